/**
 * Protocol packs: gamewire's own JSON description of RMC protocols (docs/rmc.md, "Protocol
 * packs"), written by `gamewire rmc ddl import` from a game's DDL and read back here.
 *
 * A pack is data only. `packProtocols` checks every part of it and turns it into `defineProtocol`
 * declarations through the same codecs the built-in protocols use (`list`, `map`, `struct`, …):
 * nothing in a pack becomes code. Names become object keys only after they pass `NAME_RE` (an
 * identifier, never `__proto__`), and the struct compiler quotes keys with JSON.stringify.
 */
import { readFileSync } from 'node:fs';
import { CommandError } from '../../../core/errors.js';
import {
  bytes,
  type Codec,
  custom,
  DeclarationError,
  DecodeError,
  EncodeError,
  ErrorCode,
  type Fields,
  type Json,
  struct,
  WireReader,
  WireWriter,
} from '../../../wire/index.js';
import { defineProtocol, type MethodSpec, type ProtocolDef } from '../signature.js';
import {
  type AnyDataHolder,
  anyDataHolder,
  bool,
  buffer16,
  buffer32,
  dateTime,
  double,
  float,
  i8,
  i16,
  i32,
  i64,
  list,
  map,
  qResult,
  qString,
  stationUrl,
  u8,
  u16,
  u32,
  u64,
  variant,
} from '../types.js';

const hexRest = bytes('rest');

/**
 * The DDL's `buffertail`: every byte left in what holds it (a structure inside an AnyDataHolder
 * reads to the holder's end; a method's last parameter to the message's end), as hex. Meaningful
 * only last; anywhere else the fields after it find no bytes, and the body stays hex.
 */
export const bufferTail = custom<Buffer>({
  name: 'rmc.BufferTail',
  description: 'every byte left in its structure (DDL buffertail)',
  read: (r) => Buffer.from(r.rest()),
  write: (w, v) => w.bytes(v),
  toJson: (v) => v.toString('hex'),
  fromJson: (j, path) => hexRest.fromJson(j, path),
});

export const PACK_FORMAT = 'gamewire-rmc-pack';
export const PACK_VERSION = 1;

/** The primitive type names of a pack, and the codec each stands for. */
export const PACK_PRIMITIVES: Readonly<Record<string, Codec<any>>> = Object.freeze({
  u8,
  i8,
  u16,
  i16,
  u32,
  i32,
  u64,
  i64,
  float,
  double,
  bool,
  qString,
  buffer16,
  buffer32,
  dateTime,
  qResult,
  variant,
  stationUrl,
  anyDataHolder,
  bufferTail,
});

/**
 * A type in a pack: a primitive's name, `{list}`, `{map}`, a class of the pack by name, or a DDL
 * type gamewire cannot encode (kept by name so nothing is lost; the method side that uses it is
 * opaque: hex only).
 */
export type PackType =
  | string
  | { list: PackType }
  | { map: [PackType, PackType] }
  | { class: string }
  | { unsupported: string };

export interface PackField {
  name: string;
  type: PackType;
}

export interface PackClass {
  /** The base class, whose fields come first on the wire; null for none. */
  base: string | null;
  fields: PackField[];
}

export interface PackMethod {
  name: string;
  /** Classic method id: 1 + the method's position in its DDL declaration. */
  id: number;
  args: PackField[];
  /** The return value (named `retval`) first, then the out parameters, in declaration order. */
  results: PackField[];
}

export interface PackProtocol {
  name: string;
  /** Classic protocol id (from the id mapping); null when the mapping gives none. */
  id: number | null;
  doc: string;
  methods: PackMethod[];
}

export interface PackProblem {
  /** What was not carried over: `unsupported-type`, `no-protocol-id`. */
  kind: 'unsupported-type' | 'no-protocol-id';
  /** The DDL element, e.g. `SecureConnectionProtocol::Register.vecMyURLs` or a protocol name. */
  element: string;
  detail: string;
}

export interface ProtocolPack {
  format: typeof PACK_FORMAT;
  version: typeof PACK_VERSION;
  /** The files it was imported from (informational). */
  sources: string[];
  types: Record<string, PackClass>;
  protocols: PackProtocol[];
  /** What the import could not carry over, each by name (also printed by the import). */
  problems: PackProblem[];
}

/** A pack that does not follow the schema, or declares something gamewire refuses. */
export class PackError extends CommandError {
  /** Where in the pack (`protocols[0].methods[2].args[1].type`); empty for the whole pack. */
  readonly path: string;
  readonly detail: string;
  constructor(path: string, detail: string, file?: string) {
    const where = [file, path].filter((x) => x !== undefined && x !== '').join(': ');
    super('ERR_RMC_PACK', `${where === '' ? '' : `${where}: `}${detail}`);
    this.path = path;
    this.detail = detail;
  }
  override get name(): string {
    return 'PackError';
  }
}

/** An identifier, as `defineProtocol` requires; `__proto__` and friends are refused too. */
export const NAME_RE = /^[A-Za-z_][A-Za-z0-9_]*$/;
const RESERVED = new Set(['__proto__', 'constructor', 'prototype']);
export const MAX_NAME_LENGTH = 128;
export const MAX_TYPE_DEPTH = 16;
const MAX_ITEMS = 100_000;

export function isSafeName(s: unknown): s is string {
  return typeof s === 'string' && s.length <= MAX_NAME_LENGTH && NAME_RE.test(s) && !RESERVED.has(s);
}

/** A short, printable form of an untrusted value for messages. */
export function show(v: unknown): string {
  let s: string;
  try {
    s = typeof v === 'string' ? v : (JSON.stringify(v) ?? String(v));
  } catch {
    s = typeof v; // a cycle, or too deep to print
  }
  const clean = s.replace(/[^\x20-\x7e]/g, '?');
  return JSON.stringify(clean.length > 60 ? `${clean.slice(0, 60)}…` : clean);
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function arrayAt(v: unknown, path: string): unknown[] {
  if (!Array.isArray(v)) throw new PackError(path, 'expected an array');
  if (v.length > MAX_ITEMS) throw new PackError(path, `more than ${MAX_ITEMS} items`);
  return v;
}

function nameAt(v: unknown, path: string): string {
  if (!isSafeName(v))
    throw new PackError(
      path,
      `${show(v)} is not a name (an identifier of at most ${MAX_NAME_LENGTH} characters)`,
    );
  return v;
}

function idAt(v: unknown, path: string, max: number): number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v > max)
    throw new PackError(path, `${show(v)} is not an id (an integer 0..${max})`);
  return v;
}

function checkType(v: unknown, path: string, depth: number): PackType {
  if (depth > MAX_TYPE_DEPTH) throw new PackError(path, `types nest deeper than ${MAX_TYPE_DEPTH}`);
  if (typeof v === 'string') {
    if (!Object.hasOwn(PACK_PRIMITIVES, v)) throw new PackError(path, `unknown type ${show(v)}`);
    return v;
  }
  if (!isRecord(v)) throw new PackError(path, 'a type is a name or an object');
  const keys = Object.keys(v);
  if (keys.length !== 1) throw new PackError(path, 'a type object has exactly one key');
  const k = keys[0]!;
  if (k === 'list') return { list: checkType(v.list, `${path}.list`, depth + 1) };
  if (k === 'map') {
    const kv = arrayAt(v.map, `${path}.map`);
    if (kv.length !== 2) throw new PackError(`${path}.map`, 'a map is [key, value]');
    return {
      map: [checkType(kv[0], `${path}.map[0]`, depth + 1), checkType(kv[1], `${path}.map[1]`, depth + 1)],
    };
  }
  if (k === 'class') return { class: nameAt(v.class, `${path}.class`) };
  if (k === 'unsupported') {
    if (typeof v.unsupported !== 'string' || v.unsupported.length > 256)
      throw new PackError(`${path}.unsupported`, 'expected the DDL type name');
    return { unsupported: v.unsupported };
  }
  throw new PackError(path, `unknown type kind ${show(k)}`);
}

function checkFields(v: unknown, path: string): PackField[] {
  const seen = new Set<string>();
  return arrayAt(v, path).map((f, i) => {
    const p = `${path}[${i}]`;
    if (!isRecord(f)) throw new PackError(p, 'a field is {name, type}');
    const name = nameAt(f.name, `${p}.name`);
    if (seen.has(name)) throw new PackError(`${p}.name`, `${name} is used twice`);
    seen.add(name);
    return { name, type: checkType(f.type, `${p}.type`, 0) };
  });
}

/** Checks arbitrary JSON against the pack schema. Throws PackError only. */
export function validatePack(json: unknown): ProtocolPack {
  if (!isRecord(json)) throw new PackError('', 'a protocol pack is a JSON object');
  if (json.format !== PACK_FORMAT) throw new PackError('format', `expected "${PACK_FORMAT}"`);
  if (json.version !== PACK_VERSION)
    throw new PackError(
      'version',
      `version ${JSON.stringify(json.version) ?? 'undefined'} is not supported (this gamewire reads ${PACK_VERSION})`,
    );
  const sources = arrayAt(json.sources ?? [], 'sources').map((s, i) => {
    if (typeof s !== 'string') throw new PackError(`sources[${i}]`, 'expected a string');
    return s;
  });
  if (!isRecord(json.types)) throw new PackError('types', 'expected an object of classes');
  const types: Record<string, PackClass> = Object.create(null);
  const typeNames = Object.keys(json.types);
  if (typeNames.length > MAX_ITEMS) throw new PackError('types', `more than ${MAX_ITEMS} classes`);
  for (const name of typeNames) {
    nameAt(name, `types[${show(name)}]`);
    const p = `types.${name}`;
    const c = json.types[name];
    if (!isRecord(c)) throw new PackError(p, 'a class is {base, fields}');
    const base = c.base === null || c.base === undefined ? null : nameAt(c.base, `${p}.base`);
    types[name] = { base, fields: checkFields(c.fields, `${p}.fields`) };
  }
  const protoNames = new Set<string>();
  const protoIds = new Set<number>();
  const protocols = arrayAt(json.protocols, 'protocols').map((pv, i): PackProtocol => {
    const p = `protocols[${i}]`;
    if (!isRecord(pv)) throw new PackError(p, 'a protocol is {name, id, doc, methods}');
    const name = nameAt(pv.name, `${p}.name`);
    if (protoNames.has(name)) throw new PackError(`${p}.name`, `protocol ${name} is declared twice`);
    protoNames.add(name);
    const id = pv.id === null || pv.id === undefined ? null : idAt(pv.id, `${p}.id`, 0xffff);
    if (id !== null) {
      if (protoIds.has(id)) throw new PackError(`${p}.id`, `protocol id ${id} is used twice`);
      protoIds.add(id);
    }
    const doc = typeof pv.doc === 'string' ? pv.doc.slice(0, 1000) : '';
    const methodNames = new Set<string>();
    const methodIds = new Set<number>();
    const methods = arrayAt(pv.methods, `${p}.methods`).map((mv, j): PackMethod => {
      const mp = `${p}.methods[${j}]`;
      if (!isRecord(mv)) throw new PackError(mp, 'a method is {name, id, args, results}');
      const mname = nameAt(mv.name, `${mp}.name`);
      if (methodNames.has(mname)) throw new PackError(`${mp}.name`, `method ${mname} is declared twice`);
      methodNames.add(mname);
      const mid = idAt(mv.id, `${mp}.id`, 0x7fff);
      if (methodIds.has(mid)) throw new PackError(`${mp}.id`, `method id ${mid} is used twice`);
      methodIds.add(mid);
      return {
        name: mname,
        id: mid,
        args: checkFields(mv.args, `${mp}.args`),
        results: checkFields(mv.results, `${mp}.results`),
      };
    });
    return { name, id, doc, methods };
  });
  const problems = arrayAt(json.problems ?? [], 'problems').map((x, i): PackProblem => {
    const p = `problems[${i}]`;
    if (!isRecord(x) || typeof x.element !== 'string' || typeof x.detail !== 'string')
      throw new PackError(p, 'a problem is {kind, element, detail}');
    if (x.kind !== 'unsupported-type' && x.kind !== 'no-protocol-id')
      throw new PackError(`${p}.kind`, `unknown kind ${show(x.kind)}`);
    return { kind: x.kind, element: x.element, detail: x.detail };
  });
  const pack: ProtocolPack = {
    format: PACK_FORMAT,
    version: PACK_VERSION,
    sources,
    types,
    protocols,
    problems,
  };
  checkClassGraph(pack);
  return pack;
}

/** How deep classes may nest (through bases and fields): a pack is untrusted. */
export const MAX_CLASS_DEPTH = 32;

/** The class names a type refers to. */
function classRefs(t: PackType, out: string[] = []): string[] {
  if (typeof t === 'string' || 'unsupported' in t) return out;
  if ('list' in t) classRefs(t.list, out);
  else if ('map' in t) {
    classRefs(t.map[0], out);
    classRefs(t.map[1], out);
  } else out.push(t.class);
  return out;
}

/**
 * Every referenced class exists, no class contains itself (through its base or its fields), and
 * classes nest at most MAX_CLASS_DEPTH deep.
 */
function checkClassGraph(pack: ProtocolPack): void {
  const state = new Map<string, 'visiting' | 'done'>();
  const visit = (name: string, path: string, depth: number): void => {
    const s = state.get(name);
    if (s === 'done') return;
    if (s === 'visiting') throw new PackError(path, `class ${name} contains itself`);
    if (depth > MAX_CLASS_DEPTH) throw new PackError(path, `classes nest deeper than ${MAX_CLASS_DEPTH}`);
    const c = Object.hasOwn(pack.types, name) ? pack.types[name] : undefined;
    if (c === undefined) throw new PackError(path, `class ${name} is not declared in types`);
    state.set(name, 'visiting');
    if (c.base !== null) visit(c.base, `types.${name}.base`, depth + 1);
    for (const [i, f] of c.fields.entries())
      for (const r of classRefs(f.type)) visit(r, `types.${name}.fields[${i}]`, depth + 1);
    state.set(name, 'done');
  };
  for (const name of Object.keys(pack.types)) visit(name, `types.${name}`, 0);
  for (const [i, p] of pack.protocols.entries())
    for (const [j, m] of p.methods.entries())
      for (const side of ['args', 'results'] as const)
        for (const [k, f] of m[side].entries())
          for (const r of classRefs(f.type)) visit(r, `protocols[${i}].methods[${j}].${side}[${k}]`, 0);
}

/** The DDL names of the unsupported types a list of fields uses (through classes too). */
export function unsupportedIn(pack: ProtocolPack, fields: readonly PackField[]): string[] {
  const out = new Set<string>();
  const seen = new Set<string>();
  const walk = (t: PackType): void => {
    if (typeof t === 'string') return;
    if ('unsupported' in t) out.add(t.unsupported);
    else if ('list' in t) walk(t.list);
    else if ('map' in t) {
      walk(t.map[0]);
      walk(t.map[1]);
    } else if (!seen.has(t.class)) {
      // Each class once: a class used many times (or a diamond of them) costs one walk.
      seen.add(t.class);
      for (const f of classFields(pack, t.class, pack.types[t.class]!)) walk(f.type);
    }
  };
  for (const f of fields) walk(f.type);
  return [...out];
}

/** A class's fields on the wire: its base's first (the graph was checked to be acyclic). */
function classFields(pack: ProtocolPack, name: string, c: PackClass): PackField[] {
  const own = c.fields;
  if (c.base === null) return own;
  const base = classFields(pack, c.base, pack.types[c.base]!);
  const names = new Set(base.map((f) => f.name));
  for (const f of own)
    if (names.has(f.name)) throw new PackError(`types.${name}`, `field ${f.name} is also in a base class`);
  return [...base, ...own];
}

/** An AnyDataHolder whose structure is a class of the pack: its fields by name. */
interface TypedHolder extends AnyDataHolder {
  /** The structure decoded by its class, when it is one and its bytes read back exactly. */
  value?: unknown;
}

/**
 * AnyDataHolder that knows the pack's classes: a holder naming one of them shows the structure's
 * fields (`{typeName, data: {…}}`) when they read its bytes exactly and write them back the same;
 * any other holder keeps its bytes as hex. The bytes are what is written either way, so the
 * round trip is exact. Nested holders read strictly smaller inputs, so recursion ends.
 */
function typedAnyDataHolder(classOf: (name: string) => Codec<any> | undefined): Codec<TypedHolder> {
  const structure = (typeName: string, data: Buffer): unknown => {
    const codec = classOf(typeName);
    if (codec === undefined) return undefined;
    try {
      const r = new WireReader(data);
      const value = codec.read(r);
      if (r.offset !== data.length) return undefined;
      const w = new WireWriter();
      codec.write(w, value);
      return w.toBuffer().equals(data) ? value : undefined;
    } catch (e) {
      if (e instanceof DecodeError || e instanceof EncodeError) return undefined;
      throw e;
    }
  };
  return custom<TypedHolder>({
    name: 'rmc.AnyDataHolder',
    description:
      "String typeName, u32 length+4, u32 length, then the structure (the pack's class of that name)",
    minSize: 10,
    read: (r) => {
      const h: TypedHolder = anyDataHolder.read(r);
      const value = structure(h.typeName, h.data);
      if (value !== undefined) h.value = value;
      return h;
    },
    write: (w, v) => anyDataHolder.write(w, v),
    toJson: (v) => {
      const codec = v.value === undefined ? undefined : classOf(v.typeName);
      return codec === undefined
        ? anyDataHolder.toJson(v)
        : { typeName: v.typeName, data: codec.toJson(v.value) as Json };
    },
    fromJson: (j, path) => {
      const o = j as Record<string, unknown> | null;
      if (typeof o === 'object' && o !== null && typeof o.data === 'object' && o.data !== null) {
        const at = (k: string) => (path === '' ? k : `${path}.${k}`);
        const typeName = qString.fromJson(o.typeName, at('typeName'));
        const codec = classOf(typeName);
        if (codec === undefined)
          throw new EncodeError(
            ErrorCode.BAD_INPUT,
            `${typeName} is no class of the pack: give data as hex`,
            at('data'),
          );
        const value = codec.fromJson(o.data, at('data'));
        const w = new WireWriter();
        codec.write(w, value);
        return { typeName, data: w.toBuffer(), value };
      }
      return anyDataHolder.fromJson(j, path);
    },
  });
}

/** Turns a checked pack into protocol declarations. Throws PackError only. */
export function packProtocols(pack: ProtocolPack): ProtocolDef[] {
  const classes = new Map<string, Codec<any>>();
  const holder = typedAnyDataHolder((name) =>
    Object.hasOwn(pack.types, name) ? codecOf({ class: name }) : undefined,
  );
  const codecOf = (t: PackType): Codec<any> => {
    if (t === 'anyDataHolder') return holder;
    if (typeof t === 'string') return PACK_PRIMITIVES[t]!;
    if ('list' in t) return list(codecOf(t.list));
    if ('map' in t) return map(codecOf(t.map[0]), codecOf(t.map[1]));
    // Unreachable: a side that uses an unsupported type is opaque (`side` below).
    if ('unsupported' in t) throw new PackError('', `${t.unsupported} cannot be encoded`);
    let c = classes.get(t.class);
    if (c === undefined) {
      c = struct(fieldsOf(classFields(pack, t.class, pack.types[t.class]!)));
      classes.set(t.class, c);
    }
    return c;
  };
  const fieldsOf = (fields: readonly PackField[]): Fields => {
    const out: Fields = Object.create(null);
    for (const f of fields) out[f.name] = codecOf(f.type);
    return out;
  };
  // An opaque side (it uses a type gamewire cannot encode): one field, its bytes as hex.
  const side = (fields: readonly PackField[]) =>
    unsupportedIn(pack, fields).length > 0 ? struct({ bytes: bytes('rest') }) : struct(fieldsOf(fields));
  return pack.protocols.map((p, i) => {
    try {
      const specs: Record<string, MethodSpec<any, any>> = Object.create(null);
      for (const m of p.methods) {
        const opaque = [...unsupportedIn(pack, m.args), ...unsupportedIn(pack, m.results)];
        specs[m.name] = {
          args: side(m.args),
          results: side(m.results),
          layout: 'inferred',
          doc:
            opaque.length === 0
              ? `from a protocol pack (${p.name})`
              : `from a protocol pack (${p.name}); uses ${opaque.join(', ')}, which gamewire cannot encode: bytes as hex`,
          id: m.id,
          secretFields: [],
        };
      }
      return defineProtocol(p.name, p.doc, specs, p.id === null ? {} : { id: p.id });
    } catch (e) {
      if (e instanceof PackError) throw e;
      if (e instanceof DeclarationError) throw new PackError(`protocols[${i}]`, e.message);
      throw e;
    }
  });
}

/** Reads, checks and declares the protocols of a pack file. Throws PackError (or a read error as CommandError). */
export function loadPackFile(file: string): ProtocolDef[] {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new CommandError('ERR_READ', `cannot read protocol pack ${file}: ${(err as Error).message}`);
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (err) {
    throw new PackError('', `not JSON: ${(err as Error).message}`, file);
  }
  try {
    return packProtocols(validatePack(json));
  } catch (e) {
    if (e instanceof PackError) throw new PackError(e.path, e.detail, file);
    throw e;
  }
}

/** The protocols of several packs (file names, an array or comma-separated), in order. */
export function loadPacks(files: string | readonly string[]): ProtocolDef[] {
  const list = typeof files === 'string' ? files.split(',') : files;
  const out: ProtocolDef[] = [];
  const names = new Set<string>();
  for (const f of list.map((x) => x.trim()).filter((x) => x !== '')) {
    for (const p of loadPackFile(f)) {
      if (names.has(p.name)) throw new PackError('', `protocol ${p.name} is in more than one pack`, f);
      names.add(p.name);
      out.push(p);
    }
  }
  return out;
}
