import type { AdminSource } from './admin/source.js';
import type { Logger } from './logger.js';
import type { ProtocolMetrics } from './metrics.js';

/**
 * One option of `gamewire serve`, also settable in the config file under the protocol's name.
 * Names follow the rule in docs/decisions.md ("Config keys and flags"). Every field after
 * `default` is optional; the config schema (src/core/config.ts) uses them to validate flags,
 * config-file values and environment variables alike. Protocols declare them through the typed
 * builders of src/core/options.ts (`defineServer`), which also give `start()` its options' type.
 */
export interface ServeOption {
  /** Key in the options object and the config file (camelCase), e.g. `apiPort`. */
  key: string;
  /** Commander flag, e.g. `--api-port <port>`. Several protocols may share one (`--port`). */
  flag: string;
  description: string;
  /**
   * `json`: text from a flag or the environment (a file name, say), any JSON value in the config
   * file; its `parse` makes sense of either.
   */
  type: 'int' | 'string' | 'bool' | 'list' | 'json';
  /** The default, as the config file would give it (`parse`, when declared, applies to it too). */
  default?: unknown;
  /**
   * A default that follows from other options (`defineOptions`'s `derive`): the value when none
   * was given, from the options filled before it (declared earlier, or with a fixed default).
   */
  derive?(options: Readonly<Record<string, unknown>>): unknown;
  /** Smallest accepted value (`int`). Ports and counts default to 0 when unset. */
  min?: number;
  /** Smallest value a library caller may give (`int`), when lower than `min` (src/core/options.ts). */
  libraryMin?: number;
  /** Largest accepted value (`int`). */
  max?: number;
  /** The only accepted values (`string`, or each item of a `list`). */
  choices?: readonly string[];
  /** Unit of an `int`, for docs and messages: `ms`, `s`, `bytes`, `MiB`, `port`, … */
  unit?: string;
  /** A secret (key, token, password): never printed, and settable through `env`. */
  secret?: boolean;
  /** Environment variable that sets this option (`GAMEWIRE_…`); derived from the key when `secret` is set. */
  env?: string;
  /** Former config keys still accepted (with a warning) so existing config files keep working. */
  aliases?: readonly string[];
  /** Former flags (`--unity-idle-timeout`) still accepted, hidden from `--help`, with a warning. */
  flagAliases?: readonly string[];
  /**
   * The key of another option of the same section without which this one does nothing (a
   * fleet-only option needs `redis`): setting this one (to anything but its default) without
   * that one is refused before anything starts.
   */
  requires?: string;
  /** Why `requires` holds, ending the refusal (default "without it, it does nothing"). */
  requiresWhy?: string;
  /**
   * `false`: an option only a library caller gives (nox-relay's keep-alive interval, its
   * congestion thresholds): no flag, config key, environment variable or docs/config.md row, but
   * declared, checked and defaulted like the others (`ServerDefinition.allOptions`). Its `flag`
   * is only a name for messages.
   */
  cli?: false;
  /**
   * The option's own conversion after the type, range and choice checks: what `start()` receives
   * (`rmc.datacenters`: `id=host:port` items or objects become `DatacenterConfig`s). It throws
   * an `Error` whose message says what is wrong; the schema adds where the value came from.
   */
  parse?(value: unknown): unknown;
}

export interface ServerContext {
  log: Logger;
  metrics: ProtocolMetrics;
  /** Folder for generated state (demo caches, stores); created on demand. */
  dataDir: string;
  /**
   * The command that runs this `gamewire` (node, its flags and the CLI script), for servers that
   * start copies of themselves (`unity-relay --workers`). Undefined outside the CLI.
   */
  selfCommand?: readonly string[];
  /**
   * Under `serve`: takes a server's announcement (a fleet node's record in Redis), which `serve`
   * runs once every server and the admin endpoint listen, so a port that cannot be had stops
   * `serve` before anything is announced anywhere. Absent (a library caller), a server announces
   * itself at the end of `start`.
   */
  deferAnnouncement?: (announce: () => Promise<void>) => void;
}

export interface Endpoint {
  transport: 'tcp' | 'udp' | 'http';
  host: string;
  port: number;
  description: string;
}

export interface RunningServer {
  endpoints: Endpoint[];
  /** Live state, actions and wire tap for the admin endpoint (the dashboard), when the protocol offers them. */
  admin?: AdminSource;
  /** Stops accepting, finishes in-flight writes, closes sockets. Idempotent. */
  close(): Promise<void>;
}

/**
 * What every server is given besides its own options: where it binds. (A type, not an interface,
 * so every options type built on it stays a plain object type.)
 */
export type CommonServerOptions = {
  /** Bind address (`<protocol>.host`, else `serve.host`; `0.0.0.0` for a library caller). */
  host: string;
  /** The protocol's main port (its default port unless set). */
  port: number;
};

/**
 * A protocol's server. `O` is the type of the options `start` receives: `defineServer`
 * (src/core/options.ts) derives it from the option declarations, so `start` never parses or
 * defaults a value itself. The registry (`ProtocolModule.server`) holds definitions of every `O`
 * as `ServerDefinition` (`O` = `CommonServerOptions`); `serve` and `completeOptions` hand each
 * `start` the options checked and filled from that same definition's `options`
 * (`resolveOptions`, src/core/config.ts, the one place a checked record is typed as an `O`).
 */
export interface ServerDefinition<O extends CommonServerOptions = CommonServerOptions> {
  summary: string;
  defaultPort: number;
  /** Protocol-specific options. `--port` and `--host` are common to all and always present. */
  options: readonly ServeOption[];
  /**
   * Every option `start()` receives, in declaration order: `options` and those only a library
   * caller can give (`cli: false`: no flag, config key or environment variable). `options` when
   * absent. `gamewire serve` fills the library-only ones with their defaults.
   */
  allOptions?: readonly ServeOption[];
  /**
   * `options` holds `port`, `host` and every declared key, checked, converted (`parse`) and with
   * every default filled in: `gamewire serve` builds it from the config file, the environment and
   * the flags; a library caller with `completeOptions` (src/core/config.ts).
   */
  start(options: O, ctx: ServerContext): Promise<RunningServer>;
}
