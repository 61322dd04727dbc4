/**
 * A small LZMA1 decoder (read only), written for JS5's form of the format: the 5-byte properties
 * header (`props u8, dictSize u32 LE`) followed by the raw range-coded stream, with no size field.
 *
 * The decoder writes straight into a `Uint8Array` of exactly the declared size. It never grows
 * its output: a literal that would pass the end, or a match whose length runs past it, stops the
 * decoding at once with `LzmaError('overflow')`. So the work done and the memory used are bounded
 * by the declared size (plus the probability tables, at most 6 MiB for `lc + lp = 12`), whatever
 * the input holds.
 */
import { Js5Error } from '../errors.js';

/** Why decoding stopped; `compression.ts` turns it into a typed `DecodeError`. */
export class LzmaError extends Js5Error {
  readonly reason: 'overflow' | 'underflow' | 'corrupt';
  constructor(reason: 'overflow' | 'underflow' | 'corrupt', message: string) {
    super(
      reason === 'overflow'
        ? 'ERR_JS5_OVERFLOW'
        : reason === 'underflow'
          ? 'ERR_JS5_UNDERFLOW'
          : 'ERR_JS5_BAD_LZMA',
      message,
    );
    this.reason = reason;
  }

  override get name(): string {
    return 'LzmaError';
  }
}

const PROB_INIT = 1024; // half of 1 << 11
const NUM_STATES = 12;
const POS_STATES_MAX = 16;
const END_POS_MODEL_INDEX = 14;
const NUM_FULL_DISTANCES = 128;
const MATCH_MIN_LEN = 2;
const TOP = 0x100_0000;

class RangeDecoder {
  private range = 0xffff_ffff;
  private code = 0;
  private pos: number;
  private readonly data: Uint8Array;

  constructor(data: Uint8Array, start: number) {
    this.data = data;
    this.pos = start;
    if (this.next() !== 0) throw new LzmaError('corrupt', 'range coder does not start with 0');
    for (let i = 0; i < 4; i++) this.code = this.code * 256 + this.next();
  }

  private next(): number {
    if (this.pos >= this.data.length) throw new LzmaError('corrupt', 'lzma stream is truncated');
    return this.data[this.pos++]!;
  }

  private normalize(): void {
    if (this.range < TOP) {
      this.range = this.range * 256;
      this.code = this.code * 256 + this.next();
    }
  }

  /** Decodes one bit with the adaptive probability `probs[i]`. */
  bit(probs: Uint16Array, i: number): number {
    const p = probs[i]!;
    const bound = (this.range >>> 11) * p;
    let b: number;
    if (this.code < bound) {
      this.range = bound;
      probs[i] = p + ((2048 - p) >>> 5);
      b = 0;
    } else {
      this.range -= bound;
      this.code -= bound;
      probs[i] = p - (p >>> 5);
      b = 1;
    }
    this.normalize();
    return b;
  }

  /** `n` bits with probability ½ each, most significant first (n ≤ 26). */
  direct(n: number): number {
    let r = 0;
    for (let i = 0; i < n; i++) {
      this.range = this.range >>> 1;
      let b = 0;
      if (this.code >= this.range) {
        this.code -= this.range;
        b = 1;
      }
      r = r * 2 + b;
      this.normalize();
    }
    return r;
  }

  /** A bit tree of `n` bits at `probs[base + 1 …]`, most significant bit first. */
  tree(probs: Uint16Array, base: number, n: number): number {
    let m = 1;
    for (let i = 0; i < n; i++) m = (m << 1) | this.bit(probs, base + m);
    return m - (1 << n);
  }

  /** A bit tree of `n` bits at `probs[base + 1 …]`, least significant bit first. */
  reverseTree(probs: Uint16Array, base: number, n: number): number {
    let m = 1;
    let sym = 0;
    for (let i = 0; i < n; i++) {
      const b = this.bit(probs, base + m);
      m = (m << 1) | b;
      sym |= b << i;
    }
    return sym;
  }
}

/** The match-length decoder (one for matches, one for repeated matches). */
class LenDecoder {
  // [choice, choice2], low[16][8], mid[16][8], high[256]
  private readonly choice = new Uint16Array(2).fill(PROB_INIT);
  private readonly low = new Uint16Array(POS_STATES_MAX << 3).fill(PROB_INIT);
  private readonly mid = new Uint16Array(POS_STATES_MAX << 3).fill(PROB_INIT);
  private readonly high = new Uint16Array(256).fill(PROB_INIT);

  decode(rc: RangeDecoder, posState: number): number {
    if (rc.bit(this.choice, 0) === 0) return rc.tree(this.low, posState << 3, 3);
    if (rc.bit(this.choice, 1) === 0) return 8 + rc.tree(this.mid, posState << 3, 3);
    return 16 + rc.tree(this.high, 0, 8);
  }
}

/**
 * Decodes JS5's LZMA form into exactly `size` bytes. Throws `LzmaError` on a bad header, a
 * corrupt or truncated stream, output that would pass `size` (`overflow`), or an end marker
 * before `size` bytes (`underflow`). `maxDictionary` bounds the header's dictionary size.
 */
export function lzmaDecode(data: Uint8Array, size: number, maxDictionary: number): Uint8Array {
  if (data.length < 5) throw new LzmaError('corrupt', 'lzma header is 5 bytes');
  let props = data[0]!;
  if (props >= 9 * 5 * 5) throw new LzmaError('corrupt', `bad lzma properties byte ${props}`);
  const lc = props % 9;
  props = (props - lc) / 9;
  const lp = props % 5;
  const pb = (props - lp) / 5;
  const dictSize = (data[1]! | (data[2]! << 8) | (data[3]! << 16) | (data[4]! << 24)) >>> 0;
  if (dictSize > maxDictionary)
    throw new LzmaError('corrupt', `lzma dictionary of ${dictSize} bytes is over the limit`);
  const dictCheck = Math.max(dictSize, 1);

  const out = new Uint8Array(size);
  if (size === 0) return out; // nothing to decode; the stream is not looked at (as LZMA SDK)

  const rc = new RangeDecoder(data, 5);
  const literals = new Uint16Array(0x300 << (lc + lp)).fill(PROB_INIT);
  const isMatch = new Uint16Array(NUM_STATES << 4).fill(PROB_INIT);
  const isRep = new Uint16Array(NUM_STATES).fill(PROB_INIT);
  const isRepG0 = new Uint16Array(NUM_STATES).fill(PROB_INIT);
  const isRepG1 = new Uint16Array(NUM_STATES).fill(PROB_INIT);
  const isRepG2 = new Uint16Array(NUM_STATES).fill(PROB_INIT);
  const isRep0Long = new Uint16Array(NUM_STATES << 4).fill(PROB_INIT);
  const posSlot = new Uint16Array(4 << 6).fill(PROB_INIT);
  const posDecoders = new Uint16Array(1 + NUM_FULL_DISTANCES - END_POS_MODEL_INDEX).fill(PROB_INIT);
  const align = new Uint16Array(16).fill(PROB_INIT);
  const lenDecoder = new LenDecoder();
  const repLenDecoder = new LenDecoder();

  const pbMask = (1 << pb) - 1;
  const lpMask = (1 << lp) - 1;
  let state = 0;
  let rep0 = 0;
  let rep1 = 0;
  let rep2 = 0;
  let rep3 = 0;
  let pos = 0;

  while (pos < size) {
    const posState = pos & pbMask;
    if (rc.bit(isMatch, (state << 4) + posState) === 0) {
      const prev = pos > 0 ? out[pos - 1]! : 0;
      const base = 0x300 * (((pos & lpMask) << lc) + (prev >>> (8 - lc)));
      let sym = 1;
      if (state >= 7) {
        let matchByte = out[pos - rep0 - 1]!; // rep0 < pos was checked when it was set
        while (sym < 0x100) {
          const matchBit = (matchByte >>> 7) & 1;
          matchByte <<= 1;
          const b = rc.bit(literals, base + ((1 + matchBit) << 8) + sym);
          sym = (sym << 1) | b;
          if (matchBit !== b) break;
        }
      }
      while (sym < 0x100) sym = (sym << 1) | rc.bit(literals, base + sym);
      out[pos++] = sym & 0xff;
      state = state < 4 ? 0 : state < 10 ? state - 3 : state - 6;
      continue;
    }

    let len: number;
    if (rc.bit(isRep, state) !== 0) {
      if (pos === 0) throw new LzmaError('corrupt', 'repeated match before any output');
      if (rc.bit(isRepG0, state) === 0) {
        if (rc.bit(isRep0Long, (state << 4) + posState) === 0) {
          // a "short rep": one byte at distance rep0
          state = state < 7 ? 9 : 11;
          out[pos] = out[pos - rep0 - 1]!;
          pos++;
          continue;
        }
      } else {
        let dist: number;
        if (rc.bit(isRepG1, state) === 0) dist = rep1;
        else {
          if (rc.bit(isRepG2, state) === 0) dist = rep2;
          else {
            dist = rep3;
            rep3 = rep2;
          }
          rep2 = rep1;
        }
        rep1 = rep0;
        rep0 = dist;
      }
      len = repLenDecoder.decode(rc, posState);
      state = state < 7 ? 8 : 11;
    } else {
      rep3 = rep2;
      rep2 = rep1;
      rep1 = rep0;
      len = lenDecoder.decode(rc, posState);
      state = state < 7 ? 7 : 10;
      // distance
      const slot = rc.tree(posSlot, (len < 3 ? len : 3) << 6, 6);
      if (slot < 4) rep0 = slot;
      else {
        const direct = (slot >>> 1) - 1;
        let dist = (2 | (slot & 1)) * 2 ** direct;
        if (slot < END_POS_MODEL_INDEX) dist += rc.reverseTree(posDecoders, dist - slot, direct);
        else dist += rc.direct(direct - 4) * 16 + rc.reverseTree(align, 0, 4);
        rep0 = dist;
      }
      if (rep0 === 0xffff_ffff) {
        throw new LzmaError('underflow', `lzma end marker after ${pos} bytes, declared ${size}`);
      }
      if (rep0 >= pos || rep0 >= dictCheck) {
        throw new LzmaError('corrupt', `lzma match distance ${rep0 + 1} reaches before the data`);
      }
    }
    len += MATCH_MIN_LEN;
    if (len > size - pos) {
      throw new LzmaError('overflow', `lzma data exceeds the declared ${size} bytes`);
    }
    let from = pos - rep0 - 1;
    for (const end = pos + len; pos < end; ) out[pos++] = out[from++]!;
  }
  return out;
}
