/**
 * One option schema for `gamewire serve`: the same `ServeOption` declarations validate
 * command-line flags, config-file values and environment variables (types, ranges, choices,
 * unknown keys and sections), and generate docs/config.md and `gamewire config example`.
 * The naming rule is in docs/decisions.md ("Config keys and flags").
 */
import { readFileSync } from 'node:fs';
import { ConfigError } from './errors.js';
import type { CommonServerOptions, ServeOption, ServerDefinition } from './server.js';

/** Where a value came from, for messages that say exactly what to fix. */
export type ValueSource =
  | { kind: 'flag'; flag: string }
  | { kind: 'file'; file: string; key: string }
  | { kind: 'env'; name: string }
  /** A value a library caller passed (`completeOptions`): `key` is `<section>.<key>`. */
  | { kind: 'value'; key: string };

function describeSource(s: ValueSource): string {
  if (s.kind === 'flag') return s.flag;
  if (s.kind === 'env') return `environment variable ${s.name}`;
  if (s.kind === 'value') return s.key;
  return `${s.key} in ${s.file}`;
}

function sourceKey(s: ValueSource): string {
  return s.kind === 'flag' ? s.flag : s.kind === 'env' ? s.name : s.key;
}

function sourceName(s: ValueSource): string | undefined {
  if (s.kind === 'value') return undefined;
  return s.kind === 'file' ? s.file : s.kind === 'flag' ? 'command line' : 'environment';
}

/** The bare flag name: `--api-port <port>` → `--api-port`. */
export function flagName(option: ServeOption): string {
  return option.flag.split(/[\s,]/)[0]!;
}

/** Upper snake case: `unity-relay` + `apiKey` → `UNITY_RELAY_API_KEY`. */
function upperSnake(s: string): string {
  return s
    .replace(/([a-z0-9])([A-Z])/g, '$1_$2')
    .replace(/[^A-Za-z0-9]+/g, '_')
    .toUpperCase();
}

/** The environment variable that sets an option, if any (`GAMEWIRE_<SECTION>_<KEY>` for secrets). */
export function envName(section: string, option: ServeOption): string | undefined {
  if (option.env !== undefined) return option.env;
  if (option.secret === true) return `GAMEWIRE_${upperSnake(section)}_${upperSnake(option.key)}`;
  return undefined;
}

function isPortKey(option: ServeOption): boolean {
  return option.unit === 'port' || option.key === 'port' || /Port$/.test(option.key);
}

/** The accepted integer range of an option. */
export function intRange(option: ServeOption): { min: number; max: number } {
  const port = isPortKey(option);
  return {
    min: option.min ?? 0,
    max: option.max ?? (port ? 65_535 : Number.MAX_SAFE_INTEGER),
  };
}

function fail(source: ValueSource, detail: string): never {
  throw new ConfigError(`${describeSource(source)}: ${detail}`, sourceKey(source), sourceName(source));
}

function checkChoice(option: ServeOption, value: string, source: ValueSource): void {
  if (option.choices !== undefined && !option.choices.includes(value)) {
    fail(source, `"${value}" is not one of ${option.choices.join(', ')}`);
  }
}

/**
 * Checks one value against its option's type, range and choices, converting text (flags and
 * environment variables) to the type. Config files give JSON values, which must already have the
 * right type (no "abc" where a number goes). Converted values pass again unchanged, so a value can
 * be checked once per protocol that shares its flag.
 */
export function checkKind(option: ServeOption, raw: unknown, source: ValueSource): unknown {
  const fromText = typeof raw === 'string' && source.kind !== 'file' && source.kind !== 'value';
  switch (option.type) {
    case 'int': {
      let n: number;
      if (typeof raw === 'number' && Number.isInteger(raw)) n = raw;
      else if (fromText && /^-?\d+$/.test((raw as string).trim())) n = Number((raw as string).trim());
      else
        fail(source, `expected a whole number, got ${typeof raw === 'number' ? raw : JSON.stringify(raw)}`);
      const range = intRange(option);
      const max = range.max;
      // A library caller may go below `min` down to `libraryMin` (js5's tiny slices).
      const min = source.kind === 'value' && option.libraryMin !== undefined ? option.libraryMin : range.min;
      if (n < min || n > max) fail(source, `${n} is out of range ${min}..${max}`);
      return n;
    }
    case 'bool': {
      if (typeof raw === 'boolean') return raw;
      if (fromText) {
        const t = (raw as string).trim().toLowerCase();
        if (t === 'true' || t === '1' || t === 'yes') return true;
        if (t === 'false' || t === '0' || t === 'no') return false;
      }
      return fail(source, `expected true or false, got ${JSON.stringify(raw)}`);
    }
    case 'string': {
      if (typeof raw !== 'string') return fail(source, `expected a string, got ${JSON.stringify(raw)}`);
      checkChoice(option, raw, source);
      return raw;
    }
    case 'list': {
      let items: unknown[];
      if (Array.isArray(raw)) items = raw;
      else if (typeof raw === 'string')
        items = raw
          .split(',')
          .map((s) => s.trim())
          .filter((s) => s !== '');
      else return fail(source, `expected a list, got ${JSON.stringify(raw)}`);
      for (const item of items) {
        if (typeof item === 'string') checkChoice(option, item, source);
        // Items other than strings are for the option's own parse to judge.
        else if (option.parse === undefined)
          fail(source, `expected a list of strings, got ${JSON.stringify(item)} in it`);
      }
      return items;
    }
    case 'json':
      return raw;
  }
}

/**
 * Checks and converts one value: its type, range and choices (`checkKind`), then the option's
 * own `parse`, if it has one. An error names where the value came from.
 */
export function checkValue(option: ServeOption, raw: unknown, source: ValueSource): unknown {
  const value = checkKind(option, raw, source);
  if (option.parse === undefined) return value;
  try {
    return option.parse(value);
  } catch (err) {
    // A ConfigError naming its key already says what and where (an instance file's own errors);
    // any other error says what, and the schema adds where.
    if (err instanceof ConfigError && err.key !== undefined) throw err;
    return fail(source, (err as Error).message ?? String(err));
  }
}

/**
 * Removes `//` and `/* … *\/` comments outside strings, so config files (and the output of
 * `gamewire config example`) can explain themselves. Line breaks are kept, so JSON error
 * positions stay right.
 */
export function stripComments(text: string): string {
  let out = '';
  let i = 0;
  while (i < text.length) {
    const c = text[i]!;
    if (c === '"') {
      const start = i++;
      while (i < text.length && text[i] !== '"') i += text[i] === '\\' ? 2 : 1;
      out += text.slice(start, ++i);
    } else if (c === '/' && text[i + 1] === '/') {
      while (i < text.length && text[i] !== '\n') i++;
    } else if (c === '/' && text[i + 1] === '*') {
      const end = text.indexOf('*/', i + 2);
      const stop = end === -1 ? text.length : end + 2;
      out += text.slice(i, stop).replace(/[^\n]/g, ' ');
      i = stop;
    } else {
      out += c;
      i++;
    }
  }
  return out;
}

/** A config file: `{ "serve": {…}, "<protocol>": {…} }`, parsed but not yet checked. */
export type ConfigFile = Record<string, Record<string, unknown>>;

/** Reads a config file and checks its shape: an object of objects. */
export function readConfigFile(file: string): ConfigFile {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw new ConfigError(`cannot read config ${file}: ${(err as Error).message}`, undefined, file);
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(stripComments(text));
  } catch (err) {
    throw new ConfigError(`config ${file} is not valid JSON: ${(err as Error).message}`, undefined, file);
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    throw new ConfigError(
      `config ${file} must be a JSON object of sections ("serve", protocol names)`,
      undefined,
      file,
    );
  }
  for (const [section, value] of Object.entries(parsed)) {
    if (typeof value !== 'object' || value === null || Array.isArray(value)) {
      throw new ConfigError(
        `config ${file}: section "${section}" must be an object of options`,
        section,
        file,
      );
    }
  }
  return parsed as ConfigFile;
}

/** The closest known name, for "did you mean" hints (edit distance ≤ 3). */
function closest(name: string, known: Iterable<string>): string | undefined {
  let best: string | undefined;
  let bestDistance = 4;
  for (const k of known) {
    const d = editDistance(name.toLowerCase(), k.toLowerCase());
    if (d < bestDistance) {
      best = k;
      bestDistance = d;
    }
  }
  return best;
}

function editDistance(a: string, b: string): number {
  if (Math.abs(a.length - b.length) > 3) return 4;
  const row = Array.from({ length: b.length + 1 }, (_, i) => i);
  for (let i = 1; i <= a.length; i++) {
    let diagonal = row[0]!;
    row[0] = i;
    for (let j = 1; j <= b.length; j++) {
      const above = row[j]!;
      row[j] = Math.min(row[j]! + 1, row[j - 1]! + 1, diagonal + (a[i - 1] === b[j - 1] ? 0 : 1));
      diagonal = above;
    }
  }
  return row[b.length]!;
}

/** A hint naming the closest known key or section, or listing them all. */
function hint(name: string, known: readonly string[]): string {
  const near = closest(name, known);
  return near !== undefined ? `did you mean "${near}"?` : `known: ${known.join(', ')}`;
}

/** The schema of every section: `serve` and one per protocol with a server. */
export type ConfigSchema = ReadonlyMap<string, readonly ServeOption[]>;

/**
 * Checks every section and key of a config file against the schema. Returns the values by
 * section, converted, with aliases renamed to their keys, plus a warning per alias used.
 */
export function checkConfigFile(
  config: ConfigFile,
  file: string,
  schema: ConfigSchema,
): { values: Map<string, Record<string, unknown>>; warnings: string[] } {
  const values = new Map<string, Record<string, unknown>>();
  const warnings: string[] = [];
  for (const [section, entries] of Object.entries(config)) {
    const options = schema.get(section);
    if (options === undefined) {
      throw new ConfigError(
        `config ${file}: unknown section "${section}" (${hint(section, [...schema.keys()])})`,
        section,
        file,
      );
    }
    const out: Record<string, unknown> = {};
    for (const [key, raw] of Object.entries(entries)) {
      let option = options.find((o) => o.key === key);
      if (option === undefined) {
        option = options.find((o) => o.aliases?.includes(key));
        if (option !== undefined)
          warnings.push(`${file}: ${section}.${key} is now called ${section}.${option.key}`);
      }
      if (option === undefined) {
        throw new ConfigError(
          `config ${file}: unknown key "${section}.${key}" (${hint(
            key,
            options.map((o) => o.key),
          )})`,
          `${section}.${key}`,
          file,
        );
      }
      out[option.key] = checkValue(option, raw, { kind: 'file', file, key: `${section}.${option.key}` });
    }
    values.set(section, out);
  }
  return { values, warnings };
}

/** Values of a section's options from the environment (secrets and options that name a variable). */
export function valuesFromEnv(
  section: string,
  options: readonly ServeOption[],
  env: NodeJS.ProcessEnv = process.env,
): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const o of options) {
    const name = envName(section, o);
    if (name === undefined) continue;
    const raw = env[name];
    if (raw === undefined || raw === '') continue;
    out[o.key] = checkValue(o, raw, { kind: 'env', name });
  }
  return out;
}

/**
 * Refuses an option set without the option it `requires` (`rmc --drain` without `--redis` would
 * be accepted and do nothing). "Set" means given a value other than its default; the one it
 * requires is missing when not given, empty or a switch left off (`--js5-preload-max-mb` without
 * `--preload`).
 */
export function checkRequires(
  section: string,
  options: readonly ServeOption[],
  values: Record<string, unknown>,
): void {
  for (const o of options) {
    if (o.requires === undefined) continue;
    const v = values[o.key];
    if (v === undefined || v === o.default) continue;
    // Absent: not given, empty, or a switch left off.
    const needed = values[o.requires];
    if (needed !== undefined && needed !== '' && needed !== false) continue;
    const other = options.find((x) => x.key === o.requires);
    const name = other === undefined ? o.requires : `${flagName(other)} (config ${section}.${other.key})`;
    throw new ConfigError(
      `${section}: ${flagName(o)} (config ${section}.${o.key}) needs ${name}: ${o.requiresWhy ?? 'without it, it does nothing'}`,
      `${section}.${o.key}`,
    );
  }
}

/**
 * A section's complete options from values already checked (`checkValue`): every option not
 * given takes its default (through its `parse`, if it has one), then each option with a derived
 * default (`derive`) not given takes it, in declaration order; `host` is `host` unless given, and
 * an option set without the one it `requires` is refused. What `start()` receives.
 */
export function fillOptions(
  section: string,
  options: readonly ServeOption[],
  values: Record<string, unknown>,
  host = '0.0.0.0',
): Record<string, unknown> {
  const out: Record<string, unknown> = { host };
  for (const o of options) {
    const given = values[o.key];
    if (given !== undefined) out[o.key] = given;
    else if (o.default !== undefined) out[o.key] = o.parse === undefined ? o.default : o.parse(o.default);
    else if (!(o.key in out)) out[o.key] = undefined;
  }
  for (const o of options) if (out[o.key] === undefined && o.derive !== undefined) out[o.key] = o.derive(out);
  checkRequires(section, options, out);
  return out;
}

/**
 * The typed options of a server (or an `OptionSet`) from values checked against its `options`
 * (`checkValue`): `fillOptions`, typed. The one place a checked record is given its type `O`: the
 * registry holds definitions of every options type (`ProtocolModule.server`, `O` erased), and
 * the values were checked and filled from that same definition's declarations, so they are what
 * its `start` expects; `OptionSet.resolve` names `O` from its declarations.
 */
export function resolveOptions<O extends CommonServerOptions>(
  server: Pick<ServerDefinition<O>, 'defaultPort' | 'options' | 'allOptions'>,
  section: string,
  values: Readonly<Record<string, unknown>>,
  host = '0.0.0.0',
): O {
  const options = sectionOptions(server.defaultPort, server.allOptions ?? server.options);
  return fillOptions(section, options, { ...values }, host) as O;
}

/**
 * The options `start()` of `server` receives, from values a library caller gives (the same
 * values as a config-file section, or already converted ones): each is checked as the config file
 * would be, unknown keys are refused, defaults are filled in. `gamewire serve` does the same
 * from the config file, the environment and the flags.
 *
 * ```ts
 * const running = await js5.server.start(completeOptions('js5', js5.server, { port: 0 }), ctx);
 * ```
 */
export function completeOptions<O extends CommonServerOptions>(
  section: string,
  server: ServerDefinition<O>,
  values: Readonly<Record<string, unknown>> = {},
): O {
  return resolveOptions(server, section, checkGiven(section, server, values));
}

/**
 * Values a library caller gives for a server's section (`host`, `port` and its own options, the
 * library-only ones included), each checked as the config file would check it (with
 * `libraryMin`); a former name (`aliases`) is read as its option, unknown keys are refused.
 */
export function checkGiven(
  section: string,
  server: Pick<ServerDefinition, 'defaultPort' | 'options' | 'allOptions'>,
  values: Readonly<Record<string, unknown>>,
): Record<string, unknown> {
  const options = sectionOptions(server.defaultPort, server.allOptions ?? server.options);
  const checked: Record<string, unknown> = {};
  for (const [key, raw] of Object.entries(values)) {
    const o = options.find((x) => x.key === key) ?? options.find((x) => x.aliases?.includes(key));
    if (o === undefined)
      throw new ConfigError(
        `${section}: unknown option "${key}" (${hint(
          key,
          options.map((x) => x.key),
        )})`,
        `${section}.${key}`,
      );
    // Under its own name, which wins over a former one given too.
    if (raw !== undefined && (o.key === key || values[o.key] === undefined))
      checked[o.key] = checkValue(o, raw, { kind: 'value', key: `${section}.${key}` });
  }
  return checked;
}

/**
 * A commander argument parser for an option: converts and checks the type, range and choices,
 * naming the flag on error. The option's own `parse` runs later, once per protocol
 * (`checkValue`), since a flag several protocols share is parsed once.
 */
export function flagParser(option: ServeOption): ((value: string) => unknown) | undefined {
  if (option.type === 'bool') return undefined;
  const flag = flagName(option);
  return (value: string) => checkKind(option, value, { kind: 'flag', flag });
}

/** Defaults of a list of options. */
export function defaultsOf(options: readonly ServeOption[]): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const o of options) if (o.default !== undefined) out[o.key] = o.default;
  return out;
}

/** Log levels `--log-level` accepts (pino's). */
export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;

/** The `serve` section: what every server shares. */
export const SERVE_OPTIONS: readonly ServeOption[] = [
  {
    key: 'host',
    flag: '--host <address>',
    description: 'bind address for game traffic',
    type: 'string',
    default: '0.0.0.0',
  },
  {
    key: 'dataDir',
    flag: '--data-dir <dir>',
    description: 'folder for generated state (demo caches, stores)',
    type: 'string',
    default: 'data',
  },
  {
    key: 'logLevel',
    flag: '--log-level <level>',
    description: 'log level (also GAMEWIRE_LOG_LEVEL)',
    type: 'string',
    choices: LOG_LEVELS,
    default: 'info',
    env: 'GAMEWIRE_LOG_LEVEL',
  },
  {
    key: 'adminPort',
    flag: '--admin-port <port>',
    description:
      'admin endpoint: the dashboard, /api, /metrics, /health and /ready over HTTP (also GAMEWIRE_ADMIN_PORT; --metrics-port is the same; --no-admin turns it off)',
    type: 'int',
    unit: 'port',
    default: 9100,
    env: 'GAMEWIRE_ADMIN_PORT',
    aliases: ['metricsPort'],
  },
  {
    key: 'adminHost',
    flag: '--admin-host <address>',
    description:
      'bind address of the admin endpoint; beyond loopback only with adminToken (--metrics-host is the same)',
    type: 'string',
    default: '127.0.0.1',
    aliases: ['metricsHost'],
  },
  {
    key: 'adminToken',
    flag: '--admin-token <token>',
    description:
      'require this token on every admin request but /health and /ready (Bearer header, or once as /?token= in the browser; also GAMEWIRE_SERVE_ADMIN_TOKEN)',
    type: 'string',
    secret: true,
    env: 'GAMEWIRE_ADMIN_TOKEN',
  },
  {
    key: 'shutdownTimeoutMs',
    flag: '--shutdown-timeout-ms <ms>',
    description:
      'after SIGINT/SIGTERM, exit anyway (status 1) when the servers have not stopped within this many ms',
    type: 'int',
    unit: 'ms',
    min: 100,
    default: 5000,
    env: 'GAMEWIRE_SHUTDOWN_TIMEOUT_MS',
  },
];

/** The options every protocol section has besides its own: where its server binds. */
export function serverCommonOptions(defaultPort: number): ServeOption[] {
  return [
    {
      key: 'host',
      flag: '--host <address>',
      description: 'bind address (default: serve.host)',
      type: 'string',
    },
    {
      key: 'port',
      flag: '--port <port>',
      description: "the protocol's main port (flag only when serving one protocol)",
      type: 'int',
      unit: 'port',
      default: defaultPort,
    },
  ];
}

/** Every option of a protocol's section: host and port, then its own (deduplicated by key). */
export function sectionOptions(defaultPort: number, own: readonly ServeOption[]): ServeOption[] {
  const common = serverCommonOptions(defaultPort);
  return [...common, ...own.filter((o) => !common.some((c) => c.key === o.key))];
}
