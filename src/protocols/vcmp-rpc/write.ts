/**
 * Writing LibRPC items. The writer counts nesting the way the reader does (every call, array,
 * `g` and `h` body is one level), so it never produces a packet its own decoder refuses as too
 * deep.
 */
import { EncodeError, ErrorCode, type WireWriter } from '../../wire/index.js';
import {
  isNamedCall,
  MAX_DEPTH,
  QuaternionPayload,
  type RpcCall,
  type RpcValue,
  Tag,
  type TopItem,
  VectorPayload,
} from './values.js';

const INT_MIN = -(2 ** 31);
const UINT_MAX = 2 ** 32 - 1;

/** One write's nesting budget. */
interface Depth {
  max: number;
  now: number;
}

function enter(d: Depth): void {
  if (++d.now > d.max) {
    throw new EncodeError(
      ErrorCode.TOO_DEEP,
      `nesting deeper than ${d.max}: the decoder would refuse this packet (raise maxDepth on both sides)`,
    );
  }
}

function writeSizedValues(w: WireWriter, tag: number, values: readonly RpcValue[], d: Depth): void {
  w.u8(tag);
  const at = w.reserve(4);
  enter(d);
  for (const v of values) writeValueAt(w, v, d);
  d.now--;
  w.patchU32be(at, w.offset - at - 4);
}

function writeString(w: WireWriter, s: string): void {
  const at = w.reserve(2);
  const n = w.string(s, 'utf8');
  if (n > 0xffff) {
    w.offset = at;
    throw new EncodeError(ErrorCode.TOO_LARGE, `string of ${n} bytes exceeds 65535`);
  }
  w.patchU16be(at, n);
}

function writeValueAt(w: WireWriter, v: RpcValue, d: Depth): void {
  switch (v.type) {
    case 'null':
      w.u8(Tag.o);
      return;
    case 'int':
      if (!Number.isInteger(v.value) || v.value < INT_MIN || v.value > UINT_MAX) {
        throw new EncodeError(ErrorCode.BAD_INPUT, `int ${v.value} is not an int32 or uint32`);
      }
      w.u8(Tag.i);
      w.i32le(v.value | 0);
      return;
    case 'float':
      w.u8(Tag.f);
      w.f32le(v.value);
      return;
    case 'bool':
      w.u8(Tag.b);
      w.bool(v.value);
      return;
    case 'string':
      w.u8(Tag.s);
      writeString(w, v.value);
      return;
    case 'vector':
      w.u8(Tag.v);
      VectorPayload.write(w, v);
      return;
    case 'quaternion':
      w.u8(Tag.q);
      QuaternionPayload.write(w, v);
      return;
    case 'array':
      writeSizedValues(w, Tag.a, v.items, d);
      return;
    case 'call':
      writeCallAt(w, v, d);
      return;
    case 'get':
      writeSizedValues(w, Tag.g, v.path, d);
      return;
    default:
      throw new EncodeError(
        ErrorCode.BAD_INPUT,
        `unknown value type ${String((v as { type: unknown }).type)}`,
      );
  }
}

function writeCallAt(w: WireWriter, call: RpcCall, d: Depth): void {
  w.u8(Tag[call.tag]);
  const at = w.reserve(4);
  enter(d);
  if (isNamedCall(call)) writeString(w, call.name);
  else writeValueAt(w, call.callee, d);
  for (const a of call.args) writeValueAt(w, a, d);
  d.now--;
  w.patchU32be(at, w.offset - at - 4);
}

/** Writes one value; `maxDepth` (default 32) is the decoder's nesting limit. */
export function writeValue(w: WireWriter, v: RpcValue, maxDepth = MAX_DEPTH): void {
  writeValueAt(w, v, { max: maxDepth, now: 0 });
}

/** Writes one call item (tag, size, body). */
export function writeCall(w: WireWriter, call: RpcCall, maxDepth = MAX_DEPTH): void {
  writeCallAt(w, call, { max: maxDepth, now: 0 });
}

/** Writes the top-level item of a ServerData. */
export function writeTopItem(w: WireWriter, item: TopItem, maxDepth = MAX_DEPTH): void {
  const d = { max: maxDepth, now: 0 };
  if (item.type === 'set') writeSizedValues(w, Tag.h, item.values, d);
  else writeCallAt(w, item, d);
}
