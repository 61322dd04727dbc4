/**
 * The RELAY payload of `gamewire load unity-relay` carries a CRC-32 of all its other bytes:
 * flipping any single bit anywhere in it (number, sender, send time, the CRC itself, the pattern)
 * is a fault. The byte pattern alone missed the header: a sequence bit above the eighth leaves
 * every pattern byte as it was, and the send time was not looked at. load-corrupt.test.ts shows
 * it through a real relay and a corrupting link.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { fillRelayPayload, relayDigest, relayPayloadFault } from '../../../src/protocols/unity-relay/load.js';

const message = fc.record({
  seq: fc.integer({ min: 0, max: 0xffffffff }),
  sender: fc.integer({ min: 0, max: 0xffffffff }),
  sentMs: fc.double({ noNaN: true }),
});

describe('unity-relay load: the RELAY payload digest', () => {
  it('an intact payload has no fault, and flipping any one of its bits is one (every bit, up to 160 bytes)', () => {
    fc.assert(
      fc.property(fc.integer({ min: 20, max: 160 }), message, (size, m) => {
        const payload = Buffer.alloc(size);
        fillRelayPayload(payload, m.seq, m.sender, m.sentMs);
        expect(relayPayloadFault(payload)).toBeUndefined();
        for (let at = 0; at < size; at++)
          for (let bit = 0; bit < 8; bit++) {
            payload[at]! ^= 1 << bit;
            expect(relayPayloadFault(payload), `byte ${at} bit ${bit}`).toBeDefined();
            payload[at]! ^= 1 << bit;
          }
      }),
      { numRuns: 60 },
    );
  });

  it('flipping a bit anywhere in a payload of up to 1300 bytes is a fault', () => {
    fc.assert(
      fc.property(
        fc
          .integer({ min: 20, max: 1300 })
          .chain((size) =>
            fc.tuple(
              fc.constant(size),
              fc.integer({ min: 0, max: size - 1 }),
              fc.integer({ min: 0, max: 7 }),
            ),
          ),
        message,
        ([size, at, bit], m) => {
          const payload = Buffer.alloc(size);
          fillRelayPayload(payload, m.seq, m.sender, m.sentMs);
          payload[at]! ^= 1 << bit;
          expect(relayPayloadFault(payload)).toBeDefined();
        },
      ),
    );
  });

  it('the header flips the pattern cannot see are caught by the digest', () => {
    const payload = Buffer.alloc(64);
    fillRelayPayload(payload, 5, 3, 1234.5);
    for (const [at, bit] of [
      [1, 0], // sequence bit 8: every pattern byte unchanged ((seq * 7) & 0xff moves by 7 * 256)
      [5, 3], // sender bit 11
      [12, 2], // the send time
    ] as const) {
      const copy = Buffer.from(payload);
      copy[at]! ^= 1 << bit;
      expect(relayPayloadFault(copy)).toMatch(/^the CRC of #/);
    }
  });

  it('is zlib CRC-32 of the payload without its own four bytes', async () => {
    const { crc32 } = await import('node:zlib');
    const payload = Buffer.alloc(100);
    fillRelayPayload(payload, 77, 9, 42);
    expect(relayDigest(payload)).toBe(crc32(Buffer.concat([payload.subarray(0, 16), payload.subarray(20)])));
    expect(payload.readUInt32LE(16)).toBe(relayDigest(payload));
  });
});
