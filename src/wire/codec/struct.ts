/**
 * Structs and messages: named fields compiled into straight-line JavaScript, conditional fields
 * (`when` with typed `is.…` conditions), constants and documented fields.
 */
import { asDecodeError, DeclarationError, DecodeError, EncodeError, ErrorCode } from '../errors.js';
import type { WireReader } from '../reader.js';
import type { WireWriter } from '../writer.js';
import { badInput, type Simplify, typeOf } from './internal.js';
import { Codec, type CodecInfo, type FieldInfo, type Json } from './primitives.js';

// ---- conditions (typed `when` predicates, as data) -------------------------------------------

type Scalar = number | bigint | boolean | string;

/**
 * A condition on an earlier field, kept as data so that introspection (the inspector, the
 * Wireshark dissector generator) can read it as well as run it.
 */
export type Condition =
  | { op: 'eq' | 'ne'; field: string; value: Scalar }
  | { op: 'in'; field: string; values: readonly Scalar[] }
  | { op: 'allBits' | 'anyBits' | 'noBits'; field: string; mask: number }
  | { op: 'and' | 'or'; conditions: readonly Condition[] }
  | { op: 'not'; condition: Condition };

/** A runnable condition; `Needs` is the shape of the earlier fields it reads (checked by `struct`). */
export interface Predicate<Needs> {
  readonly condition: Condition;
  readonly test: (partial: Needs) => boolean;
}

type Widen<V> = V extends number
  ? number
  : V extends bigint
    ? bigint
    : V extends boolean
      ? boolean
      : V extends string
        ? string
        : V;

function predicate<Needs>(condition: Condition, test: (partial: any) => boolean): Predicate<Needs> {
  return { condition, test };
}

/** The fields a condition reads, for declaration-time checks. */
export function conditionFields(c: Condition): string[] {
  if ('conditions' in c) return c.conditions.flatMap(conditionFields);
  if ('condition' in c) return conditionFields(c.condition);
  return [c.field];
}

/** Typed conditions for `when(…)`: each names an earlier field of the struct. */
export const is = {
  /** `field === value`. */
  eq<K extends string, V extends Scalar>(field: K, value: V): Predicate<{ [P in K]: Widen<V> }> {
    return predicate({ op: 'eq', field, value }, (o) => o[field] === value);
  },
  /** `field !== value`. */
  ne<K extends string, V extends Scalar>(field: K, value: V): Predicate<{ [P in K]: Widen<V> }> {
    return predicate({ op: 'ne', field, value }, (o) => o[field] !== value);
  },
  /** `field` is one of `values`. */
  oneOf<K extends string, V extends Scalar>(
    field: K,
    values: readonly V[],
  ): Predicate<{ [P in K]: Widen<V> }> {
    const set = new Set<unknown>(values);
    return predicate({ op: 'in', field, values }, (o) => set.has(o[field]));
  },
  /** Every bit of `mask` is set in `field`. */
  allBits<K extends string>(field: K, mask: number): Predicate<{ [P in K]: number }> {
    return predicate({ op: 'allBits', field, mask }, (o) => (o[field] & mask) === mask);
  },
  /** At least one bit of `mask` is set in `field`. */
  anyBits<K extends string>(field: K, mask: number): Predicate<{ [P in K]: number }> {
    return predicate({ op: 'anyBits', field, mask }, (o) => (o[field] & mask) !== 0);
  },
  /** No bit of `mask` is set in `field`. */
  noBits<K extends string>(field: K, mask: number): Predicate<{ [P in K]: number }> {
    return predicate({ op: 'noBits', field, mask }, (o) => (o[field] & mask) === 0);
  },
  and<A, B>(a: Predicate<A>, b: Predicate<B>): Predicate<A & B> {
    return predicate({ op: 'and', conditions: [a.condition, b.condition] }, (o) => a.test(o) && b.test(o));
  },
  or<A, B>(a: Predicate<A>, b: Predicate<B>): Predicate<A & B> {
    return predicate({ op: 'or', conditions: [a.condition, b.condition] }, (o) => a.test(o) || b.test(o));
  },
  not<A>(a: Predicate<A>): Predicate<A> {
    return predicate({ op: 'not', condition: a.condition }, (o) => !a.test(o));
  },
} as const;

// ---- structs (compiled) ---------------------------------------------------------------------

const OPTIONAL = Symbol('optional');
const CONSTANT = Symbol('constant');
const DOC = Symbol('doc');

export interface OptionalField<T, Needs = any> {
  readonly [OPTIONAL]: true;
  readonly codec: Codec<T>;
  readonly when: (partial: Needs) => boolean;
  readonly condition: Condition | undefined;
}

export interface ConstantField<T> {
  readonly [CONSTANT]: true;
  readonly codec: Codec<T>;
  readonly value: T;
}

export interface DocField<T> {
  readonly [DOC]: true;
  readonly codec: Codec<T>;
  readonly doc: string;
}

/**
 * A field that exists only when `predicate` holds for the fields decoded before it. The
 * predicate is either an `is.…` condition (typed by the field it names, and readable by
 * introspection) or a function; annotate the function's parameter (`(m: { flags: number }) => …`)
 * and `struct`/`message` check that those fields exist with those types.
 */
export function when<T, Needs = any>(
  predicate: Predicate<Needs> | ((partial: Needs) => boolean),
  codec: Codec<T>,
): OptionalField<T, Needs> {
  if (typeof predicate === 'function')
    return { [OPTIONAL]: true, codec, when: predicate, condition: undefined };
  return { [OPTIONAL]: true, codec, when: predicate.test, condition: predicate.condition };
}

/** A fixed value (a signature, version, padding): checked on decode, written on encode. */
export function constant<T>(codec: Codec<T>, value: T): ConstantField<T> {
  return { [CONSTANT]: true, codec, value };
}

/** A required field with a description for the inspector and dissectors. */
export function doc<T>(text: string, codec: Codec<T>): DocField<T> {
  return { [DOC]: true, codec, doc: text };
}

type FieldInput = Codec<any> | OptionalField<any, any> | ConstantField<any> | DocField<any>;
export type Fields = Record<string, FieldInput>;

type RequiredKeys<F> = {
  [K in keyof F]: F[K] extends ConstantField<any> ? never : F[K] extends OptionalField<any, any> ? never : K;
}[keyof F];
type OptionalKeys<F> = { [K in keyof F]: F[K] extends OptionalField<any, any> ? K : never }[keyof F];
type FieldType<X> =
  X extends OptionalField<infer T, any>
    ? T
    : X extends DocField<infer T>
      ? T
      : X extends Codec<infer T>
        ? T
        : never;

export type StructValue<F> = Simplify<
  { [K in RequiredKeys<F>]: FieldType<F[K]> } & { [K in OptionalKeys<F>]?: FieldType<F[K]> }
>;
export type MessageValue<N extends string, F> = Simplify<{ type: N } & StructValue<F>>;

type FieldValues<F> = { [K in keyof F]: FieldType<F[K]> };

/**
 * `F`, with every `when` whose predicate needs fields this struct does not declare (or declares
 * with other types) turned into a type error at the field's name; an untyped predicate (`any`)
 * passes. `struct`/`message` do not apply it themselves (it would reject generic wrappers that
 * pass a type parameter through); wrap the fields in `checkedFields({…})` to opt in. Every
 * `is.…` condition is also checked when it is declared: it must name an earlier field.
 */
export type CheckedFields<F> = {
  [K in keyof F]: F[K] extends OptionalField<any, infer Needs>
    ? unknown extends Needs
      ? F[K]
      : FieldValues<F> extends Needs
        ? F[K]
        : { error: 'when(): the predicate reads fields this struct does not declare, or with other types' }
    : F[K];
};

function normalizeField(name: string, input: FieldInput): FieldInfo {
  if (name === '__proto__' || name === 'constructor' || name === 'type') {
    throw new DeclarationError(`field name "${name}" is reserved`);
  }
  if (input instanceof Codec) {
    return {
      name,
      codec: input,
      when: undefined,
      condition: undefined,
      constant: undefined,
      isConstant: false,
      doc: undefined,
    };
  }
  if (OPTIONAL in input) {
    return {
      name,
      codec: input.codec,
      when: input.when,
      condition: input.condition,
      constant: undefined,
      isConstant: false,
      doc: undefined,
    };
  }
  if (CONSTANT in input) {
    return {
      name,
      codec: input.codec,
      when: undefined,
      condition: undefined,
      constant: input.value,
      isConstant: true,
      doc: undefined,
    };
  }
  return {
    name,
    codec: input.codec,
    when: undefined,
    condition: undefined,
    constant: undefined,
    isConstant: false,
    doc: input.doc,
  };
}

function constantMatches(a: unknown, b: unknown): boolean {
  if (a instanceof Uint8Array && b instanceof Uint8Array) return Buffer.compare(a, b) === 0;
  return a === b;
}

/**
 * A codec whose value is an object of named fields, which `select` can extend: it reads its
 * fields into an object that already holds earlier ones, and converts to or from JSON into a
 * shared object. `StructCodec` and `SelectCodec` are the two kinds.
 */
export abstract class ObjectCodec<T> extends Codec<T> {
  /** The message name written as `type`, if any. */
  abstract readonly name: string | undefined;
  /** Every field name this codec can produce (for select's checks and JSON validation). */
  abstract readonly fieldNames: ReadonlySet<string>;
  /** Field names its conditions read that it does not declare itself (a select's head must). */
  abstract readonly outerFields: ReadonlySet<string>;
  /** Reads the fields into `o` (which may hold earlier fields) and returns it. */
  abstract readInto(r: WireReader, o: Record<string, unknown>): T;
  /** Adds the JSON of this codec's fields to `out` (not `type`). */
  abstract toJsonInto(value: T, out: Record<string, Json>): void;
  /** Converts this codec's fields from `json` into `out`, adding their names to `known`. */
  abstract fromJsonInto(
    json: Record<string, unknown>,
    path: string,
    out: Record<string, unknown>,
    known: Set<string>,
  ): void;

  toJson(value: T): Json {
    const out: Record<string, Json> = {};
    const type = (value as { type?: unknown }).type;
    if (typeof type === 'string') out.type = type;
    this.toJsonInto(value, out);
    return out;
  }

  fromJson(json: unknown, path: string): T {
    if (typeof json !== 'object' || json === null || Array.isArray(json)) {
      throw badInput(path, `expected an object, got ${typeOf(json)}`);
    }
    const j = json as Record<string, unknown>;
    const out: Record<string, unknown> = {};
    const known = new Set<string>(['type']);
    this.fromJsonInto(j, path, out, known);
    for (const k of Object.keys(j)) {
      if (!known.has(k)) throw badInput(path === '' ? k : `${path}.${k}`, 'unknown field');
    }
    return out as T;
  }
}

export class StructCodec<T> extends ObjectCodec<T> {
  readonly info: CodecInfo;
  readonly fields: readonly FieldInfo[];
  readonly read: (r: WireReader) => T;
  readonly readInto: (r: WireReader, o: Record<string, unknown>) => T;
  readonly write: (w: WireWriter, value: T) => void;
  readonly name: string | undefined;
  readonly fieldNames: ReadonlySet<string>;
  readonly outerFields: ReadonlySet<string>;

  constructor(name: string | undefined, fields: Fields) {
    super();
    this.name = name;
    this.fields = Object.entries(fields).map(([n, f]) => normalizeField(n, f));
    this.info = { kind: 'struct', name, fields: this.fields };
    this.fieldNames = new Set(this.fields.filter((f) => !f.isConstant).map((f) => f.name));
    this.outerFields = checkConditions(this.fields);
    let min = 0;
    let fixed: number | undefined = 0;
    for (const f of this.fields) {
      if (f.when === undefined) min += f.codec.minSize;
      fixed =
        f.when === undefined && f.codec.fixedSize !== undefined && fixed !== undefined
          ? fixed + f.codec.fixedSize
          : undefined;
    }
    this.minSize = min;
    this.fixedSize = fixed;
    const compiled = compileRead(name, this.fields);
    this.read = compiled.read as (r: WireReader) => T;
    this.readInto = compiled.readInto as (r: WireReader, o: Record<string, unknown>) => T;
    this.write = compileWrite(this.fields) as (w: WireWriter, value: T) => void;
  }

  toJsonInto(value: T, out: Record<string, Json>): void {
    const v = value as Record<string, unknown>;
    for (const f of this.fields) {
      if (f.isConstant) continue;
      const x = v[f.name];
      if (x !== undefined) out[f.name] = f.codec.toJson(x);
    }
  }

  override toJson(value: T): Json {
    const out: Record<string, Json> = {};
    if (this.name !== undefined) out.type = this.name;
    this.toJsonInto(value, out);
    return out;
  }

  fromJsonInto(
    j: Record<string, unknown>,
    path: string,
    out: Record<string, unknown>,
    known: Set<string>,
  ): void {
    if (this.name !== undefined) out.type = this.name;
    for (const f of this.fields) {
      known.add(f.name);
      if (f.isConstant) continue;
      const p = path === '' ? f.name : `${path}.${f.name}`;
      if (f.when !== undefined && !f.when(out)) {
        if (j[f.name] !== undefined) throw badInput(p, 'field must be absent here (its condition is false)');
        continue;
      }
      if (!Object.hasOwn(j, f.name)) throw badInput(p, 'missing field');
      out[f.name] = f.codec.fromJson(j[f.name], p);
    }
  }
}

/**
 * Checks at declaration time that every `is.…` condition reads a field declared before it (and
 * not a constant, which is not part of the value). Returns the names it reads that the struct
 * does not declare: legal only inside a `select`, whose head must declare them.
 */
function checkConditions(fields: readonly FieldInfo[]): Set<string> {
  const outer = new Set<string>();
  fields.forEach((f, i) => {
    if (f.condition === undefined) return;
    for (const name of conditionFields(f.condition)) {
      const at = fields.findIndex((x) => x.name === name);
      if (at === -1) outer.add(name);
      else if (at >= i)
        throw new DeclarationError(`field "${f.name}" depends on "${name}", which comes after it`);
      else if (fields[at]!.isConstant)
        throw new DeclarationError(`field "${f.name}" depends on constant "${name}"`);
    }
  });
  return outer;
}

/** Prefixes the failing field's name to whatever a struct's field threw. */
function decodeFieldError(e: unknown, fields: readonly FieldInfo[], f: number, r: WireReader): DecodeError {
  const err = asDecodeError(e, r.offset);
  return f >= 0 ? err.withPath(fields[f]!.name) : err;
}

function encodeFieldError(e: unknown, fields: readonly FieldInfo[], f: number): unknown {
  if (e instanceof EncodeError && f >= 0) return e.withPath(fields[f]!.name);
  if (e instanceof TypeError && f >= 0) return badInput(fields[f]!.name, `bad value: ${e.message}`);
  return e;
}

function checkConstant(field: FieldInfo, got: unknown, at: number): void {
  if (!constantMatches(got, field.constant)) {
    throw new DecodeError(
      ErrorCode.BAD_MAGIC,
      `expected ${formatConst(field.constant)}, got ${formatConst(got)}`,
      at,
    );
  }
}

function formatConst(v: unknown): string {
  if (typeof v === 'number') return `0x${v.toString(16)}`;
  if (v instanceof Uint8Array) return Buffer.from(v).toString('hex');
  return String(v);
}

function compileRead(
  name: string | undefined,
  fields: readonly FieldInfo[],
): { read: Function; readInto: Function } {
  const body: string[] = [];
  fields.forEach((field, i) => {
    const key = JSON.stringify(field.name);
    const readExpr = field.codec.inline !== undefined ? `r.${field.codec.inline}()` : `c${i}.read(r)`;
    body.push(`    f = ${i};`);
    if (field.isConstant) {
      body.push(`    { const at = r.offset; checkConstant(fields[${i}], ${readExpr}, at); }`);
    } else if (field.when !== undefined) {
      body.push(`    if (fields[${i}].when(o)) o[${key}] = ${readExpr};`);
    } else {
      body.push(`    o[${key}] = ${readExpr};`);
    }
  });
  const tail = [
    '    return o;',
    '  } catch (e) {',
    '    throw decodeFieldError(e, fields, f, r);',
    '  }',
    '}',
  ];
  const init = fields.filter((f) => !f.isConstant).map((f) => `${JSON.stringify(f.name)}: undefined`);
  if (name !== undefined) init.unshift(`type: ${JSON.stringify(name)}`);
  // `read` builds the object with every field present from the start, so decoded objects share
  // one shape; `readInto` adds to an object a select's head already started.
  const lines = [
    'function read(r) {',
    '  let f = -1;',
    '  try {',
    `    const o = { ${init.join(', ')} };`,
    ...body,
    ...tail,
    'function readInto(r, o) {',
    '  let f = -1;',
    '  try {',
    ...(name !== undefined ? [`    o.type = ${JSON.stringify(name)};`] : []),
    ...body,
    ...tail,
    'return { read, readInto };',
  ];
  const params = fields.map((_, i) => `c${i}`);
  const factory = new Function('fields', 'checkConstant', 'decodeFieldError', ...params, lines.join('\n'));
  return factory(fields, checkConstant, decodeFieldError, ...fields.map((f) => f.codec));
}

function compileWrite(fields: readonly FieldInfo[]): Function {
  const lines: string[] = ['return function write(w, v) {', '  let f = -1;', '  try {'];
  fields.forEach((field, i) => {
    const key = JSON.stringify(field.name);
    const value = field.isConstant ? `fields[${i}].constant` : `v[${key}]`;
    const writeStmt =
      field.codec.inline !== undefined ? `w.${field.codec.inline}(${value});` : `c${i}.write(w, ${value});`;
    lines.push(`    f = ${i};`);
    if (field.when !== undefined) lines.push(`    if (fields[${i}].when(v)) ${writeStmt}`);
    else lines.push(`    ${writeStmt}`);
  });
  lines.push('  } catch (e) {', '    throw encodeFieldError(e, fields, f);', '  }', '};');
  const params = fields.map((_, i) => `c${i}`);
  const factory = new Function('fields', 'encodeFieldError', ...params, lines.join('\n'));
  return factory(fields, encodeFieldError, ...fields.map((f) => f.codec));
}

/** Returns `fields` unchanged, after checking at compile time that typed `when` predicates fit them. */
export function checkedFields<F extends Fields>(fields: F & CheckedFields<F>): F {
  return fields;
}

export function struct<F extends Fields>(fields: F): StructCodec<StructValue<F>> {
  return new StructCodec(undefined, fields);
}

/** A struct that is a message: its decoded object starts with `type: name`. */
export function message<N extends string, F extends Fields>(
  name: N,
  fields: F,
): StructCodec<MessageValue<N, F>> {
  return new StructCodec(name, fields);
}
