import { isUtf8 } from 'node:buffer';
import { DecodeError, ErrorCode } from './errors.js';
import { type DecodeLimits, resolveLimits } from './limits.js';

export type StringEncoding = 'utf8' | 'latin1' | 'ascii';

const EMPTY = Buffer.alloc(0);

function asBuffer(bytes: Uint8Array): Buffer {
  return Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

/**
 * Bounds-checked reader over a byte buffer. Every read names its byte order. A read past the
 * end throws `DecodeError` (ERR_INCOMPLETE at the end of the input, ERR_OVERRUN at the end of a
 * nested bound set with `limit`), never a RangeError, and never reads out of bounds.
 *
 * A reader can be reused across packets with `reset`, so a hot path allocates nothing per
 * packet. Byte arrays it returns are views into the input, not copies.
 */
export class WireReader {
  buf: Buffer = EMPTY;
  /** Next byte to read. */
  offset = 0;
  /** Current bound: reads may not pass it. Equals `dataEnd` unless a nested `limit` is active. */
  end = 0;
  /** End of the input itself. */
  dataEnd = 0;
  /** Current nesting depth, maintained by `enter`/`leave`. */
  depth = 0;
  /** How many `limit` bounds are active: a read past one is an overrun of its item, not a short input. */
  bounds = 0;
  limits: DecodeLimits;

  constructor(bytes?: Uint8Array, limits?: Partial<DecodeLimits>, start = 0, end?: number) {
    this.limits = resolveLimits(limits);
    if (bytes !== undefined) this.reset(bytes, start, end);
  }

  /** Points the reader at new input without allocating. */
  reset(bytes: Uint8Array, start = 0, end = bytes.length): this {
    this.buf = asBuffer(bytes);
    this.offset = start;
    this.end = end;
    this.dataEnd = end;
    this.depth = 0;
    this.bounds = 0;
    return this;
  }

  get remaining(): number {
    return this.end - this.offset;
  }

  /** Throws the right error for a read of `n` bytes at the current offset that does not fit. */
  fail(n: number, what = 'bytes'): never {
    if (this.bounds > 0) {
      throw new DecodeError(
        ErrorCode.OVERRUN,
        `${what}: ${n} byte(s) needed but only ${this.end - this.offset} left in the enclosing item`,
        this.offset,
      );
    }
    throw new DecodeError(
      ErrorCode.INCOMPLETE,
      `${what}: input ends after ${Math.max(0, this.end - this.offset)} of ${n} byte(s)`,
      this.offset,
    );
  }

  /** Checks that `n` more bytes can be read. */
  need(n: number, what?: string): void {
    if (n > this.end - this.offset) this.fail(n, what);
  }

  /**
   * Narrows the readable range to the next `n` bytes (a nested item with a declared size).
   * Returns the previous bound, to give to `restore`.
   */
  limit(n: number, what = 'item'): number {
    if (n > this.end - this.offset) {
      if (this.bounds > 0) {
        throw new DecodeError(
          ErrorCode.OVERRUN,
          `${what} of ${n} byte(s) runs past its container`,
          this.offset,
        );
      }
      throw new DecodeError(
        ErrorCode.INCOMPLETE,
        `${what}: input ends before its ${n} declared byte(s)`,
        this.offset,
      );
    }
    const previous = this.end;
    this.end = this.offset + n;
    this.bounds++;
    return previous;
  }

  /** Ends a `limit`. */
  restore(previousEnd: number): void {
    this.end = previousEnd;
    this.bounds--;
  }

  /** Enters one level of nesting, enforcing `maxDepth`. */
  enter(): void {
    if (++this.depth > this.limits.maxDepth) {
      throw new DecodeError(ErrorCode.TOO_DEEP, `nesting deeper than ${this.limits.maxDepth}`, this.offset);
    }
  }

  leave(): void {
    this.depth--;
  }

  /** Throws ERR_TRAILING_BYTES unless the current bound is fully consumed. */
  expectEnd(what = 'message'): void {
    if (this.offset !== this.end) {
      throw new DecodeError(
        ErrorCode.TRAILING_BYTES,
        `${this.end - this.offset} byte(s) left after the ${what}`,
        this.offset,
      );
    }
  }

  // ---- integers -------------------------------------------------------------------------

  u8(): number {
    const o = this.offset;
    if (o >= this.end) this.fail(1, 'u8');
    this.offset = o + 1;
    return this.buf[o]!;
  }

  i8(): number {
    return (this.u8() << 24) >> 24;
  }

  /** Looks at the byte at `offset + ahead` without consuming it. */
  peekU8(ahead = 0): number {
    const o = this.offset + ahead;
    if (o >= this.end) this.fail(ahead + 1, 'u8');
    return this.buf[o]!;
  }

  u16le(): number {
    const o = this.offset;
    if (o + 2 > this.end) this.fail(2, 'u16');
    this.offset = o + 2;
    const b = this.buf;
    return b[o]! | (b[o + 1]! << 8);
  }

  u16be(): number {
    const o = this.offset;
    if (o + 2 > this.end) this.fail(2, 'u16');
    this.offset = o + 2;
    const b = this.buf;
    return (b[o]! << 8) | b[o + 1]!;
  }

  i16le(): number {
    return (this.u16le() << 16) >> 16;
  }

  i16be(): number {
    return (this.u16be() << 16) >> 16;
  }

  u24be(): number {
    const o = this.offset;
    if (o + 3 > this.end) this.fail(3, 'u24');
    this.offset = o + 3;
    const b = this.buf;
    return (b[o]! << 16) | (b[o + 1]! << 8) | b[o + 2]!;
  }

  u24le(): number {
    const o = this.offset;
    if (o + 3 > this.end) this.fail(3, 'u24');
    this.offset = o + 3;
    const b = this.buf;
    return b[o]! | (b[o + 1]! << 8) | (b[o + 2]! << 16);
  }

  u32le(): number {
    return this.i32le() >>> 0;
  }

  u32be(): number {
    return this.i32be() >>> 0;
  }

  i32le(): number {
    const o = this.offset;
    if (o + 4 > this.end) this.fail(4, 'u32');
    this.offset = o + 4;
    const b = this.buf;
    return b[o]! | (b[o + 1]! << 8) | (b[o + 2]! << 16) | (b[o + 3]! << 24);
  }

  i32be(): number {
    const o = this.offset;
    if (o + 4 > this.end) this.fail(4, 'u32');
    this.offset = o + 4;
    const b = this.buf;
    return (b[o]! << 24) | (b[o + 1]! << 16) | (b[o + 2]! << 8) | b[o + 3]!;
  }

  u64le(): bigint {
    this.need(8, 'u64');
    const v = this.buf.readBigUInt64LE(this.offset);
    this.offset += 8;
    return v;
  }

  u64be(): bigint {
    this.need(8, 'u64');
    const v = this.buf.readBigUInt64BE(this.offset);
    this.offset += 8;
    return v;
  }

  i64le(): bigint {
    this.need(8, 'i64');
    const v = this.buf.readBigInt64LE(this.offset);
    this.offset += 8;
    return v;
  }

  i64be(): bigint {
    this.need(8, 'i64');
    const v = this.buf.readBigInt64BE(this.offset);
    this.offset += 8;
    return v;
  }

  // ---- floats ---------------------------------------------------------------------------

  f32le(): number {
    this.need(4, 'f32');
    const v = this.buf.readFloatLE(this.offset);
    this.offset += 4;
    return v;
  }

  f32be(): number {
    this.need(4, 'f32');
    const v = this.buf.readFloatBE(this.offset);
    this.offset += 4;
    return v;
  }

  f64le(): number {
    this.need(8, 'f64');
    const v = this.buf.readDoubleLE(this.offset);
    this.offset += 8;
    return v;
  }

  f64be(): number {
    this.need(8, 'f64');
    const v = this.buf.readDoubleBE(this.offset);
    this.offset += 8;
    return v;
  }

  // ---- bool, bytes, strings -------------------------------------------------------------

  /** A strict bool: one byte, 0 or 1; anything else is ERR_BAD_VALUE. */
  bool(): boolean {
    const at = this.offset;
    const v = this.u8();
    if (v > 1) throw new DecodeError(ErrorCode.BAD_VALUE, `bool must be 0 or 1, got ${v}`, at);
    return v === 1;
  }

  /** `n` bytes as a view into the input (no copy). Checks `maxBytesLength` first. */
  bytes(n: number): Buffer {
    if (n > this.limits.maxBytesLength) {
      throw new DecodeError(
        ErrorCode.TOO_LARGE,
        `byte array of ${n} exceeds the limit of ${this.limits.maxBytesLength}`,
        this.offset,
      );
    }
    const o = this.offset;
    if (o + n > this.end) this.fail(n, 'bytes');
    this.offset = o + n;
    return this.buf.subarray(o, o + n);
  }

  /** Everything up to the current bound, as a view. */
  rest(): Buffer {
    return this.bytes(this.end - this.offset);
  }

  skip(n: number): void {
    if (n > this.end - this.offset) this.fail(n, 'skip');
    this.offset += n;
  }

  /**
   * A string of `n` bytes. Checks `maxStringBytes` before decoding. UTF-8 is validated: a
   * string that would not survive a round trip is ERR_BAD_STRING, unless `lossy` is set.
   */
  string(n: number, encoding: StringEncoding = 'utf8', lossy = false): string {
    if (n > this.limits.maxStringBytes) {
      throw new DecodeError(
        ErrorCode.TOO_LARGE,
        `string of ${n} bytes exceeds the limit of ${this.limits.maxStringBytes}`,
        this.offset,
      );
    }
    const o = this.offset;
    if (o + n > this.end) this.fail(n, 'string');
    const b = this.buf;
    if (encoding === 'utf8') {
      // ASCII fast path: most protocol strings are plain names.
      if (n <= 16) {
        let s = '';
        let i = o;
        for (; i < o + n; i++) {
          const c = b[i]!;
          if (c > 0x7f) break;
          s += String.fromCharCode(c);
        }
        if (i === o + n) {
          this.offset = i;
          return s;
        }
      }
      let ascii = true;
      for (let i = o; i < o + n; i++) {
        if (b[i]! > 0x7f) {
          ascii = false;
          break;
        }
      }
      if (!ascii && !lossy && !isUtf8(b.subarray(o, o + n))) {
        throw new DecodeError(ErrorCode.BAD_STRING, 'string is not valid UTF-8', o);
      }
      this.offset = o + n;
      return b.toString(ascii ? 'latin1' : 'utf8', o, o + n);
    }
    if (encoding === 'ascii') {
      for (let i = o; i < o + n; i++) {
        if (b[i]! > 0x7f) throw new DecodeError(ErrorCode.BAD_STRING, 'string is not ASCII', i);
      }
    }
    this.offset = o + n;
    return b.toString('latin1', o, o + n);
  }
}
