/**
 * Reading LibRPC items. Strict reading (here) rejects anything malformed with a typed error.
 * Lenient reading (lenient.ts) accepts and fails exactly where the real C++ reader of the stdrpc
 * plugin does, by replaying its operations on a model of the Squirrel stack; `readTopItem` and
 * `readValue` dispatch on the mode.
 */
import { DecodeError, ErrorCode, type WireReader } from '../../wire/index.js';
import { type ReadMode, readTopLenient, readValueLenient } from './lenient.js';
import { isKnownTag, type RpcCall, type RpcValue, Tag, type TopItem, tagName } from './values.js';

export type { ReadMode } from './lenient.js';

function unknownTag(tag: number, at: number): DecodeError {
  return new DecodeError(ErrorCode.UNKNOWN_TYPE, `unknown item tag ${tagName(tag)}`, at);
}

function withPath(e: unknown, segment: string): unknown {
  return e instanceof DecodeError ? e.withPath(segment) : e;
}

/** Reads one tagged value. Lenient: on its own stack, so a value that pushes nothing is an error. */
export function readValue(r: WireReader, mode: ReadMode): RpcValue {
  return mode.lenient ? readValueLenient(r, mode) : readStrictValue(r, mode);
}

function readStrictValue(r: WireReader, mode: ReadMode): RpcValue {
  const at = r.offset;
  const tag = r.u8();
  switch (tag) {
    case Tag.o:
      return { type: 'null' };
    case Tag.i:
      return { type: 'int', value: r.i32le() };
    case Tag.f:
      return { type: 'float', value: r.f32le() };
    case Tag.b:
      return { type: 'bool', value: r.bool() };
    case Tag.s:
      return { type: 'string', value: r.string(r.u16be(), 'utf8') };
    case Tag.v:
      return { type: 'vector', x: r.f32le(), y: r.f32le(), z: r.f32le() };
    case Tag.q:
      return { type: 'quaternion', x: r.f32le(), y: r.f32le(), z: r.f32le(), w: r.f32le() };
    case Tag.a:
      return readArray(r, mode);
    case Tag.F:
    case Tag.G:
    case Tag.E:
    case Tag.D:
      return readCall(r, tag, mode);
    case Tag.g:
      if (mode.direction === 'server') {
        throw new DecodeError(ErrorCode.UNKNOWN_TYPE, "item 'g' only travels NPC→server", at);
      }
      return { type: 'get', path: readSizedValues(r, mode, 'get', 'path') };
    default:
      throw unknownTag(tag, at);
  }
}

function readArray(r: WireReader, mode: ReadMode): RpcValue {
  const at = r.offset;
  const n = r.u32be();
  r.enter();
  const items: RpcValue[] = [];
  const previous = r.limit(n, `array at ${at}`);
  while (r.offset < r.end) {
    if (items.length >= r.limits.maxArrayLength) {
      throw new DecodeError(
        ErrorCode.TOO_LARGE,
        `array exceeds ${r.limits.maxArrayLength} elements`,
        r.offset,
      );
    }
    try {
      items.push(readStrictValue(r, mode));
    } catch (e) {
      throw withPath(e, `items[${items.length}]`);
    }
  }
  r.restore(previous);
  r.leave();
  return { type: 'array', items };
}

/** Reads `u32 BE size` + values filling it (the bodies of `g` and `h`). */
function readSizedValues(r: WireReader, mode: ReadMode, what: string, field: 'path' | 'values'): RpcValue[] {
  const n = r.u32be();
  r.enter();
  const previous = r.limit(n, what);
  const values = readArgs(r, mode, field);
  r.restore(previous);
  r.leave();
  return values;
}

/** Reads values up to the current bound. */
function readArgs(r: WireReader, mode: ReadMode, field: 'args' | 'values' | 'path'): RpcValue[] {
  const args: RpcValue[] = [];
  while (r.offset < r.end) {
    try {
      args.push(readStrictValue(r, mode));
    } catch (e) {
      throw withPath(e, `${field}[${args.length}]`);
    }
  }
  return args;
}

/** Reads a call item after its tag, bounded by its declared size. */
function readCall(r: WireReader, tag: number, mode: ReadMode): RpcCall {
  const at = r.offset - 1;
  const size = r.u32be();
  r.enter();
  const previous = r.limit(size, `call item at ${at}`);
  let call: RpcCall;
  if (tag === Tag.F || tag === Tag.E) {
    let name: string;
    try {
      name = r.string(r.u16be(), 'utf8');
    } catch (e) {
      throw withPath(e, 'name');
    }
    call = { type: 'call', tag: tag === Tag.F ? 'F' : 'E', name, args: [] };
  } else {
    const calleeAt = r.offset;
    let callee: RpcValue;
    try {
      callee = readStrictValue(r, mode);
    } catch (e) {
      throw withPath(e, 'callee');
    }
    if (callee.type !== 'call' && callee.type !== 'get') {
      throw new DecodeError(
        ErrorCode.BAD_VALUE,
        'the callee of a G/D call must be a call item',
        calleeAt,
        'callee',
      );
    }
    call = { type: 'call', tag: tag === Tag.G ? 'G' : 'D', callee, args: [] };
  }
  call.args = readArgs(r, mode, 'args');
  if ((call.tag === 'E' || call.tag === 'D') && call.args.length === 0) {
    throw new DecodeError(
      ErrorCode.BAD_VALUE,
      `an ${call.tag} call needs its environment as first argument`,
      at,
    );
  }
  r.restore(previous);
  r.leave();
  return call;
}

/** Reads the one top-level item of a ServerData (a call, or NPC→server a set). */
export function readTopItem(r: WireReader, mode: ReadMode): TopItem {
  const at = r.offset;
  const tag = r.u8();
  if (mode.lenient) return readTopLenient(r, mode, tag, at);
  if (tag === Tag.F || tag === Tag.G || tag === Tag.E || tag === Tag.D) return readCall(r, tag, mode);
  if (tag === Tag.h) {
    if (mode.direction === 'server')
      throw new DecodeError(ErrorCode.UNKNOWN_TYPE, "item 'h' only travels NPC→server", at);
    return { type: 'set', values: readSizedValues(r, mode, 'set', 'values') };
  }
  if (isKnownTag(tag)) {
    throw new DecodeError(ErrorCode.BAD_VALUE, `a ServerData must hold a call item, not ${tagName(tag)}`, at);
  }
  throw unknownTag(tag, at);
}
