/**
 * Reading LibRPC items: strict (reject anything malformed) and lenient (accept and fail exactly
 * where the real C++ reader of the stdrpc plugin accepts and fails).
 *
 * The lenient rules, each checked against the plugin's `ReadBuffer`/`CallFunctionAdvanced`:
 * - the top-level size is only an upper bound, compared in 32-bit arithmetic (`size + 5` wraps,
 *   so 0xfffffffb..0xffffffff pass), and the arguments run to the end of the packet;
 * - a nested call's u32 size is kept in a 16-bit variable to bound the nested item, then the
 *   nested item re-reads its full 32-bit size against that bound: any size ≥ 65536 fails;
 * - an array's u32 length is truncated to 16 bits (and stays truncated);
 * - an array whose length runs past its container pushes nothing, but the reader goes on with
 *   its element bytes as further values; as a call argument it still counts, so the call (and
 *   the packet) fails; inside another array the element is simply skipped;
 * - array elements are bounded by the container, not by the array's own end.
 *
 * A streaming read (`streaming: true`, used by the executor's streaming mode) does not throw on
 * malformed input after the top-level header: it records an `abort` marker where the real
 * reader stops, keeps every value read before it, and reads nothing after it. The executor then
 * runs the calls before the marker, as the plugin does while it reads, and fails at the marker.
 */
import { DecodeError, ErrorCode, type WireReader } from '../../wire/index.js';
import { type RpcCall, type RpcValue, Tag, type TopItem } from './values.js';

/** How strictly to read, and in which direction the packet travels. */
export interface ReadMode {
  /** Mimic the C++ reader's tolerance instead of rejecting. */
  lenient: boolean;
  /**
   * `server` (server→NPC): no `g`/`h`. `client` (NPC→server): `g` values and a top-level `h`
   * are allowed. `any`: accept both.
   */
  direction: 'server' | 'client' | 'any';
  /** Streaming read (implies lenient): malformed parts become an `abort` marker. */
  streaming?: StreamingState;
}

/** Per-read state of a streaming read. */
export interface StreamingState {
  aborted: boolean;
}

/** Marks where a streaming read stopped: the real reader fails here. */
export interface RpcAbort {
  type: 'abort';
  error: DecodeError;
}

/** A call argument the real plugin counts without pushing (an array overrunning its container). */
export interface RpcUnpushed {
  type: 'unpushed';
  offset: number;
}

/** What a streaming read may hold besides ordinary values. */
export type StreamedValue = RpcValue | RpcAbort | RpcUnpushed;

/** Returned by `readValue` in lenient mode for an array the C++ pushes nothing for. */
const UNPUSHED = Symbol('unpushed');

const TAG_NAMES: Record<number, string> = Object.fromEntries(Object.entries(Tag).map(([k, v]) => [v, k]));

export function tagName(tag: number): string {
  return TAG_NAMES[tag] ?? `0x${tag.toString(16).padStart(2, '0')}`;
}

export function isKnownTag(tag: number): boolean {
  return TAG_NAMES[tag] !== undefined;
}

function unknownTag(tag: number, at: number): DecodeError {
  return new DecodeError(ErrorCode.UNKNOWN_TYPE, `unknown item tag ${tagName(tag)}`, at);
}

function withPath(e: unknown, segment: string): unknown {
  return e instanceof DecodeError ? e.withPath(segment) : e;
}

/** Reads one tagged value (the public entry: an overrunning array is an error here). */
export function readValue(r: WireReader, mode: ReadMode): RpcValue {
  const at = r.offset;
  const v = readValueOrUnpushed(r, mode);
  if (v === UNPUSHED) throw overrunArgument(at);
  return v;
}

function overrunArgument(at: number): DecodeError {
  return new DecodeError(
    ErrorCode.BAD_LENGTH,
    "an array's length runs past its container: the real plugin counts this argument without pushing it, so the call fails",
    at,
  );
}

function readValueOrUnpushed(r: WireReader, mode: ReadMode): RpcValue | typeof UNPUSHED {
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
      return { type: 'string', value: r.string(r.u16be(), 'utf8', mode.lenient) };
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
      return readCall(r, tag, mode, false);
    case Tag.g:
      if (mode.direction === 'server') {
        throw new DecodeError(ErrorCode.UNKNOWN_TYPE, "item 'g' only travels NPC→server", at);
      }
      return { type: 'get', path: readSizedValues(r, mode, 'get', 'path') };
    default:
      throw unknownTag(tag, at);
  }
}

function readArray(r: WireReader, mode: ReadMode): RpcValue | typeof UNPUSHED {
  const at = r.offset;
  // The C++ keeps this u32 in a uint16_t: lenient mode truncates the same way.
  const n = mode.lenient ? r.u32be() & 0xffff : r.u32be();
  r.enter();
  const items: RpcValue[] = [];
  if (mode.lenient) {
    if (n > r.remaining) {
      r.leave();
      return UNPUSHED;
    }
    // Elements are checked against the container, not the array's own end.
    const stop = r.offset + n;
    while (r.offset < stop) {
      let v: RpcValue | typeof UNPUSHED;
      try {
        v = readValueOrUnpushed(r, mode);
      } catch (e) {
        if (mode.streaming === undefined || !(e instanceof DecodeError))
          throw withPath(e, `items[${items.length}]`);
        items.push(abortAt(mode.streaming, e.withPath(`items[${items.length}]`)));
        break;
      }
      // An overrunning array inside an array: nothing is pushed and nothing appended.
      if (v !== UNPUSHED) items.push(v);
      if (mode.streaming?.aborted === true) break;
    }
  } else {
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
        items.push(readValue(r, mode));
      } catch (e) {
        throw withPath(e, `items[${items.length}]`);
      }
    }
    r.restore(previous);
  }
  r.leave();
  return { type: 'array', items };
}

function abortAt(state: StreamingState, error: DecodeError): RpcValue {
  state.aborted = true;
  return { type: 'abort', error } as StreamedValue as RpcValue;
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

/**
 * Reads values up to the current bound. In lenient mode an overrunning array still counts as
 * an argument: the list is read on to its end (as the C++ does, running nested calls), then the
 * call fails.
 */
function readArgs(r: WireReader, mode: ReadMode, field: 'args' | 'values' | 'path'): RpcValue[] {
  const args: RpcValue[] = [];
  let unpushedAt = -1;
  while (r.offset < r.end) {
    const at = r.offset;
    let v: RpcValue | typeof UNPUSHED;
    try {
      v = readValueOrUnpushed(r, mode);
    } catch (e) {
      if (mode.streaming === undefined || !(e instanceof DecodeError))
        throw withPath(e, `${field}[${args.length}]`);
      args.push(abortAt(mode.streaming, e.withPath(`${field}[${args.length}]`)));
      return args;
    }
    if (v === UNPUSHED) {
      if (mode.streaming !== undefined) {
        args.push({ type: 'unpushed', offset: at } as StreamedValue as RpcValue);
      } else if (unpushedAt < 0) {
        unpushedAt = at;
      }
      continue;
    }
    args.push(v);
    if (mode.streaming?.aborted === true) return args;
  }
  if (unpushedAt >= 0) throw overrunArgument(unpushedAt).withPath(field);
  return args;
}

/**
 * Reads a call item after its tag. At top level in lenient mode the declared size is only an
 * upper bound and the arguments run to the end of the packet, as in the C++.
 */
function readCall(r: WireReader, tag: number, mode: ReadMode, topLevel: boolean): RpcCall {
  const at = r.offset - 1;
  const size = r.u32be();
  r.enter();
  let previous = -1;
  if (mode.lenient && topLevel) {
    // `funcStreamLen + 5 > size` in 32 bits, `size` counting from the tag to the packet end.
    if ((size + 5) >>> 0 > r.remaining + 5) r.fail(size, 'call item');
  } else if (mode.lenient) {
    // The enclosing reader bounds the item with the size cut to 16 bits; the item then re-reads
    // its full size against that bound and fails when they differ.
    const bound = size & 0xffff;
    if (bound > r.remaining) r.fail(bound, 'call item');
    if ((size + 5) >>> 0 > bound + 5) {
      throw new DecodeError(
        ErrorCode.BAD_LENGTH,
        `a nested call size of ${size} (≥ 65536) fails: the real plugin bounds the item with the size cut to 16 bits, then re-reads the full size`,
        at,
      );
    }
    previous = r.limit(bound, `call item at ${at}`);
  } else {
    previous = r.limit(size, `call item at ${at}`);
  }
  let call: RpcCall;
  if (tag === Tag.F || tag === Tag.E) {
    let name: string;
    try {
      name = r.string(r.u16be(), 'utf8', mode.lenient);
    } catch (e) {
      throw withPath(e, 'name');
    }
    call = { type: 'call', tag: tag === Tag.F ? 'F' : 'E', name, args: [] };
  } else {
    const calleeAt = r.offset;
    let callee: RpcValue | typeof UNPUSHED;
    try {
      callee = readValueOrUnpushed(r, mode);
    } catch (e) {
      if (mode.streaming === undefined || !(e instanceof DecodeError)) throw withPath(e, 'callee');
      callee = abortAt(mode.streaming, e.withPath('callee'));
    }
    if (callee === UNPUSHED || (!mode.lenient && callee.type !== 'call' && callee.type !== 'get')) {
      throw new DecodeError(
        ErrorCode.BAD_VALUE,
        'the callee of a G/D call must be a call item',
        calleeAt,
        'callee',
      );
    }
    call = { type: 'call', tag: tag === Tag.G ? 'G' : 'D', callee, args: [] };
  }
  call.args = mode.streaming?.aborted === true ? [] : readArgs(r, mode, 'args');
  if (!mode.lenient && (call.tag === 'E' || call.tag === 'D') && call.args.length === 0) {
    throw new DecodeError(
      ErrorCode.BAD_VALUE,
      `an ${call.tag} call needs its environment as first argument`,
      at,
    );
  }
  if (previous >= 0 && mode.streaming?.aborted !== true) r.restore(previous);
  r.leave();
  return call;
}

/** Reads the one top-level item of a ServerData (a call, or NPC→server a set). */
export function readTopItem(r: WireReader, mode: ReadMode): TopItem {
  const at = r.offset;
  const tag = r.u8();
  if (tag === Tag.F || tag === Tag.G || tag === Tag.E || tag === Tag.D) return readCall(r, tag, mode, true);
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
