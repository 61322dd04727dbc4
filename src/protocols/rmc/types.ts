/**
 * The Rendez-Vous data types, declared once with the wire core's codecs. Every type here is a
 * `Codec`, so it decodes, encodes, converts to/from the CLI's JSON and shows in `codec.info`.
 *
 * All integers are little-endian. Names follow the HyperScape wiki where it names a type, and
 * the NEX name is given beside it where the two differ (see docs/rmc.md, "Buffer vs qBuffer"):
 *
 * | here        | wire                       | HyperScape wiki | NEX (nex-go, NintendoClients) |
 * |-------------|----------------------------|-----------------|-------------------------------|
 * | `buffer16`  | u16 length + bytes         | `Buffer`        | `qBuffer`                     |
 * | `buffer32`  | u32 length + bytes         | —               | `Buffer`                      |
 */
import {
  type ArrayCodec,
  array,
  badInput,
  type Codec,
  custom,
  DecodeError,
  EncodeError,
  ErrorCode,
  type Infer,
  type Json,
  StringCodec,
  struct,
  t,
  type WireReader,
} from '../../wire/index.js';

// ---- String ---------------------------------------------------------------------------------

/**
 * Quazal `String`: u16 length counting a trailing NUL, then UTF-8 bytes and the NUL.
 *
 * Our choice for spec §7.7 (empty strings): we always write `01 00 00`, and we also accept the
 * `00 00` form some servers write (5th-echelon), decoding it as "". A missing NUL is
 * ERR_BAD_STRING. Charset (§7.8): UTF-8, validated, as the HyperScape wiki says.
 */
export interface QStringOptions {
  /**
   * Most UTF-8 bytes in the string, NUL not counted (default: only the reader's
   * `maxStringBytes` and the u16 length bound it). Longer is ERR_TOO_LARGE on decode and on encode.
   */
  maxBytes?: number;
}

export class QStringCodec extends StringCodec {
  constructor(options: QStringOptions = {}) {
    // `maxBytes` counts the UTF-8 bytes without the NUL, on decode, encode and JSON alike.
    super(t.u16le, {
      nulTerminated: true,
      encoding: 'utf8',
      ...(options.maxBytes !== undefined ? { maxBytes: options.maxBytes } : {}),
    });
    // The shortest accepted form is the two-byte `00 00` (see above), not `01 00 00`: containers
    // bound their element counts with this.
    this.minSize = 2;
  }

  override read(r: WireReader): string {
    const o = r.offset;
    // An empty String written as `00 00` (no NUL) is accepted too.
    if (o + 2 <= r.end && r.buf[o] === 0 && r.buf[o + 1] === 0) {
      r.offset = o + 2;
      return '';
    }
    return super.read(r);
  }
}

/** Quazal String (u16 length including the NUL). */
export const qString: Codec<string> = new QStringCodec();

/**
 * A Quazal String of at most `maxBytes` UTF-8 bytes (NUL not counted), for fields a server
 * keeps or sends back (names, keys): same wire form as `qString`, longer is ERR_TOO_LARGE.
 */
export function boundedString(maxBytes: number): QStringCodec {
  return new QStringCodec({ maxBytes });
}

// ---- buffers --------------------------------------------------------------------------------

/** u16 length + bytes: HyperScape's "Buffer", NEX's **qBuffer**. */
export const buffer16 = custom<Buffer>({
  name: 'rmc.Buffer16',
  description: 'u16 LE length, then that many bytes (HyperScape "Buffer" = NEX "qBuffer")',
  minSize: 2,
  read: (r) => Buffer.from(r.bytes(r.u16le())),
  write: (w, v) => {
    if (v.length > 0xffff)
      throw new EncodeError(ErrorCode.TOO_LARGE, `${v.length} bytes do not fit a u16 length`);
    w.u16le(v.length);
    w.bytes(v);
  },
  toJson: (v) => v.toString('hex'),
  fromJson: (j, path) => hexJson(j, path),
});

/** u32 length + bytes: NEX's **Buffer** (not HyperScape's "Buffer", which is u16). */
export const buffer32 = custom<Buffer>({
  name: 'rmc.Buffer32',
  description: 'u32 LE length, then that many bytes (NEX "Buffer")',
  minSize: 4,
  read: (r) => Buffer.from(r.bytes(r.u32le())),
  write: (w, v) => {
    w.u32le(v.length);
    w.bytes(v);
  },
  toJson: (v) => v.toString('hex'),
  fromJson: (j, path) => hexJson(j, path),
});

/** `n` raw bytes, copied out of the input (safe to keep after the frame is gone). */
export function rawBytes(n: number) {
  return custom<Buffer>({
    name: `rmc.bytes[${n}]`,
    description: `${n} raw bytes`,
    fixedSize: n,
    read: (r) => Buffer.from(r.bytes(n)),
    write: (w, v) => {
      if (v.length !== n) throw new EncodeError(ErrorCode.BAD_INPUT, `expected ${n} bytes, got ${v.length}`);
      w.bytes(v);
    },
    toJson: (v) => v.toString('hex'),
    fromJson: (j, path) => {
      const b = hexJson(j, path);
      if (b.length !== n) throw badInput(path, `expected ${n} bytes, got ${b.length}`);
      return b;
    },
  });
}

function hexJson(j: unknown, path: string): Buffer {
  if (typeof j !== 'string' || !/^(?:[0-9a-fA-F]{2})*$/.test(j))
    throw badInput(path, 'expected a hex string');
  return Buffer.from(j, 'hex');
}

// ---- containers -----------------------------------------------------------------------------

/** `List<T>`: u32 count, then the items. */
export function list<T>(element: Codec<T>): ArrayCodec<T> {
  return array(element, t.u32le);
}

/** `Map<K,V>`: u32 count, then key/value pairs. Decoded as an array of pairs, wire order kept. */
export function map<K, V>(key: Codec<K>, value: Codec<V>) {
  return array(struct({ key, value }), t.u32le);
}

// ---- fixed-size scalars ---------------------------------------------------------------------

/** The integer and float types, by their Quazal/NEX names. */
export const u8 = t.u8;
export const i8 = t.i8;
export const u16 = t.u16le;
export const i16 = t.i16le;
export const u32 = t.u32le;
export const i32 = t.i32le;
export const u64 = t.u64le;
export const i64 = t.i64le;
export const float = t.f32le;
export const double = t.f64le;
export const bool = t.bool;

/**
 * UUID: 16 raw bytes ("platform-wide unique identifier"). The bytes are kept as they travel;
 * `uuidToString` formats them as a GUID with the first three fields little-endian (NEX qUUID).
 */
export const uuid = custom<Buffer>({
  name: 'rmc.UUID',
  description: '16 raw bytes',
  fixedSize: 16,
  read: (r) => Buffer.from(r.bytes(16)),
  write: (w, v) => {
    if (v.length !== 16) throw new EncodeError(ErrorCode.BAD_INPUT, `a UUID is 16 bytes, got ${v.length}`);
    w.bytes(v);
  },
  toJson: (v) => v.toString('hex'),
  fromJson: (j, path) => {
    const b = hexJson(j, path);
    if (b.length !== 16) throw badInput(path, `a UUID is 16 bytes, got ${b.length}`);
    return b;
  },
});

/** Formats a qUUID as `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` (first three fields little-endian). */
export function uuidToString(b: Uint8Array): string {
  const h = Buffer.from(b).toString('hex');
  const le = (s: string) => s.match(/../g)!.reverse().join('');
  return `${le(h.slice(0, 8))}-${le(h.slice(8, 12))}-${le(h.slice(12, 16))}-${h.slice(16, 20)}-${h.slice(20)}`;
}

// ---- qResult --------------------------------------------------------------------------------

/**
 * qResult: a u32 whose high half (without the MSB) is the facility and low half the code; the
 * MSB marks an error. `0x00010001` is the usual success value.
 */
export const qResult = custom<number>({
  name: 'rmc.qResult',
  description: 'u32 LE: MSB = error, bits 16..30 = facility, bits 0..15 = code',
  fixedSize: 4,
  read: (r) => r.u32le(),
  write: (w, v) => w.u32le(v),
  toJson: (v) => v,
  fromJson: (j, path) => t.u32le.fromJson(j, path),
});

export const RESULT_SUCCESS = 0x00010001;

// ---- DateTime -------------------------------------------------------------------------------

/** NEX DateTime, split into its bitfields. Every u64 maps to exactly one of these. */
export interface DateTime {
  year: number;
  month: number;
  day: number;
  hour: number;
  minute: number;
  second: number;
}

const DT_FIELDS = [
  ['second', 0, 6],
  ['minute', 6, 6],
  ['hour', 12, 5],
  ['day', 17, 5],
  ['month', 22, 4],
  ['year', 26, 38],
] as const;

export function dateTimeFromU64(v: bigint): DateTime {
  const out = {} as Record<string, number>;
  for (const [k, shift, bits] of DT_FIELDS)
    out[k] = Number((v >> BigInt(shift)) & ((1n << BigInt(bits)) - 1n));
  return out as unknown as DateTime;
}

export function dateTimeToU64(d: DateTime, path = ''): bigint {
  let v = 0n;
  for (const [k, shift, bits] of DT_FIELDS) {
    const x = d[k];
    if (!Number.isInteger(x) || x < 0 || x >= 2 ** bits) {
      throw badInput(path === '' ? k : `${path}.${k}`, `${String(x)} does not fit ${bits} bits`);
    }
    v |= BigInt(x) << BigInt(shift);
  }
  return v;
}

/** DateTime from a JS Date (UTC). */
export function dateTimeFromDate(date: Date): DateTime {
  return {
    year: date.getUTCFullYear(),
    month: date.getUTCMonth() + 1,
    day: date.getUTCDate(),
    hour: date.getUTCHours(),
    minute: date.getUTCMinutes(),
    second: date.getUTCSeconds(),
  };
}

export function dateTimeToDate(d: DateTime): Date {
  return new Date(Date.UTC(d.year, d.month - 1, d.day, d.hour, d.minute, d.second));
}

/** DateTime: u64 LE = sec | min<<6 | hour<<12 | day<<17 | month<<22 | year<<26. */
export const dateTime = custom<DateTime>({
  name: 'rmc.DateTime',
  description: 'u64 LE bitfield: sec | min<<6 | hour<<12 | day<<17 | month<<22 | year<<26',
  fixedSize: 8,
  read: (r) => dateTimeFromU64(r.u64le()),
  write: (w, v) => w.u64le(dateTimeToU64(v)),
  toJson: (v) => ({
    year: v.year,
    month: v.month,
    day: v.day,
    hour: v.hour,
    minute: v.minute,
    second: v.second,
  }),
  fromJson: (j, path) => {
    if (typeof j !== 'object' || j === null || Array.isArray(j))
      throw badInput(path, 'expected a DateTime object');
    const o = j as Record<string, unknown>;
    const d = {} as Record<string, number>;
    for (const [k] of DT_FIELDS) {
      const x = o[k];
      if (typeof x !== 'number') throw badInput(path === '' ? k : `${path}.${k}`, 'expected an integer');
      d[k] = x;
    }
    dateTimeToU64(d as unknown as DateTime, path);
    return d as unknown as DateTime;
  },
});

// ---- StationURL -----------------------------------------------------------------------------

/** A parsed StationURL: `scheme:/key=value;key=value`. */
export interface StationUrlParts {
  scheme: string;
  params: Map<string, string>;
}

/**
 * Parses `prudp:/address=1.2.3.4;port=9103;sid=15`. Keys keep their order; `prudp:/` alone has
 * no parameters. Throws DecodeError ERR_BAD_VALUE when there is no `scheme:/`.
 */
export function parseStationUrl(url: string): StationUrlParts {
  const i = url.indexOf(':/');
  if (i <= 0) throw new DecodeError(ErrorCode.BAD_VALUE, `not a StationURL: ${JSON.stringify(url)}`, 0);
  const params = new Map<string, string>();
  for (const part of url.slice(i + 2).split(';')) {
    if (part === '') continue;
    const eq = part.indexOf('=');
    if (eq <= 0) throw new DecodeError(ErrorCode.BAD_VALUE, `StationURL parameter without a key: ${part}`, 0);
    params.set(part.slice(0, eq), part.slice(eq + 1));
  }
  return { scheme: url.slice(0, i), params };
}

/** Formats a StationURL: `scheme:/k=v;k=v` in the map's order. */
export function formatStationUrl(
  parts: StationUrlParts | { scheme: string; params: Record<string, string | number> },
): string {
  const entries = parts.params instanceof Map ? [...parts.params] : Object.entries(parts.params);
  return `${parts.scheme}:/${entries.map(([k, v]) => `${k}=${v}`).join(';')}`;
}

/**
 * StationURL: a String on the wire. It stays a string in values so that a decoded URL
 * re-encodes byte-exactly (the seed's redacted `address=000.000.00.000` included); use
 * `parseStationUrl` / `formatStationUrl` for its parts.
 */
export const stationUrl = custom<string>({
  name: 'rmc.StationURL',
  description: 'a String holding scheme:/key=value;… (e.g. prudp:/address=…;port=…;sid=…)',
  minSize: 2,
  read: (r) => qString.read(r),
  write: (w, v) => qString.write(w, v),
  toJson: (v) => v,
  fromJson: (j, path) => qString.fromJson(j, path),
});

// ---- Variant --------------------------------------------------------------------------------

export type Variant =
  | { kind: 'none' }
  | { kind: 'int64'; value: bigint }
  | { kind: 'double'; value: number }
  | { kind: 'bool'; value: boolean }
  | { kind: 'string'; value: string }
  | { kind: 'datetime'; value: DateTime }
  | { kind: 'uint64'; value: bigint };

const VARIANT_CODECS = new Map<number, { kind: Variant['kind']; codec: Codec<any> | undefined }>([
  [0, { kind: 'none', codec: undefined }],
  [1, { kind: 'int64', codec: t.i64le }],
  [2, { kind: 'double', codec: t.f64le }],
  [3, { kind: 'bool', codec: t.bool }],
  [4, { kind: 'string', codec: qString }],
  [5, { kind: 'datetime', codec: dateTime }],
  [6, { kind: 'uint64', codec: t.u64le }],
]);
const VARIANT_TAGS = new Map<string, number>([...VARIANT_CODECS].map(([tag, v]) => [v.kind, tag]));

/** Variant: u8 type (0 none, 1 s64, 2 double, 3 bool, 4 String, 5 DateTime, 6 u64), then the value. */
export const variant = custom<Variant>({
  name: 'rmc.Variant',
  description: 'u8 type (0 none, 1 int64, 2 double, 3 bool, 4 String, 5 DateTime, 6 uint64), then the value',
  minSize: 1,
  read: (r) => {
    const at = r.offset;
    const tag = r.u8();
    const v = VARIANT_CODECS.get(tag);
    if (v === undefined) throw new DecodeError(ErrorCode.UNKNOWN_TYPE, `unknown Variant type ${tag}`, at);
    if (v.codec === undefined) return { kind: 'none' };
    return { kind: v.kind, value: v.codec.read(r) } as Variant;
  },
  write: (w, v) => {
    const tag = VARIANT_TAGS.get(v.kind);
    if (tag === undefined) throw badInput('kind', `unknown Variant kind ${String(v.kind)}`);
    w.u8(tag);
    const codec = VARIANT_CODECS.get(tag)!.codec;
    if (codec !== undefined) codec.write(w, (v as { value: unknown }).value);
  },
  toJson: (v): Json => {
    const codec = VARIANT_CODECS.get(VARIANT_TAGS.get(v.kind)!)!.codec;
    return codec === undefined
      ? { kind: v.kind }
      : { kind: v.kind, value: codec.toJson((v as { value: unknown }).value) };
  },
  fromJson: (j, path) => {
    if (typeof j !== 'object' || j === null || Array.isArray(j))
      throw badInput(path, 'expected a Variant object');
    const o = j as Record<string, unknown>;
    const tag = typeof o.kind === 'string' ? VARIANT_TAGS.get(o.kind) : undefined;
    if (tag === undefined)
      throw badInput(
        path === '' ? 'kind' : `${path}.kind`,
        `expected one of ${[...VARIANT_TAGS.keys()].join(', ')}`,
      );
    const codec = VARIANT_CODECS.get(tag)!.codec;
    if (codec === undefined) return { kind: 'none' };
    return {
      kind: o.kind,
      value: codec.fromJson(o.value, path === '' ? 'value' : `${path}.value`),
    } as Variant;
  },
});

// ---- AnyDataHolder --------------------------------------------------------------------------

/** AnyDataHolder: a structure's class name and its encoded bytes (not interpreted here). */
export interface AnyDataHolder {
  typeName: string;
  data: Buffer;
}

/** AnyDataHolder: String name, u32 (len + 4), u32 len, then len bytes. */
export const anyDataHolder = custom<AnyDataHolder>({
  name: 'rmc.AnyDataHolder',
  description: 'String typeName, u32 length+4, u32 length, then the structure bytes',
  minSize: 10,
  read: (r) => {
    const typeName = qString.read(r);
    const at = r.offset;
    const outer = r.u32le();
    const inner = r.u32le();
    if (outer !== inner + 4) {
      throw new DecodeError(
        ErrorCode.BAD_LENGTH,
        `AnyDataHolder lengths disagree: ${outer} is not ${inner} + 4`,
        at,
      );
    }
    return { typeName, data: Buffer.from(r.bytes(inner)) };
  },
  write: (w, v) => {
    qString.write(w, v.typeName);
    w.u32le(v.data.length + 4);
    w.u32le(v.data.length);
    w.bytes(v.data);
  },
  toJson: (v) => ({ typeName: v.typeName, data: v.data.toString('hex') }),
  fromJson: (j, path) => {
    if (typeof j !== 'object' || j === null || Array.isArray(j))
      throw badInput(path, 'expected an AnyDataHolder object');
    const o = j as Record<string, unknown>;
    const p = (k: string) => (path === '' ? k : `${path}.${k}`);
    return { typeName: qString.fromJson(o.typeName, p('typeName')), data: hexJson(o.data, p('data')) };
  },
});

// ---- structures used by the RMC envelope ----------------------------------------------------

/** ClassVersion: String name, u16 version (HyperScape request envelope). */
export const ClassVersion = struct({ name: qString, version: t.u16le });
export type ClassVersion = Infer<typeof ClassVersion>;
