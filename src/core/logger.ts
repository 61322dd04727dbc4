import { createRequire } from 'node:module';
import { LogDestination } from './log-destination.js';

const require = createRequire(import.meta.url);

/** One logging call: fields then a message, or a message alone (pino's calling convention). */
export interface LogFn {
  (fields: object, msg?: string): void;
  (msg: string): void;
}

/**
 * What gamewire's servers log through: the part of pino's logger they use, declared here so that
 * the package's types name no dependency. A pino logger is one; so is `silentLogger()`, and any
 * object with these members (a library user's own logger behind an adapter).
 */
export interface Logger {
  /** The lowest level written (`info`, `debug`, `silent`, …). */
  readonly level: string;
  fatal: LogFn;
  error: LogFn;
  warn: LogFn;
  info: LogFn;
  debug: LogFn;
  trace: LogFn;
  isLevelEnabled(level: string): boolean;
  /** A logger that adds `bindings` to every line. */
  child(bindings: Record<string, unknown>): Logger;
  /** Writes what is buffered (pino has it; a plain object may leave it out). */
  flush?(): void;
}

/**
 * One logger (pino), on stderr so that stdout stays for results and listen lines. JSON lines
 * when stderr is a pipe or a file (for log collectors); readable, coloured lines on a terminal.
 * pino and pino-pretty are loaded here, when a logger is made, so that importing a server or
 * codec module does not load them.
 *
 * Lines go through `LogDestination` on `process.stderr`, never through pino's own destination:
 * a stderr whose reader went away or stopped reading must neither block the server nor keep it
 * from exiting (see log-destination.ts).
 */
export function createLogger(level?: string, options: { hold?: boolean } = {}): Logger {
  const { pino } = require('pino') as typeof import('pino');
  const pinoOptions = { level: level ?? process.env.GAMEWIRE_LOG_LEVEL ?? 'info', base: undefined };
  let format: ((line: string) => string) | undefined;
  if (process.stderr.isTTY) {
    const { prettyFactory } = require('pino-pretty') as typeof import('pino-pretty');
    format = prettyFactory({
      colorize: process.env.NO_COLOR === undefined,
      translateTime: 'HH:MM:ss.l',
      ignore: 'pid,hostname',
      singleLine: true,
    });
  }
  const destination = new LogDestination(process.stderr, format === undefined ? {} : { format });
  if (options.hold === true) destination.hold();
  const logger = pino(pinoOptions, destination);
  destinations.set(logger, destination);
  return logger;
}

const destinations = new WeakMap<object, LogDestination>();

/**
 * Ends the hold of a logger made with `{ hold: true }`: writes what it held (only warnings and
 * worse when `all` is false), then writes as usual. Nothing for any other logger.
 */
export function releaseLogs(logger: Logger, all = true): void {
  destinations.get(logger)?.release(all);
}

const noop = (): void => {};

/**
 * A logger that discards everything, for tests and embedded use. It is a plain object with the
 * Logger methods (no pino behind it), so servers created without a logger load no logging code.
 */
export function silentLogger(): Logger {
  const logger: Logger = {
    level: 'silent',
    fatal: noop,
    error: noop,
    warn: noop,
    info: noop,
    debug: noop,
    trace: noop,
    isLevelEnabled: () => false,
    child: () => logger,
  };
  return logger;
}

/** Limits of a `RateLimitedLog`. */
export interface RateLimitedLogOptions {
  /** Length of one key's window (default 10 s). */
  intervalMs?: number;
  /** Lines one key may log per window (default 5). */
  perInterval?: number;
  /** Keys remembered at once (default 1000); the oldest is forgotten first. */
  maxKeys?: number;
  /** The clock (tests). */
  now?: () => number;
}

/**
 * Logs at most `perInterval` lines per `intervalMs` for one key; the lines held back are counted
 * and reported (`suppressed: N`) on the next line of that key. For refusals that mean
 * misconfiguration or load (a client with the wrong build or key, a full server): worth an info
 * line, but a flood must not fill the disk. One per server; keys are the refusal kinds
 * (`wrong_build`, `full`, …). The only one: protocols use it too (js5's refusals, one per reason
 * per `--js5-log-interval-ms`).
 */
export class RateLimitedLog {
  private readonly windows = new Map<string, { start: number; logged: number; suppressed: number }>();
  private readonly log: Logger;
  private readonly intervalMs: number;
  private readonly perInterval: number;
  private readonly maxKeys: number;
  private readonly now: () => number;

  constructor(log: Logger, options: RateLimitedLogOptions = {}) {
    this.log = log;
    this.intervalMs = options.intervalMs ?? 10_000;
    this.perInterval = options.perInterval ?? 5;
    this.maxKeys = options.maxKeys ?? 1000;
    this.now = options.now ?? Date.now;
  }

  /** Logs `msg` with `fields` at `level` unless this key already logged its share this window. */
  write(
    level: 'info' | 'warn' | 'error',
    key: string,
    fields: Record<string, unknown>,
    msg: string,
  ): boolean {
    const now = this.now();
    let w = this.windows.get(key);
    let suppressed = 0;
    if (w !== undefined && now - w.start >= this.intervalMs) {
      suppressed = w.suppressed;
      w = undefined;
      this.windows.delete(key);
    }
    if (w === undefined) {
      // Bounded: an attacker choosing keys cannot grow the table past maxKeys.
      if (this.windows.size >= this.maxKeys) this.windows.delete(this.windows.keys().next().value as string);
      w = { start: now, logged: 0, suppressed: 0 };
      this.windows.set(key, w);
    }
    if (w.logged >= this.perInterval) {
      w.suppressed++;
      return false;
    }
    w.logged++;
    this.log[level](suppressed > 0 ? { ...fields, suppressed } : fields, msg);
    return true;
  }

  info(key: string, fields: Record<string, unknown>, msg: string): boolean {
    return this.write('info', key, fields, msg);
  }

  warn(key: string, fields: Record<string, unknown>, msg: string): boolean {
    return this.write('warn', key, fields, msg);
  }
}
