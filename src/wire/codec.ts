/**
 * Declared codecs. A message is declared once, as a tree of `Codec` objects; the same tree
 * drives decode, encode, the TypeScript type (`Infer<typeof Msg>`), JSON conversion for the
 * CLI, and introspection (`codec.info`) for the inspector and dissector generators.
 *
 * Structs compile their field list into straight-line JavaScript once, at declaration time, so a
 * declared message decodes about as fast as a hand-written one: monomorphic calls, stable object
 * shapes, no per-field loop.
 */
import { asDecodeError, DeclarationError, DecodeError, EncodeError, ErrorCode } from './errors.js';
import { DEFAULT_LIMITS, type DecodeLimits, resolveLimits } from './limits.js';
import { type StringEncoding, WireReader } from './reader.js';
import { WireWriter } from './writer.js';

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

export type Endian = 'le' | 'be';

/** What introspection sees of a codec. `kind` says which other keys exist. */
export type CodecInfo =
  | { kind: 'int'; bits: 8 | 16 | 24 | 32; signed: boolean; endian: Endian }
  | { kind: 'bigint'; bits: 64; signed: boolean; endian: Endian }
  | { kind: 'float'; bits: 32 | 64; endian: Endian }
  | { kind: 'bool' }
  | { kind: 'enum'; base: Codec<number>; values: Readonly<Record<string, number>> }
  | { kind: 'bytes'; length: LengthInfo }
  | { kind: 'string'; length: LengthInfo; encoding: StringEncoding; nulTerminated: boolean }
  | { kind: 'array'; length: LengthInfo; element: Codec<unknown> }
  | { kind: 'struct'; name: string | undefined; fields: readonly FieldInfo[] }
  | { kind: 'sized'; prefix: Codec<number>; adjust: number; inner: Codec<unknown> }
  | { kind: 'union'; tag: Codec<number>; variants: readonly VariantInfo[] }
  | { kind: 'select'; head: Codec<unknown>; on: string; cases: readonly SelectCaseInfo[] }
  | { kind: 'lazy'; target: () => Codec<unknown> }
  | { kind: 'custom'; name: string; description: string };

/** How the length of a bytes/string/array is known. */
export type LengthInfo =
  | { type: 'fixed'; value: number }
  | { type: 'prefix'; prefix: Codec<number>; counts: 'bytes' | 'items' }
  | { type: 'rest' };

export interface FieldInfo {
  name: string;
  codec: Codec<unknown>;
  /** Present only when this returns true for the fields decoded so far. */
  when: ((partial: any) => boolean) | undefined;
  /** The same condition as data, when it was declared with `is.…` (for dissectors and the inspector). */
  condition: Condition | undefined;
  /** A fixed value: checked on decode, written on encode, not part of the message object. */
  constant: unknown;
  isConstant: boolean;
  doc: string | undefined;
}

/** One branch of a `select`: taken when the selecting field's value, as a string, is `value`. */
export interface SelectCaseInfo {
  value: string;
  codec: Codec<unknown>;
}

export interface VariantInfo {
  name: string;
  tag: number;
  codec: Codec<unknown>;
}

const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);
const EMPTY_INPUT = Buffer.alloc(0);

function typeOf(j: unknown): string {
  return j === null ? 'null' : Array.isArray(j) ? 'array' : typeof j;
}

export function badInput(path: string, detail: string): EncodeError {
  return new EncodeError(ErrorCode.BAD_INPUT, detail, path);
}

/** The base of every declared type. */
export abstract class Codec<T> {
  abstract readonly info: CodecInfo;
  /** Encoded size when every value has the same size (set once, by constructors). */
  fixedSize: number | undefined = undefined;
  /** Smallest possible encoding; bounds element counts before anything is allocated. */
  minSize = 0;
  /** Name of a WireReader/WireWriter method pair that implements this codec (compiled structs inline it). */
  inline: string | undefined = undefined;

  abstract read(r: WireReader): T;
  abstract write(w: WireWriter, value: T): void;
  /** Converts a decoded value to the CLI's JSON form (bytes as hex, big integers as strings). */
  abstract toJson(value: T): Json;
  /** Converts (and validates) JSON into a value for `write`. Throws EncodeError with the path. */
  abstract fromJson(json: unknown, path: string): T;
}

export type Infer<C> = C extends Codec<infer T> ? T : never;

// ---- integers -------------------------------------------------------------------------------

type IntMethod =
  | 'u8'
  | 'i8'
  | 'u16le'
  | 'u16be'
  | 'i16le'
  | 'i16be'
  | 'u24le'
  | 'u24be'
  | 'u32le'
  | 'u32be'
  | 'i32le'
  | 'i32be';

export class IntCodec extends Codec<number> {
  readonly info: CodecInfo;
  declare inline: IntMethod;
  readonly min: number;
  readonly max: number;

  constructor(method: IntMethod, bits: 8 | 16 | 24 | 32, signed: boolean, endian: Endian) {
    super();
    this.inline = method;
    this.info = { kind: 'int', bits, signed, endian };
    this.fixedSize = this.minSize = bits / 8;
    this.min = signed ? -(2 ** (bits - 1)) : 0;
    this.max = signed ? 2 ** (bits - 1) - 1 : 2 ** bits - 1;
  }

  read(r: WireReader): number {
    return r[this.inline]();
  }

  write(w: WireWriter, value: number): void {
    w[this.inline](value);
  }

  /** Writes `value` at a position reserved earlier (sizes that precede what they measure). */
  patch(w: WireWriter, at: number, value: number): void {
    const end = w.offset;
    w.offset = at;
    w[this.inline](value);
    w.offset = end;
  }

  toJson(value: number): Json {
    return value;
  }

  fromJson(json: unknown, path: string): number {
    if (typeof json !== 'number' || !Number.isInteger(json)) {
      throw badInput(path, `expected an integer, got ${typeOf(json)}`);
    }
    if (json < this.min || json > this.max) {
      throw badInput(path, `${json} is out of range ${this.min}..${this.max}`);
    }
    return json;
  }
}

export class BigIntCodec extends Codec<bigint> {
  readonly info: CodecInfo;
  declare inline: 'u64le' | 'u64be' | 'i64le' | 'i64be';
  private readonly min: bigint;
  private readonly max: bigint;

  constructor(method: 'u64le' | 'u64be' | 'i64le' | 'i64be', signed: boolean, endian: Endian) {
    super();
    this.inline = method;
    this.info = { kind: 'bigint', bits: 64, signed, endian };
    this.fixedSize = this.minSize = 8;
    this.min = signed ? -(1n << 63n) : 0n;
    this.max = signed ? (1n << 63n) - 1n : (1n << 64n) - 1n;
  }

  read(r: WireReader): bigint {
    return r[this.inline]();
  }

  write(w: WireWriter, value: bigint): void {
    w[this.inline](value);
  }

  /** Integers beyond 2^53 become decimal strings (the CLI contract). */
  toJson(value: bigint): Json {
    return value <= MAX_SAFE && value >= -MAX_SAFE ? Number(value) : value.toString();
  }

  fromJson(json: unknown, path: string): bigint {
    let v: bigint;
    if (typeof json === 'number' && Number.isSafeInteger(json)) v = BigInt(json);
    else if (typeof json === 'string' && /^-?\d+$/.test(json)) v = BigInt(json);
    else throw badInput(path, `expected an integer or a decimal string, got ${typeOf(json)}`);
    if (v < this.min || v > this.max) throw badInput(path, `${v} is out of range ${this.min}..${this.max}`);
    return v;
  }
}

// ---- floats ---------------------------------------------------------------------------------

/** JSON has no NaN, Infinity or -0; they travel as strings so that round trips stay exact. */
export function floatToJson(v: number): Json {
  if (Number.isFinite(v)) return Object.is(v, -0) ? '-0' : v;
  return String(v);
}

export function floatFromJson(json: unknown, path: string): number {
  if (typeof json === 'number') return json;
  if (json === 'NaN') return Number.NaN;
  if (json === 'Infinity') return Number.POSITIVE_INFINITY;
  if (json === '-Infinity') return Number.NEGATIVE_INFINITY;
  if (json === '-0') return -0;
  throw badInput(path, `expected a number, got ${typeOf(json)}`);
}

export class FloatCodec extends Codec<number> {
  readonly info: CodecInfo;
  declare inline: 'f32le' | 'f32be' | 'f64le' | 'f64be';

  constructor(method: 'f32le' | 'f32be' | 'f64le' | 'f64be', bits: 32 | 64, endian: Endian) {
    super();
    this.inline = method;
    this.info = { kind: 'float', bits, endian };
    this.fixedSize = this.minSize = bits / 8;
  }

  read(r: WireReader): number {
    return r[this.inline]();
  }

  write(w: WireWriter, value: number): void {
    w[this.inline](value);
  }

  toJson(value: number): Json {
    return floatToJson(value);
  }

  fromJson(json: unknown, path: string): number {
    return floatFromJson(json, path);
  }
}

export class BoolCodec extends Codec<boolean> {
  readonly info: CodecInfo = { kind: 'bool' };

  constructor() {
    super();
    this.fixedSize = this.minSize = 1;
    this.inline = 'bool';
  }

  read(r: WireReader): boolean {
    return r.bool();
  }

  write(w: WireWriter, value: boolean): void {
    w.bool(value);
  }

  toJson(value: boolean): Json {
    return value;
  }

  fromJson(json: unknown, path: string): boolean {
    if (typeof json !== 'boolean') throw badInput(path, `expected a boolean, got ${typeOf(json)}`);
    return json;
  }
}

/** Primitive codecs. The byte order is part of the name: pick it per field. */
export const t = {
  u8: new IntCodec('u8', 8, false, 'le'),
  i8: new IntCodec('i8', 8, true, 'le'),
  u16le: new IntCodec('u16le', 16, false, 'le'),
  u16be: new IntCodec('u16be', 16, false, 'be'),
  i16le: new IntCodec('i16le', 16, true, 'le'),
  i16be: new IntCodec('i16be', 16, true, 'be'),
  u24le: new IntCodec('u24le', 24, false, 'le'),
  u24be: new IntCodec('u24be', 24, false, 'be'),
  u32le: new IntCodec('u32le', 32, false, 'le'),
  u32be: new IntCodec('u32be', 32, false, 'be'),
  i32le: new IntCodec('i32le', 32, true, 'le'),
  i32be: new IntCodec('i32be', 32, true, 'be'),
  u64le: new BigIntCodec('u64le', false, 'le'),
  u64be: new BigIntCodec('u64be', false, 'be'),
  i64le: new BigIntCodec('i64le', true, 'le'),
  i64be: new BigIntCodec('i64be', true, 'be'),
  f32le: new FloatCodec('f32le', 32, 'le'),
  f32be: new FloatCodec('f32be', 32, 'be'),
  f64le: new FloatCodec('f64le', 64, 'le'),
  f64be: new FloatCodec('f64be', 64, 'be'),
  bool: new BoolCodec(),
} as const;

// ---- enumerations -----------------------------------------------------------------------

/** An integer restricted to named values (an identifier, a version, an opcode set). */
export class EnumCodec extends Codec<number> {
  readonly info: CodecInfo;
  private readonly base: IntCodec;
  private readonly allowed: ReadonlySet<number>;

  constructor(base: IntCodec, values: Readonly<Record<string, number>>) {
    super();
    this.base = base;
    this.allowed = new Set(Object.values(values));
    this.info = { kind: 'enum', base, values };
    this.fixedSize = base.fixedSize;
    this.minSize = base.minSize;
  }

  read(r: WireReader): number {
    const at = r.offset;
    const v = this.base.read(r);
    if (!this.allowed.has(v))
      throw new DecodeError(ErrorCode.BAD_VALUE, `0x${v.toString(16)} is not an allowed value`, at);
    return v;
  }

  write(w: WireWriter, value: number): void {
    this.base.write(w, value);
  }

  toJson(value: number): Json {
    return value;
  }

  fromJson(json: unknown, path: string): number {
    const v = this.base.fromJson(json, path);
    if (!this.allowed.has(v)) throw badInput(path, `${v} is not one of ${[...this.allowed].join(', ')}`);
    return v;
  }
}

export function enumOf(base: IntCodec, values: Readonly<Record<string, number>>): EnumCodec {
  return new EnumCodec(base, values);
}

// ---- lengths --------------------------------------------------------------------------------

/** Length declarations for bytes, strings and arrays. */
export type Length = number | IntCodec | 'rest';

function lengthInfo(length: Length, counts: 'bytes' | 'items'): LengthInfo {
  if (typeof length === 'number') return { type: 'fixed', value: length };
  if (length === 'rest') return { type: 'rest' };
  return { type: 'prefix', prefix: length, counts };
}

// ---- bytes ----------------------------------------------------------------------------------

const HEX_RE = /^(?:[0-9a-fA-F]{2})*$/;

export function hexToBytes(hex: string, path = ''): Buffer {
  const clean = hex.replace(/\s+/g, '');
  if (!HEX_RE.test(clean)) throw badInput(path, 'expected a hex string with an even number of digits');
  return Buffer.from(clean, 'hex');
}

export class BytesCodec extends Codec<Buffer> {
  readonly info: CodecInfo;
  private readonly length: Length;

  constructor(length: Length) {
    super();
    this.length = length;
    this.info = { kind: 'bytes', length: lengthInfo(length, 'bytes') };
    if (typeof length === 'number') this.fixedSize = this.minSize = length;
    else this.minSize = length === 'rest' ? 0 : length.minSize;
  }

  read(r: WireReader): Buffer {
    const len = this.length;
    if (typeof len === 'number') return r.bytes(len);
    if (len === 'rest') return r.rest();
    return r.bytes(len.read(r));
  }

  write(w: WireWriter, value: Uint8Array): void {
    const len = this.length;
    if (typeof len === 'number') {
      if (value.length !== len) {
        throw new EncodeError(ErrorCode.BAD_INPUT, `expected ${len} bytes, got ${value.length}`);
      }
    } else if (len !== 'rest') {
      if (value.length > len.max) {
        throw new EncodeError(
          ErrorCode.TOO_LARGE,
          `${value.length} bytes do not fit a ${len.info.kind} length`,
        );
      }
      len.write(w, value.length);
    }
    w.bytes(value);
  }

  toJson(value: Uint8Array): Json {
    return Buffer.from(value.buffer, value.byteOffset, value.byteLength).toString('hex');
  }

  fromJson(json: unknown, path: string): Buffer {
    if (typeof json !== 'string') throw badInput(path, `expected a hex string, got ${typeOf(json)}`);
    const b = hexToBytes(json, path);
    if (typeof this.length === 'number' && b.length !== this.length) {
      throw badInput(path, `expected ${this.length} bytes, got ${b.length}`);
    }
    return b;
  }
}

// ---- strings --------------------------------------------------------------------------------

export interface StringOptions {
  encoding?: StringEncoding;
  /** The length counts a trailing NUL that must be present (Quazal String). */
  nulTerminated?: boolean;
  /** Per-field cap on the string's bytes (a NUL terminator not counted), on top of the reader's `maxStringBytes`. */
  maxBytes?: number;
}

export class StringCodec extends Codec<string> {
  readonly info: CodecInfo;
  private readonly encoding: StringEncoding;
  private readonly nul: boolean;
  private readonly maxBytes: number;
  private readonly length: Length;

  constructor(length: Length, options: StringOptions = {}) {
    super();
    this.length = length;
    this.encoding = options.encoding ?? 'utf8';
    this.nul = options.nulTerminated ?? false;
    this.maxBytes = options.maxBytes ?? Number.POSITIVE_INFINITY;
    this.info = {
      kind: 'string',
      length: lengthInfo(length, 'bytes'),
      encoding: this.encoding,
      nulTerminated: this.nul,
    };
    if (typeof length === 'number') this.fixedSize = this.minSize = length;
    else this.minSize = (length === 'rest' ? 0 : length.minSize) + (this.nul ? 1 : 0);
  }

  read(r: WireReader): string {
    const len = this.length;
    const at = r.offset;
    const n = typeof len === 'number' ? len : len === 'rest' ? r.remaining : len.read(r);
    // The cap counts the string's own bytes, never its NUL (the same rule `write` applies).
    const content = this.nul && n > 0 ? n - 1 : n;
    if (content > this.maxBytes) {
      throw new DecodeError(
        ErrorCode.TOO_LARGE,
        `string of ${content} bytes exceeds the field's limit of ${this.maxBytes}`,
        at,
      );
    }
    if (!this.nul) return r.string(n, this.encoding);
    if (n === 0)
      throw new DecodeError(ErrorCode.BAD_STRING, 'string length 0 leaves no room for its NUL', at);
    const s = r.string(n - 1, this.encoding);
    const nulAt = r.offset;
    if (r.u8() !== 0)
      throw new DecodeError(ErrorCode.BAD_STRING, 'string is missing its NUL terminator', nulAt);
    return s;
  }

  write(w: WireWriter, value: string): void {
    const len = this.length;
    if (typeof len === 'number') {
      const start = w.offset;
      const n = w.string(value, this.encoding);
      if (n !== len) {
        w.offset = start;
        throw new EncodeError(ErrorCode.BAD_INPUT, `expected exactly ${len} bytes of string, got ${n}`);
      }
      return;
    }
    if (len === 'rest') {
      w.string(value, this.encoding);
      if (this.nul) w.u8(0);
      return;
    }
    // Write the prefix as a placeholder, the string, then patch the real byte count in.
    const at = w.offset;
    len.write(w, 0);
    const n = w.string(value, this.encoding) + (this.nul ? 1 : 0);
    if (this.nul) w.u8(0);
    if (n > len.max || n - (this.nul ? 1 : 0) > this.maxBytes) {
      w.offset = at;
      throw new EncodeError(ErrorCode.TOO_LARGE, `string of ${n} bytes is too long for its length field`);
    }
    len.patch(w, at, n);
  }

  toJson(value: string): Json {
    return value;
  }

  fromJson(json: unknown, path: string): string {
    if (typeof json !== 'string') throw badInput(path, `expected a string, got ${typeOf(json)}`);
    if (this.nul && json.includes('\0')) throw badInput(path, 'string contains a NUL');
    if (this.maxBytes !== Number.POSITIVE_INFINITY && Buffer.byteLength(json, 'utf8') > this.maxBytes) {
      throw badInput(
        path,
        `string of ${Buffer.byteLength(json, 'utf8')} bytes exceeds the limit of ${this.maxBytes}`,
      );
    }
    return json;
  }
}

// ---- arrays ---------------------------------------------------------------------------------

export class ArrayCodec<T> extends Codec<T[]> {
  readonly info: CodecInfo;
  readonly element: Codec<T>;
  private readonly length: Length;
  private readonly counts: 'items' | 'bytes';

  constructor(element: Codec<T>, length: Length, counts: 'items' | 'bytes' = 'items') {
    super();
    this.element = element;
    this.length = length;
    this.counts = counts;
    this.info = { kind: 'array', length: lengthInfo(length, counts), element };
    if (typeof length === 'number' && counts === 'items') {
      this.minSize = length * element.minSize;
      this.fixedSize = element.fixedSize === undefined ? undefined : length * element.fixedSize;
    } else {
      this.minSize = typeof length === 'number' ? length : length === 'rest' ? 0 : length.minSize;
    }
  }

  read(r: WireReader): T[] {
    const len = this.length;
    const el = this.element;
    const out: T[] = [];
    if (this.counts === 'bytes' || len === 'rest') {
      // Elements fill a byte range: read until it is consumed. `rest` needs no bound of its own,
      // so a short last element still reads as ERR_INCOMPLETE.
      const bounded = len !== 'rest';
      const previous = bounded ? r.limit(typeof len === 'number' ? len : len.read(r), 'array') : 0;
      while (r.offset < r.end) {
        if (out.length >= r.limits.maxArrayLength) {
          throw new DecodeError(
            ErrorCode.TOO_LARGE,
            `array exceeds ${r.limits.maxArrayLength} elements`,
            r.offset,
          );
        }
        out.push(readElement(el, r, out.length));
      }
      if (bounded) r.restore(previous);
      return out;
    }
    const at = r.offset;
    const count = typeof len === 'number' ? len : len.read(r);
    if (count > r.limits.maxArrayLength) {
      throw new DecodeError(
        ErrorCode.TOO_LARGE,
        `array of ${count} exceeds ${r.limits.maxArrayLength} elements`,
        at,
      );
    }
    // A count the remaining bytes cannot possibly hold is rejected before looping.
    if (count * el.minSize > r.remaining) r.fail(count * el.minSize, `array of ${count}`);
    for (let i = 0; i < count; i++) out.push(readElement(el, r, i));
    return out;
  }

  write(w: WireWriter, value: T[]): void {
    const len = this.length;
    if (this.counts === 'bytes' && typeof len !== 'number' && len !== 'rest') {
      const at = w.offset;
      len.write(w, 0);
      const start = w.offset;
      for (let i = 0; i < value.length; i++) writeElement(this.element, w, value[i]!, i);
      len.patch(w, at, w.offset - start);
      return;
    }
    if (typeof len === 'number') {
      if (value.length !== len)
        throw new EncodeError(ErrorCode.BAD_INPUT, `expected ${len} elements, got ${value.length}`);
    } else if (len !== 'rest') {
      if (value.length > len.max)
        throw new EncodeError(ErrorCode.TOO_LARGE, `${value.length} elements do not fit the count`);
      len.write(w, value.length);
    }
    for (let i = 0; i < value.length; i++) writeElement(this.element, w, value[i]!, i);
  }

  toJson(value: T[]): Json {
    return value.map((v) => this.element.toJson(v));
  }

  fromJson(json: unknown, path: string): T[] {
    if (!Array.isArray(json)) throw badInput(path, `expected an array, got ${typeOf(json)}`);
    return json.map((j, i) => this.element.fromJson(j, `${path}[${i}]`));
  }
}

function readElement<T>(el: Codec<T>, r: WireReader, i: number): T {
  try {
    return el.read(r);
  } catch (e) {
    throw asDecodeError(e, r.offset).withPath(`[${i}]`);
  }
}

function writeElement<T>(el: Codec<T>, w: WireWriter, v: T, i: number): void {
  try {
    el.write(w, v);
  } catch (e) {
    if (e instanceof EncodeError) throw e.withPath(`[${i}]`);
    throw e;
  }
}

// ---- conditions (typed `when` predicates, as data) -------------------------------------------

type Scalar = number | bigint | boolean | string;

/**
 * A condition on an earlier field, kept as data so that introspection (the inspector, the
 * Wireshark dissector generator) can read it as well as run it.
 */
export type Condition =
  | { op: 'eq' | 'ne'; field: string; value: Scalar }
  | { op: 'in'; field: string; values: readonly Scalar[] }
  | { op: 'allBits' | 'anyBits' | 'noBits'; field: string; mask: number }
  | { op: 'and' | 'or'; conditions: readonly Condition[] }
  | { op: 'not'; condition: Condition };

/** A runnable condition; `Needs` is the shape of the earlier fields it reads (checked by `struct`). */
export interface Predicate<Needs> {
  readonly condition: Condition;
  readonly test: (partial: Needs) => boolean;
}

type Widen<V> = V extends number
  ? number
  : V extends bigint
    ? bigint
    : V extends boolean
      ? boolean
      : V extends string
        ? string
        : V;

function predicate<Needs>(condition: Condition, test: (partial: any) => boolean): Predicate<Needs> {
  return { condition, test };
}

/** The fields a condition reads, for declaration-time checks. */
export function conditionFields(c: Condition): string[] {
  if ('conditions' in c) return c.conditions.flatMap(conditionFields);
  if ('condition' in c) return conditionFields(c.condition);
  return [c.field];
}

/** Typed conditions for `when(…)`: each names an earlier field of the struct. */
export const is = {
  /** `field === value`. */
  eq<K extends string, V extends Scalar>(field: K, value: V): Predicate<{ [P in K]: Widen<V> }> {
    return predicate({ op: 'eq', field, value }, (o) => o[field] === value);
  },
  /** `field !== value`. */
  ne<K extends string, V extends Scalar>(field: K, value: V): Predicate<{ [P in K]: Widen<V> }> {
    return predicate({ op: 'ne', field, value }, (o) => o[field] !== value);
  },
  /** `field` is one of `values`. */
  oneOf<K extends string, V extends Scalar>(
    field: K,
    values: readonly V[],
  ): Predicate<{ [P in K]: Widen<V> }> {
    const set = new Set<unknown>(values);
    return predicate({ op: 'in', field, values }, (o) => set.has(o[field]));
  },
  /** Every bit of `mask` is set in `field`. */
  allBits<K extends string>(field: K, mask: number): Predicate<{ [P in K]: number }> {
    return predicate({ op: 'allBits', field, mask }, (o) => (o[field] & mask) === mask);
  },
  /** At least one bit of `mask` is set in `field`. */
  anyBits<K extends string>(field: K, mask: number): Predicate<{ [P in K]: number }> {
    return predicate({ op: 'anyBits', field, mask }, (o) => (o[field] & mask) !== 0);
  },
  /** No bit of `mask` is set in `field`. */
  noBits<K extends string>(field: K, mask: number): Predicate<{ [P in K]: number }> {
    return predicate({ op: 'noBits', field, mask }, (o) => (o[field] & mask) === 0);
  },
  and<A, B>(a: Predicate<A>, b: Predicate<B>): Predicate<A & B> {
    return predicate({ op: 'and', conditions: [a.condition, b.condition] }, (o) => a.test(o) && b.test(o));
  },
  or<A, B>(a: Predicate<A>, b: Predicate<B>): Predicate<A & B> {
    return predicate({ op: 'or', conditions: [a.condition, b.condition] }, (o) => a.test(o) || b.test(o));
  },
  not<A>(a: Predicate<A>): Predicate<A> {
    return predicate({ op: 'not', condition: a.condition }, (o) => !a.test(o));
  },
} as const;

// ---- structs (compiled) ---------------------------------------------------------------------

const OPTIONAL = Symbol('optional');
const CONSTANT = Symbol('constant');
const DOC = Symbol('doc');

export interface OptionalField<T, Needs = any> {
  readonly [OPTIONAL]: true;
  readonly codec: Codec<T>;
  readonly when: (partial: Needs) => boolean;
  readonly condition: Condition | undefined;
}

export interface ConstantField<T> {
  readonly [CONSTANT]: true;
  readonly codec: Codec<T>;
  readonly value: T;
}

export interface DocField<T> {
  readonly [DOC]: true;
  readonly codec: Codec<T>;
  readonly doc: string;
}

/**
 * A field that exists only when `predicate` holds for the fields decoded before it. The
 * predicate is either an `is.…` condition (typed by the field it names, and readable by
 * introspection) or a function; annotate the function's parameter (`(m: { flags: number }) => …`)
 * and `struct`/`message` check that those fields exist with those types.
 */
export function when<T, Needs = any>(
  predicate: Predicate<Needs> | ((partial: Needs) => boolean),
  codec: Codec<T>,
): OptionalField<T, Needs> {
  if (typeof predicate === 'function')
    return { [OPTIONAL]: true, codec, when: predicate, condition: undefined };
  return { [OPTIONAL]: true, codec, when: predicate.test, condition: predicate.condition };
}

/** A fixed value (a signature, version, padding): checked on decode, written on encode. */
export function constant<T>(codec: Codec<T>, value: T): ConstantField<T> {
  return { [CONSTANT]: true, codec, value };
}

/** A required field with a description for the inspector and dissectors. */
export function doc<T>(text: string, codec: Codec<T>): DocField<T> {
  return { [DOC]: true, codec, doc: text };
}

type FieldInput = Codec<any> | OptionalField<any, any> | ConstantField<any> | DocField<any>;
export type Fields = Record<string, FieldInput>;

type Simplify<T> = { [K in keyof T]: T[K] } & {};
type RequiredKeys<F> = {
  [K in keyof F]: F[K] extends ConstantField<any> ? never : F[K] extends OptionalField<any, any> ? never : K;
}[keyof F];
type OptionalKeys<F> = { [K in keyof F]: F[K] extends OptionalField<any, any> ? K : never }[keyof F];
type FieldType<X> =
  X extends OptionalField<infer T, any>
    ? T
    : X extends DocField<infer T>
      ? T
      : X extends Codec<infer T>
        ? T
        : never;

export type StructValue<F> = Simplify<
  { [K in RequiredKeys<F>]: FieldType<F[K]> } & { [K in OptionalKeys<F>]?: FieldType<F[K]> }
>;
export type MessageValue<N extends string, F> = Simplify<{ type: N } & StructValue<F>>;

type FieldValues<F> = { [K in keyof F]: FieldType<F[K]> };

/**
 * `F`, with every `when` whose predicate needs fields this struct does not declare (or declares
 * with other types) turned into a type error at the field's name; an untyped predicate (`any`)
 * passes. `struct`/`message` do not apply it themselves (it would reject generic wrappers that
 * pass a type parameter through); wrap the fields in `checkedFields({…})` to opt in. Every
 * `is.…` condition is also checked when it is declared: it must name an earlier field.
 */
export type CheckedFields<F> = {
  [K in keyof F]: F[K] extends OptionalField<any, infer Needs>
    ? unknown extends Needs
      ? F[K]
      : FieldValues<F> extends Needs
        ? F[K]
        : { error: 'when(): the predicate reads fields this struct does not declare, or with other types' }
    : F[K];
};

function normalizeField(name: string, input: FieldInput): FieldInfo {
  if (name === '__proto__' || name === 'constructor' || name === 'type') {
    throw new DeclarationError(`field name "${name}" is reserved`);
  }
  if (input instanceof Codec) {
    return {
      name,
      codec: input,
      when: undefined,
      condition: undefined,
      constant: undefined,
      isConstant: false,
      doc: undefined,
    };
  }
  if (OPTIONAL in input) {
    return {
      name,
      codec: input.codec,
      when: input.when,
      condition: input.condition,
      constant: undefined,
      isConstant: false,
      doc: undefined,
    };
  }
  if (CONSTANT in input) {
    return {
      name,
      codec: input.codec,
      when: undefined,
      condition: undefined,
      constant: input.value,
      isConstant: true,
      doc: undefined,
    };
  }
  return {
    name,
    codec: input.codec,
    when: undefined,
    condition: undefined,
    constant: undefined,
    isConstant: false,
    doc: input.doc,
  };
}

function constantMatches(a: unknown, b: unknown): boolean {
  if (a instanceof Uint8Array && b instanceof Uint8Array) return Buffer.compare(a, b) === 0;
  return a === b;
}

/**
 * A codec whose value is an object of named fields, which `select` can extend: it reads its
 * fields into an object that already holds earlier ones, and converts to or from JSON into a
 * shared object. `StructCodec` and `SelectCodec` are the two kinds.
 */
export abstract class ObjectCodec<T> extends Codec<T> {
  /** The message name written as `type`, if any. */
  abstract readonly name: string | undefined;
  /** Every field name this codec can produce (for select's checks and JSON validation). */
  abstract readonly fieldNames: ReadonlySet<string>;
  /** Field names its conditions read that it does not declare itself (a select's head must). */
  abstract readonly outerFields: ReadonlySet<string>;
  /** Reads the fields into `o` (which may hold earlier fields) and returns it. */
  abstract readInto(r: WireReader, o: Record<string, unknown>): T;
  /** Adds the JSON of this codec's fields to `out` (not `type`). */
  abstract toJsonInto(value: T, out: Record<string, Json>): void;
  /** Converts this codec's fields from `json` into `out`, adding their names to `known`. */
  abstract fromJsonInto(
    json: Record<string, unknown>,
    path: string,
    out: Record<string, unknown>,
    known: Set<string>,
  ): void;

  toJson(value: T): Json {
    const out: Record<string, Json> = {};
    const type = (value as { type?: unknown }).type;
    if (typeof type === 'string') out.type = type;
    this.toJsonInto(value, out);
    return out;
  }

  fromJson(json: unknown, path: string): T {
    if (typeof json !== 'object' || json === null || Array.isArray(json)) {
      throw badInput(path, `expected an object, got ${typeOf(json)}`);
    }
    const j = json as Record<string, unknown>;
    const out: Record<string, unknown> = {};
    const known = new Set<string>(['type']);
    this.fromJsonInto(j, path, out, known);
    for (const k of Object.keys(j)) {
      if (!known.has(k)) throw badInput(path === '' ? k : `${path}.${k}`, 'unknown field');
    }
    return out as T;
  }
}

export class StructCodec<T> extends ObjectCodec<T> {
  readonly info: CodecInfo;
  readonly fields: readonly FieldInfo[];
  readonly read: (r: WireReader) => T;
  readonly readInto: (r: WireReader, o: Record<string, unknown>) => T;
  readonly write: (w: WireWriter, value: T) => void;
  readonly name: string | undefined;
  readonly fieldNames: ReadonlySet<string>;
  readonly outerFields: ReadonlySet<string>;

  constructor(name: string | undefined, fields: Fields) {
    super();
    this.name = name;
    this.fields = Object.entries(fields).map(([n, f]) => normalizeField(n, f));
    this.info = { kind: 'struct', name, fields: this.fields };
    this.fieldNames = new Set(this.fields.filter((f) => !f.isConstant).map((f) => f.name));
    this.outerFields = checkConditions(this.fields);
    let min = 0;
    let fixed: number | undefined = 0;
    for (const f of this.fields) {
      if (f.when === undefined) min += f.codec.minSize;
      fixed =
        f.when === undefined && f.codec.fixedSize !== undefined && fixed !== undefined
          ? fixed + f.codec.fixedSize
          : undefined;
    }
    this.minSize = min;
    this.fixedSize = fixed;
    const compiled = compileRead(name, this.fields);
    this.read = compiled.read as (r: WireReader) => T;
    this.readInto = compiled.readInto as (r: WireReader, o: Record<string, unknown>) => T;
    this.write = compileWrite(this.fields) as (w: WireWriter, value: T) => void;
  }

  toJsonInto(value: T, out: Record<string, Json>): void {
    const v = value as Record<string, unknown>;
    for (const f of this.fields) {
      if (f.isConstant) continue;
      const x = v[f.name];
      if (x !== undefined) out[f.name] = f.codec.toJson(x);
    }
  }

  override toJson(value: T): Json {
    const out: Record<string, Json> = {};
    if (this.name !== undefined) out.type = this.name;
    this.toJsonInto(value, out);
    return out;
  }

  fromJsonInto(
    j: Record<string, unknown>,
    path: string,
    out: Record<string, unknown>,
    known: Set<string>,
  ): void {
    if (this.name !== undefined) out.type = this.name;
    for (const f of this.fields) {
      known.add(f.name);
      if (f.isConstant) continue;
      const p = path === '' ? f.name : `${path}.${f.name}`;
      if (f.when !== undefined && !f.when(out)) {
        if (j[f.name] !== undefined) throw badInput(p, 'field must be absent here (its condition is false)');
        continue;
      }
      if (!Object.hasOwn(j, f.name)) throw badInput(p, 'missing field');
      out[f.name] = f.codec.fromJson(j[f.name], p);
    }
  }
}

/**
 * Checks at declaration time that every `is.…` condition reads a field declared before it (and
 * not a constant, which is not part of the value). Returns the names it reads that the struct
 * does not declare: legal only inside a `select`, whose head must declare them.
 */
function checkConditions(fields: readonly FieldInfo[]): Set<string> {
  const outer = new Set<string>();
  fields.forEach((f, i) => {
    if (f.condition === undefined) return;
    for (const name of conditionFields(f.condition)) {
      const at = fields.findIndex((x) => x.name === name);
      if (at === -1) outer.add(name);
      else if (at >= i)
        throw new DeclarationError(`field "${f.name}" depends on "${name}", which comes after it`);
      else if (fields[at]!.isConstant)
        throw new DeclarationError(`field "${f.name}" depends on constant "${name}"`);
    }
  });
  return outer;
}

/** Prefixes the failing field's name to whatever a struct's field threw. */
function decodeFieldError(e: unknown, fields: readonly FieldInfo[], f: number, r: WireReader): DecodeError {
  const err = asDecodeError(e, r.offset);
  return f >= 0 ? err.withPath(fields[f]!.name) : err;
}

function encodeFieldError(e: unknown, fields: readonly FieldInfo[], f: number): unknown {
  if (e instanceof EncodeError && f >= 0) return e.withPath(fields[f]!.name);
  if (e instanceof TypeError && f >= 0) return badInput(fields[f]!.name, `bad value: ${e.message}`);
  return e;
}

function checkConstant(field: FieldInfo, got: unknown, at: number): void {
  if (!constantMatches(got, field.constant)) {
    throw new DecodeError(
      ErrorCode.BAD_MAGIC,
      `expected ${formatConst(field.constant)}, got ${formatConst(got)}`,
      at,
    );
  }
}

function formatConst(v: unknown): string {
  if (typeof v === 'number') return `0x${v.toString(16)}`;
  if (v instanceof Uint8Array) return Buffer.from(v).toString('hex');
  return String(v);
}

function compileRead(
  name: string | undefined,
  fields: readonly FieldInfo[],
): { read: Function; readInto: Function } {
  const body: string[] = [];
  fields.forEach((field, i) => {
    const key = JSON.stringify(field.name);
    const readExpr = field.codec.inline !== undefined ? `r.${field.codec.inline}()` : `c${i}.read(r)`;
    body.push(`    f = ${i};`);
    if (field.isConstant) {
      body.push(`    { const at = r.offset; checkConstant(fields[${i}], ${readExpr}, at); }`);
    } else if (field.when !== undefined) {
      body.push(`    if (fields[${i}].when(o)) o[${key}] = ${readExpr};`);
    } else {
      body.push(`    o[${key}] = ${readExpr};`);
    }
  });
  const tail = [
    '    return o;',
    '  } catch (e) {',
    '    throw decodeFieldError(e, fields, f, r);',
    '  }',
    '}',
  ];
  const init = fields.filter((f) => !f.isConstant).map((f) => `${JSON.stringify(f.name)}: undefined`);
  if (name !== undefined) init.unshift(`type: ${JSON.stringify(name)}`);
  // `read` builds the object with every field present from the start, so decoded objects share
  // one shape; `readInto` adds to an object a select's head already started.
  const lines = [
    'function read(r) {',
    '  let f = -1;',
    '  try {',
    `    const o = { ${init.join(', ')} };`,
    ...body,
    ...tail,
    'function readInto(r, o) {',
    '  let f = -1;',
    '  try {',
    ...(name !== undefined ? [`    o.type = ${JSON.stringify(name)};`] : []),
    ...body,
    ...tail,
    'return { read, readInto };',
  ];
  const params = fields.map((_, i) => `c${i}`);
  const factory = new Function('fields', 'checkConstant', 'decodeFieldError', ...params, lines.join('\n'));
  return factory(fields, checkConstant, decodeFieldError, ...fields.map((f) => f.codec));
}

function compileWrite(fields: readonly FieldInfo[]): Function {
  const lines: string[] = ['return function write(w, v) {', '  let f = -1;', '  try {'];
  fields.forEach((field, i) => {
    const key = JSON.stringify(field.name);
    const value = field.isConstant ? `fields[${i}].constant` : `v[${key}]`;
    const writeStmt =
      field.codec.inline !== undefined ? `w.${field.codec.inline}(${value});` : `c${i}.write(w, ${value});`;
    lines.push(`    f = ${i};`);
    if (field.when !== undefined) lines.push(`    if (fields[${i}].when(v)) ${writeStmt}`);
    else lines.push(`    ${writeStmt}`);
  });
  lines.push('  } catch (e) {', '    throw encodeFieldError(e, fields, f);', '  }', '};');
  const params = fields.map((_, i) => `c${i}`);
  const factory = new Function('fields', 'encodeFieldError', ...params, lines.join('\n'));
  return factory(fields, encodeFieldError, ...fields.map((f) => f.codec));
}

// ---- sized regions --------------------------------------------------------------------------

/**
 * A size prefix followed by exactly that many bytes holding `inner`. `adjust` is added to the
 * byte count when writing the prefix (and subtracted when reading): use it when the size
 * counts bytes before the region, such as its own header.
 */
export class SizedCodec<T> extends Codec<T> {
  readonly info: CodecInfo;
  readonly inner: Codec<T>;
  private readonly prefix: IntCodec;
  private readonly adjust: number;

  constructor(prefix: IntCodec, inner: Codec<T>, adjust = 0) {
    super();
    this.prefix = prefix;
    this.inner = inner;
    this.adjust = adjust;
    this.info = { kind: 'sized', prefix, adjust, inner };
    this.minSize = prefix.minSize + inner.minSize;
  }

  read(r: WireReader): T {
    const at = r.offset;
    const n = this.prefix.read(r) - this.adjust;
    if (n < 0)
      throw new DecodeError(
        ErrorCode.BAD_LENGTH,
        `size ${n + this.adjust} is smaller than ${this.adjust}`,
        at,
      );
    const previous = r.limit(n, 'sized item');
    const v = this.inner.read(r);
    r.expectEnd('sized item');
    r.restore(previous);
    return v;
  }

  write(w: WireWriter, value: T): void {
    const at = w.offset;
    this.prefix.write(w, 0);
    const start = w.offset;
    this.inner.write(w, value);
    const n = w.offset - start + this.adjust;
    if (n > this.prefix.max) throw new EncodeError(ErrorCode.TOO_LARGE, `size ${n} does not fit its prefix`);
    this.prefix.patch(w, at, n);
  }

  toJson(value: T): Json {
    return this.inner.toJson(value);
  }

  fromJson(json: unknown, path: string): T {
    return this.inner.fromJson(json, path);
  }
}

// ---- tagged unions (message sets) -----------------------------------------------------------

type VariantMap = Record<string, readonly [number, StructCodec<any>]>;
export type UnionValue<V extends VariantMap> = { [K in keyof V]: Infer<V[K][1]> }[keyof V];

/**
 * A set of messages told apart by a tag (a type code or opcode). Each variant is a `message`,
 * whose decoded object carries `type: NAME`.
 */
export class UnionCodec<V extends VariantMap> extends Codec<UnionValue<V>> {
  readonly info: CodecInfo;
  private readonly byTag = new Map<number, StructCodec<any>>();
  private readonly byName = new Map<string, { tag: number; codec: StructCodec<any> }>();
  readonly tagCodec: Codec<number>;

  constructor(tag: Codec<number>, variants: V) {
    super();
    this.tagCodec = tag;
    const list: VariantInfo[] = [];
    let min = Number.POSITIVE_INFINITY;
    for (const [name, [code, codec]] of Object.entries(variants)) {
      if (codec.name !== name)
        throw new DeclarationError(`variant ${name} must be declared as message('${name}', …)`);
      this.byTag.set(code, codec);
      this.byName.set(name, { tag: code, codec });
      list.push({ name, tag: code, codec });
      min = Math.min(min, codec.minSize);
    }
    this.info = { kind: 'union', tag, variants: list };
    this.minSize = tag.minSize + (Number.isFinite(min) ? min : 0);
  }

  /** The variant for a tag, or undefined. */
  variant(tag: number): StructCodec<any> | undefined {
    return this.byTag.get(tag);
  }

  read(r: WireReader): UnionValue<V> {
    const at = r.offset;
    const tag = this.tagCodec.read(r);
    const codec = this.byTag.get(tag);
    if (codec === undefined) {
      throw new DecodeError(
        ErrorCode.UNKNOWN_TYPE,
        `unknown type 0x${tag.toString(16).padStart(2, '0')}`,
        at,
      );
    }
    return codec.read(r);
  }

  write(w: WireWriter, value: UnionValue<V>): void {
    const v = this.byName.get((value as { type: string }).type);
    if (v === undefined)
      throw badInput('type', `unknown message type ${String((value as { type: string }).type)}`);
    this.tagCodec.write(w, v.tag);
    v.codec.write(w, value);
  }

  toJson(value: UnionValue<V>): Json {
    const v = this.byName.get((value as { type: string }).type);
    if (v === undefined) throw badInput('type', 'unknown message type');
    return v.codec.toJson(value);
  }

  fromJson(json: unknown, path: string): UnionValue<V> {
    if (typeof json !== 'object' || json === null || Array.isArray(json)) {
      throw badInput(path, `expected an object, got ${typeOf(json)}`);
    }
    const type = (json as { type?: unknown }).type;
    const v = typeof type === 'string' ? this.byName.get(type) : undefined;
    if (v === undefined) {
      throw badInput(
        path === '' ? 'type' : `${path}.type`,
        `expected one of ${[...this.byName.keys()].join(', ')}`,
      );
    }
    return v.codec.fromJson(json, path);
  }
}

// ---- select: branch on an earlier field -----------------------------------------------------

type CaseMap = Record<string, ObjectCodec<any>>;
export type SelectValue<H, C extends CaseMap> = { [K in keyof C]: Simplify<H & Infer<C[K]>> }[keyof C];

/**
 * A message whose remaining fields depend on a field read earlier: `head` is read first, then
 * the case named by `String(head[on])` (`'true'`/`'false'` for a boolean, `'3'` for a number).
 * The result is one flat object with the head's and the case's fields, as the wire format lays
 * them out; a named case (`message('Response', …)`) sets `type`. Cases can be selects
 * themselves (branch again on a later field), and their conditions may read the head's fields.
 */
export class SelectCodec<T> extends ObjectCodec<T> {
  readonly info: CodecInfo;
  readonly head: ObjectCodec<any>;
  readonly on: string;
  readonly name: string | undefined;
  readonly fieldNames: ReadonlySet<string>;
  readonly outerFields: ReadonlySet<string>;
  private readonly cases: ReadonlyMap<string, ObjectCodec<any>>;

  constructor(head: ObjectCodec<any>, on: string, cases: CaseMap) {
    super();
    if (!head.fieldNames.has(on)) throw new DeclarationError(`select: the head has no field "${on}"`);
    this.head = head;
    this.on = on;
    this.name = head.name;
    this.cases = new Map(Object.entries(cases));
    if (this.cases.size === 0) throw new DeclarationError('select: no cases');
    const names = new Set(head.fieldNames);
    const outer = new Set(head.outerFields);
    let min = Number.POSITIVE_INFINITY;
    let fixed: number | undefined;
    let first = true;
    for (const [value, c] of this.cases) {
      for (const n of c.fieldNames) {
        if (head.fieldNames.has(n))
          throw new DeclarationError(`select case ${value}: field "${n}" is also in the head`);
        names.add(n);
      }
      for (const n of c.outerFields) if (!head.fieldNames.has(n)) outer.add(n);
      min = Math.min(min, c.minSize);
      fixed = first ? c.fixedSize : fixed === c.fixedSize ? fixed : undefined;
      first = false;
    }
    this.fieldNames = names;
    this.outerFields = outer;
    this.minSize = head.minSize + min;
    this.fixedSize = head.fixedSize !== undefined && fixed !== undefined ? head.fixedSize + fixed : undefined;
    this.info = {
      kind: 'select',
      head,
      on,
      cases: [...this.cases].map(([value, codec]) => ({ value, codec })),
    };
  }

  private caseFor(value: unknown): ObjectCodec<any> | undefined {
    return this.cases.get(String(value));
  }

  private choices(): string {
    return [...this.cases.keys()].join(', ');
  }

  read(r: WireReader): T {
    const o = this.head.read(r) as Record<string, unknown>;
    return this.readCase(r, o);
  }

  readInto(r: WireReader, o: Record<string, unknown>): T {
    this.head.readInto(r, o);
    return this.readCase(r, o);
  }

  private readCase(r: WireReader, o: Record<string, unknown>): T {
    const value = o[this.on];
    const c = this.caseFor(value);
    if (c === undefined) {
      throw new DecodeError(
        ErrorCode.BAD_VALUE,
        `${this.on} = ${String(value)} has no case (cases: ${this.choices()})`,
        r.offset,
        this.on,
      );
    }
    return c.readInto(r, o);
  }

  write(w: WireWriter, value: T): void {
    const v = value as Record<string, unknown>;
    const c = this.caseFor(v[this.on]);
    if (c === undefined)
      throw badInput(this.on, `${String(v[this.on])} has no case (cases: ${this.choices()})`);
    this.head.write(w, value);
    c.write(w, value);
  }

  toJsonInto(value: T, out: Record<string, Json>): void {
    const v = value as Record<string, unknown>;
    this.head.toJsonInto(value, out);
    const c = this.caseFor(v[this.on]);
    if (c === undefined)
      throw badInput(this.on, `${String(v[this.on])} has no case (cases: ${this.choices()})`);
    c.toJsonInto(value, out);
  }

  fromJsonInto(
    j: Record<string, unknown>,
    path: string,
    out: Record<string, unknown>,
    known: Set<string>,
  ): void {
    this.head.fromJsonInto(j, path, out, known);
    const c = this.caseFor(out[this.on]);
    if (c === undefined) {
      const p = path === '' ? this.on : `${path}.${this.on}`;
      throw badInput(p, `${String(out[this.on])} has no case (cases: ${this.choices()})`);
    }
    c.fromJsonInto(j, path, out, known);
  }
}

// ---- escape hatches -------------------------------------------------------------------------

export interface CustomDefinition<T> {
  /** A name for introspection, e.g. `vcmp-rpc.value`. */
  name: string;
  /** What the bytes look like, for people reading a dissector or inspector. */
  description: string;
  minSize?: number;
  fixedSize?: number;
  read(r: WireReader): T;
  write(w: WireWriter, value: T): void;
  toJson(value: T): Json;
  fromJson(json: unknown, path: string): T;
}

/** A hand-written codec behind the same interface, for what cannot be declared. */
export class CustomCodec<T> extends Codec<T> {
  readonly info: CodecInfo;
  override readonly read: (r: WireReader) => T;
  readonly write: (w: WireWriter, value: T) => void;
  readonly toJson: (value: T) => Json;
  readonly fromJson: (json: unknown, path: string) => T;

  constructor(def: CustomDefinition<T>) {
    super();
    this.info = { kind: 'custom', name: def.name, description: def.description };
    this.minSize = def.minSize ?? def.fixedSize ?? 0;
    this.fixedSize = def.fixedSize;
    this.read = def.read;
    this.write = def.write;
    this.toJson = def.toJson;
    this.fromJson = def.fromJson;
  }
}

/** A codec resolved on first use, for recursive declarations. */
export class LazyCodec<T> extends Codec<T> {
  readonly info: CodecInfo;
  private resolved: Codec<T> | undefined;
  private readonly target: () => Codec<T>;

  constructor(target: () => Codec<T>) {
    super();
    this.target = target;
    this.info = { kind: 'lazy', target };
  }

  private get codec(): Codec<T> {
    this.resolved ??= this.target();
    return this.resolved;
  }

  read(r: WireReader): T {
    r.enter();
    const v = this.codec.read(r);
    r.leave();
    return v;
  }

  write(w: WireWriter, value: T): void {
    this.codec.write(w, value);
  }

  toJson(value: T): Json {
    return this.codec.toJson(value);
  }

  fromJson(json: unknown, path: string): T {
    return this.codec.fromJson(json, path);
  }
}

// ---- constructors ---------------------------------------------------------------------------

export function bytes(length: Length): BytesCodec {
  return new BytesCodec(length);
}

export function string(length: Length, options?: StringOptions): StringCodec {
  return new StringCodec(length, options);
}

/** An array whose length is a count of elements (or fixed, or the rest of the input). */
export function array<T>(element: Codec<T>, length: Length): ArrayCodec<T> {
  return new ArrayCodec(element, length, 'items');
}

/** An array preceded by its size in bytes; elements are read until that many bytes are consumed. */
export function arrayOfBytes<T>(element: Codec<T>, byteLength: IntCodec): ArrayCodec<T> {
  return new ArrayCodec(element, byteLength, 'bytes');
}

/** Returns `fields` unchanged, after checking at compile time that typed `when` predicates fit them. */
export function checkedFields<F extends Fields>(fields: F & CheckedFields<F>): F {
  return fields;
}

export function struct<F extends Fields>(fields: F): StructCodec<StructValue<F>> {
  return new StructCodec(undefined, fields);
}

/** A struct that is a message: its decoded object starts with `type: name`. */
export function message<N extends string, F extends Fields>(
  name: N,
  fields: F,
): StructCodec<MessageValue<N, F>> {
  return new StructCodec(name, fields);
}

export function sized<T>(prefix: IntCodec, inner: Codec<T>, adjust = 0): SizedCodec<T> {
  return new SizedCodec(prefix, inner, adjust);
}

/**
 * Branches on a field of `head`: `select(head, 'isRequest', { true: request, false: response })`.
 * See `SelectCodec`.
 */
export function select<H, K extends keyof H & string, C extends CaseMap>(
  head: ObjectCodec<H>,
  on: K,
  cases: C,
): SelectCodec<SelectValue<H, C>> {
  return new SelectCodec(head, on, cases);
}

export function union<V extends VariantMap>(tag: Codec<number>, variants: V): UnionCodec<V> {
  return new UnionCodec(tag, variants);
}

export function custom<T>(def: CustomDefinition<T>): CustomCodec<T> {
  return new CustomCodec(def);
}

export function lazy<T>(target: () => Codec<T>): LazyCodec<T> {
  return new LazyCodec(target);
}

// ---- whole-message helpers ------------------------------------------------------------------

export interface DecodeOptions {
  limits?: Partial<DecodeLimits>;
  /** Accept bytes after the message instead of failing with ERR_TRAILING_BYTES. */
  allowTrailing?: boolean;
}

// One reader serves every top-level decode (decoding is synchronous); a decode that starts while
// another is running (a custom codec decoding a nested container) gets its own.
const sharedReader = new WireReader();
let sharedBusy = false;

/** A complete limits object is used as it is; a partial one is filled from the defaults. */
function limitsFor(partial: Partial<DecodeLimits> | undefined): DecodeLimits {
  if (partial === undefined) return DEFAULT_LIMITS as DecodeLimits;
  if (
    partial.maxStringBytes !== undefined &&
    partial.maxBytesLength !== undefined &&
    partial.maxArrayLength !== undefined &&
    partial.maxDepth !== undefined
  ) {
    return partial as DecodeLimits;
  }
  return resolveLimits(partial);
}

/**
 * Decodes exactly one message from `bytes`. Throws only DecodeError. Allocates nothing of its
 * own per call when `limits` is absent or complete (every key set).
 */
export function decode<T>(codec: Codec<T>, bytes: Uint8Array, options: DecodeOptions = {}): T {
  const nested = sharedBusy;
  const r = nested ? new WireReader() : sharedReader;
  r.reset(bytes);
  r.limits = limitsFor(options.limits);
  sharedBusy = true;
  try {
    const v = codec.read(r);
    if (options.allowTrailing !== true) r.expectEnd();
    return v;
  } catch (e) {
    throw asDecodeError(e, r.offset);
  } finally {
    if (!nested) {
      sharedBusy = false;
      r.reset(EMPTY_INPUT);
    }
  }
}

/** Encodes into a new buffer. */
export function encode<T>(codec: Codec<T>, value: T): Buffer {
  const w = new WireWriter();
  codec.write(w, value);
  return w.toBuffer();
}

/** Encodes into a reused writer (reset first) and returns a view of the bytes: no allocation. */
export function encodeInto<T>(codec: Codec<T>, value: T, w: WireWriter): Buffer {
  w.reset();
  codec.write(w, value);
  return w.view();
}
