/**
 * `gamewire decode prudp` / `encode prudp`: every packet of a datagram as JSON, and for DATA
 * and CONNECT payloads the decrypted, inflated plaintext and (for a whole RMC message) the
 * decoded message.
 *
 * Flags: `--access-key KEY` (required: the checksum depends on it), `--checksum 1|4`
 * (default 1), `--rmc-variant classic|hyperscape` (how the RMC inside DATA is read; default
 * classic, the variant of every captured Ubisoft title), `--session-key HEX` (HyperScape
 * secure DATA: the 16-byte AES key; without it secure payloads stay encrypted).
 *
 * `encode prudp` takes the same JSON back: the wire `payload` when present, otherwise the
 * payload is built from `decoded.plaintext`; the checksum is always recomputed.
 */
import { UsageError } from '../../../core/errors.js';
import type { CodecOptions, ProtocolCodec } from '../../../core/protocol.js';
import {
  badInput,
  DecodeError,
  EncodeError,
  ErrorCode,
  hexToBytes,
  type Json,
  WireWriter,
} from '../../../wire/index.js';
import { codecProtocols, decodeStream } from '../codec.js';
import type { RmcVariant } from '../messages.js';
import type { ProtocolDef } from '../signature.js';
import { accessKeyByte, type ChecksumWidth } from './checksum.js';
import { FLAG_NAMES, Flag, PACKET_TYPE_NAMES, PacketType, StreamType } from './constants.js';
import { PRUDP_CODEC_FLAGS } from './flags.js';
import { type ChecksumConfig, newPacket, type PacketFields, readPacket, writePacket } from './packet.js';
import { ClassicPayloadCodec, type PayloadCodec, SecurePayloadCodec } from './payload.js';

interface PrudpCliOptions {
  checksum: ChecksumConfig;
  rmcVariant: RmcVariant;
  secure: PayloadCodec | undefined;
  /** Protocols whose methods decode to named fields (`--protocols` packs, then the built-ins). */
  protocols: readonly ProtocolDef<any>[];
}

function cliOptions(options: CodecOptions): PrudpCliOptions {
  const extra = options.extra ?? {};
  const key = extra.accessKey;
  if (key === undefined) throw new UsageError('prudp needs --access-key KEY (the checksum depends on it)');
  const widthText = extra.checksum ?? '1';
  if (widthText !== '1' && widthText !== '4') throw new UsageError('--checksum takes 1 or 4');
  const rmcVariant = (extra.rmcVariant ?? 'classic') as RmcVariant;
  if (rmcVariant !== 'classic' && rmcVariant !== 'hyperscape')
    throw new UsageError('--rmc-variant takes classic or hyperscape');
  let secure: PayloadCodec | undefined;
  if (extra.sessionKey !== undefined) {
    if (!/^[0-9a-fA-F]{32}$/.test(extra.sessionKey))
      throw new UsageError('--session-key takes 32 hex digits');
    secure = new SecurePayloadCodec(Buffer.from(extra.sessionKey, 'hex'));
  }
  return {
    checksum: { width: Number(widthText) as ChecksumWidth, keyByte: accessKeyByte(key) },
    rmcVariant,
    secure,
    protocols: codecProtocols(options),
  };
}

function vportJson(v: number): Json {
  return { streamType: v >> 4, port: v & 0x0f };
}

function flagList(flags: number): Json {
  return FLAG_NAMES.filter(([, bit]) => (flags & bit) !== 0).map(([n]) => n);
}

/** Whether a payload on this stream is RC4/compression-coded (stream 3 and 10) or raw. */
function isCodedStream(vport: number): boolean {
  const s = vport >> 4;
  return s === StreamType.OLD_RV_SECURE || s === StreamType.RV_SECURE;
}

/** The classic codec, unless a secure key was given and this is DATA. */
function payloadCodecFor(o: PrudpCliOptions, type: number): PayloadCodec {
  return o.secure !== undefined && type === PacketType.DATA ? o.secure : new ClassicPayloadCodec();
}

/** Decodes every packet in a datagram. Throws DecodeError only. */
export function decodeDatagram(bytes: Buffer, o: PrudpCliOptions): Json[] {
  if (bytes.length === 0) throw new DecodeError(ErrorCode.INCOMPLETE, 'no PRUDP packet in the input', 0);
  const p = newPacket();
  const out: Json[] = [];
  let off = 0;
  while (off < bytes.length) {
    const next = readPacket(bytes, off, o.checksum, p);
    const json: Record<string, Json> = {
      type: PACKET_TYPE_NAMES[p.type]!,
      source: vportJson(p.source),
      destination: vportJson(p.destination),
      flags: flagList(p.flags),
      sessionId: p.sessionId,
      packetSignature: p.packetSignature,
      sequenceId: p.sequenceId,
    };
    if (p.type <= PacketType.CONNECT) json.connectionSignature = p.connectionSignature;
    if (p.type === PacketType.DATA) json.fragmentId = p.fragmentId;
    json.payload = p.payload.toString('hex');
    json.checksum = p.checksum;
    const decoded = decodePayload(p.type, p.source, p.fragmentId, p.payload, o);
    if (decoded !== undefined) json.decoded = decoded;
    out.push(json);
    if ((p.flags & Flag.HAS_SIZE) === 0 && next < bytes.length) {
      throw new DecodeError(
        ErrorCode.TRAILING_BYTES,
        'bytes after a packet without HAS_SIZE (only sized packets can be followed by another)',
        next,
      );
    }
    off = next;
  }
  return out;
}

function decodePayload(
  type: number,
  source: number,
  fragmentId: number,
  payload: Buffer,
  o: PrudpCliOptions,
): Json | undefined {
  if (payload.length === 0 || !isCodedStream(source)) return undefined;
  if (type !== PacketType.DATA && type !== PacketType.CONNECT) return undefined;
  // A HyperScape secure CONNECT carries a raw ECDH key blob: shown as is.
  if (type === PacketType.CONNECT && payload.subarray(0, 4).toString('latin1') === 'ECK1') return undefined;
  if (o.secure === undefined && type === PacketType.DATA && o.rmcVariant === 'hyperscape') return undefined;
  const codec = payloadCodecFor(o, type);
  let plain: Buffer;
  try {
    plain = codec.decode(payload, 16 * 1024 * 1024);
  } catch (e) {
    if (!(e instanceof DecodeError)) throw e;
    return { error: { code: e.code, message: e.message } };
  }
  const out: Record<string, Json> = { compression: codec.lastCompression, plaintext: plain.toString('hex') };
  if (
    type === PacketType.DATA &&
    fragmentId === 0 &&
    plain.length >= 4 &&
    plain.readUInt32LE(0) === plain.length - 4
  ) {
    try {
      const msgs = decodeStream(plain, o.rmcVariant, o.protocols);
      out.rmc = msgs.length === 1 ? msgs[0]! : msgs;
    } catch (e) {
      if (!(e instanceof DecodeError)) throw e;
      out.rmcError = { code: e.code, message: e.message };
    }
  }
  return out;
}

function intField(o: Record<string, unknown>, key: string, max: number, path: string, dflt?: number): number {
  const v = o[key] ?? dflt;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v > max) {
    throw badInput(path === '' ? key : `${path}.${key}`, `expected an integer 0..${max}`);
  }
  return v;
}

function vportFromJson(j: unknown, path: string): number {
  if (typeof j !== 'object' || j === null) throw badInput(path, 'expected {streamType, port}');
  const o = j as Record<string, unknown>;
  return (intField(o, 'streamType', 15, path) << 4) | intField(o, 'port', 15, path);
}

/** Encodes one packet's JSON into `w`. Throws EncodeError. */
export function encodePacketJson(json: unknown, o: PrudpCliOptions, w: WireWriter, path = ''): void {
  if (typeof json !== 'object' || json === null || Array.isArray(json))
    throw badInput(path, 'expected an object');
  const j = json as Record<string, unknown>;
  const sub = (k: string) => (path === '' ? k : `${path}.${k}`);
  const type = PACKET_TYPE_NAMES.indexOf(j.type as (typeof PACKET_TYPE_NAMES)[number]);
  if (type < 0) throw badInput(sub('type'), `expected one of ${PACKET_TYPE_NAMES.join(', ')}`);
  let flags = 0;
  if (!Array.isArray(j.flags)) throw badInput(sub('flags'), 'expected an array of flag names');
  for (const f of j.flags) {
    const bit = FLAG_NAMES.find(([n]) => n === f)?.[1];
    if (bit === undefined) throw badInput(sub('flags'), `unknown flag ${JSON.stringify(f)}`);
    flags |= bit;
  }
  const source = vportFromJson(j.source, sub('source'));
  const fields: PacketFields = {
    source,
    destination: vportFromJson(j.destination, sub('destination')),
    type,
    flags,
    sessionId: intField(j, 'sessionId', 0xff, path),
    packetSignature: intField(j, 'packetSignature', 0xffffffff, path),
    sequenceId: intField(j, 'sequenceId', 0xffff, path),
    connectionSignature:
      type <= PacketType.CONNECT ? intField(j, 'connectionSignature', 0xffffffff, path, 0) : 0,
    fragmentId: type === PacketType.DATA ? intField(j, 'fragmentId', 0xff, path, 0) : 0,
  };
  let payload: Buffer;
  if (typeof j.payload === 'string') payload = hexToBytes(j.payload, sub('payload'));
  else {
    const d = j.decoded as Record<string, unknown> | undefined;
    if (d === undefined || typeof d.plaintext !== 'string')
      throw badInput(sub('payload'), 'give payload (hex) or decoded.plaintext (hex)');
    const plain = hexToBytes(d.plaintext, sub('decoded.plaintext'));
    payload =
      isCodedStream(source) && plain.length > 0 ? payloadCodecFor(o, type).encode(plain) : Buffer.from(plain);
  }
  if (payload.length > 0xffff) throw badInput(sub('payload'), 'payload over 65535 bytes');
  writePacket(w, fields, payload, o.checksum);
}

export const prudpCodec: ProtocolCodec = {
  name: 'prudp',
  summary: 'Quazal PRUDP V0 datagrams (Rendez-Vous transport), with RC4/zlib/AES payloads and the RMC inside',
  canEncode: true,
  flags: PRUDP_CODEC_FLAGS,
  decode(bytes: Buffer, options: CodecOptions): Json {
    const all = decodeDatagram(bytes, cliOptions(options));
    return all.length === 1 ? all[0]! : all;
  },
  encode(json: unknown, options: CodecOptions): Buffer {
    const o = cliOptions(options);
    const w = new WireWriter();
    try {
      if (Array.isArray(json))
        for (let i = 0; i < json.length; i++) encodePacketJson(json[i], o, w, `[${i}]`);
      else encodePacketJson(json, o, w);
    } catch (e) {
      if (e instanceof EncodeError || e instanceof UsageError) throw e;
      throw badInput('', (e as Error).message);
    }
    return w.toBuffer();
  },
};
