/**
 * The base of every declared type (`Codec`), what introspection sees of one (`CodecInfo`), and
 * the primitives: integers, floats, booleans, enumerations.
 */
import { DecodeError, ErrorCode } from '../errors.js';
import type { StringEncoding, WireReader } from '../reader.js';
import type { WireWriter } from '../writer.js';
import { badInput, typeOf } from './internal.js';
import type { Condition } from './struct.js';

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
