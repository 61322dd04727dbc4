/**
 * Token buckets keyed by source (an IP address, or an address and a route), bounded in size.
 *
 * The Map is kept in least-recently-used order (a bucket is re-inserted when used), so when it is
 * full a new key evicts the oldest bucket in O(1); there is never a global clear, so an attacker who
 * floods new keys only evicts the buckets that were idle longest, and an evicted bucket would have
 * refilled anyway unless the table is far too small (`maxKeys` is an option with a large default).
 * `prune` walks only the buckets it removes.
 */
interface Bucket {
  tokens: number;
  at: number;
}

/** Default most keys a bucket table remembers. */
export const DEFAULT_LIMITER_KEYS = 100_000;

export class TokenBuckets {
  private readonly buckets = new Map<string, Bucket>();
  /** Tokens per ms. */
  private readonly rate: number;
  readonly burst: number;
  readonly maxKeys: number;
  /** A bucket untouched this long has refilled completely (behaves exactly like a new one). */
  private readonly refillMs: number;

  constructor(ratePerSecond: number, burst: number, maxKeys = DEFAULT_LIMITER_KEYS) {
    this.rate = ratePerSecond / 1000;
    this.burst = Math.max(1, burst);
    this.maxKeys = Math.max(1, Math.floor(maxKeys));
    this.refillMs = this.rate > 0 ? this.burst / this.rate : Number.POSITIVE_INFINITY;
  }

  /** Keys currently remembered. */
  get size(): number {
    return this.buckets.size;
  }

  /** Takes `cost` tokens from `key`'s bucket; false (and nothing taken) when there are too few. */
  take(key: string, now: number, cost = 1): boolean {
    let b = this.buckets.get(key);
    if (b === undefined) {
      if (this.buckets.size >= this.maxKeys) {
        // Full: evict the least recently used key (first in insertion order). O(1).
        const oldest = this.buckets.keys().next();
        if (oldest.done !== true) this.buckets.delete(oldest.value);
      }
      b = { tokens: this.burst, at: now };
      this.buckets.set(key, b);
    } else {
      b.tokens = Math.min(this.burst, b.tokens + Math.max(0, now - b.at) * this.rate);
      b.at = now;
      // Move to the end: the Map stays in least-recently-used order.
      this.buckets.delete(key);
      this.buckets.set(key, b);
    }
    if (b.tokens < cost) return false;
    b.tokens -= cost;
    return true;
  }

  /** Seconds until `key` has `cost` tokens again (0 when it has them now). */
  waitSeconds(key: string, now: number, cost = 1): number {
    const b = this.buckets.get(key);
    if (b === undefined || this.rate <= 0) return 0;
    const tokens = Math.min(this.burst, b.tokens + Math.max(0, now - b.at) * this.rate);
    return tokens >= cost ? 0 : Math.ceil((cost - tokens) / this.rate / 1000);
  }

  /**
   * Forgets buckets that have surely refilled (untouched for `burst / rate`). Buckets are in
   * order of last use, so this stops at the first recent one: the cost is the number removed + 1.
   */
  prune(now: number): void {
    for (const [k, b] of this.buckets) {
      if (now - b.at < this.refillMs) break;
      this.buckets.delete(k);
    }
  }
}
