/**
 * A latency histogram with fixed memory and no allocation per sample: log-linear buckets over
 * microseconds (exact below 128 µs, then 64 buckets per power of two, so a percentile is within
 * 1.6 % of the true value), from 1 µs to about 35 minutes. Count, sum, min and max are exact.
 */

const SUB_BITS = 6;
const SUB = 1 << SUB_BITS; // 64 buckets per power of two
const LINEAR = SUB * 2; // values below 128 µs have a bucket each
const MAX_EXPONENT = 31;
const BUCKETS = LINEAR + (MAX_EXPONENT - SUB_BITS) * SUB;
const MAX_US = 2 ** MAX_EXPONENT - 1;

function bucketOf(us: number): number {
  if (us < LINEAR) return us;
  const e = 31 - Math.clz32(us); // floor(log2(us)), at least 7
  const shift = e - SUB_BITS;
  return LINEAR + (e - SUB_BITS - 1) * SUB + ((us >>> shift) - SUB);
}

/** The middle of a bucket, in microseconds. */
function bucketMiddle(index: number): number {
  if (index < LINEAR) return index;
  const k = index - LINEAR;
  const e = Math.floor(k / SUB) + SUB_BITS + 1;
  const shift = e - SUB_BITS;
  const mantissa = (k % SUB) + SUB;
  return mantissa * 2 ** shift + (2 ** shift - 1) / 2;
}

export interface LatencySummary {
  count: number;
  mean: number;
  p50: number;
  p90: number;
  p99: number;
  p999: number;
  max: number;
}

export class Histogram {
  private readonly buckets = new Float64Array(BUCKETS);
  count = 0;
  /** Sum of the samples, in milliseconds. */
  sum = 0;
  /** Smallest and largest samples, in milliseconds (exact). */
  min = Number.POSITIVE_INFINITY;
  max = 0;

  /** Records one sample in milliseconds (negative values count as 0). */
  record(ms: number): void {
    const v = ms > 0 ? ms : 0;
    let us = Math.round(v * 1000);
    if (us > MAX_US) us = MAX_US;
    this.buckets[bucketOf(us)]!++;
    this.count++;
    this.sum += v;
    if (v < this.min) this.min = v;
    if (v > this.max) this.max = v;
  }

  /** The value (ms) below which a share `q` (0..1) of the samples lie; 0 when empty. */
  quantile(q: number): number {
    if (this.count === 0) return 0;
    const rank = Math.max(1, Math.ceil(q * this.count));
    let seen = 0;
    for (let i = 0; i < BUCKETS; i++) {
      seen += this.buckets[i]!;
      if (seen >= rank) {
        const ms = bucketMiddle(i) / 1000;
        // The bucket's middle may lie outside what was seen: clamp to the exact extremes.
        return Math.min(this.max, Math.max(this.min, ms));
      }
    }
    return this.max;
  }

  /** Adds another histogram's samples to this one. */
  add(other: Histogram): void {
    for (let i = 0; i < BUCKETS; i++) this.buckets[i]! += other.buckets[i]!;
    this.count += other.count;
    this.sum += other.sum;
    if (other.min < this.min) this.min = other.min;
    if (other.max > this.max) this.max = other.max;
  }

  reset(): void {
    this.buckets.fill(0);
    this.count = 0;
    this.sum = 0;
    this.min = Number.POSITIVE_INFINITY;
    this.max = 0;
  }

  summary(): LatencySummary {
    const round = (ms: number) => Math.round(ms * 1000) / 1000;
    return {
      count: this.count,
      mean: this.count === 0 ? 0 : round(this.sum / this.count),
      p50: round(this.quantile(0.5)),
      p90: round(this.quantile(0.9)),
      p99: round(this.quantile(0.99)),
      p999: round(this.quantile(0.999)),
      max: round(this.max),
    };
  }
}
