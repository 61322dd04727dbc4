/**
 * `gamewire rmc ddl import`: a game's DDL, dumped as JSON in the form 5th-echelon publishes for
 * Splinter Cell: Blacklist (a `Namespace` of `DDLUnitDeclaration`, `ClassDeclaration`,
 * `TemplateInstance`, `ProtocolDeclaration`…), to a protocol pack (pack.ts).
 *
 * The input is untrusted: every element is checked, names must be identifiers, types nest at most
 * MAX_TYPE_DEPTH deep, and a malformed element is a DdlError naming it. A type gamewire cannot
 * encode, and a protocol the id mapping gives no id, are kept and reported (`problems`), never
 * dropped.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { basename, join } from 'node:path';
import { CommandError } from '../../../core/errors.js';
import {
  isSafeName,
  MAX_NAME_LENGTH,
  MAX_TYPE_DEPTH,
  PACK_FORMAT,
  PACK_VERSION,
  type PackClass,
  PackError,
  type PackField,
  type PackMethod,
  type PackProblem,
  type PackProtocol,
  type PackType,
  type ProtocolPack,
  show,
  validatePack,
} from './pack.js';

/** A DDL dump gamewire refuses: the element it is about, and why. */
export class DdlError extends CommandError {
  /** The element: `file: Protocol::Method.param`, `file: class Name`, … */
  readonly element: string;
  constructor(element: string, detail: string) {
    super('ERR_RMC_DDL', `${element}: ${detail}`);
    this.element = element;
  }
  override get name(): string {
    return 'DdlError';
  }
}

/** The DDL's simple types gamewire encodes, and the pack type each becomes. */
const SIMPLE: Readonly<Record<string, string>> = Object.freeze({
  bool: 'bool',
  byte: 'u8',
  int8: 'i8',
  uint8: 'u8',
  int16: 'i16',
  uint16: 'u16',
  int32: 'i32',
  uint32: 'u32',
  int64: 'i64',
  uint64: 'u64',
  float: 'float',
  double: 'double',
  string: 'qString',
  // NEX naming: `buffer` has a u32 length, `qBuffer` a u16 one (docs/rmc.md, "Buffer, qBuffer").
  buffer: 'buffer32',
  qBuffer: 'buffer16',
  datetime: 'dateTime',
  qresult: 'qResult',
  variant: 'variant',
  stationurl: 'stationUrl',
  // Every byte left in what holds it (DynamicData's body in SC:BL's ProtocolFoundation).
  buffertail: 'bufferTail',
});

/** Simple types the DDL declares that gamewire does not encode (yet): kept and reported. */
const NOT_ENCODED = new Set(['real', 'char', 'char16', 'char8', 'cstr']);

/** The DDL's list templates; all are a u32 count and the items. */
const LISTS = new Set(['std_list', 'qlist', 'qvector', 'qqueue']);
const KNOWN_TEMPLATES = new Set([...LISTS, 'std_map', 'any']);

/** Quazal's root class has no fields; a dump that does not declare it still derives from it. */
const ROOT_CLASS = 'Data';

const MAX_FILE_BYTES = 64 * 1024 * 1024;
const MAX_NAMESPACE_DEPTH = 8;

type Obj = Record<string, unknown>;

function isObj(v: unknown): v is Obj {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

export interface DdlDocument {
  /** File name, for messages. */
  file: string;
  json: unknown;
}

export interface ImportOptions {
  /** Protocol name -> classic protocol id (5th-echelon's `sc_bl_mapping.json`). */
  ids?: Record<string, number>;
}

interface RawClass {
  file: string;
  name: string;
  base: string | null;
  variables: { name: string; type: unknown; element: string }[];
}

interface RawProtocol {
  file: string;
  name: string;
  id: unknown;
  namespace: string;
  methods: Obj[];
}

/** Checks a protocol-id mapping (`{"TicketGrantingProtocol": 10, …}`). Throws DdlError. */
export function checkIdMapping(json: unknown, file: string): Record<string, number> {
  if (!isObj(json) || '__class__' in json)
    throw new DdlError(file, 'an id mapping is a JSON object of protocol name -> id');
  const out: Record<string, number> = Object.create(null);
  for (const [k, v] of Object.entries(json)) {
    if (!isSafeName(k)) throw new DdlError(`${file}: ${show(k)}`, 'not a protocol name');
    if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v > 0xffff)
      throw new DdlError(`${file}: ${k}`, `id ${show(v)} is not a u16`);
    out[k] = v;
  }
  return out;
}

/** Is this parsed file an id mapping (an object of names to integers, no `__class__`)? */
function looksLikeMapping(json: unknown): boolean {
  return (
    isObj(json) &&
    !('__class__' in json) &&
    Object.values(json).length > 0 &&
    Object.values(json).every((v) => typeof v === 'number')
  );
}

function nameOf(v: unknown, element: string, what: string): string {
  if (typeof v === 'string' && v.length > MAX_NAME_LENGTH)
    throw new DdlError(element, `${what} is ${v.length} characters long (at most ${MAX_NAME_LENGTH})`);
  if (!isSafeName(v)) throw new DdlError(element, `${what} ${show(v)} is not an identifier`);
  return v;
}

function arrayOf(v: unknown, element: string, what: string): unknown[] {
  if (!Array.isArray(v)) throw new DdlError(element, `${what} is not an array`);
  return v;
}

/** Collects classes and protocols from one dump (namespaces nest: a unit holds a Namespace). */
function collect(doc: DdlDocument, classes: RawClass[], protocols: RawProtocol[]): void {
  const walk = (ns: unknown, element: string, depth: number): void => {
    if (depth > MAX_NAMESPACE_DEPTH)
      throw new DdlError(element, `namespaces nest deeper than ${MAX_NAMESPACE_DEPTH}`);
    if (!isObj(ns) || ns.__class__ !== 'Namespace')
      throw new DdlError(element, 'expected a Namespace {"__class__": "Namespace", "elements": […]}');
    arrayOf(ns.elements, element, 'elements').forEach((e, i) => {
      const at = `${element} elements[${i}]`;
      if (!isObj(e)) throw new DdlError(at, 'an element is an object');
      switch (e.__class__) {
        case 'DDLUnitDeclaration':
          if (e.elements !== undefined) walk(e.elements, `${doc.file}: unit ${show(e.name1)}`, depth + 1);
          return;
        case 'ClassDeclaration': {
          const name = nameOf(e.name1, at, 'class name');
          const where = `${doc.file}: class ${name}`;
          const base =
            e.maybe_base === '' || e.maybe_base === null || e.maybe_base === undefined
              ? null
              : nameOf(e.maybe_base, where, 'base class');
          const variables = arrayOf(e.variables ?? [], where, 'variables').map((v, j) => {
            const vat = `${where} variables[${j}]`;
            if (!isObj(v)) throw new DdlError(vat, 'a variable is an object');
            const vname = nameOf(v.name1, vat, 'variable name');
            return { name: vname, type: v.type, element: `${where}.${vname}` };
          });
          classes.push({ file: doc.file, name, base, variables });
          return;
        }
        case 'ProtocolDeclaration': {
          const name = nameOf(e.name1, at, 'protocol name');
          const where = `${doc.file}: protocol ${name}`;
          const methods = arrayOf(e.methods, where, 'methods').map((m, j) => {
            if (!isObj(m)) throw new DdlError(`${where} methods[${j}]`, 'a method is an object');
            return m;
          });
          protocols.push({
            file: doc.file,
            name,
            id: e._id,
            namespace: typeof e.namespace === 'string' ? e.namespace.slice(0, MAX_NAME_LENGTH) : '',
            methods,
          });
          return;
        }
        case 'TemplateInstance': {
          // An instance names a template the types below use; check it is one gamewire knows.
          if (typeof e.templ_name !== 'string' || !KNOWN_TEMPLATES.has(e.templ_name))
            throw new DdlError(`${at} (${show(e.name1)})`, `unknown template ${show(e.templ_name)}`);
          return;
        }
        // Declarations of the DDL's own vocabulary (its simple types, templates, class properties):
        // gamewire has its own list of them (SIMPLE, KNOWN_TEMPLATES).
        case 'SimpleDeclaration':
        case 'TemplateDeclaration':
        case 'PropertyDeclaration':
          return;
        default:
          throw new DdlError(at, `unknown element ${show(e.__class__)}`);
      }
    });
  };
  walk(doc.json, doc.file, 0);
}

/** Converts DDL types to pack types, recording what gamewire cannot encode. */
class TypeMapper {
  private readonly classes: ReadonlyMap<string, RawClass>;
  private readonly broken: ReadonlyMap<string, string>;
  private readonly problems: PackProblem[];

  constructor(
    classes: ReadonlyMap<string, RawClass>,
    broken: ReadonlyMap<string, string>,
    problems: PackProblem[],
  ) {
    this.classes = classes;
    this.broken = broken;
    this.problems = problems;
  }

  map(node: unknown, element: string, depth = 0): PackType {
    if (depth > MAX_TYPE_DEPTH) throw new DdlError(element, `types nest deeper than ${MAX_TYPE_DEPTH}`);
    if (!isObj(node)) throw new DdlError(element, 'a type is an object');
    switch (node.__class__) {
      case 'PType':
        return this.map(node.type, element, depth + 1);
      case 'SimpleType':
        return this.simple(node.name, element);
      case 'TemplateType': {
        const t = node.templ_name;
        const params = arrayOf(node.parameters, element, 'template parameters');
        if (typeof t !== 'string' || !KNOWN_TEMPLATES.has(t))
          throw new DdlError(element, `unknown template ${show(t)}`);
        const want = t === 'std_map' || t === 'any' ? 2 : 1;
        if (params.length !== want)
          throw new DdlError(element, `${t} takes ${want} parameter(s), not ${params.length}`);
        if (LISTS.has(t)) return { list: this.map(params[0], element, depth + 1) };
        if (t === 'std_map')
          return { map: [this.map(params[0], element, depth + 1), this.map(params[1], element, depth + 1)] };
        // any<Data,string>: Quazal's AnyDataHolder (a class name, then the object's bytes).
        const p0 = params[0];
        const p1 = params[1];
        if (isObj(p0) && isObj(p1) && p0.name === ROOT_CLASS && p1.name === 'string') return 'anyDataHolder';
        return this.unsupported(
          `any<${show(isObj(p0) ? p0.name : p0)},${show(isObj(p1) ? p1.name : p1)}>`,
          element,
          'only any<Data,string> (AnyDataHolder) is known',
        );
      }
      default:
        throw new DdlError(element, `unknown type node ${show(node.__class__)}`);
    }
  }

  private simple(name: unknown, element: string): PackType {
    if (typeof name !== 'string' || name.length === 0 || name.length > MAX_NAME_LENGTH)
      throw new DdlError(element, `type name ${show(name)} is empty or longer than ${MAX_NAME_LENGTH}`);
    const prim = Object.hasOwn(SIMPLE, name) ? SIMPLE[name] : undefined;
    if (prim !== undefined) return prim;
    if (NOT_ENCODED.has(name)) return this.unsupported(name, element, 'gamewire has no codec for it');
    const why = this.broken.get(name);
    if (why !== undefined) return this.unsupported(name, element, why);
    if (this.classes.has(name)) return { class: name };
    return this.unsupported(name, element, 'not declared in the imported DDL');
  }

  private unsupported(name: string, element: string, detail: string): PackType {
    this.problems.push({ kind: 'unsupported-type', element, detail: `${name}: ${detail}` });
    return { unsupported: name };
  }
}

/** Builds a protocol pack from parsed DDL dumps. Throws DdlError only. */
export function importDdl(docs: readonly DdlDocument[], options: ImportOptions = {}): ProtocolPack {
  const rawClasses: RawClass[] = [];
  const rawProtocols: RawProtocol[] = [];
  for (const doc of docs) collect(doc, rawClasses, rawProtocols);

  const classes = new Map<string, RawClass>();
  for (const c of rawClasses) {
    const prev = classes.get(c.name);
    if (prev !== undefined) {
      // The same class in two dumps is fine when both say the same.
      if (
        JSON.stringify(prev.variables.map((v) => [v.name, v.type])) !==
          JSON.stringify(c.variables.map((v) => [v.name, v.type])) ||
        prev.base !== c.base
      )
        throw new DdlError(`${c.file}: class ${c.name}`, `declared differently in ${prev.file}`);
      continue;
    }
    classes.set(c.name, c);
  }
  // Base classes: a cycle is an error; a base nobody declares makes the class unusable (reported).
  const broken = new Map<string, string>();
  for (const c of classes.values()) {
    const chain = [c.name];
    let cur: RawClass | undefined = c;
    while (cur?.base != null) {
      const base: string = cur.base;
      if (chain.includes(base))
        throw new DdlError(
          `${c.file}: class ${c.name}`,
          `base classes form a cycle: ${[...chain, base].join(' -> ')}`,
        );
      chain.push(base);
      const next = classes.get(base);
      if (next === undefined) {
        if (base !== ROOT_CLASS)
          broken.set(c.name, `its base class ${base} is not declared in the imported DDL`);
        break;
      }
      cur = next;
    }
  }

  const problems: PackProblem[] = [];
  const mapper = new TypeMapper(classes, broken, problems);
  const types: Record<string, PackClass> = Object.create(null);
  for (const c of classes.values()) {
    if (broken.has(c.name)) {
      problems.push({
        kind: 'unsupported-type',
        element: `${c.file}: class ${c.name}`,
        detail: `${c.name}: ${broken.get(c.name)}`,
      });
      continue;
    }
    const base = c.base === null || (c.base === ROOT_CLASS && !classes.has(ROOT_CLASS)) ? null : c.base;
    types[c.name] = {
      base,
      fields: c.variables.map((v) => ({ name: v.name, type: mapper.map(v.type, v.element) })),
    };
  }

  const ids = options.ids ?? {};
  const protocols: PackProtocol[] = [];
  const seen = new Set<string>();
  for (const p of rawProtocols) {
    const where = `${p.file}: protocol ${p.name}`;
    if (seen.has(p.name)) throw new DdlError(where, 'declared twice');
    seen.add(p.name);
    let id: number | null = Object.hasOwn(ids, p.name) ? ids[p.name]! : null;
    if (id === null && typeof p.id === 'number' && Number.isInteger(p.id) && p.id >= 0 && p.id <= 0xffff)
      id = p.id;
    if (id === null)
      problems.push({
        kind: 'no-protocol-id',
        element: where,
        detail: `the id mapping gives it no id (callable by name only, not over the classic variant)`,
      });
    if (p.methods.length > 0x7ffe)
      throw new DdlError(where, `${p.methods.length} methods: more than ids allow`);
    const methods = p.methods.map((m, i) => method(m, i + 1, where, mapper));
    protocols.push({
      name: p.name,
      id,
      doc: `${p.name}${p.namespace === '' ? '' : ` (${p.namespace})`}, imported from ${p.file}`,
      methods,
    });
  }
  const pack: ProtocolPack = {
    format: PACK_FORMAT,
    version: PACK_VERSION,
    sources: docs.map((d) => d.file),
    types,
    protocols,
    problems,
  };
  try {
    // Whatever the pack loader would refuse (a class that contains itself, a name used twice) is
    // refused here, at import, with the element named.
    return validatePack(JSON.parse(JSON.stringify(pack)));
  } catch (e) {
    if (e instanceof PackError) throw new DdlError(`pack ${e.path}`, e.detail);
    throw e;
  }
}

/** One DDL method: ids in declaration order; `in` parameters are args, return value and `out` results. */
function method(m: Obj, id: number, protocol: string, mapper: TypeMapper): PackMethod {
  const name = nameOf(m.name1, `${protocol} method #${id}`, 'method name');
  const where = `${protocol.replace(': protocol ', ': ')}::${name}`;
  const args: PackField[] = [];
  const outs: PackField[] = [];
  let ret: PackField[] = [];
  const names = new Set<string>();
  arrayOf(m.elements1 ?? m.elements2, where, 'elements1').forEach((e, i) => {
    const at = `${where} elements1[${i}]`;
    if (!isObj(e)) throw new DdlError(at, 'a method element is an object');
    if (e.__class__ === 'ReturnValue') {
      if (ret.length > 0) throw new DdlError(at, 'a second return value');
      ret = [{ name: 'retval', type: mapper.map(e.dtype1, `${where}.return`) }];
      return;
    }
    if (e.__class__ !== 'Parameter') throw new DdlError(at, `unknown method element ${show(e.__class__)}`);
    const pname = nameOf(e.name1, at, 'parameter name');
    if (names.has(pname)) throw new DdlError(`${where}.${pname}`, 'parameter declared twice');
    names.add(pname);
    const type = mapper.map(e.dtype1, `${where}.${pname}`);
    // 1 in, 2 out, 3 in and out.
    if (e.type !== 1 && e.type !== 2 && e.type !== 3)
      throw new DdlError(
        `${where}.${pname}`,
        `direction ${show(e.type)} is not 1 (in), 2 (out) or 3 (in/out)`,
      );
    if (e.type !== 2) args.push({ name: pname, type });
    if (e.type !== 1) outs.push({ name: pname, type });
  });
  if (ret.length > 0 && names.has('retval')) ret[0]!.name = 'returnValue';
  if (ret.length > 0 && names.has('returnValue') && ret[0]!.name === 'returnValue')
    throw new DdlError(
      where,
      'parameters named both retval and returnValue leave no name for the return value',
    );
  // On the wire the return value comes first, then the out parameters (whatever the dump's order).
  return { name, id, args, results: [...ret, ...outs] };
}

/** Reads JSON files and folders: DDL dumps, and an id mapping found beside them. Throws DdlError. */
export function readDdlInputs(
  paths: readonly string[],
  idsFile?: string,
): { docs: DdlDocument[]; ids: Record<string, number> | undefined } {
  const files: string[] = [];
  for (const p of paths) {
    let st: ReturnType<typeof statSync>;
    try {
      st = statSync(p);
    } catch (err) {
      throw new CommandError('ERR_READ', `cannot read ${p}: ${(err as Error).message}`);
    }
    if (st.isDirectory()) {
      for (const f of readdirSync(p).sort()) if (f.endsWith('.json')) files.push(join(p, f));
    } else files.push(p);
  }
  const parse = (file: string): unknown => {
    let buf: Buffer;
    try {
      if (statSync(file).size > MAX_FILE_BYTES)
        throw new DdlError(file, `larger than ${MAX_FILE_BYTES} bytes`);
      buf = readFileSync(file);
    } catch (err) {
      if (err instanceof DdlError) throw err;
      throw new CommandError('ERR_READ', `cannot read ${file}: ${(err as Error).message}`);
    }
    try {
      return JSON.parse(buf.toString('utf8'));
    } catch (err) {
      throw new DdlError(file, `not JSON: ${(err as Error).message}`);
    }
  };
  let ids: Record<string, number> | undefined;
  if (idsFile !== undefined) ids = checkIdMapping(parse(idsFile), basename(idsFile));
  const docs: DdlDocument[] = [];
  for (const f of files) {
    if (idsFile !== undefined && f === idsFile) continue;
    const json = parse(f);
    if (looksLikeMapping(json)) {
      // A folder may hold the mapping beside the dumps; --ids wins over it.
      if (ids === undefined) ids = checkIdMapping(json, basename(f));
      continue;
    }
    docs.push({ file: basename(f), json });
  }
  if (docs.length === 0) throw new DdlError(paths.join(', '), 'no DDL dump (a JSON Namespace) found');
  return { docs, ids };
}
