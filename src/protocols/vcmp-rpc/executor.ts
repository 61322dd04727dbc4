/**
 * Runs a decoded ServerData against a table of JavaScript functions the way the NPC's LibRPC
 * (and, NPC→server, the server plugin) runs it against the Squirrel root table:
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
 * JavaScript internals. Where Squirrel would fall back to a type's built-in delegate (so that
 * `RFCa('len')('hello')` returns 5 on a real NPC), the `delegate` option is consulted;
 * `squirrelDelegates` is a ready-made one with the common built-in methods.
 *
 * By default a packet is decoded first and then run. `streaming: true` runs it the way the
 * plugin does, while reading, on the model of the plugin's Squirrel stack (lenient.ts): each call
 * runs as soon as it is read, the calls before a malformed part have run when the packet fails,
 * and malformed arrays go where the plugin's stack sends them.
 *
 * Like the plugins, `run` compares the identifier before reading anything else: a packet with
 * another identifier is ignored, whatever its body.
 */
import { DecodeError, GamewireError } from '../../wire/index.js';
import { Quaternion, Vector } from './builder.js';
import { decodeServerData, runServerDataLive } from './codec.js';
import type { LiveHooks } from './lenient.js';
import { Identifier, isNamedCall, type RpcCall, type RpcValue, type ServerData } from './messages.js';

function readU32le(bytes: Uint8Array): number {
  return (bytes[0]! | (bytes[1]! << 8) | (bytes[2]! << 16) | (bytes[3]! << 24)) >>> 0;
}

export type RpcErrorCode =
  | 'ERR_RPC_DECODE'
  | 'ERR_RPC_NOT_ADMIN'
  | 'ERR_RPC_UNKNOWN_FUNCTION'
  | 'ERR_RPC_NOT_CALLABLE'
  | 'ERR_RPC_NO_ENVIRONMENT'
  | 'ERR_RPC_BAD_TARGET'
  | 'ERR_RPC_THROWN'
  | 'ERR_RPC_IGNORED';

export class RpcExecutionError extends GamewireError {
  declare readonly code: RpcErrorCode;

  constructor(code: RpcErrorCode, message: string, cause?: unknown) {
    super(code, message, cause === undefined ? undefined : { cause });
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
  /**
   * Run while reading, as the plugin does (for `run` on bytes; implies `lenient`): calls before
   * a malformed part run, then the packet fails with ERR_RPC_DECODE. Default false: a malformed
   * packet runs nothing.
   */
  streaming?: boolean;
  /**
   * Where a name is not an own slot of its table (F: the root table; E: the environment),
   * Squirrel falls back to the value's built-in delegate. Return the function to call, or
   * undefined. `squirrelDelegates` reproduces the common built-ins.
   */
  delegate?: (target: unknown, name: string) => unknown;
  /**
   * Also run packets with the v1.6 beta..beta4 identifier 0x40000000. Default false: like
   * LibRPC since v1.6 beta5, such packets are ignored (ERR_RPC_IGNORED).
   */
  acceptLegacyIdentifier?: boolean;
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

/**
 * Method lookup on an environment: own slots first, then the methods of its class when it is a
 * class instance (never Object's). Strings, numbers, bools and arrays have no JavaScript methods
 * here: Squirrel gives them only its built-in delegates (the `delegate` option).
 */
function methodOf(env: unknown, name: string): unknown {
  const own = ownSlot(env, name);
  if (own.found) return own.value;
  if (FORBIDDEN_KEYS.has(name) || name.startsWith('__')) return undefined;
  if (env === null || typeof env !== 'object' || Array.isArray(env) || env instanceof Map) return undefined;
  const proto = Object.getPrototypeOf(env) as object | null;
  if (proto === null || proto === Object.prototype || proto === Function.prototype) return undefined;
  return (proto as Table)[name];
}

/** The type name Squirrel would give a value in "attempt to call '…'". */
function squirrelTypeName(value: unknown, root: unknown): string {
  if (value === null || value === undefined) return 'null';
  if (value === root) return 'table';
  if (typeof value === 'number') return Number.isInteger(value) ? 'integer' : 'float';
  if (typeof value === 'boolean') return 'bool';
  if (typeof value === 'string') return 'string';
  if (Array.isArray(value)) return 'array';
  if (value instanceof Vector || value instanceof Quaternion) return 'instance';
  return 'table';
}

export class RpcExecutor {
  readonly root: Table;
  private readonly options: Required<Omit<ExecutorOptions, 'delegate'>>;
  private readonly delegate: ((target: unknown, name: string) => unknown) | undefined;

  /** `root` is the root table: functions (and anything `g`/`h` may read or write) by name. */
  constructor(root: Table, options: ExecutorOptions = {}) {
    this.root = root;
    this.options = {
      direction: options.direction ?? 'server-to-npc',
      zeroExtendInts: options.zeroExtendInts ?? false,
      lenient: options.lenient ?? false,
      streaming: options.streaming ?? false,
      acceptLegacyIdentifier: options.acceptLegacyIdentifier ?? false,
    };
    this.delegate = options.delegate;
  }

  /** Decodes (if given bytes) and runs one packet. Never throws: failures come back as `ok: false`. */
  run(packet: ServerData | Uint8Array, context: RunContext = {}): RunResult {
    try {
      const from = this.options.direction === 'npc-to-server' ? 'client' : 'server';
      // The plugin compares the identifier before it reads anything else: a packet it does not
      // run is ignored, whatever its body holds.
      if (packet instanceof Uint8Array && packet.length >= 4) this.checkIdentifier(readU32le(packet));
      if (packet instanceof Uint8Array && this.options.streaming) {
        if (packet.length >= 4) this.checkAdmin(context);
        return { ok: true, value: runServerDataLive(packet, this.liveHooks(), { from }) };
      }
      const data =
        packet instanceof Uint8Array
          ? decodeServerData(packet, { lenient: this.options.lenient, from })
          : packet;
      this.checkIdentifier(data.identifier);
      this.checkAdmin(context);
      const item = data.item;
      if (item.type === 'set') {
        if (this.options.direction !== 'npc-to-server')
          throw new RpcExecutionError('ERR_RPC_BAD_TARGET', "'h' only runs on the server");
        this.set(this.evaluateArgs(item.values, 0));
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

  private checkAdmin(context: RunContext): void {
    if (this.options.direction === 'npc-to-server' && context.admin !== true) {
      throw new RpcExecutionError('ERR_RPC_NOT_ADMIN', 'Remote Call: player must be admin');
    }
  }

  /** The executor's side of a streaming run: the plugin's model calls these as it reads. */
  private liveHooks(): LiveHooks {
    return {
      root: this.root,
      scalar: (node) => this.evaluate(node),
      rootSlot: (name) => this.rootSlot(name),
      method: (self, name) => this.method(self, name),
      callee: (value) => {
        this.callable(value, 'callee');
      },
      call: (fn, params, call) => {
        const what = isNamedCall(call) ? call.name : 'callee';
        return this.invoke(this.callable(fn, what), params[0], params.slice(1), what);
      },
      noParameters: (top) => {
        // Squirrel calls it with no `this`: a function refuses ("wrong number of parameters").
        this.callable(top, 'a call without parameters');
        throw new RpcExecutionError(
          'ERR_RPC_NO_ENVIRONMENT',
          'an E or D call needs its environment (wrong number of parameters)',
        );
      },
      get: (path) => this.get(path),
      set: (values) => this.set(values),
    };
  }

  /** F: the slot named on the root table (own slots, then the delegate); missing fails the packet. */
  private rootSlot(name: string): unknown {
    const slot = ownSlot(this.root, name);
    const found = slot.found ? slot.value : this.delegate?.(this.root, name);
    if (!slot.found && found === undefined)
      throw new RpcExecutionError('ERR_RPC_UNKNOWN_FUNCTION', `the index '${name}' does not exist`);
    return found;
  }

  /** E: the slot named on its environment (own slots, class methods, then the delegate). */
  private method(self: unknown, name: string): unknown {
    const found = methodOf(self, name) ?? this.delegate?.(self, name);
    if (found === undefined) {
      throw new RpcExecutionError(
        'ERR_RPC_NOT_CALLABLE',
        `A function was not returned while processing ${name}: the index '${name}' does not exist`,
      );
    }
    return found;
  }

  private checkIdentifier(identifier: number): void {
    if (identifier === Identifier.current) return;
    if (identifier === Identifier.legacy && this.options.acceptLegacyIdentifier) return;
    throw new RpcExecutionError(
      'ERR_RPC_IGNORED',
      `identifier 0x${identifier.toString(16).padStart(8, '0')} is ignored (LibRPC since v1.6 beta5 runs only 0x40000001${this.options.acceptLegacyIdentifier ? ', and here 0x40000000' : ''})`,
    );
  }

  /** Evaluates one value (running nested calls). */
  evaluate(value: RpcValue): unknown {
    const v = value;
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
        return this.get(this.evaluateArgs(v.path, 0));
    }
  }

  /**
   * Runs a call node in the plugin's order: F looks its name up before its arguments, E after its
   * first; G/D check the callee right after it; whether the slot found is a function is checked
   * when it is called, after the arguments.
   */
  private call(c: RpcCall): unknown {
    if (!isNamedCall(c)) {
      const fn = this.callable(this.evaluate(c.callee), 'callee');
      const args = this.evaluateArgs(c.args, 0);
      if (c.tag === 'G') return this.invoke(fn, this.root, args, 'callee');
      if (args.length === 0)
        throw new RpcExecutionError('ERR_RPC_NO_ENVIRONMENT', 'a D call needs its environment');
      return this.invoke(fn, args[0], args.slice(1), 'callee');
    }
    if (c.tag === 'F') {
      const found = this.rootSlot(c.name);
      const args = this.evaluateArgs(c.args, 0);
      return this.invoke(this.callable(found, c.name), this.root, args, c.name);
    }
    // E: the environment is evaluated first, then the name is looked up on it (as the C++ does).
    if (c.args.length === 0)
      throw new RpcExecutionError('ERR_RPC_NO_ENVIRONMENT', 'an E call needs its environment');
    const env = this.evaluate(c.args[0]!);
    const found = this.method(env, c.name);
    const args = this.evaluateArgs(c.args, 1);
    return this.invoke(this.callable(found, c.name), env, args, c.name);
  }

  /** Evaluates arguments in order. */
  private evaluateArgs(args: readonly RpcValue[], from: number): unknown[] {
    const out: unknown[] = [];
    for (let i = from; i < args.length; i++) out.push(this.evaluate(args[i]!));
    return out;
  }

  private callable(value: unknown, what: string): Function {
    if (typeof value !== 'function') {
      throw new RpcExecutionError(
        'ERR_RPC_NOT_CALLABLE',
        `A function was not returned while processing ${what} (attempt to call '${squirrelTypeName(value, this.root)}')`,
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
