/**
 * Runs a decoded ServerData against a table of JavaScript functions the way the NPC's LibRPC
 * (and, NPC→server, the server plugin) runs it against the Squirrel root table (spec §3, §4):
 *
 * - depth-first, left to right: for G/D the callee item first, then each argument in order,
 *   nested calls inside arguments before the call that receives them;
 * - F looks the name up in the root table and calls it with this = root;
 * - E looks the name up on its first argument (the environment) once that is evaluated, and
 *   calls it with this = environment and the remaining arguments; D does the same with the
 *   function its callee returns;
 * - G calls the function its callee returns, with this = root;
 * - the return value is discarded by the real plugin; `run` hands it back for tests and tools;
 * - any failure aborts the packet; calls that already ran keep their effects (not atomic);
 * - NPC→server packets run only for admin callers.
 *
 * Names are looked up as own properties only, so `constructor` or `__proto__` never reach
 * JavaScript internals.
 */
import { DecodeError } from '../../wire/index.js';
import { Quaternion, Vector } from './builder.js';
import { decodeServerData } from './codec.js';
import { isNamedCall, type RpcCall, type RpcValue, type ServerData } from './messages.js';

export type RpcErrorCode =
  | 'ERR_RPC_DECODE'
  | 'ERR_RPC_NOT_ADMIN'
  | 'ERR_RPC_UNKNOWN_FUNCTION'
  | 'ERR_RPC_NOT_CALLABLE'
  | 'ERR_RPC_NO_ENVIRONMENT'
  | 'ERR_RPC_BAD_TARGET'
  | 'ERR_RPC_THROWN';

export class RpcExecutionError extends Error {
  readonly code: RpcErrorCode;
  override readonly cause: unknown;

  constructor(code: RpcErrorCode, message: string, cause?: unknown) {
    super(message);
    this.code = code;
    this.cause = cause;
  }

  override get name(): string {
    return 'RpcExecutionError';
  }
}

export interface ExecutorOptions {
  /**
   * `server-to-npc` (the NPC's LibRPC; the default) or `npc-to-server` (the server plugin:
   * admin callers only, `g` and `h` allowed).
   */
  direction?: 'server-to-npc' | 'npc-to-server';
  /**
   * Reproduce 64-bit builds (Linux rpclib64/npc04rel64), which zero-extend `i` values, so -1
   * arrives as 4294967295. Default false: 32-bit behaviour, sign kept (every Windows npcclient).
   */
  zeroExtendInts?: boolean;
  /** Decode packets leniently, like the C++ reader (for `run` on bytes). */
  lenient?: boolean;
}

export interface RunContext {
  /** Whether the sending player is an admin (needed for NPC→server packets). */
  admin?: boolean;
}

export type RunResult = { ok: true; value: unknown } | { ok: false; error: RpcExecutionError };

type Table = Record<string, unknown>;

const FORBIDDEN_KEYS = new Set(['__proto__', 'constructor', 'prototype']);

function ownSlot(table: unknown, key: unknown): { found: boolean; value: unknown } {
  if (table === null || (typeof table !== 'object' && typeof table !== 'function'))
    return { found: false, value: undefined };
  if (table instanceof Map) return { found: table.has(key), value: table.get(key) };
  if (typeof key !== 'string' && typeof key !== 'number') return { found: false, value: undefined };
  const k = String(key);
  if (FORBIDDEN_KEYS.has(k) || !Object.hasOwn(table, k)) return { found: false, value: undefined };
  return { found: true, value: (table as Table)[k] };
}

/** Method lookup on an environment: own slots first, then its class's methods (never Object's). */
function methodOf(env: unknown, name: string): unknown {
  const own = ownSlot(env, name);
  if (own.found) return own.value;
  if (FORBIDDEN_KEYS.has(name) || name.startsWith('__')) return undefined;
  if (env === null || env === undefined) return undefined;
  const proto = Object.getPrototypeOf(Object(env)) as object | null;
  if (proto === null || proto === Object.prototype || proto === Function.prototype) return undefined;
  return (proto as Table)[name];
}

export class RpcExecutor {
  readonly root: Table;
  private readonly options: Required<ExecutorOptions>;

  /** `root` is the root table: functions (and anything `g`/`h` may read or write) by name. */
  constructor(root: Table, options: ExecutorOptions = {}) {
    this.root = root;
    this.options = {
      direction: options.direction ?? 'server-to-npc',
      zeroExtendInts: options.zeroExtendInts ?? false,
      lenient: options.lenient ?? false,
    };
  }

  /** Decodes (if given bytes) and runs one packet. Never throws: failures come back as `ok: false`. */
  run(packet: ServerData | Uint8Array, context: RunContext = {}): RunResult {
    try {
      const data =
        packet instanceof Uint8Array
          ? decodeServerData(packet, {
              lenient: this.options.lenient,
              from: this.options.direction === 'npc-to-server' ? 'client' : 'server',
            })
          : packet;
      if (this.options.direction === 'npc-to-server' && context.admin !== true) {
        throw new RpcExecutionError('ERR_RPC_NOT_ADMIN', 'Remote Call: player must be admin');
      }
      const item = data.item;
      if (item.type === 'set') {
        if (this.options.direction !== 'npc-to-server')
          throw new RpcExecutionError('ERR_RPC_BAD_TARGET', "'h' only runs on the server");
        this.set(item.values.map((v) => this.evaluate(v)));
        return { ok: true, value: undefined };
      }
      return { ok: true, value: this.call(item) };
    } catch (e) {
      if (e instanceof RpcExecutionError) return { ok: false, error: e };
      if (e instanceof DecodeError)
        return { ok: false, error: new RpcExecutionError('ERR_RPC_DECODE', e.message, e) };
      return { ok: false, error: new RpcExecutionError('ERR_RPC_THROWN', String(e), e) };
    }
  }

  /** Evaluates one value (running nested calls). */
  evaluate(v: RpcValue): unknown {
    switch (v.type) {
      case 'null':
        return null;
      case 'int':
        return this.options.zeroExtendInts ? v.value >>> 0 : v.value | 0;
      case 'float':
      case 'bool':
      case 'string':
        return v.value;
      case 'vector':
        return new Vector(v.x, v.y, v.z);
      case 'quaternion':
        return new Quaternion(v.x, v.y, v.z, v.w);
      case 'array':
        return v.items.map((item) => this.evaluate(item));
      case 'call':
        return this.call(v);
      case 'get':
        return this.get(v.path.map((p) => this.evaluate(p)));
    }
  }

  private call(c: RpcCall): unknown {
    if (!isNamedCall(c)) {
      const fn = this.callable(this.evaluate(c.callee), 'callee');
      const args = c.args.map((a) => this.evaluate(a));
      if (c.tag === 'G') return this.invoke(fn, this.root, args, 'callee');
      if (args.length === 0)
        throw new RpcExecutionError('ERR_RPC_NO_ENVIRONMENT', 'a D call needs its environment');
      return this.invoke(fn, args[0], args.slice(1), 'callee');
    }
    if (c.tag === 'F') {
      const slot = ownSlot(this.root, c.name);
      if (!slot.found)
        throw new RpcExecutionError('ERR_RPC_UNKNOWN_FUNCTION', `the index '${c.name}' does not exist`);
      const fn = this.callable(slot.value, c.name);
      return this.invoke(
        fn,
        this.root,
        c.args.map((a) => this.evaluate(a)),
        c.name,
      );
    }
    // E: the environment is evaluated first, then the name is looked up on it (as the C++ does).
    if (c.args.length === 0)
      throw new RpcExecutionError('ERR_RPC_NO_ENVIRONMENT', 'an E call needs its environment');
    const env = this.evaluate(c.args[0]!);
    const fn = this.callable(methodOf(env, c.name), c.name);
    const rest = c.args.slice(1).map((a) => this.evaluate(a));
    return this.invoke(fn, env, rest, c.name);
  }

  private callable(value: unknown, what: string): Function {
    if (typeof value !== 'function') {
      throw new RpcExecutionError(
        'ERR_RPC_NOT_CALLABLE',
        `A function was not returned while processing ${what}`,
      );
    }
    return value;
  }

  private invoke(fn: Function, self: unknown, args: unknown[], what: string): unknown {
    try {
      return fn.apply(self, args);
    } catch (e) {
      throw new RpcExecutionError(
        'ERR_RPC_THROWN',
        `Error in ${what}: ${e instanceof Error ? e.message : String(e)}`,
        e,
      );
    }
  }

  /** `g`: first value names a root slot (string) or is the object; each further value is a key. */
  private get(path: unknown[]): unknown {
    if (this.options.direction !== 'npc-to-server')
      throw new RpcExecutionError('ERR_RPC_BAD_TARGET', "'g' only runs on the server");
    if (path.length === 0) throw new RpcExecutionError('ERR_RPC_BAD_TARGET', 'empty lookup');
    let current: unknown;
    let rest: unknown[];
    if (typeof path[0] === 'string') {
      const slot = ownSlot(this.root, path[0]);
      if (!slot.found)
        throw new RpcExecutionError('ERR_RPC_UNKNOWN_FUNCTION', `the index '${path[0]}' does not exist`);
      current = slot.value;
      rest = path.slice(1);
    } else {
      current = path[0];
      rest = path.slice(1);
    }
    for (const key of rest) {
      const slot = ownSlot(current, key);
      if (!slot.found)
        throw new RpcExecutionError('ERR_RPC_BAD_TARGET', `the index '${String(key)}' does not exist`);
      current = slot.value;
    }
    return current;
  }

  /** `h`: (key, value) on the root table, or (object, key, value). Creates the slot if missing. */
  private set(values: unknown[]): void {
    const [target, key, value] =
      typeof values[0] === 'string' ? [this.root, values[0], values[1]] : [values[0], values[1], values[2]];
    if (typeof key !== 'string' && typeof key !== 'number')
      throw new RpcExecutionError('ERR_RPC_BAD_TARGET', 'set key must be a string or number');
    if (FORBIDDEN_KEYS.has(String(key)))
      throw new RpcExecutionError('ERR_RPC_BAD_TARGET', `refusing to set '${String(key)}'`);
    if (target instanceof Map) {
      target.set(key, value);
      return;
    }
    if (target === null || typeof target !== 'object')
      throw new RpcExecutionError('ERR_RPC_BAD_TARGET', 'set target is not a table');
    (target as Table)[String(key)] = value;
  }
}
