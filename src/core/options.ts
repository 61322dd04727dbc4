/**
 * Typed server options. A protocol declares each option once, as a property of one record (the
 * property name is its config key): its flag, environment variable, checks, default, and so its
 * TypeScript type. `defineServer` turns the record into the `ServeOption` list that the config
 * schema, `serve --help`, `config example` and docs/config.md are built from, and types the
 * options `start()` receives from the same record: an option with a default is always there, one
 * without may be `undefined`.
 *
 * ```ts
 * const options = {
 *   maxClients: option.int({ flag: '--js5-max-clients <n>', description: '…', default: 1000, min: 1 }),
 *   cache: option.string({ flag: '--cache <dir>', description: '…' }),
 * };
 * export const server = defineServer({ summary, defaultPort: 43594, options, async start(opts, ctx) {
 *   opts.maxClients; // number
 *   opts.cache;      // string | undefined
 * } });
 * ```
 */
import type { RunningServer, ServeOption, ServerContext, ServerDefinition } from './server.js';

export declare const VALUE: unique symbol;

/**
 * One option's declaration: a `ServeOption` without its key. `T` is the value `start()` gets and
 * `Filled` whether it always gets one (a default, or a boolean); both exist for the type checker
 * only.
 */
export interface OptionDeclaration<T = unknown, Filled extends boolean = boolean>
  extends Omit<ServeOption, 'key'> {
  readonly [VALUE]?: { value: T; filled: Filled };
}

/** A record of declarations: key → declaration. */
export type OptionDeclarations = { readonly [key: string]: OptionDeclaration };

/** The options a record of declarations gives `start()`. */
export type Infer<D extends OptionDeclarations> = {
  -readonly [K in keyof D]: D[K] extends OptionDeclaration<infer T, infer F>
    ? F extends true
      ? T
      : T | undefined
    : never;
};

/**
 * What every server is given besides its own options: where it binds. (A type, not an interface:
 * options types stay assignable to `Record<string, unknown>`, which `ProtocolModule.server` is.)
 */
export type CommonServerOptions = {
  /** Bind address (`<protocol>.host`, else `serve.host`; `0.0.0.0` for a library caller). */
  host: string;
  /** The protocol's main port (its default port unless set). */
  port: number;
};

/** The options `start()` of a server with these declarations receives. */
export type ServerOptions<D extends OptionDeclarations> = Infer<D> & CommonServerOptions;

/** What every declaration may say, whatever its type. */
type CommonSpec = Pick<
  ServeOption,
  'flag' | 'description' | 'secret' | 'env' | 'aliases' | 'flagAliases' | 'requires' | 'requiresWhy'
>;

export interface IntSpec extends CommonSpec {
  default?: number;
  /** Smallest value (default 0). */
  min?: number;
  /** Largest value (default 65535 for ports, else Number.MAX_SAFE_INTEGER). */
  max?: number;
  unit?: string;
  parse?(value: number): unknown;
}

export interface StringSpec extends CommonSpec {
  default?: string;
  choices?: readonly string[];
  parse?(value: string): unknown;
}

export type BoolSpec = CommonSpec;

export interface ListSpec extends CommonSpec {
  default?: readonly unknown[];
  /** The only values each item may take. */
  choices?: readonly string[];
  /**
   * Without it every item must be a string; with it, items may be any JSON value in the config
   * file, and `parse` checks them.
   */
  parse?(items: unknown[]): unknown;
}

export interface JsonSpec extends CommonSpec {
  /** Makes sense of text (from a flag or the environment) and of a JSON value (config file). */
  parse(value: unknown): unknown;
}

/** `T`, or what `parse` turns it into. */
type Parsed<S, T> = S extends { parse(value: never): infer P } ? P : T;
/** Whether a declaration has a default. */
type HasDefault<S> = S extends { default: NonNullable<unknown> } ? true : false;
/** The choices of a declaration as a union, or `Otherwise` when it has none. */
type Choice<S, Otherwise> = S extends { choices: readonly (infer C)[] } ? C : Otherwise;

/** A whole number: `--js5-max-clients <n>`. */
function int<const S extends IntSpec>(spec: S): OptionDeclaration<Parsed<S, number>, HasDefault<S>> {
  return { ...spec, type: 'int' };
}

/** A string, or one of `choices` (typed as their union). */
function string<const S extends StringSpec>(
  spec: S,
): OptionDeclaration<Parsed<S, Choice<S, string>>, HasDefault<S>> {
  return { ...spec, type: 'string' };
}

/** A switch: a bare flag (`--drain`), `true`/`false` in the config file; always false by default. */
function bool<const S extends BoolSpec>(spec: S): OptionDeclaration<boolean, true> {
  return { ...spec, type: 'bool', default: false };
}

/** A list: a JSON array in the config file, comma-separated on the command line. */
function list<const S extends ListSpec>(
  spec: S,
): OptionDeclaration<Parsed<S, Choice<S, string>[]>, HasDefault<S>> {
  return { ...spec, type: 'list' };
}

/** A value `parse` makes sense of: a file name on the command line, the JSON itself in the config file. */
function json<const S extends JsonSpec>(spec: S): OptionDeclaration<Parsed<S, unknown>, false> {
  return { ...spec, type: 'json' };
}

/** The option builders. */
export const option = { int, string, bool, list, json };

/** The `ServeOption`s of a record of declarations, in declaration order. */
export function serveOptions(declarations: OptionDeclarations): ServeOption[] {
  return Object.entries(declarations).map(([key, d]) => ({ key, ...d }));
}

/** What `defineServer` takes: a server whose `start` gets the options its declarations give. */
export interface ServerDeclaration<D extends OptionDeclarations> {
  summary: string;
  defaultPort: number;
  options: D;
  start(options: ServerOptions<D>, ctx: ServerContext): Promise<RunningServer>;
}

/** A server defined from typed declarations; `declarations` keeps them for the type checker. */
export interface TypedServerDefinition<D extends OptionDeclarations>
  extends ServerDefinition<ServerOptions<D>> {
  readonly declarations: D;
}

/**
 * Defines a protocol's server from its option declarations: `options` becomes the `ServeOption`
 * list, and `start` is typed with the options it will receive, every default filled.
 */
export function defineServer<const D extends OptionDeclarations>(
  server: ServerDeclaration<D>,
): TypedServerDefinition<D> {
  return {
    summary: server.summary,
    defaultPort: server.defaultPort,
    options: serveOptions(server.options),
    declarations: server.options,
    start: (options, ctx) => server.start(options, ctx),
  };
}
