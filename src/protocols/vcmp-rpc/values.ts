/**
 * VC-MP NPC LibRPC: the value model, constants and the fixed payloads declared with the wire core.
 *
 *   u32 LE identifier (0x40000001, or 0x40000000 for npc v1.6 beta..beta4)
 *   one call item:  tag | u32 BE size (bytes after this 5-byte header) | body
 *
 * Byte orders are mixed on purpose: the identifier, ints and floats are little-endian (native
 * x86 stores); every size and length is big-endian (the C++ swaps them).
 */
import { string, struct, t } from '../../wire/index.js';

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

const TAG_NAMES: Record<number, string> = Object.fromEntries(Object.entries(Tag).map(([k, v]) => [v, k]));

/** A tag byte as its letter, or as hex when it is not a LibRPC tag. */
export function tagName(tag: number): string {
  return TAG_NAMES[tag] ?? `0x${tag.toString(16).padStart(2, '0')}`;
}

export function isKnownTag(tag: number): boolean {
  return TAG_NAMES[tag] !== undefined;
}

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
