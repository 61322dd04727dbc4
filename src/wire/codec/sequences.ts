/** Byte strings, text strings and arrays, with fixed, prefixed or rest-of-input lengths. */
import { asDecodeError, DecodeError, EncodeError, ErrorCode } from '../errors.js';
import type { StringEncoding, WireReader } from '../reader.js';
import type { WireWriter } from '../writer.js';
import { badInput, typeOf } from './internal.js';
import { Codec, type CodecInfo, type IntCodec, type Json, type LengthInfo } from './primitives.js';

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
