/**
 * The CLI's view of JS5: `js5` (requests with --from client, responses with --from server),
 * and the decode-only formats `js5-container`, `js5-index`, `js5-master-index`.
 */
import { UsageError } from '../../core/errors.js';
import type { CodecOptions, ProtocolCodec } from '../../core/protocol.js';
import type { Json } from '../../wire/codec.js';
import { asDecodeError, DecodeError, ErrorCode } from '../../wire/errors.js';
import { WireReader } from '../../wire/reader.js';
import { WireWriter } from '../../wire/writer.js';
import { COMPRESSION_NAMES, decodeContainer } from './cache/container.js';
import { type Js5Index, readIndex } from './cache/js5-index.js';
import { type MasterIndexFormat, readMasterIndex } from './cache/master-index.js';
import { unframeResponse } from './framing.js';
import { Handshake, HandshakeSeeded, INIT_JS5_OPCODE, Js5Request, Js5Response } from './messages.js';

function many(items: Json[]): Json {
  return items.length === 1 ? items[0]! : items;
}

function asList(json: unknown): unknown[] {
  return Array.isArray(json) ? json : [json];
}

function decodeUpstream(bytes: Buffer, seeded: boolean): Json {
  const r = new WireReader(bytes);
  const out: Json[] = [];
  try {
    if (bytes.length > 0 && bytes[0] === INIT_JS5_OPCODE) {
      // A leading handshake: 5 bytes, or 21 with the `seeded` variant (OSRS ≥ 223).
      if (seeded) out.push(HandshakeSeeded.toJson(HandshakeSeeded.read(r)));
      else out.push(Handshake.toJson(Handshake.read(r)));
    }
    while (r.remaining > 0) out.push(Js5Request.toJson(Js5Request.read(r)));
  } catch (e) {
    throw asDecodeError(e, r.offset);
  }
  if (out.length === 0) throw new DecodeError(ErrorCode.INCOMPLETE, 'no request in the input', 0);
  return many(out);
}

function decodeDownstream(bytes: Buffer): Json {
  const r = new WireReader(bytes);
  const out: Json[] = [];
  try {
    do out.push(Js5Response.toJson(Js5Response.read(r)));
    while (r.remaining > 0);
  } catch (e) {
    throw asDecodeError(e, r.offset);
  }
  return many(out);
}

function side(options: CodecOptions): 'client' | 'server' {
  if (options.from === undefined) {
    throw new UsageError('js5 needs --from client (requests) or --from server (responses)');
  }
  return options.from;
}

export const js5Codec: ProtocolCodec = {
  name: 'js5',
  summary:
    'JS5 requests (--from client, optionally after the handshake) and framed responses (--from server)',
  variants: ['standard', 'seeded'],
  canEncode: true,
  decode(bytes, options) {
    return side(options) === 'client'
      ? decodeUpstream(bytes, options.variant === 'seeded')
      : decodeDownstream(bytes);
  },
  encode(json, options) {
    const w = new WireWriter();
    const client = side(options) === 'client';
    asList(json).forEach((item, i) => {
      const type = (item as { type?: unknown } | null)?.type;
      const path = Array.isArray(json) ? `[${i}]` : '';
      if (client && type === 'handshake') Handshake.write(w, Handshake.fromJson(item, path));
      else if (client && type === 'handshakeSeeded')
        HandshakeSeeded.write(w, HandshakeSeeded.fromJson(item, path));
      else if (client) Js5Request.write(w, Js5Request.fromJson(item, path));
      else Js5Response.write(w, Js5Response.fromJson(item, path));
    });
    return w.toBuffer();
  },
};

function containerJson(bytes: Buffer): Json {
  const c = decodeContainer(bytes, 'optional');
  const out: Record<string, Json> = {
    type: 'container',
    compression: COMPRESSION_NAMES[c.compression]!,
    length: c.length,
    uncompressedLength: c.uncompressedLength,
  };
  if (c.version !== undefined) out.version = c.version;
  out.data = c.data.toString('hex');
  return out;
}

export const js5ContainerCodec: ProtocolCodec = {
  name: 'js5-container',
  summary: 'a JS5 container (none/bzip2/gzip/lzma, optional version trailer), decompressed',
  canEncode: false,
  decode(bytes) {
    try {
      return containerJson(bytes);
    } catch (e) {
      throw asDecodeError(e, 0);
    }
  },
  encode() {
    throw new UsageError('js5-container is decode-only');
  },
};

export function indexToJson(index: Js5Index): Json {
  return {
    type: 'index',
    protocol: index.protocol,
    version: index.version,
    flags: index.flags,
    groups: index.groups.map((g) => {
      const o: Record<string, Json> = { id: g.id };
      if (g.nameHash !== undefined) o.nameHash = g.nameHash;
      o.checksum = g.checksum;
      if (g.uncompressedChecksum !== undefined) o.uncompressedChecksum = g.uncompressedChecksum;
      if (g.digest !== undefined) o.digest = g.digest.toString('hex');
      if (g.length !== undefined) o.length = g.length;
      if (g.uncompressedLength !== undefined) o.uncompressedLength = g.uncompressedLength;
      o.version = g.version;
      o.files = g.files.map(
        (f): Json => (f.nameHash === undefined ? { id: f.id } : { id: f.id, nameHash: f.nameHash }),
      );
      return o;
    }),
  };
}

export const js5IndexCodec: ProtocolCodec = {
  name: 'js5-index',
  summary: 'a Js5Index (protocol 5/6/7): the stored container of group 255/N, or its decompressed payload',
  canEncode: false,
  decode(bytes) {
    try {
      // Containers start with a compression type 0–3; payloads with a protocol 5–7.
      const payload = bytes.length > 0 && bytes[0]! <= 3 ? decodeContainer(bytes, 'optional').data : bytes;
      return indexToJson(readIndex(payload));
    } catch (e) {
      throw asDecodeError(e, 0);
    }
  },
  encode() {
    throw new UsageError('js5-index is decode-only');
  },
};

/** The master index payload from a framed response (`ff 00ff 00 …`), a type-0 container, or raw. */
function masterPayload(bytes: Buffer): Buffer {
  if (bytes.length >= 8 && bytes[0] === 0xff && bytes[1] === 0 && bytes[2] === 0xff) {
    const plain = unframeResponse(bytes, 0, bytes.length);
    return decodeContainer(plain.subarray(3), 'none').data;
  }
  if (bytes.length >= 5 && bytes[0] === 0 && bytes.readInt32BE(1) === bytes.length - 5)
    return bytes.subarray(5);
  return bytes;
}

export const js5MasterIndexCodec: ProtocolCodec = {
  name: 'js5-master-index',
  summary: 'the JS5 master index (255/255): framed response, type-0 container or raw payload',
  variants: ['versioned', 'original', 'digests'],
  canEncode: false,
  decode(bytes, options) {
    try {
      const format = (options.variant ?? 'versioned') as MasterIndexFormat;
      const m = readMasterIndex(masterPayload(bytes), format);
      return {
        type: 'masterIndex',
        format,
        entries: m.entries.map((e, archive): Json => {
          if (format === 'original') return { archive, checksum: e.checksum };
          if (e.digest === undefined) return { archive, checksum: e.checksum, version: e.version };
          return { archive, checksum: e.checksum, version: e.version, digest: e.digest.toString('hex') };
        }),
      };
    } catch (e) {
      throw asDecodeError(e, 0);
    }
  },
  encode() {
    throw new UsageError('js5-master-index is decode-only');
  },
};
