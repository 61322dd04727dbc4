/**
 * The measures a load run reports: latency percentiles from the fixed-memory histogram, and loss,
 * duplicates and reordering from the sequence tracker, each checked against an exact model.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { Histogram } from '../../../src/core/load/histogram.js';
import { SequenceTracker } from '../../../src/core/load/sequence.js';

function exactQuantile(sorted: number[], q: number): number {
  return sorted[Math.max(0, Math.ceil(q * sorted.length) - 1)]!;
}

describe('Histogram', () => {
  it('gives every percentile within 1.6 % (or 1 µs) of the exact sample', () => {
    fc.assert(
      fc.property(
        fc.array(fc.double({ min: 0, max: 600_000, noNaN: true }), { minLength: 1, maxLength: 400 }),
        fc.constantFrom(0.5, 0.9, 0.99, 0.999, 1),
        (samples, q) => {
          const h = new Histogram();
          for (const s of samples) h.record(s);
          const sorted = [...samples].sort((a, b) => a - b);
          const exact = exactQuantile(sorted, q);
          const got = h.quantile(q);
          expect(Math.abs(got - exact)).toBeLessThanOrEqual(Math.max(0.001, exact * 0.016));
        },
      ),
    );
  });

  it('keeps count, mean, min and max exact, and an empty one reports zeros', () => {
    const h = new Histogram();
    expect(h.summary()).toEqual({ count: 0, mean: 0, p50: 0, p90: 0, p99: 0, p999: 0, max: 0 });
    for (const v of [1, 2, 3, 4, 1000]) h.record(v);
    const s = h.summary();
    expect(s.count).toBe(5);
    expect(s.mean).toBe(202);
    expect(s.max).toBe(1000);
    expect(h.min).toBe(1);
    expect(s.p50).toBeCloseTo(3, 1);
  });

  it('clamps what it cannot place: negative samples count as 0, huge ones in the last bucket', () => {
    const h = new Histogram();
    h.record(-5);
    h.record(1e12);
    expect(h.count).toBe(2);
    expect(h.quantile(0.5)).toBe(0);
    expect(h.quantile(1)).toBeGreaterThan(2_000_000);
  });

  it('adds and resets', () => {
    const a = new Histogram();
    const b = new Histogram();
    for (let i = 1; i <= 100; i++) (i % 2 === 0 ? a : b).record(i);
    a.add(b);
    expect(a.count).toBe(100);
    expect(a.quantile(0.99)).toBeCloseTo(99, 0);
    a.reset();
    expect(a.count).toBe(0);
    expect(a.quantile(0.5)).toBe(0);
  });
});

/** What a receiver saw, computed exactly from the full list. */
function model(seen: number[]): { received: number; duplicates: number; expected: number } {
  const set = new Set<number>();
  let duplicates = 0;
  for (const s of seen) {
    if (set.has(s)) duplicates++;
    else set.add(s);
  }
  const min = Math.min(...set);
  const max = Math.max(...set);
  return { received: set.size, duplicates, expected: max - min + 1 };
}

describe('SequenceTracker', () => {
  it('counts what was received, lost and duplicated exactly while reordering stays within 64', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 1000 }),
        fc.array(
          fc.record({ drop: fc.boolean(), dup: fc.boolean(), shift: fc.integer({ min: 0, max: 40 }) }),
          {
            minLength: 1,
            maxLength: 300,
          },
        ),
        (start, plan) => {
          // Numbers start..start+n-1, some dropped, some doubled, each moved up to 40 places later.
          const slots: { at: number; seq: number }[] = [];
          plan.forEach((p, i) => {
            if (p.drop) return;
            slots.push({ at: i + p.shift, seq: start + i });
            if (p.dup) slots.push({ at: i + p.shift + 0.5, seq: start + i });
          });
          fc.pre(slots.length > 0);
          slots.sort((a, b) => a.at - b.at);
          const seen = slots.map((s) => s.seq);
          const t = new SequenceTracker();
          let falseReturns = 0;
          for (const s of seen) if (!t.see(s)) falseReturns++;
          const m = model(seen);
          expect(t.received).toBe(m.received);
          expect(t.duplicates).toBe(m.duplicates);
          expect(falseReturns).toBe(m.duplicates);
          expect(t.expected).toBe(m.expected);
          expect(t.lost).toBe(m.expected - m.received);
          expect(t.tooOld).toBe(0);
        },
      ),
    );
  });

  it('in order and complete: nothing lost, nothing reordered', () => {
    const t = new SequenceTracker();
    for (let i = 5; i < 500; i++) expect(t.see(i)).toBe(true);
    expect(t).toMatchObject({ received: 495, duplicates: 0, reordered: 0, lost: 0, expected: 495 });
  });

  it('counts a number far behind the window as too old rather than guessing', () => {
    const t = new SequenceTracker();
    t.see(0);
    t.see(200);
    t.see(100);
    expect(t.tooOld).toBe(1);
    expect(t.received).toBe(3);
    expect(t.lost).toBe(198);
  });
});
