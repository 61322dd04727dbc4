import { createRequire } from 'node:module';
import fc from 'fast-check';
import { describe, expect, test } from 'vitest';
import { decodeContainer } from '../../../src/protocols/js5/cache/container.js';
import { DecodeError } from '../../../src/wire/errors.js';

// LZMA-JS is used here only as an independent encoder of test payloads.
const require = createRequire(import.meta.url);
const LZMA = require('lzma') as { compress(data: Uint8Array | number[], mode: number): number[] };

/** A JS5 type-3 container: LZMA-JS's .lzma output minus its 8-byte size field. */
function lzmaContainer(data: Uint8Array, mode = 1, declared = data.length): Buffer {
  const lz = Buffer.from(LZMA.compress(data, mode).map((b) => b & 0xff));
  const body = Buffer.concat([lz.subarray(0, 5), lz.subarray(13)]);
  const out = Buffer.alloc(9 + body.length);
  out[0] = 3;
  out.writeInt32BE(body.length, 1);
  out.writeInt32BE(declared, 5);
  body.copy(out, 9);
  return out;
}

function codeOf(f: () => unknown): string {
  try {
    f();
  } catch (e) {
    expect(e).toBeInstanceOf(DecodeError);
    return (e as DecodeError).code;
  }
  return 'no error';
}

describe('lzma containers (own decoder)', () => {
  test.each([
    ['zeros', () => 0],
    ['0xff', () => 0xff],
    ['mixed', (i: number) => (i * 37) & 0xff],
  ])(
    'a 30-byte container declaring 16 MiB with a garbage stream (%s) fails fast with a typed error',
    (_, fill) => {
      // With zeros, LZMA-JS (the previous back end) ran for minutes and ran out of heap.
      const bomb = Buffer.alloc(30);
      bomb[0] = 3;
      bomb.writeInt32BE(21, 1);
      bomb.writeInt32BE(0xff_ffff, 5); // 16 MiB − 1, the largest size a container may declare
      bomb[9] = 0x5d; // lc 3, lp 0, pb 2
      bomb.writeUInt32LE(1 << 20, 10);
      for (let i = 15; i < 30; i++) bomb[i] = fill(i);
      bomb[14] = 0; // a valid range coder start, so the decoder really runs
      const heapBefore = process.memoryUsage().heapUsed;
      const t0 = performance.now();
      const code = codeOf(() => decodeContainer(bomb, 'none'));
      const ms = performance.now() - t0;
      expect(['ERR_JS5_BAD_LZMA', 'ERR_JS5_OVERFLOW', 'ERR_JS5_UNDERFLOW']).toContain(code);
      expect(ms).toBeLessThan(500);
      expect(process.memoryUsage().heapUsed - heapBefore).toBeLessThan(64 * 1024 * 1024);
    },
  );

  test('a real stream declaring less than it holds stops at the declared size (ERR_JS5_OVERFLOW)', () => {
    const data = Buffer.alloc(200_000, 0x41);
    const c = lzmaContainer(data, 1, 1000);
    const t0 = performance.now();
    expect(codeOf(() => decodeContainer(c, 'none'))).toBe('ERR_JS5_OVERFLOW');
    expect(performance.now() - t0).toBeLessThan(500);
  });

  test('payloads LZMA-JS would turn into a string decode exactly (41 c1 81 42)', () => {
    const payload = Buffer.from([0x41, 0xc1, 0x81, 0x42]);
    expect(decodeContainer(lzmaContainer(payload), 'none').data).toEqual(payload);
    const text = Buffer.from('héllo wörld, ☃ — plain UTF-8');
    expect(decodeContainer(lzmaContainer(text), 'none').data).toEqual(text);
  });

  test('round trip against LZMA-JS for random and repetitive data, all modes', () => {
    fc.assert(
      fc.property(
        fc.oneof(
          fc.uint8Array({ maxLength: 3000 }),
          fc
            .tuple(fc.uint8Array({ minLength: 1, maxLength: 16 }), fc.integer({ min: 1, max: 400 }))
            .map(([p, n]) => new Uint8Array(Buffer.concat(Array(n).fill(Buffer.from(p))))),
        ),
        fc.integer({ min: 1, max: 9 }),
        (data, mode) => {
          expect(decodeContainer(lzmaContainer(data, mode), 'none').data).toEqual(Buffer.from(data));
        },
      ),
      { numRuns: 150 },
    );
  });

  test('truncated, short and over-declared streams fail with typed errors', () => {
    const data = Buffer.from('the quick brown fox jumps over the lazy dog '.repeat(20));
    const good = lzmaContainer(data);
    const cut = Buffer.from(good.subarray(0, good.length - 8));
    cut.writeInt32BE(cut.length - 9, 1);
    expect(['ERR_JS5_BAD_LZMA', 'ERR_JS5_UNDERFLOW']).toContain(codeOf(() => decodeContainer(cut, 'none')));
    const over = lzmaContainer(data, 1, data.length + 50);
    expect(['ERR_JS5_BAD_LZMA', 'ERR_JS5_UNDERFLOW']).toContain(codeOf(() => decodeContainer(over, 'none')));
    const badProps = Buffer.from(good);
    badProps[9] = 225;
    expect(codeOf(() => decodeContainer(badProps, 'none'))).toBe('ERR_JS5_BAD_LZMA');
  });
});
