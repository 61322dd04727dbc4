/** TokenBuckets: per-source token buckets, bounded in size with O(1) eviction, never a global clear. */
import { describe, expect, it } from 'vitest';
import { DEFAULT_ERROR_SOURCES, TokenBuckets } from '../../../src/protocols/unity-relay/index.js';

describe('TokenBuckets', () => {
  it('stays bounded however many sources arrive', () => {
    const limiter = new TokenBuckets(5, 10, 1000);
    for (let i = 0; i < 50_000; i++) {
      expect(limiter.take(`10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}`, 0)).toBe(true);
      expect(limiter.size).toBeLessThanOrEqual(1000);
    }
    expect(limiter.size).toBe(1000);
  });

  it('at the default cap, new sources evict in O(1) instead of rescanning the table', () => {
    const limiter = new TokenBuckets(5, 10);
    const n = DEFAULT_ERROR_SOURCES + 50_000;
    const started = performance.now();
    // All at the same instant: nothing has refilled, so nothing could be pruned.
    for (let i = 0; i < n; i++) limiter.take(`s${i}`, 0);
    const ms = performance.now() - started;
    expect(limiter.size).toBe(DEFAULT_ERROR_SOURCES);
    // An O(n) scan per new source would take minutes here; O(1) eviction takes well under a second.
    expect(ms).toBeLessThan(10_000);
  });

  it('limits each source, evicts the least recently used, and prunes refilled buckets', () => {
    const limiter = new TokenBuckets(2, 2, 3); // 2/s, burst 2: refilled after 1 s
    expect(limiter.take('a', 0)).toBe(true);
    expect(limiter.take('a', 0)).toBe(true);
    expect(limiter.take('b', 0)).toBe(true);
    expect(limiter.take('c', 0)).toBe(true);
    expect(limiter.take('a', 10)).toBe(false); // a is limited, and now the most recently used
    expect(limiter.take('d', 10)).toBe(true); // evicts b (least recently used), not a
    expect(limiter.size).toBe(3);
    expect(limiter.take('a', 20)).toBe(false); // a kept its (empty) bucket
    limiter.prune(500);
    expect(limiter.size).toBe(3); // nothing refilled yet
    // By last use: c (t=0), d (t=10), a (t=20); each refills 1 s after its last use.
    limiter.prune(1005);
    expect(limiter.size).toBe(2);
    limiter.prune(1015);
    expect(limiter.size).toBe(1);
    expect(limiter.take('a', 1015)).toBe(true); // refilled: a token again
    limiter.prune(2015);
    expect(limiter.size).toBe(0);
  });
});
