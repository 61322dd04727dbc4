/**
 * Declared codecs. A message is declared once, as a tree of `Codec` objects; the same tree
 * drives decode, encode, the TypeScript type (`Infer<typeof Msg>`), JSON conversion for the
 * CLI, and introspection (`codec.info`) for the inspector and dissector generators.
 *
 * Structs compile their field list into straight-line JavaScript once, at declaration time, so a
 * declared message decodes about as fast as a hand-written one: monomorphic calls, stable object
 * shapes, no per-field loop.
 */
import { asDecodeError, DecodeError, EncodeError, ErrorCode } from './errors.js';
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
  /** A fixed value: checked on decode, written on encode, not part of the message object. */
  constant: unknown;
  isConstant: boolean;
  doc: string | undefined;
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

// ---- structs (compiled) ---------------------------------------------------------------------

const OPTIONAL = Symbol('optional');
const CONSTANT = Symbol('constant');
const DOC = Symbol('doc');

export interface OptionalField<T> {
  readonly [OPTIONAL]: true;
  readonly codec: Codec<T>;
  readonly when: (partial: any) => boolean;
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

/** A field that exists only when `when(fieldsSoFar)` is true. */
export function when<T>(predicate: (partial: any) => boolean, codec: Codec<T>): OptionalField<T> {
  return { [OPTIONAL]: true, codec, when: predicate };
}

/** A fixed value (a signature, version, padding): checked on decode, written on encode. */
export function constant<T>(codec: Codec<T>, value: T): ConstantField<T> {
  return { [CONSTANT]: true, codec, value };
}

/** A required field with a description for the inspector and dissectors. */
export function doc<T>(text: string, codec: Codec<T>): DocField<T> {
  return { [DOC]: true, codec, doc: text };
}

type FieldInput = Codec<any> | OptionalField<any> | ConstantField<any> | DocField<any>;
export type Fields = Record<string, FieldInput>;

type Simplify<T> = { [K in keyof T]: T[K] } & {};
type RequiredKeys<F> = {
  [K in keyof F]: F[K] extends ConstantField<any> ? never : F[K] extends OptionalField<any> ? never : K;
}[keyof F];
type OptionalKeys<F> = { [K in keyof F]: F[K] extends OptionalField<any> ? K : never }[keyof F];
type FieldType<X> =
  X extends OptionalField<infer T>
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

function normalizeField(name: string, input: FieldInput): FieldInfo {
  if (name === '__proto__' || name === 'constructor' || name === 'type') {
    throw new Error(`field name "${name}" is reserved`);
  }
  if (input instanceof Codec) {
    return { name, codec: input, when: undefined, constant: undefined, isConstant: false, doc: undefined };
  }
  if (OPTIONAL in input) {
    return {
      name,
      codec: input.codec,
      when: input.when,
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
      constant: input.value,
      isConstant: true,
      doc: undefined,
    };
  }
  return {
    name,
    codec: input.codec,
    when: undefined,
    constant: undefined,
    isConstant: false,
    doc: input.doc,
  };
}

function constantMatches(a: unknown, b: unknown): boolean {
  if (a instanceof Uint8Array && b instanceof Uint8Array) return Buffer.compare(a, b) === 0;
  return a === b;
}

export class StructCodec<T> extends Codec<T> {
  readonly info: CodecInfo;
  readonly fields: readonly FieldInfo[];
  readonly read: (r: WireReader) => T;
  readonly write: (w: WireWriter, value: T) => void;
  readonly name: string | undefined;

  constructor(name: string | undefined, fields: Fields) {
    super();
    this.name = name;
    this.fields = Object.entries(fields).map(([n, f]) => normalizeField(n, f));
    this.info = { kind: 'struct', name, fields: this.fields };
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
    this.read = compileRead(name, this.fields) as (r: WireReader) => T;
    this.write = compileWrite(this.fields) as (w: WireWriter, value: T) => void;
  }

  toJson(value: T): Json {
    const v = value as Record<string, unknown>;
    const out: Record<string, Json> = {};
    if (this.name !== undefined) out.type = this.name;
    for (const f of this.fields) {
      if (f.isConstant) continue;
      const x = v[f.name];
      if (x !== undefined) out[f.name] = f.codec.toJson(x);
    }
    return out;
  }

  fromJson(json: unknown, path: string): T {
    if (typeof json !== 'object' || json === null || Array.isArray(json)) {
      throw badInput(path, `expected an object, got ${typeOf(json)}`);
    }
    const j = json as Record<string, unknown>;
    const out: Record<string, unknown> = {};
    if (this.name !== undefined) out.type = this.name;
    const known = new Set<string>(['type']);
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
    for (const k of Object.keys(j)) {
      if (!known.has(k)) throw badInput(path === '' ? k : `${path}.${k}`, 'unknown field');
    }
    return out as T;
  }
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

function compileRead(name: string | undefined, fields: readonly FieldInfo[]): Function {
  const lines: string[] = [];
  const init = fields.filter((f) => !f.isConstant).map((f) => `${JSON.stringify(f.name)}: undefined`);
  if (name !== undefined) init.unshift(`type: ${JSON.stringify(name)}`);
  lines.push(
    'return function read(r) {',
    '  let f = -1;',
    '  try {',
    `    const o = { ${init.join(', ')} };`,
  );
  fields.forEach((field, i) => {
    const key = JSON.stringify(field.name);
    const readExpr = field.codec.inline !== undefined ? `r.${field.codec.inline}()` : `c${i}.read(r)`;
    lines.push(`    f = ${i};`);
    if (field.isConstant) {
      lines.push(`    { const at = r.offset; checkConstant(fields[${i}], ${readExpr}, at); }`);
    } else if (field.when !== undefined) {
      lines.push(`    if (fields[${i}].when(o)) o[${key}] = ${readExpr};`);
    } else {
      lines.push(`    o[${key}] = ${readExpr};`);
    }
  });
  lines.push('    return o;', '  } catch (e) {', '    throw decodeFieldError(e, fields, f, r);', '  }', '};');
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
      if (codec.name !== name) throw new Error(`variant ${name} must be declared as message('${name}', …)`);
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
