/**
 * The one token bucket (src/core/token-bucket.ts): nox-relay's per-client and per-address packet
 * rates, unity-relay's keyed limiters (test/protocols/unity-relay/limiter.test.ts covers the
 * keyed table's bounds and eviction).
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { TokenBucket, TokenBuckets } from '../../src/core/token-bucket.js';

describe('TokenBucket', () => {
  it('starts full, refuses below one token without taking, refills at its rate up to its burst', () => {
    const b = new TokenBucket(10, 3, 1000); // 10/s: one token per 100 ms
    expect([b.take(1000), b.take(1000), b.take(1000), b.take(1000)]).toEqual([true, true, true, false]);
    expect(b.peek(1000)).toBe(0);
    expect(b.take(1050)).toBe(false);
    expect(b.peek(1050)).toBeCloseTo(0.5);
    expect(b.take(1100)).toBe(true);
    // Long idle: capped at the burst.
    expect(b.peek(60_000)).toBe(3);
  });

  it('a clock that steps back earns nothing and takes nothing away', () => {
    const b = new TokenBucket(10, 4, 5000);
    expect(b.take(5000)).toBe(true);
    expect(b.peek(4000)).toBe(3);
    expect(b.take(4000)).toBe(true);
    expect(b.peek(5000)).toBe(2);
  });

  it('says how long until a cost is affordable', () => {
    const b = new TokenBucket(2, 2, 0);
    expect(b.waitSeconds(0)).toBe(0);
    b.take(0, 2);
    expect(b.waitSeconds(0)).toBe(1); // 0.5 s, rounded up
    expect(b.waitSeconds(0, 2)).toBe(1);
    expect(b.take(0, 3)).toBe(false); // more than the burst: never
    expect(new TokenBucket(0, 1, 0).waitSeconds(0, 2)).toBe(0);
  });

  it('never grants more than burst + rate × elapsed, whatever the sequence of takes', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 1000 }),
        fc.integer({ min: 1, max: 50 }),
        fc.array(fc.tuple(fc.integer({ min: 0, max: 500 }), fc.integer({ min: 1, max: 5 })), {
          maxLength: 200,
        }),
        (rate, burst, steps) => {
          const b = new TokenBucket(rate, burst, 0);
          let now = 0;
          let granted = 0;
          for (const [dt, cost] of steps) {
            now += dt;
            if (b.take(now, cost)) granted += cost;
            expect(b.peek(now)).toBeGreaterThanOrEqual(0);
            expect(b.peek(now)).toBeLessThanOrEqual(burst);
          }
          expect(granted).toBeLessThanOrEqual(burst + (rate * now) / 1000 + 1e-6);
        },
      ),
    );
  });
});

describe('TokenBuckets', () => {
  it('keys are limited apart, each with the table’s rate and burst', () => {
    const t = new TokenBuckets(1, 2, 10);
    expect([t.take('a', 0), t.take('a', 0), t.take('a', 0)]).toEqual([true, true, false]);
    expect(t.take('b', 0)).toBe(true);
    expect(t.waitSeconds('a', 0)).toBe(1);
    expect(t.waitSeconds('unknown', 0)).toBe(0);
    expect(t.take('a', 1000)).toBe(true);
  });
});
