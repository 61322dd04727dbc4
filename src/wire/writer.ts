import { EncodeError, ErrorCode } from './errors.js';
import type { StringEncoding } from './reader.js';

export interface WriterOptions {
  /** Starting capacity; the buffer grows by doubling. */
  initialCapacity?: number;
  /** Largest output allowed; a longer message is ERR_TOO_LARGE. */
  maxBytes?: number;
}

/**
 * Writer with the byte order explicit per call. It owns one growable buffer that is reused
 * across messages: `reset()` rewinds without zero-filling, so steady-state encoding allocates
 * nothing. `view()` returns the written bytes without copying (valid until the next reset);
 * `toBuffer()` copies them out.
 */
export class WireWriter {
  buf: Buffer;
  offset = 0;
  readonly maxBytes: number;

  constructor(options: WriterOptions = {}) {
    this.buf = Buffer.allocUnsafe(options.initialCapacity ?? 256);
    this.maxBytes = options.maxBytes ?? 64 * 1024 * 1024;
  }

  /** Rewinds to the start. The old contents stay in memory and are overwritten. */
  reset(): this {
    this.offset = 0;
    return this;
  }

  /** Makes room for `n` more bytes. */
  ensure(n: number): void {
    const need = this.offset + n;
    if (need <= this.buf.length) return;
    if (need > this.maxBytes) {
      throw new EncodeError(ErrorCode.TOO_LARGE, `message would exceed ${this.maxBytes} bytes`);
    }
    let cap = this.buf.length * 2;
    while (cap < need) cap *= 2;
    const next = Buffer.allocUnsafe(Math.min(cap, Math.max(need, this.maxBytes)));
    this.buf.copy(next, 0, 0, this.offset);
    this.buf = next;
  }

  /** The bytes written so far, as a view (no copy). */
  view(): Buffer {
    return this.buf.subarray(0, this.offset);
  }

  /** The bytes written so far, copied into a new buffer. */
  toBuffer(): Buffer {
    return Buffer.from(this.buf.subarray(0, this.offset));
  }

  // ---- integers (values are taken modulo their width; validate before, where it matters) --

  u8(v: number): void {
    this.ensure(1);
    this.buf[this.offset++] = v;
  }

  i8(v: number): void {
    this.u8(v & 0xff);
  }

  u16le(v: number): void {
    this.ensure(2);
    const b = this.buf;
    const o = this.offset;
    b[o] = v;
    b[o + 1] = v >>> 8;
    this.offset = o + 2;
  }

  u16be(v: number): void {
    this.ensure(2);
    const b = this.buf;
    const o = this.offset;
    b[o] = v >>> 8;
    b[o + 1] = v;
    this.offset = o + 2;
  }

  i16le(v: number): void {
    this.u16le(v & 0xffff);
  }

  i16be(v: number): void {
    this.u16be(v & 0xffff);
  }

  u24be(v: number): void {
    this.ensure(3);
    const b = this.buf;
    const o = this.offset;
    b[o] = v >>> 16;
    b[o + 1] = v >>> 8;
    b[o + 2] = v;
    this.offset = o + 3;
  }

  u24le(v: number): void {
    this.ensure(3);
    const b = this.buf;
    const o = this.offset;
    b[o] = v;
    b[o + 1] = v >>> 8;
    b[o + 2] = v >>> 16;
    this.offset = o + 3;
  }

  u32le(v: number): void {
    this.ensure(4);
    const b = this.buf;
    const o = this.offset;
    b[o] = v;
    b[o + 1] = v >>> 8;
    b[o + 2] = v >>> 16;
    b[o + 3] = v >>> 24;
    this.offset = o + 4;
  }

  u32be(v: number): void {
    this.ensure(4);
    const b = this.buf;
    const o = this.offset;
    b[o] = v >>> 24;
    b[o + 1] = v >>> 16;
    b[o + 2] = v >>> 8;
    b[o + 3] = v;
    this.offset = o + 4;
  }

  i32le(v: number): void {
    this.u32le(v | 0);
  }

  i32be(v: number): void {
    this.u32be(v | 0);
  }

  u64le(v: bigint): void {
    this.ensure(8);
    this.buf.writeBigUInt64LE(BigInt.asUintN(64, v), this.offset);
    this.offset += 8;
  }

  u64be(v: bigint): void {
    this.ensure(8);
    this.buf.writeBigUInt64BE(BigInt.asUintN(64, v), this.offset);
    this.offset += 8;
  }

  i64le(v: bigint): void {
    this.ensure(8);
    this.buf.writeBigInt64LE(BigInt.asIntN(64, v), this.offset);
    this.offset += 8;
  }

  i64be(v: bigint): void {
    this.ensure(8);
    this.buf.writeBigInt64BE(BigInt.asIntN(64, v), this.offset);
    this.offset += 8;
  }

  // ---- floats ---------------------------------------------------------------------------

  f32le(v: number): void {
    this.ensure(4);
    this.buf.writeFloatLE(v, this.offset);
    this.offset += 4;
  }

  f32be(v: number): void {
    this.ensure(4);
    this.buf.writeFloatBE(v, this.offset);
    this.offset += 4;
  }

  f64le(v: number): void {
    this.ensure(8);
    this.buf.writeDoubleLE(v, this.offset);
    this.offset += 8;
  }

  f64be(v: number): void {
    this.ensure(8);
    this.buf.writeDoubleBE(v, this.offset);
    this.offset += 8;
  }

  // ---- bool, bytes, strings -------------------------------------------------------------

  bool(v: boolean): void {
    this.u8(v ? 1 : 0);
  }

  bytes(src: Uint8Array): void {
    this.ensure(src.length);
    this.buf.set(src, this.offset);
    this.offset += src.length;
  }

  /** `n` zero bytes (padding). */
  zeros(n: number): void {
    this.ensure(n);
    this.buf.fill(0, this.offset, this.offset + n);
    this.offset += n;
  }

  /** Writes a string's bytes (no length, no terminator) and returns how many were written. */
  string(s: string, encoding: StringEncoding = 'utf8'): number {
    // Worst case for UTF-8 is 3 bytes per UTF-16 unit; reserve that, write, keep what was used.
    this.ensure(encoding === 'utf8' ? s.length * 3 : s.length);
    if (s.length <= 32) {
      // Short ASCII strings: a byte loop beats Buffer.write's call overhead.
      const b = this.buf;
      const o = this.offset;
      let i = 0;
      for (; i < s.length; i++) {
        const c = s.charCodeAt(i);
        if (c > 0x7f) break;
        b[o + i] = c;
      }
      if (i === s.length) {
        this.offset = o + i;
        return i;
      }
    }
    const n = this.buf.write(s, this.offset, encoding === 'utf8' ? 'utf8' : 'latin1');
    this.offset += n;
    return n;
  }

  // ---- reserve and back-patch (sizes that precede what they measure) --------------------

  /** Skips `n` bytes to fill in later with a `patch…` call. Returns their position. */
  reserve(n: number): number {
    this.ensure(n);
    const at = this.offset;
    this.offset += n;
    return at;
  }

  patchU8(at: number, v: number): void {
    this.buf[at] = v;
  }

  patchU16be(at: number, v: number): void {
    this.buf[at] = v >>> 8;
    this.buf[at + 1] = v;
  }

  patchU16le(at: number, v: number): void {
    this.buf[at] = v;
    this.buf[at + 1] = v >>> 8;
  }

  patchU32be(at: number, v: number): void {
    const b = this.buf;
    b[at] = v >>> 24;
    b[at + 1] = v >>> 16;
    b[at + 2] = v >>> 8;
    b[at + 3] = v;
  }

  patchU32le(at: number, v: number): void {
    const b = this.buf;
    b[at] = v;
    b[at + 1] = v >>> 8;
    b[at + 2] = v >>> 16;
    b[at + 3] = v >>> 24;
  }
}
