/**
 * A builder that reads like LibRPC's Squirrel API (see docs/vcmp-rpc.md):
 *
 *   const { F, RFC, Fa, RFCa, Z, S } = createRpc();
 *   RFC('print')('Hello');                               // bytes of ServerData print("Hello")
 *   RFC(F('compilestring')('print(500)'))();             // G: call what compilestring returns
 *   RFC('print')(F('format')('%d', 5));                  // a call used as an argument
 *   RFCa('len')('hello');                                // E: "hello".len()
 *
 * `F`/`Fa` return userdata (a call item, no identifier); `RFC`/`RFCa` return the whole packet's
 * bytes, ready for VC-MP's SendClientScriptData. A string callee gives F/E, userdata gives G/D.
 */
import { EncodeError, ErrorCode, WireWriter } from '../../wire/index.js';
import { encodeServerData } from './codec.js';
import type { RpcCall, RpcGet, RpcValue } from './messages.js';

/** Squirrel's Vector: encoded as `v` (three float32 LE). */
export class Vector {
  readonly x: number;
  readonly y: number;
  readonly z: number;

  constructor(x: number, y: number, z: number) {
    this.x = x;
    this.y = y;
    this.z = z;
  }
}

/** Squirrel's Quaternion: encoded as `q` (four float32 LE). */
export class Quaternion {
  readonly x: number;
  readonly y: number;
  readonly z: number;
  readonly w: number;

  constructor(x: number, y: number, z: number, w: number) {
    this.x = x;
    this.y = y;
    this.z = z;
    this.w = w;
  }
}

/** What `F`, `Fa` and `Z` return: a call or get item to pass on, like Squirrel userdata. */
export class Userdata {
  readonly item: RpcCall | RpcGet;

  constructor(item: RpcCall | RpcGet) {
    this.item = item;
  }
}

/** Forces a float where JavaScript cannot tell (`float(2)` is `2.0`, not the int 2). */
export class FloatArg {
  readonly value: number;

  constructor(value: number) {
    this.value = value;
  }
}

export function float(value: number): FloatArg {
  return new FloatArg(value);
}

/** An argument as a script would pass it. Numbers that are integers become `i`, others `f`. */
export type RpcArg =
  | null
  | undefined
  | boolean
  | number
  | string
  | Vector
  | Quaternion
  | FloatArg
  | Userdata
  | readonly RpcArg[];

/** The real builders measure strings with `strlen`: an embedded NUL ends the string there. */
function cString(s: string): string {
  const nul = s.indexOf('\0');
  return nul < 0 ? s : s.slice(0, nul);
}

/**
 * Converts a script-style argument to the wire value model. `cutAtNul` (default true) ends
 * strings at an embedded NUL, as the real builders do.
 */
export function toRpcValue(arg: RpcArg, path = 'arg', cutAtNul = true): RpcValue {
  if (arg === null || arg === undefined) return { type: 'null' };
  switch (typeof arg) {
    case 'boolean':
      return { type: 'bool', value: arg };
    case 'string':
      return { type: 'string', value: cutAtNul ? cString(arg) : arg };
    case 'number':
      return Number.isInteger(arg) && arg >= -(2 ** 31) && arg <= 2 ** 32 - 1
        ? { type: 'int', value: arg }
        : { type: 'float', value: arg };
  }
  if (Array.isArray(arg))
    return { type: 'array', items: arg.map((a, i) => toRpcValue(a, `${path}[${i}]`, cutAtNul)) };
  if (arg instanceof Userdata) return arg.item;
  if (arg instanceof Vector) return { type: 'vector', x: arg.x, y: arg.y, z: arg.z };
  if (arg instanceof Quaternion) return { type: 'quaternion', x: arg.x, y: arg.y, z: arg.z, w: arg.w };
  if (arg instanceof FloatArg) return { type: 'float', value: arg.value };
  // The plugin refuses tables, blobs and other instances the same way.
  throw new EncodeError(
    ErrorCode.BAD_INPUT,
    'Unknown type of parameter given (tables and class instances are not supported)',
    path,
  );
}

function callItem(
  callee: string | Userdata,
  args: readonly RpcArg[],
  withEnv: boolean,
  cutAtNul: boolean,
): RpcCall {
  const values = args.map((a, i) => toRpcValue(a, `args[${i}]`, cutAtNul));
  if (typeof callee === 'string')
    return {
      type: 'call',
      tag: withEnv ? 'E' : 'F',
      name: cutAtNul ? cString(callee) : callee,
      args: values,
    };
  if (callee instanceof Userdata)
    return { type: 'call', tag: withEnv ? 'D' : 'G', callee: callee.item, args: values };
  throw new EncodeError(ErrorCode.BAD_INPUT, 'the callee must be a function name or userdata from F/Fa/Z');
}

export interface RpcBuilderOptions {
  /** Write the v1.6 beta..beta4 identifier 0x40000000. */
  legacy?: boolean;
  /** Largest packet produced (default 4095). */
  maxPacketBytes?: number;
  /** Reuse one writer for every packet; each result is then a view valid until the next call. */
  reuseBuffer?: boolean;
  /**
   * End strings and names at an embedded NUL, as the real builders do (they measure with
   * `strlen`). Default true; false keeps every character.
   */
  cutStringsAtNul?: boolean;
  /** Deepest nesting produced (default 32, the decoder's default limit). */
  maxDepth?: number;
}

export interface RpcBuilder {
  /** `F(name)(…)`: userdata for a call by name (tag F); `F(ud)(…)`: call what ud returns (G). */
  F(callee: string | Userdata): (...args: RpcArg[]) => Userdata;
  /** `Fa(name)(env, …)`: a method call on env (E); `Fa(ud)(env, …)`: D. */
  Fa(callee: string | Userdata): (...args: RpcArg[]) => Userdata;
  /** `RFC(name|ud)(…)`: the ServerData bytes of the call. */
  RFC(callee: string | Userdata): (...args: RpcArg[]) => Buffer;
  /** `RFCa(name|ud)(env, …)`: the ServerData bytes of the method call. */
  RFCa(callee: string | Userdata): (...args: RpcArg[]) => Buffer;
  /** NPC side `Z(…)`: a server lookup used as a value (`Z("T","k")` is `::T.k`). */
  Z(...path: RpcArg[]): Userdata;
  /**
   * NPC side `S(key, value)` or `S(object, key, value)`: the ServerData bytes of a set. Like the
   * real builder, more values are accepted and sent; the server plugin uses the first two
   * (string key) or three and ignores the rest.
   */
  S(...values: RpcArg[]): Buffer;
}

export function createRpc(options: RpcBuilderOptions = {}): RpcBuilder {
  const writer = options.reuseBuffer === true ? new WireWriter({ initialCapacity: 512 }) : undefined;
  const cut = options.cutStringsAtNul !== false;
  const encodeOptions = {
    legacy: options.legacy === true,
    ...(options.maxDepth !== undefined ? { maxDepth: options.maxDepth } : {}),
    ...(options.maxPacketBytes !== undefined ? { maxPacketBytes: options.maxPacketBytes } : {}),
    ...(writer !== undefined ? { writer } : {}),
  };
  return {
    F:
      (callee) =>
      (...args) =>
        new Userdata(callItem(callee, args, false, cut)),
    Fa:
      (callee) =>
      (...args) =>
        new Userdata(callItem(callee, args, true, cut)),
    RFC:
      (callee) =>
      (...args) =>
        encodeServerData(callItem(callee, args, false, cut), encodeOptions),
    RFCa:
      (callee) =>
      (...args) =>
        encodeServerData(callItem(callee, args, true, cut), encodeOptions),
    Z: (...path) => new Userdata({ type: 'get', path: path.map((a, i) => toRpcValue(a, `path[${i}]`, cut)) }),
    S: (...values) => {
      if (values.length < 2) {
        throw new EncodeError(ErrorCode.BAD_INPUT, 'S takes (key, value) or (object, key, value)');
      }
      return encodeServerData(
        { type: 'set', values: values.map((a, i) => toRpcValue(a, `values[${i}]`, cut)) },
        encodeOptions,
      );
    },
  };
}
