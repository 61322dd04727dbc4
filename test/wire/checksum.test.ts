/** The load generators' checksums: zlib's CRC-32 over ranges, CRC-16/CCITT-FALSE, against references. */
import { crc32 as zlibCrc32 } from 'node:zlib';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { crc16, crc32 } from '../../src/wire/index.js';

/** CRC-16/CCITT-FALSE bit by bit, as the catalogue defines it. */
function crc16Reference(data: Uint8Array): number {
  let crc = 0xffff;
  for (const byte of data) {
    crc ^= byte << 8;
    for (let b = 0; b < 8; b++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
  }
  return crc;
}

describe('checksums', () => {
  it('give the catalogue check values of "123456789"', () => {
    const nine = Buffer.from('123456789');
    expect(crc32(nine)).toBe(0xcbf43926);
    expect(crc16(nine)).toBe(0x29b1);
    expect(crc32(new Uint8Array(0))).toBe(0);
    expect(crc16(new Uint8Array(0))).toBe(0xffff);
  });

  it('CRC-32 over a range equals zlib over those bytes, and chains across a gap', () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 300 }), fc.nat(), fc.nat(), (data, a, b) => {
        const start = data.length === 0 ? 0 : a % (data.length + 1);
        const end = start + (data.length === 0 ? 0 : b % (data.length - start + 1));
        expect(crc32(data, start, end)).toBe(zlibCrc32(data.subarray(start, end)));
        // Leaving out [start, end): the two parts chained.
        const without = Buffer.concat([data.subarray(0, start), data.subarray(end)]);
        expect(crc32(data, end, data.length, crc32(data, 0, start))).toBe(zlibCrc32(without));
      }),
    );
  });

  it('CRC-16 equals the bitwise definition, and any single flipped bit changes either', () => {
    fc.assert(
      fc.property(fc.uint8Array({ minLength: 1, maxLength: 64 }), fc.nat(), (data, bit) => {
        expect(crc16(data)).toBe(crc16Reference(data));
        const flipped = Uint8Array.from(data);
        const at = bit % (data.length * 8);
        flipped[at >> 3]! ^= 1 << (at & 7);
        expect(crc16(flipped)).not.toBe(crc16(data));
        expect(crc32(flipped)).not.toBe(crc32(data));
      }),
    );
  });
});
