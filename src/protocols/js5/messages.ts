/**
 * JS5 messages, declared once (docs/js5.md, "Wire format"). Upstream: the login-state handshake
 * (INIT_JS5REMOTE_CONNECTION, opcode 15) and 4-byte requests. Downstream: the one-byte handshake
 * reply and responses framed with 0xFF block markers (a custom codec: markers depend on the byte
 * offset inside the response, which no declaration expresses).
 */
import {
  array,
  badInput,
  constant,
  custom,
  decode,
  doc,
  hexToBytes,
  type Infer,
  message,
  t,
  union,
} from '../../wire/codec.js';
import { DecodeError, ErrorCode } from '../../wire/errors.js';
import type { WireReader } from '../../wire/reader.js';
import type { WireWriter } from '../../wire/writer.js';
import {
  containerLengthOf,
  framedLength,
  frameResponse,
  MAX_CONTAINER_LENGTH,
  unframeResponse,
} from './framing.js';

/** Login opcode that turns a connection into a JS5 connection. */
export const INIT_JS5_OPCODE = 15;

/** Handshake reply codes (docs/js5.md, "Handshake"). */
export const HandshakeStatus = { ok: 0, outOfDate: 6, full: 7, ipLimit: 9 } as const;

/** `0f` + build: 435, 530, OSRS ≤ 222. */
export const Handshake = message('handshake', {
  opcode: constant(t.u8, INIT_JS5_OPCODE),
  build: doc('client build / revision', t.u32be),
});

/** `0f` + build + 4 × int seed: OSRS ≥ 223 (21 bytes). */
export const HandshakeSeeded = message('handshakeSeeded', {
  opcode: constant(t.u8, INIT_JS5_OPCODE),
  build: doc('client revision (≥ 223)', t.u32be),
  seed: doc('4 × int32 key used for reconnections', array(t.i32be, 4)),
});

export const HandshakeReply = message('handshakeReply', {
  status: doc('0 ok, 6 out of date, 7 full, 9 IP limit', t.u8),
});

const archive = doc('archive id (255 = indexes)', t.u8);
const group = doc('group id', t.u16be);

export const PrefetchRequest = message('prefetch', { archive, group });
export const UrgentRequest = message('urgent', { archive, group });
// 02/03/07 carry 3 unused bytes (0 in every known client); like OpenRS2, they are skipped, not
// checked, so that no real client is ever cut off over them. The rekey pad is checked (2009scape).
const unused = doc('unused; 0 in every known client', t.u24be);
export const LoggedIn = message('loggedIn', { value: unused });
export const LoggedOut = message('loggedOut', { value: unused });
export const Rekey = message('rekey', {
  key: doc('XOR key for every downstream byte from now on (0 = none)', t.u8),
  padding: constant(t.u16be, 0),
});
export const Connected = message('connected', { value: doc('always 3 in 5xx clients', t.u24be) });
export const Disconnect = message('disconnect', { value: unused });

/** The 4-byte upstream packets after the handshake. */
export const Js5Request = union(t.u8, {
  prefetch: [0, PrefetchRequest],
  urgent: [1, UrgentRequest],
  loggedIn: [2, LoggedIn],
  loggedOut: [3, LoggedOut],
  rekey: [4, Rekey],
  connected: [6, Connected],
  disconnect: [7, Disconnect],
});
export type Js5RequestValue = Infer<typeof Js5Request>;

export const RequestOpcode = {
  prefetch: 0,
  urgent: 1,
  loggedIn: 2,
  loggedOut: 3,
  rekey: 4,
  connected: 6,
  disconnect: 7,
} as const;

/** One downstream response, markers removed. `data` is the container body after its header. */
export interface Js5ResponseValue {
  type: 'response';
  archive: number;
  group: number;
  /** The 0x80 bit of the compression byte (set by 5xx servers for prefetch responses). */
  prefetch: boolean;
  /** 0 none, 1 bzip2, 2 gzip, 3 lzma. */
  compression: number;
  /** Declared uncompressed length (compressed containers only). */
  uncompressedLength?: number;
  /** The container's data bytes (still compressed). */
  data: Buffer;
}

function readResponse(r: WireReader): Js5ResponseValue {
  const start = r.offset;
  r.need(8, 'response header');
  const type = r.buf[start + 3]!;
  const compression = type & 0x7f;
  if (compression > 3) {
    throw new DecodeError('ERR_JS5_BAD_COMPRESSION', `unknown compression type ${compression}`, start + 3);
  }
  const length = r.buf.readInt32BE(start + 4);
  if (length < 0)
    throw new DecodeError(ErrorCode.BAD_LENGTH, `negative container length ${length}`, start + 4);
  if (length > MAX_CONTAINER_LENGTH) {
    throw new DecodeError(
      ErrorCode.TOO_LARGE,
      `container length ${length} exceeds ${MAX_CONTAINER_LENGTH}`,
      start + 4,
    );
  }
  const framed = framedLength(containerLengthOf(type, length));
  const view = r.bytes(framed);
  let plain: Buffer;
  try {
    plain = unframeResponse(view, 0, view.length);
  } catch (e) {
    throw e instanceof DecodeError ? e.atBase(start) : e;
  }
  const out: Js5ResponseValue = {
    type: 'response',
    archive: plain[0]!,
    group: plain.readUInt16BE(1),
    prefetch: (type & 0x80) !== 0,
    compression,
    data: plain.subarray(compression === 0 ? 8 : 12),
  };
  if (compression !== 0) {
    const u = plain.readInt32BE(8);
    if (u < 0) throw new DecodeError(ErrorCode.BAD_LENGTH, `negative uncompressed length ${u}`, start + 8);
    out.uncompressedLength = u;
  }
  return out;
}

function responseContainer(v: Js5ResponseValue): Buffer {
  const h = v.compression === 0 ? 5 : 9;
  const c = Buffer.allocUnsafe(h + v.data.length);
  c[0] = v.compression;
  c.writeInt32BE(v.data.length, 1);
  if (h === 9) c.writeInt32BE(v.uncompressedLength ?? 0, 5);
  c.set(v.data, h);
  return c;
}

function intIn(json: Record<string, unknown>, key: string, min: number, max: number, path: string): number {
  const v = json[key];
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > max) {
    throw badInput(`${path}${key}`, `expected an integer in ${min}..${max}`);
  }
  return v;
}

/** A framed response (custom: 0xFF markers at response offsets 512, 1024, …). */
export const Js5Response = custom<Js5ResponseValue>({
  name: 'js5.response',
  description:
    'archive u8, group u16be, compression u8 (|0x80 = prefetch, 5xx), length i32be, [uncompressed length i32be], data; ' +
    'a 0xFF byte at every response offset that is a positive multiple of 512 while bytes follow',
  minSize: 8,
  read: readResponse,
  write(w: WireWriter, v: Js5ResponseValue): void {
    w.bytes(frameResponse(v.archive, v.group, responseContainer(v), v.prefetch));
  },
  toJson(v) {
    const out: Record<string, string | number | boolean> = {
      type: 'response',
      archive: v.archive,
      group: v.group,
      prefetch: v.prefetch,
      compression: v.compression,
    };
    if (v.uncompressedLength !== undefined) out.uncompressedLength = v.uncompressedLength;
    out.data = v.data.toString('hex');
    return out;
  },
  fromJson(json, path) {
    if (typeof json !== 'object' || json === null || Array.isArray(json)) {
      throw badInput(path, 'expected an object');
    }
    const j = json as Record<string, unknown>;
    const p = path === '' ? '' : `${path}.`;
    const a = intIn(j, 'archive', 0, 255, p);
    const g = intIn(j, 'group', 0, 0xffff, p);
    const c = intIn(j, 'compression', 0, 3, p);
    if (typeof j.prefetch !== 'boolean') throw badInput(`${p}prefetch`, 'expected a boolean');
    if (typeof j.data !== 'string') throw badInput(`${p}data`, 'expected a hex string');
    const v: Js5ResponseValue = {
      type: 'response',
      archive: a,
      group: g,
      prefetch: j.prefetch,
      compression: c,
      data: hexToBytes(j.data, `${p}data`),
    };
    if (c !== 0) {
      const u = j.uncompressedLength;
      if (typeof u !== 'number' || !Number.isInteger(u) || u < 0 || u > 0x7fff_ffff) {
        throw badInput(`${p}uncompressedLength`, 'expected an integer');
      }
      v.uncompressedLength = u;
    }
    return v;
  },
});

/** Decodes one 4-byte request (throws DecodeError). */
export function decodeRequest(buf: Uint8Array): Js5RequestValue {
  return decode(Js5Request, buf);
}
