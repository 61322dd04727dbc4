/**
 * Method signatures, declared once. A method's argument and result lists are declared structs
 * (verbose RMC writes structures without per-structure headers, spec §2.2), so the same
 * declaration decodes and encodes the arguments and results, types the handler
 * (`(ctx, args: ArgsOf<M>) => ResultsOf<M>`), types `RmcClient.call`, and shows up in
 * introspection (`method.args.info`).
 */
import {
  DeclarationError,
  type Fields,
  type StructCodec,
  type StructValue,
  struct,
} from '../../wire/index.js';

/** How much of a layout is public knowledge. Marked in code and docs for every built-in method. */
export type LayoutStatus =
  /** Matches bytes published on the HyperScape wiki. */
  | 'documented'
  /** Taken from another Rendez-Vous title or classic NEX; plausible, unverified for HyperScape. */
  | 'inferred'
  /** Not public at all: gamewire's own choice, so that the protocol does something useful. */
  | 'unknown';

export interface MethodSpec<A, R> {
  args: StructCodec<A>;
  results: StructCodec<R>;
  layout: LayoutStatus;
  doc: string;
  /** Method id for the classic packed variant (string-named variants do not use it). */
  id: number | undefined;
  /** Argument and result fields that hold a secret (a ticket, a token): masked in the wire view. */
  secretFields: readonly string[];
}

export interface MethodDef<A = any, R = any> extends MethodSpec<A, R> {
  /** Short name with the version suffix, e.g. `Register_V1`. */
  readonly name: string;
  /** Name on the wire, e.g. `LoginProtocol::Register_V1`. */
  readonly fullName: string;
  readonly protocol: string;
}

/** Declares a method's signature. Field order is wire order. */
export function method<AF extends Fields, RF extends Fields>(spec: {
  args: AF;
  results: RF;
  layout: LayoutStatus;
  doc: string;
  /** Method id, for the classic packed variant. */
  id?: number;
  /** Fields of args or results that hold a secret (the dashboard's wire view masks them). */
  secretFields?: readonly (keyof AF | keyof RF)[];
}): MethodSpec<StructValue<AF>, StructValue<RF>> {
  if (spec.id !== undefined && !(Number.isInteger(spec.id) && spec.id >= 0 && spec.id < 0x8000)) {
    throw new DeclarationError(`method id ${spec.id} must be an integer under 0x8000`);
  }
  return {
    args: struct(spec.args),
    results: struct(spec.results),
    layout: spec.layout,
    doc: spec.doc,
    id: spec.id,
    secretFields: (spec.secretFields ?? []) as readonly string[],
  };
}

export type MethodSpecs = Record<string, MethodSpec<any, any>>;

export type ProtocolMethods<S extends MethodSpecs> = {
  readonly [K in keyof S & string]: S[K] extends MethodSpec<infer A, infer R> ? MethodDef<A, R> : never;
};

export interface ProtocolDef<S extends MethodSpecs = MethodSpecs> {
  /** The protocol name on the wire, e.g. `LoginProtocol`. */
  readonly name: string;
  readonly doc: string;
  readonly methods: ProtocolMethods<S>;
  /** Methods by short name. Lookups with wire strings go through this Map, never `methods[x]`. */
  readonly byName: ReadonlyMap<string, MethodDef>;
  /** Protocol id for the classic packed variant, when declared. */
  readonly id: number | undefined;
  /** Methods by id (classic packed variant), for those that declare one. */
  readonly byId: ReadonlyMap<number, MethodDef>;
}

const NAME_RE = /^[A-Za-z_][A-Za-z0-9_]*$/;

/**
 * Declares a protocol: its wire name and its methods keyed by short name (`Register_V1`).
 * `options.id` (with method ids) makes it callable over the classic packed variant too.
 */
export function defineProtocol<S extends MethodSpecs>(
  name: string,
  doc: string,
  specs: S,
  options: { id?: number } = {},
): ProtocolDef<S> {
  if (!NAME_RE.test(name)) throw new DeclarationError(`bad protocol name ${name}`);
  if (
    options.id !== undefined &&
    !(Number.isInteger(options.id) && options.id >= 0 && options.id <= 0xffff)
  ) {
    throw new DeclarationError(`protocol id ${options.id} must be a u16`);
  }
  const byName = new Map<string, MethodDef>();
  const byId = new Map<number, MethodDef>();
  const methods: Record<string, MethodDef> = Object.create(null);
  for (const [short, spec] of Object.entries(specs)) {
    if (!NAME_RE.test(short)) throw new DeclarationError(`bad method name ${short}`);
    const def: MethodDef = { ...spec, name: short, fullName: `${name}::${short}`, protocol: name };
    byName.set(short, def);
    methods[short] = def;
    if (def.id !== undefined) {
      if (byId.has(def.id)) throw new DeclarationError(`${name}: method id ${def.id} is used twice`);
      byId.set(def.id, def);
    }
  }
  return { name, doc, methods: methods as ProtocolMethods<S>, byName, id: options.id, byId };
}

export type ArgsOf<M> = M extends MethodDef<infer A, any> ? A : never;
export type ResultsOf<M> = M extends MethodDef<any, infer R> ? R : never;

/**
 * Splits a wire method name into its short name for `protocol`: `LoginProtocol::Register_V1`
 * -> `Register_V1`; a name without `::` is taken as short; a different prefix gives undefined.
 */
export function shortMethodName(protocol: string, method: string): string | undefined {
  const i = method.indexOf('::');
  if (i < 0) return method;
  if (i !== protocol.length || !method.startsWith(protocol)) return undefined;
  return method.slice(i + 2);
}
