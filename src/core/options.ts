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
import { checkGiven, resolveOptions } from './config.js';
import type {
  CommonServerOptions,
  RunningServer,
  ServeOption,
  ServerContext,
  ServerDefinition,
} from './server.js';

export type { CommonServerOptions } from './server.js';

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
 * The options `start()` of a server with these declarations receives (and the library class it
 * builds): every declared key, `host` and `port`; the keys `K` have a derived default (`derive`),
 * so they are always there too.
 */
export type ServerOptions<D extends OptionDeclarations, K extends keyof D = never> = Infer<D> & {
  -readonly [P in K]-?: NonNullable<Infer<D>[P]>;
} & CommonServerOptions;

/**
 * Defaults that follow from other options (js5's `maxPerIp` from `maxClients`): key → its value
 * when none was given, computed from the options filled before it (fixed defaults, given values,
 * and the derived options declared before it). The declaration's description says the rule.
 */
export type Derivations<D extends OptionDeclarations, K extends keyof D> = {
  readonly [P in K]: (options: ServerOptions<D, K>) => NonNullable<Infer<D>[P]>;
};

/** What a library caller may give a server: any declared option, `host`, `port`; the rest is filled. */
export type OptionValues<D extends OptionDeclarations> = {
  [P in keyof D]?: Infer<D>[P];
} & Partial<CommonServerOptions>;

/** What every declaration may say, whatever its type. */
type CommonSpec = Pick<
  ServeOption,
  'flag' | 'description' | 'secret' | 'env' | 'aliases' | 'flagAliases' | 'requires' | 'requiresWhy' | 'cli'
>;

export interface IntSpec extends CommonSpec {
  default?: number;
  /** Smallest value (default 0). */
  min?: number;
  /**
   * Smallest value a library caller may give (`resolve`, `completeOptions`), when lower than
   * `min`, which `gamewire serve` and the config file keep (js5's tiny slices exercise the framing
   * in tests; operators get at least one block).
   */
  libraryMin?: number;
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

export interface BoolSpec extends CommonSpec {
  /** Only for a library-only switch (`cli: false`): a bare flag can only turn one on. */
  default?: boolean;
}

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

/**
 * A switch: a bare flag (`--drain`), `true`/`false` in the config file; false by default (a
 * library-only one may default to true).
 */
function bool<const S extends BoolSpec>(spec: S): OptionDeclaration<boolean, true> {
  return { ...spec, type: 'bool', default: spec.default ?? false };
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

/**
 * A protocol's options, declared once: its config section, its default port, the declarations
 * and the defaults that follow from other options. `resolve` gives the complete, checked, typed
 * options from whatever part of them a caller gives: the server's `start()` receives the same
 * (`gamewire serve` fills them from the config file, the environment and the flags), and a
 * library class (`Js5Server`) resolves the partial options it is constructed with through it, so
 * no default and no rule is written anywhere else.
 */
export interface OptionSet<D extends OptionDeclarations, K extends keyof D = never> {
  readonly section: string;
  readonly defaultPort: number;
  readonly declarations: D;
  /**
   * The `ServeOption`s (derived defaults attached) of `gamewire serve` and the config file, in
   * declaration order: every option but the library-only ones (`cli: false`).
   */
  readonly options: readonly ServeOption[];
  /** Every option, library-only ones included, in declaration order: what `resolve` fills. */
  readonly allOptions: readonly ServeOption[];
  /**
   * The complete options from `values`: each checked as the config file would check it (with
   * `libraryMin` for ints), unknown keys refused, every default (fixed or derived) filled, an
   * option set without the one it `requires` refused. Throws `ConfigError` naming
   * `<section>.<key>`.
   */
  resolve(values?: OptionValues<D>): ServerOptions<D, K>;
}

/** Declares a protocol's options once (see `OptionSet`). */
export function defineOptions<const D extends OptionDeclarations, K extends keyof D & string = never>(set: {
  section: string;
  defaultPort: number;
  options: D;
  derive?: Derivations<D, K>;
}): OptionSet<D, K> {
  const derive = (set.derive ?? {}) as Record<string, ServeOption['derive']>;
  const allOptions = serveOptions(set.options).map((o) =>
    derive[o.key] === undefined ? o : { ...o, derive: derive[o.key] },
  );
  const options = allOptions.filter((o) => o.cli !== false);
  const target = { defaultPort: set.defaultPort, options, allOptions };
  return {
    section: set.section,
    defaultPort: set.defaultPort,
    declarations: set.options,
    options,
    allOptions,
    resolve: (values = {}) =>
      resolveOptions<ServerOptions<D, K>>(target, set.section, checkGiven(set.section, target, values)),
  };
}

/** What `defineServer` takes: a server whose `start` gets the options its declarations give. */
export interface ServerDeclaration<D extends OptionDeclarations, K extends keyof D = never> {
  summary: string;
  /** The options, declared once with `defineOptions`. */
  options: OptionSet<D, K>;
  start(options: ServerOptions<D, K>, ctx: ServerContext): Promise<RunningServer>;
}

/** The older form: declarations inline (no derived defaults; `resolve` names the section `server`). */
export interface InlineServerDeclaration<D extends OptionDeclarations> {
  summary: string;
  defaultPort: number;
  options: D;
  start(options: ServerOptions<D>, ctx: ServerContext): Promise<RunningServer>;
}

/** A server defined from typed declarations; `declarations` keeps them for the type checker. */
export interface TypedServerDefinition<D extends OptionDeclarations, K extends keyof D = never>
  extends ServerDefinition<ServerOptions<D, K>> {
  readonly declarations: D;
  /** The options `start()` receives from part of them (`OptionSet.resolve`). */
  resolve(values?: OptionValues<D>): ServerOptions<D, K>;
}

/**
 * Defines a protocol's server from its option declarations: `options` becomes the `ServeOption`
 * list, and `start` is typed with the options it will receive, every default filled.
 */
export function defineServer<D extends OptionDeclarations, K extends keyof D = never>(
  server: ServerDeclaration<D, K>,
): TypedServerDefinition<D, K>;
export function defineServer<const D extends OptionDeclarations>(
  server: InlineServerDeclaration<D>,
): TypedServerDefinition<D>;
export function defineServer(
  server: ServerDeclaration<OptionDeclarations> | InlineServerDeclaration<OptionDeclarations>,
): TypedServerDefinition<OptionDeclarations> {
  const set: OptionSet<OptionDeclarations> =
    'defaultPort' in server
      ? defineOptions({ section: 'server', defaultPort: server.defaultPort, options: server.options })
      : server.options;
  return {
    summary: server.summary,
    defaultPort: set.defaultPort,
    options: set.options,
    allOptions: set.allOptions,
    declarations: set.declarations,
    resolve: set.resolve,
    start: (options, ctx) => server.start(options, ctx),
  };
}
