/**
 * VC-MP NPC LibRPC: ServerData packets (../shared/specs/vcmp-rpc.md).
 *
 *   u32 LE identifier (0x40000001, or 0x40000000 for npc v1.6 beta..beta4)
 *   one call item:  tag | u32 BE size (bytes after this 5-byte header) | body
 *
 * Byte orders are mixed on purpose: the identifier, ints and floats are little-endian (native
 * x86 stores); every size and length is big-endian (the C++ swaps them).
 *
 * The fixed parts are declared with the wire core; the tag-dispatched, recursive value items are
 * hand-written behind the same Codec interface, because their bounds rules differ between the
 * strict reader and the `lenient` one that mimics the C++ plugin.
 */
import {
  badInput,
  Codec,
  type CodecInfo,
  DecodeError,
  EncodeError,
  ErrorCode,
  enumOf,
  floatFromJson,
  floatToJson,
  type Json,
  message,
  string,
  struct,
  t,
  type WireReader,
  type WireWriter,
} from '../../wire/index.js';

/** The two stream identifiers, as u32 values (written little-endian). */
export const Identifier = { current: 0x40000001, legacy: 0x40000000 } as const;

/** Largest ServerData we produce or accept by default (the Squirrel Stream buffer is 4096). */
export const MAX_PACKET_BYTES = 4095;
/** Default nesting limit for calls in calls and arrays in arrays. */
export const MAX_DEPTH = 32;

/** Item tags (one ASCII byte each). */
export const Tag = {
  F: 0x46,
  G: 0x47,
  E: 0x45,
  D: 0x44,
  h: 0x68,
  g: 0x67,
  o: 0x6f,
  i: 0x69,
  f: 0x66,
  b: 0x62,
  s: 0x73,
  v: 0x76,
  q: 0x71,
  a: 0x61,
} as const;

// ---- declared payloads ------------------------------------------------------------------------

/** Function names and `s` values: u16 BE length, then the bytes (no NUL). */
export const RpcString = string(t.u16be);
/** `v` payload: three float32 LE. */
export const VectorPayload = struct({ x: t.f32le, y: t.f32le, z: t.f32le });
/** `q` payload: four float32 LE. */
export const QuaternionPayload = struct({ x: t.f32le, y: t.f32le, z: t.f32le, w: t.f32le });

// ---- value model ------------------------------------------------------------------------------

export type CallTag = 'F' | 'G' | 'E' | 'D';

/** A call by name (`F`: root-table function; `E`: method of the first argument). */
export interface NamedCall {
  type: 'call';
  tag: 'F' | 'E';
  name: string;
  args: RpcValue[];
}

/** A call of whatever the nested `callee` item returns (`G`: this = root; `D`: this = first argument). */
export interface IndirectCall {
  type: 'call';
  tag: 'G' | 'D';
  callee: RpcValue;
  args: RpcValue[];
}

export type RpcCall = NamedCall | IndirectCall;

export function isNamedCall(call: RpcCall): call is NamedCall {
  return call.tag === 'F' || call.tag === 'E';
}

/** NPC→server `g` (Z): a lookup path; the first value names a root-table slot (string) or is the object. */
export interface RpcGet {
  type: 'get';
  path: RpcValue[];
}

/** NPC→server top-level `h` (S): `[key, value]` on the root table, or `[object, key, value]`. */
export interface RpcSet {
  type: 'set';
  values: RpcValue[];
}

export type RpcValue =
  | { type: 'null' }
  | { type: 'int'; value: number }
  | { type: 'float'; value: number }
  | { type: 'bool'; value: boolean }
  | { type: 'string'; value: string }
  | { type: 'vector'; x: number; y: number; z: number }
  | { type: 'quaternion'; x: number; y: number; z: number; w: number }
  | { type: 'array'; items: RpcValue[] }
  | RpcCall
  | RpcGet;

export type TopItem = RpcCall | RpcSet;

export interface ServerData {
  type: 'ServerData';
  identifier: number;
  item: TopItem;
}

// ---- reading ------------------------------------------------------------------------------------

/** How strictly to read, and in which direction the packet travels. */
export interface ReadMode {
  /** Mimic the C++ reader's tolerance instead of rejecting (spec §6). */
  lenient: boolean;
  /**
   * `server` (server→NPC): no `g`/`h`. `client` (NPC→server): `g` values and a top-level `h`
   * are allowed. `any`: accept both.
   */
  direction: 'server' | 'client' | 'any';
}

const TAG_NAMES: Record<number, string> = Object.fromEntries(Object.entries(Tag).map(([k, v]) => [v, k]));

function tagName(tag: number): string {
  return TAG_NAMES[tag] ?? `0x${tag.toString(16).padStart(2, '0')}`;
}

function unknownTag(tag: number, at: number): DecodeError {
  return new DecodeError(ErrorCode.UNKNOWN_TYPE, `unknown item tag ${tagName(tag)}`, at);
}

/**
 * Reads one tagged value. Returns undefined only in lenient mode, for an array whose declared
 * length runs past its container: the C++ reader then pushes nothing and goes on reading the
 * element bytes as further values (spec §6.2).
 */
export function readValue(r: WireReader, mode: ReadMode): RpcValue | undefined {
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
      return { type: 'get', path: readSizedValues(r, mode, 'get') };
    default:
      throw unknownTag(tag, at);
  }
}

function readArray(r: WireReader, mode: ReadMode): RpcValue | undefined {
  const at = r.offset;
  // The C++ keeps this u32 in a uint16_t (spec §6.1): lenient mode truncates the same way.
  const n = mode.lenient ? r.u32be() & 0xffff : r.u32be();
  r.enter();
  const items: RpcValue[] = [];
  if (mode.lenient) {
    if (n > r.remaining) {
      r.leave();
      return undefined;
    }
    // Elements are checked against the container, not the array's own end (spec §6.2).
    const stop = r.offset + n;
    while (r.offset < stop) {
      const v = readElement(r, mode, items.length);
      if (v !== undefined) items.push(v);
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
      items.push(readElement(r, mode, items.length)!);
    }
    r.restore(previous);
  }
  r.leave();
  return { type: 'array', items };
}

function readElement(r: WireReader, mode: ReadMode, i: number): RpcValue | undefined {
  try {
    return readValue(r, mode);
  } catch (e) {
    throw e instanceof DecodeError ? e.withPath(`items[${i}]`) : e;
  }
}

/** Reads `u32 BE size` + values filling it (the bodies of `g` and `h`). */
function readSizedValues(r: WireReader, mode: ReadMode, what: string): RpcValue[] {
  const n = r.u32be();
  r.enter();
  const previous = r.limit(n, what);
  const values = readArgs(r, mode, 'values');
  r.restore(previous);
  r.leave();
  return values;
}

function readArgs(r: WireReader, mode: ReadMode, field: 'args' | 'values'): RpcValue[] {
  const args: RpcValue[] = [];
  while (r.offset < r.end) {
    let v: RpcValue | undefined;
    try {
      v = readValue(r, mode);
    } catch (e) {
      throw e instanceof DecodeError ? e.withPath(`${field}[${args.length}]`) : e;
    }
    if (v !== undefined) args.push(v);
  }
  return args;
}

/**
 * Reads a call item after its tag. At top level in lenient mode the declared size is only an
 * upper bound and the arguments run to the end of the packet, as in the C++ (spec §3.2).
 */
function readCall(r: WireReader, tag: number, mode: ReadMode, topLevel: boolean): RpcCall {
  const at = r.offset - 1;
  let size = r.u32be();
  if (mode.lenient && !topLevel) size &= 0xffff; // uint16_t subfunctionStreamLen (spec §6.1)
  r.enter();
  let previous = -1;
  if (mode.lenient && topLevel) {
    if (size > r.remaining) r.fail(size, 'call item');
  } else {
    previous = r.limit(size, `call item at ${at}`);
  }
  let call: RpcCall;
  if (tag === Tag.F || tag === Tag.E) {
    let name: string;
    try {
      name = r.string(r.u16be(), 'utf8', mode.lenient);
    } catch (e) {
      throw e instanceof DecodeError ? e.withPath('name') : e;
    }
    call = { type: 'call', tag: tag === Tag.F ? 'F' : 'E', name, args: [] };
  } else {
    const calleeAt = r.offset;
    let callee: RpcValue | undefined;
    try {
      callee = readValue(r, mode);
    } catch (e) {
      throw e instanceof DecodeError ? e.withPath('callee') : e;
    }
    if (callee === undefined || (!mode.lenient && callee.type !== 'call' && callee.type !== 'get')) {
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
  if (!mode.lenient && (call.tag === 'E' || call.tag === 'D') && call.args.length === 0) {
    throw new DecodeError(
      ErrorCode.BAD_VALUE,
      `an ${call.tag} call needs its environment as first argument`,
      at,
    );
  }
  if (previous >= 0) r.restore(previous);
  r.leave();
  return call;
}

function readTopItem(r: WireReader, mode: ReadMode): TopItem {
  const at = r.offset;
  const tag = r.u8();
  if (tag === Tag.F || tag === Tag.G || tag === Tag.E || tag === Tag.D) return readCall(r, tag, mode, true);
  if (tag === Tag.h) {
    if (mode.direction === 'server')
      throw new DecodeError(ErrorCode.UNKNOWN_TYPE, "item 'h' only travels NPC→server", at);
    return { type: 'set', values: readSizedValues(r, mode, 'set') };
  }
  if (TAG_NAMES[tag] !== undefined) {
    throw new DecodeError(ErrorCode.BAD_VALUE, `a ServerData must hold a call item, not ${tagName(tag)}`, at);
  }
  throw unknownTag(tag, at);
}

// ---- writing ------------------------------------------------------------------------------------

const INT_MIN = -(2 ** 31);
const UINT_MAX = 2 ** 32 - 1;

function writeSizedBody(w: WireWriter, tag: number, body: () => void): void {
  w.u8(tag);
  const at = w.reserve(4);
  body();
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

export function writeValue(w: WireWriter, v: RpcValue): void {
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
      writeSizedBody(w, Tag.a, () => {
        for (const item of v.items) writeValue(w, item);
      });
      return;
    case 'call':
      writeCall(w, v);
      return;
    case 'get':
      writeSizedBody(w, Tag.g, () => {
        for (const item of v.path) writeValue(w, item);
      });
      return;
    default:
      throw new EncodeError(
        ErrorCode.BAD_INPUT,
        `unknown value type ${String((v as { type: unknown }).type)}`,
      );
  }
}

export function writeCall(w: WireWriter, call: RpcCall): void {
  w.u8(Tag[call.tag]);
  const at = w.reserve(4);
  if (isNamedCall(call)) writeString(w, call.name);
  else writeValue(w, call.callee);
  for (const a of call.args) writeValue(w, a);
  w.patchU32be(at, w.offset - at - 4);
}

function writeTopItem(w: WireWriter, item: TopItem): void {
  if (item.type === 'set') {
    writeSizedBody(w, Tag.h, () => {
      for (const v of item.values) writeValue(w, v);
    });
  } else {
    writeCall(w, item);
  }
}

// ---- JSON (the CLI form is the value model itself; only floats and shape checks need care) ----

function valueToJson(v: RpcValue): Json {
  switch (v.type) {
    case 'float':
      return { type: 'float', value: floatToJson(v.value) };
    case 'vector':
      return { type: 'vector', x: floatToJson(v.x), y: floatToJson(v.y), z: floatToJson(v.z) };
    case 'quaternion':
      return {
        type: 'quaternion',
        x: floatToJson(v.x),
        y: floatToJson(v.y),
        z: floatToJson(v.z),
        w: floatToJson(v.w),
      };
    case 'array':
      return { type: 'array', items: v.items.map(valueToJson) };
    case 'get':
      return { type: 'get', path: v.path.map(valueToJson) };
    case 'call':
      return callToJson(v);
    default:
      return v as Json;
  }
}

function callToJson(c: RpcCall): Json {
  return isNamedCall(c)
    ? { type: 'call', tag: c.tag, name: c.name, args: c.args.map(valueToJson) }
    : { type: 'call', tag: c.tag, callee: valueToJson(c.callee), args: c.args.map(valueToJson) };
}

type JsonObject = Record<string, unknown>;

function objectAt(j: unknown, path: string, keys: readonly string[]): JsonObject {
  if (typeof j !== 'object' || j === null || Array.isArray(j)) throw badInput(path, 'expected an object');
  for (const k of Object.keys(j)) {
    if (!keys.includes(k)) throw badInput(`${path}.${k}`, 'unknown field');
  }
  for (const k of keys) {
    if (!Object.hasOwn(j, k)) throw badInput(`${path}.${k}`, 'missing field');
  }
  return j as JsonObject;
}

function listAt(j: unknown, path: string): unknown[] {
  if (!Array.isArray(j)) throw badInput(path, 'expected an array');
  return j;
}

function valueFromJson(j: unknown, path: string): RpcValue {
  const type = typeof j === 'object' && j !== null ? (j as JsonObject).type : undefined;
  switch (type) {
    case 'null':
      objectAt(j, path, ['type']);
      return { type: 'null' };
    case 'int':
      return { type: 'int', value: intIn(objectAt(j, path, ['type', 'value']), path) };
    case 'float':
      return {
        type: 'float',
        value: floatFromJson(objectAt(j, path, ['type', 'value']).value, `${path}.value`),
      };
    case 'bool': {
      const o = objectAt(j, path, ['type', 'value']);
      return { type: 'bool', value: t.bool.fromJson(o.value, `${path}.value`) };
    }
    case 'string': {
      const o = objectAt(j, path, ['type', 'value']);
      if (typeof o.value !== 'string') throw badInput(`${path}.value`, 'expected a string');
      return { type: 'string', value: o.value };
    }
    case 'vector': {
      const o = objectAt(j, path, ['type', 'x', 'y', 'z']);
      return {
        type: 'vector',
        x: floatFromJson(o.x, `${path}.x`),
        y: floatFromJson(o.y, `${path}.y`),
        z: floatFromJson(o.z, `${path}.z`),
      };
    }
    case 'quaternion': {
      const o = objectAt(j, path, ['type', 'x', 'y', 'z', 'w']);
      return {
        type: 'quaternion',
        x: floatFromJson(o.x, `${path}.x`),
        y: floatFromJson(o.y, `${path}.y`),
        z: floatFromJson(o.z, `${path}.z`),
        w: floatFromJson(o.w, `${path}.w`),
      };
    }
    case 'array': {
      const o = objectAt(j, path, ['type', 'items']);
      return {
        type: 'array',
        items: listAt(o.items, `${path}.items`).map((x, i) => valueFromJson(x, `${path}.items[${i}]`)),
      };
    }
    case 'get': {
      const o = objectAt(j, path, ['type', 'path']);
      return {
        type: 'get',
        path: listAt(o.path, `${path}.path`).map((x, i) => valueFromJson(x, `${path}.path[${i}]`)),
      };
    }
    case 'call':
      return callFromJson(j, path);
    default:
      throw badInput(
        `${path}.type`,
        'expected one of null, int, float, bool, string, vector, quaternion, array, call, get',
      );
  }
}

function intIn(j: unknown, path: string): number {
  const v = (j as JsonObject).value;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < INT_MIN || v > UINT_MAX) {
    throw badInput(`${path}.value`, 'expected an integer in int32 or uint32 range');
  }
  return v;
}

function callFromJson(j: unknown, path: string): RpcCall {
  const tag = (j as JsonObject).tag;
  if (tag === 'F' || tag === 'E') {
    const o = objectAt(j, path, ['type', 'tag', 'name', 'args']);
    if (typeof o.name !== 'string') throw badInput(`${path}.name`, 'expected a string');
    return { type: 'call', tag, name: o.name, args: argsFromJson(o.args, `${path}.args`) };
  }
  if (tag === 'G' || tag === 'D') {
    const o = objectAt(j, path, ['type', 'tag', 'callee', 'args']);
    return {
      type: 'call',
      tag,
      callee: valueFromJson(o.callee, `${path}.callee`),
      args: argsFromJson(o.args, `${path}.args`),
    };
  }
  throw badInput(`${path}.tag`, 'expected F, G, E or D');
}

function argsFromJson(j: unknown, path: string): RpcValue[] {
  return listAt(j, path).map((x, i) => valueFromJson(x, `${path}[${i}]`));
}

function topFromJson(j: unknown, path: string): TopItem {
  if (typeof j === 'object' && j !== null && (j as JsonObject).type === 'set') {
    const o = objectAt(j, path, ['type', 'values']);
    return { type: 'set', values: argsFromJson(o.values, `${path}.values`) };
  }
  const v = valueFromJson(j, path);
  if (v.type !== 'call') throw badInput(`${path}.type`, 'a ServerData item is a call or a set');
  return v;
}

// ---- the ServerData codec -------------------------------------------------------------------------

export const IdentifierCodec = enumOf(t.u32le, Identifier);

/** The top-level item as a Codec (hand-written: recursive, tag-dispatched, mode-dependent). */
class TopItemCodec extends Codec<TopItem> {
  readonly info: CodecInfo = {
    kind: 'custom',
    name: 'vcmp-rpc.item',
    description:
      "tag 'F'|'E' (u32 BE size, u16 BE name length, name, values) or 'G'|'D' (u32 BE size, nested call item, values); NPC→server also 'h' (u32 BE size, values). Values: 'o', 'i' i32 LE, 'f' f32 LE, 'b' 0|1, 's' u16 BE length + bytes, 'v' 3×f32 LE, 'q' 4×f32 LE, 'a' u32 BE byte length + values, nested call items, and NPC→server 'g' (u32 BE size, values)",
  };
  private readonly mode: ReadMode;

  constructor(mode: ReadMode) {
    super();
    this.mode = mode;
    this.minSize = 5;
  }

  read(r: WireReader): TopItem {
    return readTopItem(r, this.mode);
  }

  write(w: WireWriter, value: TopItem): void {
    writeTopItem(w, value);
  }

  toJson(value: TopItem): Json {
    return value.type === 'set' ? { type: 'set', values: value.values.map(valueToJson) } : callToJson(value);
  }

  fromJson(json: unknown, path: string): TopItem {
    return topFromJson(json, path);
  }
}

function serverDataCodec(mode: ReadMode) {
  return message('ServerData', { identifier: IdentifierCodec, item: new TopItemCodec(mode) });
}

/** Codecs for each reading mode (writing is the same for all). */
export const ServerDataCodecs = {
  strict: {
    any: serverDataCodec({ lenient: false, direction: 'any' }),
    server: serverDataCodec({ lenient: false, direction: 'server' }),
    client: serverDataCodec({ lenient: false, direction: 'client' }),
  },
  lenient: {
    any: serverDataCodec({ lenient: true, direction: 'any' }),
    server: serverDataCodec({ lenient: true, direction: 'server' }),
    client: serverDataCodec({ lenient: true, direction: 'client' }),
  },
} as const;

/** The default declaration, for introspection and for encoding. */
export const ServerDataCodec = ServerDataCodecs.strict.any;
