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
  RpcExecutor,
  type RpcValue,
  type ServerData,
  ServerDataCodec,
  squirrelDelegates,
} from '../../../src/protocols/vcmp-rpc/index.js';
import { DecodeError, EncodeError } from '../../../src/wire/index.js';

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

/** Encodes `p`, or returns undefined when it is over the packet limit (the only refusal expected). */
function encodeUnlessTooLarge(p: ServerData): Buffer | undefined {
  try {
    return encodePacket(p);
  } catch (e) {
    if (e instanceof EncodeError && e.code === 'ERR_TOO_LARGE') return undefined;
    throw e;
  }
}

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
        const bytes = encodeUnlessTooLarge(p);
        if (bytes === undefined) return; // over 4095 bytes: the encoder refuses, tested elsewhere
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
          const encoded = encodeUnlessTooLarge(p);
          if (encoded === undefined) return;
          const bytes = Buffer.from(encoded);
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

// ---- lenient mode: packets holding arrays that run past their container ----------------------

const u32be = (n: number) => {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(n);
  return b;
};
const name = (s: string) => Buffer.concat([Buffer.from([0, s.length]), Buffer.from(s)]);
/** An array header whose length (0xfff0 after the plugin's 16-bit cut) runs past any container. */
const OVERRUN = Buffer.from('610000fff0', 'hex');

/**
 * Raw item bytes: well-formed sizes, but with overrunning arrays anywhere a value may stand, and
 * arrays whose declared length stops short of their elements (the rest reads on as values).
 */
const { call: rawCall } = fc.letrec<{ value: Buffer; call: Buffer }>((tie) => ({
  value: fc.oneof(
    { depthSize: 'small', withCrossShrink: true },
    fc.integer({ min: 0, max: 9 }).map((n) => Buffer.from([0x69, n, 0, 0, 0])),
    fc.constant(Buffer.from('6f', 'hex')),
    fc.constantFrom('', 'a', 'hi').map((s) => Buffer.concat([Buffer.from('s'), name(s)])),
    fc.constant(OVERRUN),
    fc
      .tuple(fc.array(tie('value'), { maxLength: 4 }), fc.option(fc.nat(), { freq: 5 }))
      .map(([items, short]) => {
        const body = Buffer.concat(items);
        const length = short === null ? body.length : short % (body.length + 1);
        return Buffer.concat([Buffer.from('a'), u32be(length), body]);
      }),
    tie('call'),
  ),
  call: fc
    .tuple(
      fc.constantFrom('F', 'F', 'E', 'G', 'D'),
      fc.constantFrom('p', 'q', 'id', 'len', 'getfn', 'nope'),
      fc.array(tie('value'), { maxLength: 4 }),
    )
    .map(([tag, fn, args]) => {
      // G/D call what getfn() returns; E looks its name up on its first argument.
      const head =
        tag === 'G' || tag === 'D'
          ? Buffer.concat([Buffer.from('F'), u32be(7), name('getfn')])
          : name(tag === 'E' && fn === 'getfn' ? 'len' : fn);
      const body = Buffer.concat([head, ...args]);
      return Buffer.concat([Buffer.from(tag), u32be(body.length), body]);
    }),
}));

const malformedPacket = rawCall.map((item) => Buffer.concat([Buffer.from([1, 0, 0, 0x40]), item]));

/** A root table whose functions log their calls; nothing in it throws. */
function loggingRoot() {
  const calls: string[] = [];
  const root: Record<string, unknown> = {};
  const log =
    (fn: string, result: () => unknown) =>
    (...args: unknown[]) => {
      calls.push(
        `${fn}(${JSON.stringify(args, (_, v) => (v === root ? '<root>' : typeof v === 'function' ? '<fn>' : v))})`,
      );
      return result();
    };
  Object.assign(root, { p: log('p', () => null), q: log('q', () => [1]), id: log('id', () => 3) });
  root.getfn = log('getfn', () => root.q);
  return { calls, root };
}

const RUN_FAILURES = new Set([
  'ERR_RPC_DECODE',
  'ERR_RPC_NOT_CALLABLE',
  'ERR_RPC_UNKNOWN_FUNCTION',
  'ERR_RPC_NO_ENVIRONMENT',
  'ERR_RPC_THROWN',
]);

describe('vcmp-rpc lenient properties (the plugin stack model)', () => {
  it('lenient decoding throws only DecodeError, strict refuses every packet with an overrunning array', () => {
    fc.assert(
      fc.property(malformedPacket, (bytes) => {
        onlyDecodeErrors(bytes, { lenient: true });
        if (bytes.includes(OVERRUN)) expect(() => decodeServerData(bytes)).toThrow(DecodeError);
      }),
      { numRuns: 1500 },
    );
  });

  it('the executor never throws; decoded packets run the same calls read-then-run and streamed', () => {
    fc.assert(
      fc.property(malformedPacket, (bytes) => {
        const streamed = loggingRoot();
        const s = new RpcExecutor(streamed.root, { streaming: true, delegate: squirrelDelegates }).run(bytes);
        if (!s.ok) {
          expect(RUN_FAILURES.has(s.error.code)).toBe(true);
          // Only a built-in refusing its arguments throws here; never a fault of the reader.
          if (s.error.code === 'ERR_RPC_THROWN')
            expect(s.error.message).toMatch(/parameter|index|range|empty/);
          if (s.error.cause instanceof DecodeError) expect(s.error.cause.code).not.toBe('ERR_INTERNAL');
        }
        let decoded = true;
        try {
          decodeServerData(bytes, { lenient: true });
        } catch (e) {
          // Only the decoder's typed refusal means "not decodable"; anything else is a bug.
          if (!(e instanceof DecodeError)) throw e;
          expect(e.code).not.toBe('ERR_INTERNAL');
          decoded = false;
        }
        const read = loggingRoot();
        const r = new RpcExecutor(read.root, { lenient: true, delegate: squirrelDelegates }).run(bytes);
        if (decoded) {
          expect(read.calls).toEqual(streamed.calls);
          expect(r.ok).toBe(s.ok);
        } else {
          expect(read.calls).toEqual([]);
          expect(!r.ok && r.error.code).toBe('ERR_RPC_DECODE');
        }
      }),
      { numRuns: 1500 },
    );
  });

  it('whatever strict decoding accepts, lenient decoding reads the same way', () => {
    fc.assert(
      fc.property(
        packetArb,
        fc.array(fc.tuple(fc.nat(), fc.integer({ min: 0, max: 255 })), { maxLength: 3 }),
        (p, flips) => {
          const encoded = encodeUnlessTooLarge(p);
          if (encoded === undefined) return;
          const bytes = Buffer.from(encoded);
          for (const [at, v] of flips) bytes[at % bytes.length] = v;
          let strict: ServerData;
          try {
            strict = decodeServerData(bytes);
          } catch (e) {
            if (!(e instanceof DecodeError)) throw e;
            return;
          }
          expect(decodeServerData(bytes, { lenient: true })).toEqual(strict);
        },
      ),
      { numRuns: 800 },
    );
  });
});
