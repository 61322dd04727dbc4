/**
 * Where the real LibRPC plugin (stdrpc, run over its own Squirrel) behaves differently from a
 * reasonable reading of the format, lenient mode and the executor follow the plugin. Each packet
 * here is one that was run against the real plugin.
 */
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import {
  createRpc,
  decodeServerData,
  encodeServerData,
  type RpcCall,
  RpcExecutor,
  type RpcValue,
  squirrelDelegates,
} from '../../../src/protocols/vcmp-rpc/index.js';
import { DecodeError, EncodeError, parseHex } from '../../../src/wire/index.js';

const realRuns: unknown = JSON.parse(
  readFileSync(fileURLToPath(new URL('./real-plugin-runs.json', import.meta.url)), 'utf8'),
);

function decodeError(fn: () => unknown): DecodeError {
  try {
    fn();
  } catch (e) {
    if (e instanceof DecodeError) return e;
    throw e;
  }
  throw new Error('expected a DecodeError');
}

/** A root table that records every call. */
function recorder() {
  const calls: string[] = [];
  const fn =
    (name: string, ret?: unknown) =>
    (...args: unknown[]) => {
      calls.push(`${name}(${args.map((a) => JSON.stringify(a)).join(',')})`);
      return ret;
    };
  return { calls, fn };
}

describe('a nested call size of 65536 or more fails the packet (the plugin cuts it to 16 bits, then re-reads 32)', () => {
  const packets = {
    namedCallee: '0100004046000000110001704600010009000269647300026869',
    indirectCallee: '01000040460000001c0001704700010014460000000b0005676574666e7300017473000161',
  };

  it.each(Object.entries(packets))('%s: lenient decoding fails with ERR_BAD_LENGTH', (_, hex) => {
    const e = decodeError(() => decodeServerData(parseHex(hex), { lenient: true }));
    expect(e.code).toBe('ERR_BAD_LENGTH');
    expect(e.offset).toBe(12);
    expect(e.message).toMatch(/65536/);
  });

  it.each(Object.entries(packets))('%s: strict decoding refuses it too', (_, hex) => {
    expect(() => decodeServerData(parseHex(hex))).toThrow(DecodeError);
  });

  it('the lenient executor runs nothing, in both modes', () => {
    for (const streaming of [false, true]) {
      const { calls, fn } = recorder();
      const root = { p: fn('p'), id: fn('id'), getfn: fn('getfn', fn('t')) };
      for (const hex of Object.values(packets)) {
        const result = new RpcExecutor(root, { lenient: true, streaming }).run(parseHex(hex));
        expect(result.ok).toBe(false);
        expect(!result.ok && result.error.code).toBe('ERR_RPC_DECODE');
      }
      expect(calls).toEqual([]);
    }
  });

  it('arrays still truncate their length to 16 bits', () => {
    // F "p", then an array of length 0x00010005 (→ 5) holding i 7.
    const p = decodeServerData(parseHex('01000040 46 0000000d 000170 61 00010005 69 07000000'), {
      lenient: true,
    });
    expect(p.item).toEqual({
      type: 'call',
      tag: 'F',
      name: 'p',
      args: [{ type: 'array', items: [{ type: 'int', value: 7 }] }],
    });
  });
});

describe('an array that runs past its container, used as a call argument, fails the call', () => {
  // p(id([overrun], 1, "hi"), null): the plugin fails with "attempt to call 'table'".
  const nested = '01000040460000001c0001704600000013000269646100000050690100000073000268696f';
  // p([overrun], 1, "")
  const topLevel = '01000040460000001000017061000000506901000000730000';

  it('lenient decoding reports the array, at its offset', () => {
    const a = decodeError(() => decodeServerData(parseHex(nested), { lenient: true }));
    expect(a.code).toBe('ERR_BAD_LENGTH');
    expect(a.offset).toBe(21);
    const b = decodeError(() => decodeServerData(parseHex(topLevel), { lenient: true }));
    expect(b.code).toBe('ERR_BAD_LENGTH');
    expect(b.offset).toBe(12);
  });

  it('the executor fails and calls nothing (the call never happens)', () => {
    for (const streaming of [false, true]) {
      const { calls, fn } = recorder();
      const root = { p: fn('p'), id: fn('id') };
      for (const hex of [nested, topLevel]) {
        const result = new RpcExecutor(root, { lenient: true, streaming }).run(parseHex(hex));
        expect(result.ok).toBe(false);
        // Streaming follows the plugin: the nested call reaches p's root table and calls it; the
        // top-level one reaches below the stack (the plugin reads out of bounds).
        const code = streaming && hex === nested ? 'ERR_RPC_NOT_CALLABLE' : 'ERR_RPC_DECODE';
        expect(!result.ok && result.error.code).toBe(code);
        if (code === 'ERR_RPC_NOT_CALLABLE')
          expect(!result.ok && result.error.message).toMatch(/attempt to call 'table'/);
      }
      expect(calls).toEqual([]);
    }
  });

  it('when streaming, the nested calls read after the array still run before the call fails', () => {
    // p([overrun], q()): the plugin reads on past the array, runs q(), then fails calling p.
    const { F, RFC } = createRpc();
    const good = RFC('p')(F('q')());
    // Splice an overrunning array (length 0x50) in front of q's item: F size grows by 5.
    const bytes = Buffer.concat([good.subarray(0, 12), parseHex('6100000050'), good.subarray(12)]);
    bytes.writeUInt32BE(bytes.length - 9, 5);
    const run = (streaming: boolean) => {
      const { calls, fn } = recorder();
      const result = new RpcExecutor({ p: fn('p'), q: fn('q') }, { lenient: true, streaming }).run(bytes);
      return { result, calls };
    };
    const streamed = run(true);
    expect(streamed.result.ok).toBe(false);
    expect(streamed.calls).toEqual(['q()']);
    expect(run(false).calls).toEqual([]);
  });

  it('inside another array, the plugin skips the element and goes on', () => {
    // p([ [overrun], i 3 ]): the outer array gets only the int.
    const bytes = parseHex('01000040 46 00000012 000170 61 0000000a 61 00000050 69 03000000');
    const p = decodeServerData(bytes, { lenient: true });
    expect((p.item as RpcCall).args).toEqual([{ type: 'array', items: [{ type: 'int', value: 3 }] }]);
  });
});

describe('a top-level size of 0xfffffffb..0xffffffff passes the real size check (it wraps in 32 bits)', () => {
  const hi = '0100004046ffffffff0001707300026869';

  it('lenient decoding reads p("hi"), and the executor runs it', () => {
    expect(decodeServerData(parseHex(hi), { lenient: true }).item).toEqual({
      type: 'call',
      tag: 'F',
      name: 'p',
      args: [{ type: 'string', value: 'hi' }],
    });
    const { calls, fn } = recorder();
    expect(new RpcExecutor({ p: fn('p') }, { lenient: true }).run(parseHex(hi)).ok).toBe(true);
    expect(calls).toEqual(['p("hi")']);
  });

  it('every size from 0xfffffffb passes, 0xfffffffa does not; strict refuses them all', () => {
    for (let size = 0xfffffffa; size <= 0xffffffff; size++) {
      const bytes = parseHex(hi);
      bytes.writeUInt32BE(size, 5);
      if (size >= 0xfffffffb) expect(() => decodeServerData(bytes, { lenient: true })).not.toThrow();
      else expect(() => decodeServerData(bytes, { lenient: true })).toThrow(DecodeError);
      expect(() => decodeServerData(bytes)).toThrow(DecodeError);
    }
  });
});

describe('the remaining differences, as documented', () => {
  it('streaming execution: calls before a malformed part have run, the packet then fails', () => {
    // p(a(), b(<bool 2>)): a runs, the bad bool stops the read; neither b nor p runs.
    const { F, RFC } = createRpc();
    const bytes = RFC('p')(F('a')(), F('b')(true));
    bytes[bytes.length - 1] = 2;
    for (const [streaming, expected] of [
      [true, ['a()']],
      [false, []],
    ] as const) {
      const { calls, fn } = recorder();
      const result = new RpcExecutor(
        { p: fn('p'), a: fn('a'), b: fn('b') },
        { lenient: true, streaming },
      ).run(bytes);
      expect(result.ok).toBe(false);
      expect(!result.ok && result.error.code).toBe('ERR_RPC_DECODE');
      expect(calls).toEqual(expected);
    }
  });

  it('streaming execution runs a well-formed packet exactly like the default', () => {
    const { F, RFC } = createRpc();
    const bytes = RFC('p')(F('a')(1), [F('b')('x'), 2.5], F('a')(3));
    const results = [false, true].map((streaming) => {
      const { calls, fn } = recorder();
      const result = new RpcExecutor({ p: fn('p'), a: fn('a', 7), b: fn('b', 8) }, { streaming }).run(bytes);
      return { ok: result.ok, calls };
    });
    expect(results[1]).toEqual(results[0]);
    expect(results[0]!.calls).toEqual(['a(1)', 'b("x")', 'a(3)', 'p(7,[8,2.5],7)']);
  });

  it('the builder cuts strings and names at an embedded NUL, like the real builder', () => {
    const { RFC } = createRpc();
    expect(RFC('print')('ab\0cd')).toEqual(RFC('print')('ab'));
    expect(RFC('pr\0x')()).toEqual(RFC('pr')());
    const keep = createRpc({ cutStringsAtNul: false }).RFC('print')('ab\0cd');
    expect(decodeServerData(keep).item).toMatchObject({ args: [{ type: 'string', value: 'ab\0cd' }] });
  });

  it('the builder and the decoder agree on nesting depth', () => {
    const { F, RFC } = createRpc();
    for (let depth = 1; depth <= 40; depth++) {
      // depth nested calls: f(f(f(...)))
      let inner = F('f')();
      for (let i = 2; i < depth; i++) inner = F('f')(inner);
      let bytes: Buffer | undefined;
      try {
        bytes = depth === 1 ? RFC('f')() : RFC('f')(inner);
      } catch (e) {
        expect(e).toBeInstanceOf(EncodeError);
        expect((e as EncodeError).code).toBe('ERR_TOO_DEEP');
      }
      // Whatever the builder writes, the decoder reads; whatever it refuses is too deep to read.
      if (bytes !== undefined) expect(() => decodeServerData(bytes)).not.toThrow();
      expect(bytes !== undefined).toBe(depth <= 32);
    }
    // The same for arrays in arrays.
    let nested: RpcValue = { type: 'int', value: 1 };
    for (let i = 0; i < 40; i++) nested = { type: 'array', items: [nested] };
    const item: RpcCall = { type: 'call', tag: 'F', name: 'f', args: [nested] };
    expect(() => encodeServerData(item)).toThrow(/nesting deeper than 32/);
  });

  it('S sends every value like the real builder; the server uses the first two or three', () => {
    const { S } = createRpc();
    const bytes = S('k', 1, 2, 3);
    expect(decodeServerData(bytes, { from: 'client' }).item).toEqual({
      type: 'set',
      values: [
        { type: 'string', value: 'k' },
        { type: 'int', value: 1 },
        { type: 'int', value: 2 },
        { type: 'int', value: 3 },
      ],
    });
    const root: Record<string, unknown> = { T: {} };
    const server = new RpcExecutor(root, { direction: 'npc-to-server' });
    expect(server.run(bytes, { admin: true }).ok).toBe(true);
    expect(root.k).toBe(1);
    expect(() => S('k')).toThrow(EncodeError);
  });

  it('the legacy identifier 0x40000000 is ignored, unless asked for', () => {
    const legacy = createRpc({ legacy: true }).RFC('p')('x');
    const { calls, fn } = recorder();
    const ignored = new RpcExecutor({ p: fn('p') }).run(legacy);
    expect(!ignored.ok && ignored.error.code).toBe('ERR_RPC_IGNORED');
    expect(calls).toEqual([]);
    expect(new RpcExecutor({ p: fn('p') }, { acceptLegacyIdentifier: true }).run(legacy).ok).toBe(true);
    expect(calls).toEqual(['p("x")']);
  });

  it("names fall back to Squirrel's built-in delegates through the delegate hook", () => {
    const { RFCa, RFC, Fa } = createRpc();
    const plain = new RpcExecutor({}).run(RFCa('len')('hello'));
    expect(!plain.ok && plain.error.code).toBe('ERR_RPC_NOT_CALLABLE');
    const npc = new RpcExecutor({ p: (x: unknown) => x }, { delegate: squirrelDelegates });
    expect(npc.run(RFCa('len')('hello'))).toEqual({ ok: true, value: 5 });
    expect(npc.run(RFCa('toupper')('abc'))).toEqual({ ok: true, value: 'ABC' });
    expect(npc.run(RFCa('slice')('hello', 1, 3))).toEqual({ ok: true, value: 'el' });
    expect(npc.run(RFCa('len')([1, 2, 3]))).toEqual({ ok: true, value: 3 });
    expect(npc.run(RFCa('tointeger')(2.75))).toEqual({ ok: true, value: 2 });
    expect(npc.run(RFC('p')(Fa('find')('hello', 'll')))).toEqual({ ok: true, value: 2 });
    // Own slots still win, and nothing reaches JavaScript internals.
    expect(npc.run(RFCa('constructor')('x')).ok).toBe(false);
    expect(npc.run(RFCa('toString')('x')).ok).toBe(false);
  });

  it('short packets: the real plugin crashes on 0-4 bytes and on 9-byte F/E/G with size 0; gamewire gives typed errors', () => {
    const inputs = [
      ...[0, 1, 2, 3, 4, 5, 6, 7, 8].map((n) => parseHex('010000404600000000').subarray(0, n)),
      ...['46', '45', '47', '44'].map((tag) => parseHex(`01000040${tag}00000000`)),
    ];
    for (const bytes of inputs) {
      for (const lenient of [false, true]) {
        const e = decodeError(() => decodeServerData(bytes, { lenient }));
        expect(e.code).toMatch(/^ERR_(INCOMPLETE|BAD_VALUE|OVERRUN)$/);
      }
      const result = new RpcExecutor({}, { lenient: true, streaming: true }).run(bytes);
      expect(result.ok).toBe(false);
    }
  });
});

/**
 * The real plugin's root table for the recorded runs (real-plugin-runs.json): each function logs
 * its call the way the Squirrel script of the recording printed it, and returns what it returned.
 */
function recordingRoot() {
  const calls: string[] = [];
  const root: Record<string, unknown> = {};
  const show = (x: unknown): string => {
    if (x === root) return 'table';
    if (Array.isArray(x)) return `[${x.map(show).join(',')}]`;
    if (typeof x === 'string') return `"${x}"`;
    if (x === null || x === undefined) return 'null';
    if (typeof x === 'function') return 'function';
    if (typeof x === 'object') return 'table';
    return String(x);
  };
  const fn =
    (name: string, result: () => unknown) =>
    (...args: unknown[]) => {
      calls.push(`${name}(${args.map(show).join(',')})`);
      return result();
    };
  Object.assign(root, {
    p: fn('p', () => null),
    q: fn('q', () => 7),
    r: fn('r', () => 8),
    show: fn('show', () => null),
    getarr: fn('getarr', () => [1]),
  });
  root.id = (...args: unknown[]) => {
    calls.push(`id(${args.map(show).join(',')})`);
    return args.length > 0 ? args[0] : null;
  };
  root.getfn = fn('getfn', () => root.q);
  return { calls, root };
}

function runRecorded(hex: string, mode: { lenient?: boolean; streaming?: boolean }) {
  const { calls, root } = recordingRoot();
  // The recordings ran on a 64-bit build (ints zero-extended), with Squirrel's built-in delegates.
  const result = new RpcExecutor(root, { ...mode, zeroExtendInts: true, delegate: squirrelDelegates }).run(
    parseHex(hex),
  );
  return { calls, result };
}

describe('issue reproductions: an overrunning array inside an array (the plugin appends after every element)', () => {
  // p(show([], [[overrun]])): the inner array moves into [] and the call reaches p's root table.
  const attemptToCallTable = '01000040460000001d0001704600000015000473686f77610000000061000000056100000050';
  // p(show([[overrun, 2]])): the inner array moves into the outer one, 2 follows it there.
  const shifted = '010000404600000022000170460000001a000473686f77610000000f610000000a61000000506902000000';
  // show([], [[overrun]]) at top level: the call reaches below the stack; the plugin crashes.
  const crashes = '010000404600000015000473686f77610000000061000000056100000050';

  it('p(show([],[[overrun]])): lenient decoding fails at the array; neither mode runs anything', () => {
    const e = decodeError(() => decodeServerData(parseHex(attemptToCallTable), { lenient: true }));
    expect(e.code).toBe('ERR_BAD_LENGTH');
    expect(e.offset).toBe(33);
    expect(e.message).toMatch(/root table/);
    for (const streaming of [false, true]) {
      const { calls, result } = runRecorded(attemptToCallTable, { lenient: true, streaming });
      expect(result.ok).toBe(false);
      expect(calls).toEqual([]);
    }
    const streamed = runRecorded(attemptToCallTable, { streaming: true }).result;
    expect(!streamed.ok && streamed.error.message).toMatch(/attempt to call 'table'/);
  });

  it('p(show([[overrun],2])) reads as show([[],2]), then p(null), in both modes', () => {
    const item = decodeServerData(parseHex(shifted), { lenient: true }).item;
    expect(item).toEqual({
      type: 'call',
      tag: 'F',
      name: 'p',
      args: [
        {
          type: 'call',
          tag: 'F',
          name: 'show',
          args: [
            {
              type: 'array',
              items: [
                { type: 'array', items: [] },
                { type: 'int', value: 2 },
              ],
            },
          ],
        },
      ],
    });
    for (const streaming of [false, true]) {
      const { calls, result } = runRecorded(shifted, { lenient: true, streaming });
      expect(result.ok).toBe(true);
      expect(calls).toEqual(['show([[],2])', 'p(null)']);
    }
    expect(() => decodeServerData(parseHex(shifted))).toThrow(DecodeError);
  });

  it('show([],[[overrun]]) at top level fails the packet (the plugin reads out of bounds)', () => {
    const e = decodeError(() => decodeServerData(parseHex(crashes), { lenient: true }));
    expect(e.code).toBe('ERR_BAD_LENGTH');
    expect(e.message).toMatch(/below the packet's part of the Squirrel stack/);
    for (const streaming of [false, true]) {
      const { calls, result } = runRecorded(crashes, { lenient: true, streaming });
      expect(!result.ok && result.error.code).toBe('ERR_RPC_DECODE');
      expect(calls).toEqual([]);
    }
  });
});

describe('a packet whose identifier the plugin does not run is ignored, whatever its body', () => {
  const modes = [{}, { lenient: true }, { streaming: true }];

  it.each([
    ['00000000', 'the old identifier, no body'],
    ['000000404600000000', 'the old identifier, an undecodable body'],
    ['78563412ffff', 'an unknown identifier, garbage'],
    ['0200004046000000060001700101', 'an unknown identifier, a malformed call'],
  ])('%s (%s): ERR_RPC_IGNORED in every mode', (hex) => {
    for (const mode of modes) {
      const result = new RpcExecutor({}, mode).run(parseHex(hex));
      expect(!result.ok && result.error.code).toBe('ERR_RPC_IGNORED');
    }
  });

  it('a well-formed call under an unknown identifier is ignored too; the decoder still refuses it', () => {
    const bytes = createRpc().RFC('p')(1);
    bytes.writeUInt32LE(0x12345678, 0);
    const { calls, fn } = recorder();
    for (const mode of modes) {
      const result = new RpcExecutor({ p: fn('p') }, mode).run(bytes);
      expect(!result.ok && result.error.code).toBe('ERR_RPC_IGNORED');
    }
    expect(calls).toEqual([]);
    expect(decodeError(() => decodeServerData(bytes)).code).toBe('ERR_BAD_VALUE');
  });

  it('with acceptLegacyIdentifier, an old-identifier packet is read, so a bad body is ERR_RPC_DECODE', () => {
    for (const mode of modes) {
      const result = new RpcExecutor({}, { ...mode, acceptLegacyIdentifier: true }).run(
        parseHex('000000404600000000'),
      );
      expect(!result.ok && result.error.code).toBe('ERR_RPC_DECODE');
    }
  });

  it('fewer than 4 bytes hold no identifier: ERR_RPC_DECODE (the plugin reads past them)', () => {
    for (const mode of modes) {
      const result = new RpcExecutor({}, mode).run(parseHex('010000'));
      expect(!result.ok && result.error.code).toBe('ERR_RPC_DECODE');
    }
  });

  it('NPC→server: the identifier is checked before the admin check, as the server plugin does', () => {
    const server = new RpcExecutor({}, { direction: 'npc-to-server' });
    const ignored = server.run(parseHex('00000000'), { admin: false });
    expect(!ignored.ok && ignored.error.code).toBe('ERR_RPC_IGNORED');
    const refused = server.run(createRpc().RFC('p')(), { admin: false });
    expect(!refused.ok && refused.error.code).toBe('ERR_RPC_NOT_ADMIN');
  });
});

describe('recorded runs of the real plugin (real-plugin-runs.json)', () => {
  // Packets with arrays that run past their container, nested in arrays and calls, run by the
  // real stdrpc plugin over its own Squirrel (64-bit, AddressSanitizer): the calls it made, in
  // order, and whether the packet ran, failed, or crashed the plugin.
  const runs = realRuns as {
    hex: string;
    outcome: 'runs' | 'fails' | 'crashes';
    calls: string[];
    error?: string;
  }[];

  it('holds every kind of outcome', () => {
    const count = (o: string) => runs.filter((run) => run.outcome === o).length;
    expect(count('runs')).toBeGreaterThanOrEqual(40);
    expect(count('fails')).toBeGreaterThanOrEqual(40);
    expect(count('crashes')).toBeGreaterThanOrEqual(20);
  });

  it.each(runs.map((run) => [run.hex, run] as const))(
    'streaming execution makes the same calls as the plugin: %s',
    (hex, run) => {
      const { calls, result } = runRecorded(hex, { streaming: true });
      expect(calls).toEqual(run.calls);
      expect(result.ok).toBe(run.outcome === 'runs');
      // Where the plugin crashes (it reads below its stack), gamewire fails with a typed error.
      if (run.outcome === 'crashes') expect(!result.ok && result.error.code).toBe('ERR_RPC_DECODE');
      const attempt = run.error?.match(/^attempt to call '(\w+)'/);
      if (attempt) expect(!result.ok && result.error.message).toContain(`attempt to call '${attempt[1]}'`);
    },
  );

  it('decoded leniently, a packet runs the same calls as streamed, or runs nothing when it does not decode', () => {
    let decoded = 0;
    for (const run of runs) {
      let ok = true;
      try {
        decodeServerData(parseHex(run.hex), { lenient: true });
      } catch (e) {
        expect(e).toBeInstanceOf(DecodeError);
        ok = false;
      }
      const { calls, result } = runRecorded(run.hex, { lenient: true });
      if (ok) {
        decoded++;
        const streamed = runRecorded(run.hex, { streaming: true });
        expect(calls).toEqual(streamed.calls);
        expect(result.ok).toBe(streamed.result.ok);
      } else {
        expect(calls).toEqual([]);
        expect(!result.ok && result.error.code).toBe('ERR_RPC_DECODE');
      }
    }
    // Every packet the plugin runs to the end without a nested call's result deciding a step decodes.
    expect(decoded).toBeGreaterThan(runs.filter((run) => run.outcome === 'runs').length / 2);
  });
});

describe("Squirrel's built-in methods check their parameters before running, like a real NPC", () => {
  const npc = new RpcExecutor({}, { delegate: squirrelDelegates });
  const { RFCa } = createRpc();

  it('a wrong count fails with "wrong number of parameters"', () => {
    for (const bytes of [
      RFCa('len')('hi', 1),
      RFCa('len')([1], null),
      RFCa('append')([1]),
      RFCa('tointeger')(5, 1),
    ]) {
      const result = npc.run(bytes);
      expect(!result.ok && result.error.code).toBe('ERR_RPC_THROWN');
      expect(!result.ok && result.error.message).toMatch(/wrong number of parameters/);
    }
  });

  it('a wrong type fails with the parameter named; ranges are checked as Squirrel does', () => {
    const typed = npc.run(RFCa('toupper')('hi', [1]));
    expect(!typed.ok && typed.error.message).toMatch(/parameter 1 has an invalid type 'array'/);
    const reversed = npc.run(RFCa('toupper')('hi', 2, 1));
    expect(!reversed.ok && reversed.error.message).toMatch(/wrong indexes/);
    expect(npc.run(RFCa('toupper')('hello', 1, 3))).toEqual({ ok: true, value: 'hELlo' });
    expect(npc.run(RFCa('tointeger')('ff', 16))).toEqual({ ok: true, value: 255 });
    expect(npc.run(RFCa('slice')('hello', -3))).toEqual({ ok: true, value: 'llo' });
  });
});
