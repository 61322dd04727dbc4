/**
 * Token buckets: the one implementation every limiter uses. `TokenBucket` is one bucket (a
 * client's packet rate: nox-relay); `TokenBuckets` is a table of them keyed by source (an
 * address, or an address and a route: unity-relay's API and error replies), bounded in size.
 *
 * A bucket earns `rate` tokens per second up to `burst`; it starts full. Time is whatever
 * monotonic millisecond clock the caller passes (`performance.now()`, `Date.now()`); a clock that
 * steps back earns nothing rather than taking tokens away.
 */

/** One token bucket: `ratePerSecond` tokens per second, at most `burst` saved up. */
export class TokenBucket {
  // Numeric initialisers (not bare declarations, which start as `undefined`): V8 then keeps the
  // fields as unboxed doubles, and a take allocates nothing.
  /** Tokens at `at`. */
  tokens = 0;
  at = 0;
  /** Tokens per ms. */
  private readonly perMs: number = 0;
  readonly burst: number = 0;

  constructor(ratePerSecond: number, burst: number, now: number) {
    this.perMs = ratePerSecond / 1000;
    this.burst = burst;
    this.tokens = burst;
    this.at = now;
  }

  /** Tokens available at `now` (nothing taken). */
  peek(now: number): number {
    const tokens = now > this.at ? this.tokens + (now - this.at) * this.perMs : this.tokens;
    return tokens > this.burst ? this.burst : tokens;
  }

  /** Takes `cost` tokens; false (and nothing taken) when fewer are left. */
  take(now: number, cost = 1): boolean {
    // Inline (not `peek`): nox-relay takes one per packet.
    let tokens = this.tokens;
    if (now > this.at) {
      tokens += (now - this.at) * this.perMs;
      if (tokens > this.burst) tokens = this.burst;
      this.at = now;
    }
    if (tokens < cost) {
      this.tokens = tokens;
      return false;
    }
    this.tokens = tokens - cost;
    return true;
  }

  /** Seconds (rounded up) until `cost` tokens are there again; 0 when they are now. */
  waitSeconds(now: number, cost = 1): number {
    const tokens = this.peek(now);
    if (tokens >= cost || this.perMs <= 0) return 0;
    return Math.ceil((cost - tokens) / this.perMs / 1000);
  }
}

/** Default most keys a bucket table remembers. */
export const DEFAULT_LIMITER_KEYS = 100_000;

/**
 * Token buckets keyed by source, bounded in size.
 *
 * The Map is kept in least-recently-used order (a bucket is re-inserted when used), so when it is
 * full a new key evicts the oldest bucket in O(1); there is never a global clear, so an attacker who
 * floods new keys only evicts the buckets that were idle longest, and an evicted bucket would have
 * refilled anyway unless the table is far too small (`maxKeys` is an option with a large default).
 * `prune` walks only the buckets it removes.
 */
export class TokenBuckets {
  private readonly buckets = new Map<string, TokenBucket>();
  private readonly ratePerSecond: number;
  readonly burst: number;
  readonly maxKeys: number;
  /** A bucket untouched this long has refilled completely (behaves exactly like a new one). */
  private readonly refillMs: number;

  constructor(ratePerSecond: number, burst: number, maxKeys = DEFAULT_LIMITER_KEYS) {
    this.ratePerSecond = ratePerSecond;
    this.burst = Math.max(1, burst);
    this.maxKeys = Math.max(1, Math.floor(maxKeys));
    this.refillMs = ratePerSecond > 0 ? (this.burst * 1000) / ratePerSecond : Number.POSITIVE_INFINITY;
  }

  /** Keys currently remembered. */
  get size(): number {
    return this.buckets.size;
  }

  /** Takes `cost` tokens from `key`'s bucket; false (and nothing taken) when there are too few. */
  take(key: string, now: number, cost = 1): boolean {
    return this.bucket(key, now).take(now, cost);
  }

  /**
   * `key`'s bucket, made (full) if it has none, and marked most recently used: for a caller that
   * takes only when another limit allows it too (rmc's registrations, per address and server).
   */
  bucket(key: string, now: number): TokenBucket {
    let b = this.buckets.get(key);
    if (b === undefined) {
      if (this.buckets.size >= this.maxKeys) {
        // Full: evict the least recently used key (first in insertion order). O(1).
        const oldest = this.buckets.keys().next();
        if (oldest.done !== true) this.buckets.delete(oldest.value);
      }
      b = new TokenBucket(this.ratePerSecond, this.burst, now);
    } else {
      // Move to the end: the Map stays in least-recently-used order.
      this.buckets.delete(key);
    }
    this.buckets.set(key, b);
    return b;
  }

  /** Seconds until `key` has `cost` tokens again (0 when it has them now). */
  waitSeconds(key: string, now: number, cost = 1): number {
    return this.buckets.get(key)?.waitSeconds(now, cost) ?? 0;
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
