/**
 * The check values `gamewire load nox-relay` puts in every transform are CRC-16 digests of the
 * float32 bytes they cover: flipping any single bit of any checked float changes them (a
 * weighted sum would not: its float rounding swallows low bits). The values themselves are
 * compared with Object.is, so even a flipped sign bit of a 0 check value (0 → -0) is seen.
 * load-corrupt.test.ts shows the same through a real relay and a corrupting link.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { positionCheck, transformCheck } from '../../../src/protocols/nox-relay/load.js';
import { flipFloat32Bit } from '../../helpers/corrupting-proxy.js';

/** Values as the generator sends them (integers a float32 holds exactly), and any float32. */
const seq = fc.oneof(fc.integer({ min: 0, max: 2 ** 24 }), fc.float({ noNaN: true }));
const sender = fc.oneof(fc.integer({ min: 0, max: 0xffff }), fc.float({ noNaN: true }));
const secs = fc.oneof(fc.integer({ min: 0, max: 1_000_000 }), fc.float({ noNaN: true }));
const micros = fc.oneof(fc.integer({ min: 0, max: 999_999 }), fc.float({ noNaN: true }));

/** Every single-bit flip of input `i` of `values` (NaN results skipped: no flip of these inputs makes one from an integer). */
function* flips(values: readonly number[]): Generator<number[]> {
  for (let i = 0; i < values.length; i++)
    for (let bit = 0; bit < 32; bit++) {
      const v = flipFloat32Bit(values[i]!, bit);
      if (Number.isNaN(v)) continue;
      const out = [...values];
      out[i] = v;
      yield out;
    }
}

describe('nox-relay load: transform check values', () => {
  it('flipping any bit of the number, sender or send time changes the velocity check', () => {
    fc.assert(
      fc.property(seq, sender, secs, micros, (...raw) => {
        const values = raw.map(Math.fround);
        const check = transformCheck(values[0]!, values[1]!, values[2]!, values[3]!);
        for (const f of flips(values)) expect(transformCheck(f[0]!, f[1]!, f[2]!, f[3]!)).not.toBe(check);
      }),
      { numRuns: 300 },
    );
  });

  it('flipping any bit of the send time changes the position check', () => {
    fc.assert(
      fc.property(secs, micros, (...raw) => {
        const values = raw.map(Math.fround);
        const check = positionCheck(values[0]!, values[1]!);
        for (const f of flips(values)) expect(positionCheck(f[0]!, f[1]!)).not.toBe(check);
      }),
      { numRuns: 300 },
    );
  });

  it('integer inputs never flip into a NaN (the digest sees exactly the flipped bytes)', () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 2 ** 24 }), fc.integer({ min: 0, max: 31 }), (v, bit) => {
        expect(Number.isNaN(flipFloat32Bit(v, bit))).toBe(false);
      }),
    );
  });

  it('flipping any bit of a check value itself (a float32 below 2^16, 0 included) makes it differ', () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 0xffff }), fc.integer({ min: 0, max: 31 }), (check, bit) => {
        expect(Object.is(flipFloat32Bit(check, bit), check)).toBe(false);
      }),
    );
    // The case === misses: the sign of a 0 check value.
    expect(flipFloat32Bit(0, 31)).toBe(-0);
    expect(Object.is(flipFloat32Bit(0, 31), 0)).toBe(false);
  });

  it('checks stay below 2^16, so a float32 carries them exactly', () => {
    fc.assert(
      fc.property(seq, sender, secs, micros, (a, b, c, d) => {
        const t = transformCheck(a, b, c, d);
        const p = positionCheck(c, d);
        expect(Math.fround(t)).toBe(t);
        expect(Math.fround(p)).toBe(p);
        expect(t).toBeLessThan(0x10000);
      }),
    );
  });
});
