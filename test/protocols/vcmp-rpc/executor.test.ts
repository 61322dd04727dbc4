import { describe, expect, it } from 'vitest';
import { createRpc, RpcExecutor, Vector } from '../../../src/protocols/vcmp-rpc/index.js';
import { parseHex } from '../../../src/wire/index.js';

const { F, Fa, RFC, RFCa, Z, S } = createRpc();

describe('RpcExecutor (server→NPC, as LibRPC runs it)', () => {
  it('runs the seed: print("Hello") with this = root', () => {
    const printed: unknown[] = [];
    const root: Record<string, unknown> = {
      print(this: unknown, s: unknown) {
        printed.push([this === root, s]);
      },
    };
    // The seed carries the v1.6 beta identifier: only older plugins run it.
    const seed = parseHex('00000040460000000f00057072696e7473000548656c6c6f');
    const result = new RpcExecutor(root, { acceptLegacyIdentifier: true }).run(seed);
    expect(result.ok).toBe(true);
    expect(printed).toEqual([[true, 'Hello']]);
    // LibRPC since v1.6 beta5 ignores it.
    const ignored = new RpcExecutor(root).run(seed);
    expect(ignored.ok).toBe(false);
    expect(!ignored.ok && ignored.error.code).toBe('ERR_RPC_IGNORED');
    expect(printed).toHaveLength(1);
  });

  it('evaluates depth-first, left to right, nested calls before the call that takes them', () => {
    const order: string[] = [];
    const root = {
      a: (x: unknown) => {
        order.push(`a(${x})`);
        return 1;
      },
      b: (x: unknown) => {
        order.push(`b(${x})`);
        return 2;
      },
      outer: (...xs: unknown[]) => {
        order.push(`outer(${xs.join(',')})`);
        return 3;
      },
    };
    const r = new RpcExecutor(root).run(RFC('outer')(F('a')('x'), [F('b')('y')], 'z'));
    expect(r).toEqual({ ok: true, value: 3 });
    expect(order).toEqual(['a(x)', 'b(y)', 'outer(1,2,z)']);
  });

  it('G calls the function its callee returns, with this = root; chains work', () => {
    const root: Record<string, unknown> = {
      compilestring: (src: string) =>
        function (this: unknown) {
          return `${src}:${this === root}`;
        },
      a: () => (x: number) => (y: number) => x + y,
    };
    const ex = new RpcExecutor(root);
    expect(ex.run(RFC(F('compilestring')('print(500)'))())).toEqual({ ok: true, value: 'print(500):true' });
    expect(ex.run(RFC(F(F('a')())(1))(2.5))).toEqual({ ok: true, value: 3.5 });
  });

  it('E and D bind this to the first argument', () => {
    class Player {
      readonly name: string;
      constructor(name: string) {
        this.name = name;
      }
      greet(greeting: string) {
        return `${greeting} ${this.name}`;
      }
    }
    const root = {
      FindPlayer: (n: string) => new Player(n),
      getGreeter: () =>
        function (this: Player, g: string) {
          return `${g}, ${this.name}!`;
        },
    };
    const ex = new RpcExecutor(root);
    expect(ex.run(RFCa('greet')(F('FindPlayer')('Tommy'), 'hi'))).toEqual({ ok: true, value: 'hi Tommy' });
    expect(ex.run(RFCa(F('getGreeter')())(F('FindPlayer')('Lance'), 'hey'))).toEqual({
      ok: true,
      value: 'hey, Lance!',
    });
    // Strings have no JavaScript methods: like Squirrel, only the built-in delegates (option).
    expect(ex.run(RFCa('toUpperCase')('hello')).ok).toBe(false);
  });

  it('passes vectors, arrays, floats and nulls through', () => {
    let got: unknown[] = [];
    const ex = new RpcExecutor({ f: (...xs: unknown[]) => (got = xs) });
    expect(ex.run(RFC('f')(new Vector(1, 2, 3), [1, [true]], 0.5, null)).ok).toBe(true);
    expect(got).toEqual([new Vector(1, 2, 3), [1, [true]], 0.5, null]);
  });

  it('keeps the sign of ints (32-bit build) unless asked to zero-extend (64-bit build)', () => {
    let got: unknown;
    const root = { f: (x: unknown) => (got = x) };
    new RpcExecutor(root).run(RFC('f')(-1));
    expect(got).toBe(-1);
    new RpcExecutor(root, { zeroExtendInts: true }).run(RFC('f')(-1));
    expect(got).toBe(4294967295);
  });

  it('fails the packet, without throwing, on unknown names, non-callables and callee errors', () => {
    const ran: string[] = [];
    const root = {
      notAFunction: 5,
      boom: () => {
        throw new Error('kaboom');
      },
      mark: (x: string) => ran.push(x),
    };
    const ex = new RpcExecutor(root);
    expect(ex.run(RFC('missing')())).toMatchObject({
      ok: false,
      error: { code: 'ERR_RPC_UNKNOWN_FUNCTION' },
    });
    expect(ex.run(RFC('notAFunction')())).toMatchObject({
      ok: false,
      error: { code: 'ERR_RPC_NOT_CALLABLE' },
    });
    expect(ex.run(RFC(F('mark')('x'))())).toMatchObject({
      ok: false,
      error: { code: 'ERR_RPC_NOT_CALLABLE' },
    });
    // Not atomic: the nested mark("first") ran before boom failed.
    expect(ex.run(RFC('boom')(F('mark')('first')))).toMatchObject({
      ok: false,
      error: { code: 'ERR_RPC_THROWN' },
    });
    expect(ran).toEqual(['x', 'first']);
    expect(ex.run(parseHex('0100'))).toMatchObject({ ok: false, error: { code: 'ERR_RPC_DECODE' } });
  });

  it('never reaches JavaScript internals through names', () => {
    const ex = new RpcExecutor({});
    expect(ex.run(RFC('constructor')())).toMatchObject({
      ok: false,
      error: { code: 'ERR_RPC_UNKNOWN_FUNCTION' },
    });
    expect(ex.run(RFC('toString')())).toMatchObject({
      ok: false,
      error: { code: 'ERR_RPC_UNKNOWN_FUNCTION' },
    });
    expect(ex.run(RFCa('constructor')('x'))).toMatchObject({
      ok: false,
      error: { code: 'ERR_RPC_NOT_CALLABLE' },
    });
  });

  it('refuses g and h from the server', () => {
    const ex = new RpcExecutor({ print: () => 1 });
    expect(ex.run(S('gravity', 0.5))).toMatchObject({ ok: false, error: { code: 'ERR_RPC_DECODE' } });
  });
});

describe('RpcExecutor (NPC→server, as the server plugin runs it)', () => {
  it('runs only for admin callers', () => {
    let weather = 0;
    const ex = new RpcExecutor({ SetWeather: (w: number) => (weather = w) }, { direction: 'npc-to-server' });
    expect(ex.run(RFC('SetWeather')(5))).toMatchObject({ ok: false, error: { code: 'ERR_RPC_NOT_ADMIN' } });
    expect(weather).toBe(0);
    expect(ex.run(RFC('SetWeather')(5), { admin: true }).ok).toBe(true);
    expect(weather).toBe(5);
  });

  it('S sets root slots or object keys; Z reads them', () => {
    const root: Record<string, unknown> = { SomeTable: { key: 'value' }, print: (x: unknown) => x };
    const ex = new RpcExecutor(root, { direction: 'npc-to-server' });
    expect(ex.run(S('gravity', 0.5), { admin: true }).ok).toBe(true);
    expect(root.gravity).toBe(0.5);
    expect(ex.run(RFC('print')(Z('SomeTable', 'key')), { admin: true })).toEqual({
      ok: true,
      value: 'value',
    });
    expect(ex.run(S(Z('SomeTable'), 'key', 'changed'), { admin: true }).ok).toBe(true);
    expect((root.SomeTable as Record<string, unknown>).key).toBe('changed');
    expect(ex.run(S('__proto__', 1), { admin: true })).toMatchObject({
      ok: false,
      error: { code: 'ERR_RPC_BAD_TARGET' },
    });
    expect(ex.run(RFC('print')(Z('SomeTable', 'nope')), { admin: true })).toMatchObject({ ok: false });
    expect(Fa('x')('env')).toBeDefined();
  });
});
