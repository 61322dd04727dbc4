/**
 * Property tests: every encodable ServerData round-trips byte-exactly, and arbitrary or mutated
 * bytes only ever produce DecodeError (strict and lenient, both directions), within the limits.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  decodeServerData,
  encodePacket,
  type RpcCall,
  type RpcValue,
  type ServerData,
  ServerDataCodec,
} from '../../../src/protocols/vcmp-rpc/index.js';
import { DecodeError } from '../../../src/wire/index.js';

const f32 = fc.float({ noNaN: true, noDefaultInfinity: true }).map((x) => Math.fround(x));

const scalar: fc.Arbitrary<RpcValue> = fc.oneof(
  fc.constant({ type: 'null' } as const),
  fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 }).map((value) => ({ type: 'int', value }) as const),
  f32.map((value) => ({ type: 'float', value }) as const),
  fc.boolean().map((value) => ({ type: 'bool', value }) as const),
  fc.string({ maxLength: 20 }).map((value) => ({ type: 'string', value }) as const),
  fc.tuple(f32, f32, f32).map(([x, y, z]) => ({ type: 'vector', x, y, z }) as const),
  fc.tuple(f32, f32, f32, f32).map(([x, y, z, w]) => ({ type: 'quaternion', x, y, z, w }) as const),
);

const { call: callArb } = fc.letrec<{ value: RpcValue; call: RpcCall; named: RpcCall }>((tie) => ({
  value: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    scalar,
    fc.array(tie('value'), { maxLength: 4 }).map((items) => ({ type: 'array', items }) as const),
    tie('call'),
  ),
  named: fc
    .record({
      tag: fc.constantFrom('F' as const, 'E' as const),
      name: fc.string({ minLength: 1, maxLength: 12 }),
      args: fc.array(tie('value'), { minLength: 1, maxLength: 4 }),
    })
    .map((c) => ({ type: 'call', ...c }) as RpcCall),
  call: fc.oneof(
    { depthSize: 'small' },
    tie('named'),
    fc
      .record({
        tag: fc.constantFrom('G' as const, 'D' as const),
        callee: tie('named'),
        args: fc.array(tie('value'), { minLength: 1, maxLength: 3 }),
      })
      .map((c) => ({ type: 'call', ...c }) as RpcCall),
  ),
}));

const packetArb: fc.Arbitrary<ServerData> = fc
  .record({ identifier: fc.constantFrom(0x40000000, 0x40000001), item: callArb })
  .map((p) => ({ type: 'ServerData', ...p }));

function onlyDecodeErrors(bytes: Uint8Array, options: Parameters<typeof decodeServerData>[1]): void {
  try {
    decodeServerData(bytes, options);
  } catch (e) {
    if (!(e instanceof DecodeError)) throw e;
    expect(e.code).not.toBe('ERR_INTERNAL');
    expect(e.offset).toBeGreaterThanOrEqual(0);
    expect(e.offset).toBeLessThanOrEqual(bytes.length);
  }
}

describe('vcmp-rpc properties', () => {
  it('decode(encode(p)) == p and encode(decode(b)) == b', () => {
    fc.assert(
      fc.property(packetArb, (p) => {
        let bytes: Buffer;
        try {
          bytes = encodePacket(p);
        } catch {
          return; // over 4095 bytes: the encoder refuses, tested elsewhere
        }
        const back = decodeServerData(bytes);
        expect(back).toEqual(p);
        expect(encodePacket(back)).toEqual(bytes);
      }),
      { numRuns: 400 },
    );
  });

  it('the CLI JSON form round-trips too', () => {
    fc.assert(
      fc.property(packetArb, (p) => {
        const json = JSON.parse(JSON.stringify(ServerDataCodec.toJson(p)));
        expect(ServerDataCodec.fromJson(json, '')).toEqual(p);
      }),
      { numRuns: 200 },
    );
  });

  it('arbitrary bytes give only DecodeError', () => {
    const modes = [
      {},
      { lenient: true },
      { from: 'server' as const },
      { from: 'client' as const, lenient: true },
    ];
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 200 }), fc.constantFrom(...modes), (bytes, mode) =>
        onlyDecodeErrors(bytes, mode),
      ),
      { numRuns: 2000 },
    );
  });

  it('valid packets with bytes flipped, cut or appended give only DecodeError', () => {
    fc.assert(
      fc.property(
        packetArb,
        fc.array(fc.tuple(fc.nat(), fc.integer({ min: 0, max: 255 })), { maxLength: 4 }),
        fc.nat(),
        fc.boolean(),
        (p, flips, cut, lenient) => {
          let bytes: Buffer;
          try {
            bytes = Buffer.from(encodePacket(p));
          } catch {
            return;
          }
          for (const [at, v] of flips) bytes[at % bytes.length] = v;
          onlyDecodeErrors(bytes.subarray(0, bytes.length - (cut % 4)), { lenient });
          onlyDecodeErrors(Buffer.concat([bytes, Buffer.from([0x61, 0xff, 0xff, 0xff, 0xff])]), { lenient });
        },
      ),
      { numRuns: 500 },
    );
  });

  it('huge declared sizes are refused without allocating (and without hanging)', () => {
    // Array claiming 4 GiB, call claiming 4 GiB, string claiming 64 KiB: all in a 20-byte packet.
    for (const hexText of [
      '01000040460000000b000166 61ffffffff',
      '0100004046ffffffff000166',
      '01000040460000000500016673ffff',
    ]) {
      const bytes = Buffer.from(hexText.replace(/\s/g, ''), 'hex');
      for (const lenient of [false, true]) onlyDecodeErrors(bytes, { lenient });
    }
  });
});
