/** Sized regions, tagged unions, `select`, hand-written (`custom`) and recursive (`lazy`) codecs. */
import { DeclarationError, DecodeError, EncodeError, ErrorCode } from '../errors.js';
import type { WireReader } from '../reader.js';
import type { WireWriter } from '../writer.js';
import { badInput, type Simplify, typeOf } from './internal.js';
import {
  Codec,
  type CodecInfo,
  type Infer,
  type IntCodec,
  type Json,
  type VariantInfo,
} from './primitives.js';
import { ObjectCodec, type StructCodec } from './struct.js';

// ---- sized regions --------------------------------------------------------------------------

/**
 * A size prefix followed by exactly that many bytes holding `inner`. `adjust` is added to the
 * byte count when writing the prefix (and subtracted when reading): use it when the size
 * counts bytes before the region, such as its own header.
 */
export class SizedCodec<T> extends Codec<T> {
  readonly info: CodecInfo;
  readonly inner: Codec<T>;
  private readonly prefix: IntCodec;
  private readonly adjust: number;

  constructor(prefix: IntCodec, inner: Codec<T>, adjust = 0) {
    super();
    this.prefix = prefix;
    this.inner = inner;
    this.adjust = adjust;
    this.info = { kind: 'sized', prefix, adjust, inner };
    this.minSize = prefix.minSize + inner.minSize;
  }

  read(r: WireReader): T {
    const at = r.offset;
    const n = this.prefix.read(r) - this.adjust;
    if (n < 0)
      throw new DecodeError(
        ErrorCode.BAD_LENGTH,
        `size ${n + this.adjust} is smaller than ${this.adjust}`,
        at,
      );
    const previous = r.limit(n, 'sized item');
    const v = this.inner.read(r);
    r.expectEnd('sized item');
    r.restore(previous);
    return v;
  }

  write(w: WireWriter, value: T): void {
    const at = w.offset;
    this.prefix.write(w, 0);
    const start = w.offset;
    this.inner.write(w, value);
    const n = w.offset - start + this.adjust;
    if (n > this.prefix.max) throw new EncodeError(ErrorCode.TOO_LARGE, `size ${n} does not fit its prefix`);
    this.prefix.patch(w, at, n);
  }

  toJson(value: T): Json {
    return this.inner.toJson(value);
  }

  fromJson(json: unknown, path: string): T {
    return this.inner.fromJson(json, path);
  }
}

// ---- tagged unions (message sets) -----------------------------------------------------------

type VariantMap = Record<string, readonly [number, StructCodec<any>]>;
export type UnionValue<V extends VariantMap> = { [K in keyof V]: Infer<V[K][1]> }[keyof V];

/**
 * A set of messages told apart by a tag (a type code or opcode). Each variant is a `message`,
 * whose decoded object carries `type: NAME`.
 */
export class UnionCodec<V extends VariantMap> extends Codec<UnionValue<V>> {
  readonly info: CodecInfo;
  private readonly byTag = new Map<number, StructCodec<any>>();
  private readonly byName = new Map<string, { tag: number; codec: StructCodec<any> }>();
  readonly tagCodec: Codec<number>;

  constructor(tag: Codec<number>, variants: V) {
    super();
    this.tagCodec = tag;
    const list: VariantInfo[] = [];
    let min = Number.POSITIVE_INFINITY;
    for (const [name, [code, codec]] of Object.entries(variants)) {
      if (codec.name !== name)
        throw new DeclarationError(`variant ${name} must be declared as message('${name}', …)`);
      this.byTag.set(code, codec);
      this.byName.set(name, { tag: code, codec });
      list.push({ name, tag: code, codec });
      min = Math.min(min, codec.minSize);
    }
    this.info = { kind: 'union', tag, variants: list };
    this.minSize = tag.minSize + (Number.isFinite(min) ? min : 0);
  }

  /** The variant for a tag, or undefined. */
  variant(tag: number): StructCodec<any> | undefined {
    return this.byTag.get(tag);
  }

  read(r: WireReader): UnionValue<V> {
    const at = r.offset;
    const tag = this.tagCodec.read(r);
    const codec = this.byTag.get(tag);
    if (codec === undefined) {
      throw new DecodeError(
        ErrorCode.UNKNOWN_TYPE,
        `unknown type 0x${tag.toString(16).padStart(2, '0')}`,
        at,
      );
    }
    return codec.read(r);
  }

  write(w: WireWriter, value: UnionValue<V>): void {
    const v = this.byName.get((value as { type: string }).type);
    if (v === undefined)
      throw badInput('type', `unknown message type ${String((value as { type: string }).type)}`);
    this.tagCodec.write(w, v.tag);
    v.codec.write(w, value);
  }

  toJson(value: UnionValue<V>): Json {
    const v = this.byName.get((value as { type: string }).type);
    if (v === undefined) throw badInput('type', 'unknown message type');
    return v.codec.toJson(value);
  }

  fromJson(json: unknown, path: string): UnionValue<V> {
    if (typeof json !== 'object' || json === null || Array.isArray(json)) {
      throw badInput(path, `expected an object, got ${typeOf(json)}`);
    }
    const type = (json as { type?: unknown }).type;
    const v = typeof type === 'string' ? this.byName.get(type) : undefined;
    if (v === undefined) {
      throw badInput(
        path === '' ? 'type' : `${path}.type`,
        `expected one of ${[...this.byName.keys()].join(', ')}`,
      );
    }
    return v.codec.fromJson(json, path);
  }
}

// ---- select: branch on an earlier field -----------------------------------------------------

type CaseMap = Record<string, ObjectCodec<any>>;
export type SelectValue<H, C extends CaseMap> = { [K in keyof C]: Simplify<H & Infer<C[K]>> }[keyof C];

/**
 * A message whose remaining fields depend on a field read earlier: `head` is read first, then
 * the case named by `String(head[on])` (`'true'`/`'false'` for a boolean, `'3'` for a number).
 * The result is one flat object with the head's and the case's fields, as the wire format lays
 * them out; a named case (`message('Response', …)`) sets `type`. Cases can be selects
 * themselves (branch again on a later field), and their conditions may read the head's fields.
 */
export class SelectCodec<T> extends ObjectCodec<T> {
  readonly info: CodecInfo;
  readonly head: ObjectCodec<any>;
  readonly on: string;
  readonly name: string | undefined;
  readonly fieldNames: ReadonlySet<string>;
  readonly outerFields: ReadonlySet<string>;
  private readonly cases: ReadonlyMap<string, ObjectCodec<any>>;

  constructor(head: ObjectCodec<any>, on: string, cases: CaseMap) {
    super();
    if (!head.fieldNames.has(on)) throw new DeclarationError(`select: the head has no field "${on}"`);
    this.head = head;
    this.on = on;
    this.name = head.name;
    this.cases = new Map(Object.entries(cases));
    if (this.cases.size === 0) throw new DeclarationError('select: no cases');
    const names = new Set(head.fieldNames);
    const outer = new Set(head.outerFields);
    let min = Number.POSITIVE_INFINITY;
    let fixed: number | undefined;
    let first = true;
    for (const [value, c] of this.cases) {
      for (const n of c.fieldNames) {
        if (head.fieldNames.has(n))
          throw new DeclarationError(`select case ${value}: field "${n}" is also in the head`);
        names.add(n);
      }
      for (const n of c.outerFields) if (!head.fieldNames.has(n)) outer.add(n);
      min = Math.min(min, c.minSize);
      fixed = first ? c.fixedSize : fixed === c.fixedSize ? fixed : undefined;
      first = false;
    }
    this.fieldNames = names;
    this.outerFields = outer;
    this.minSize = head.minSize + min;
    this.fixedSize = head.fixedSize !== undefined && fixed !== undefined ? head.fixedSize + fixed : undefined;
    this.info = {
      kind: 'select',
      head,
      on,
      cases: [...this.cases].map(([value, codec]) => ({ value, codec })),
    };
  }

  private caseFor(value: unknown): ObjectCodec<any> | undefined {
    return this.cases.get(String(value));
  }

  private choices(): string {
    return [...this.cases.keys()].join(', ');
  }

  read(r: WireReader): T {
    const o = this.head.read(r) as Record<string, unknown>;
    return this.readCase(r, o);
  }

  readInto(r: WireReader, o: Record<string, unknown>): T {
    this.head.readInto(r, o);
    return this.readCase(r, o);
  }

  private readCase(r: WireReader, o: Record<string, unknown>): T {
    const value = o[this.on];
    const c = this.caseFor(value);
    if (c === undefined) {
      throw new DecodeError(
        ErrorCode.BAD_VALUE,
        `${this.on} = ${String(value)} has no case (cases: ${this.choices()})`,
        r.offset,
        this.on,
      );
    }
    return c.readInto(r, o);
  }

  write(w: WireWriter, value: T): void {
    const v = value as Record<string, unknown>;
    const c = this.caseFor(v[this.on]);
    if (c === undefined)
      throw badInput(this.on, `${String(v[this.on])} has no case (cases: ${this.choices()})`);
    this.head.write(w, value);
    c.write(w, value);
  }

  toJsonInto(value: T, out: Record<string, Json>): void {
    const v = value as Record<string, unknown>;
    this.head.toJsonInto(value, out);
    const c = this.caseFor(v[this.on]);
    if (c === undefined)
      throw badInput(this.on, `${String(v[this.on])} has no case (cases: ${this.choices()})`);
    c.toJsonInto(value, out);
  }

  fromJsonInto(
    j: Record<string, unknown>,
    path: string,
    out: Record<string, unknown>,
    known: Set<string>,
  ): void {
    this.head.fromJsonInto(j, path, out, known);
    const c = this.caseFor(out[this.on]);
    if (c === undefined) {
      const p = path === '' ? this.on : `${path}.${this.on}`;
      throw badInput(p, `${String(out[this.on])} has no case (cases: ${this.choices()})`);
    }
    c.fromJsonInto(j, path, out, known);
  }
}

// ---- escape hatches -------------------------------------------------------------------------

export interface CustomDefinition<T> {
  /** A name for introspection, e.g. `vcmp-rpc.value`. */
  name: string;
  /** What the bytes look like, for people reading a dissector or inspector. */
  description: string;
  minSize?: number;
  fixedSize?: number;
  read(r: WireReader): T;
  write(w: WireWriter, value: T): void;
  toJson(value: T): Json;
  fromJson(json: unknown, path: string): T;
}

/** A hand-written codec behind the same interface, for what cannot be declared. */
export class CustomCodec<T> extends Codec<T> {
  readonly info: CodecInfo;
  override readonly read: (r: WireReader) => T;
  readonly write: (w: WireWriter, value: T) => void;
  readonly toJson: (value: T) => Json;
  readonly fromJson: (json: unknown, path: string) => T;

  constructor(def: CustomDefinition<T>) {
    super();
    this.info = { kind: 'custom', name: def.name, description: def.description };
    this.minSize = def.minSize ?? def.fixedSize ?? 0;
    this.fixedSize = def.fixedSize;
    this.read = def.read;
    this.write = def.write;
    this.toJson = def.toJson;
    this.fromJson = def.fromJson;
  }
}

/** A codec resolved on first use, for recursive declarations. */
export class LazyCodec<T> extends Codec<T> {
  readonly info: CodecInfo;
  private resolved: Codec<T> | undefined;
  private readonly target: () => Codec<T>;

  constructor(target: () => Codec<T>) {
    super();
    this.target = target;
    this.info = { kind: 'lazy', target };
  }

  private get codec(): Codec<T> {
    this.resolved ??= this.target();
    return this.resolved;
  }

  read(r: WireReader): T {
    r.enter();
    const v = this.codec.read(r);
    r.leave();
    return v;
  }

  write(w: WireWriter, value: T): void {
    this.codec.write(w, value);
  }

  toJson(value: T): Json {
    return this.codec.toJson(value);
  }

  fromJson(json: unknown, path: string): T {
    return this.codec.fromJson(json, path);
  }
}

export function sized<T>(prefix: IntCodec, inner: Codec<T>, adjust = 0): SizedCodec<T> {
  return new SizedCodec(prefix, inner, adjust);
}

/**
 * Branches on a field of `head`: `select(head, 'isRequest', { true: request, false: response })`.
 * See `SelectCodec`.
 */
export function select<H, K extends keyof H & string, C extends CaseMap>(
  head: ObjectCodec<H>,
  on: K,
  cases: C,
): SelectCodec<SelectValue<H, C>> {
  return new SelectCodec(head, on, cases);
}

export function union<V extends VariantMap>(tag: Codec<number>, variants: V): UnionCodec<V> {
  return new UnionCodec(tag, variants);
}

export function custom<T>(def: CustomDefinition<T>): CustomCodec<T> {
  return new CustomCodec(def);
}

export function lazy<T>(target: () => Codec<T>): LazyCodec<T> {
  return new LazyCodec(target);
}
