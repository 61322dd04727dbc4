/**
 * Errors that carry an exit code for the command line but belong to no command-line code:
 * protocols, servers and config validation throw them, and the CLI turns them into its JSON error
 * line and exit status. Keeping them here (not in src/cli) lets protocols report a usage or
 * configuration problem without depending on the CLI.
 */
import { GamewireError } from '../wire/errors.js';

export { GamewireError, isGamewireError } from '../wire/errors.js';

/** Exit status for bad input or a failed operation. */
export const EXIT_FAILURE = 1;
/** Exit status for bad usage (unknown flag, bad option value, bad config). */
export const EXIT_USAGE = 2;

/** A failure reported to a person: a stable code, one line saying what to do, an exit status. */
export class CommandError extends GamewireError {
  readonly exitCode: number;

  constructor(code: string, message: string, exitCode = EXIT_FAILURE, options?: { cause?: unknown }) {
    super(code, message, options);
    this.exitCode = exitCode;
  }

  override get name(): string {
    return 'CommandError';
  }
}

/** Bad usage: exit 2. The message names the valid choices where there are any. */
export class UsageError extends CommandError {
  constructor(message: string) {
    super('ERR_USAGE', message, EXIT_USAGE);
  }

  override get name(): string {
    return 'UsageError';
  }
}

/**
 * A config value (from a flag, a config file or an environment variable) that is wrong: exit 2.
 * `key` is the config key (`js5.maxClients`), `source` where it came from (a file, a flag, a
 * variable), so the message can say exactly what to fix.
 */
export class ConfigError extends CommandError {
  readonly key: string | undefined;
  readonly source: string | undefined;

  constructor(message: string, key?: string, source?: string) {
    super('ERR_CONFIG', message, EXIT_USAGE);
    this.key = key;
    this.source = source;
  }

  override get name(): string {
    return 'ConfigError';
  }
}

/** Parses a whole-number option value, or fails as a usage error. */
export function parseIntOption(value: string): number {
  if (!/^\d+$/.test(value)) throw new UsageError(`"${value}" is not a whole number`);
  return Number(value);
}

/** Parses a port a client command connects to: a whole number 1..65535, or a usage error. */
export function parsePortOption(value: string): number {
  const n = /^\d+$/.test(value) ? Number(value) : Number.NaN;
  if (!(n >= 1 && n <= 65535)) throw new UsageError(`"${value}" is not a port to connect to (1..65535)`);
  return n;
}

/**
 * The former name of `CommandError`, kept so existing imports keep working.
 * @deprecated use CommandError
 */
export const CliError = CommandError;
export type CliError = CommandError;

const NETWORK_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ENOTFOUND',
  'EAI_AGAIN',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
]);

/**
 * Turns a failed connection (a refused TCP connect, a `fetch failed` whose cause was refused,
 * an unreachable or unknown host) into one line that says what to do: `no server at HOST:PORT:
 * is \`gamewire serve\` running?`. Other errors come back unchanged. For clients' CLI commands;
 * `hostFlag` is the flag that names the host in that command (`--host`, `--api`).
 */
export function connectFailure(err: unknown, target: string, hostFlag = '--host'): unknown {
  // Look through wrappers (fetch's TypeError, a client's own error) for the socket's code.
  let code: string | undefined;
  let e = err as (NodeJS.ErrnoException & { cause?: unknown }) | undefined;
  for (let depth = 0; depth < 4 && e !== undefined && e !== null; depth++) {
    if (typeof e.code === 'string' && NETWORK_CODES.has(e.code)) {
      code = e.code;
      break;
    }
    e = e.cause as (NodeJS.ErrnoException & { cause?: unknown }) | undefined;
  }
  if (code === 'ECONNREFUSED' || code === 'ECONNRESET') {
    return new CommandError(
      'ERR_CONNECT',
      `no server at ${target}: is \`gamewire serve\` running?`,
      EXIT_FAILURE,
      {
        cause: err,
      },
    );
  }
  if (code === 'ENOTFOUND' || code === 'EAI_AGAIN') {
    return new CommandError(
      'ERR_CONNECT',
      `cannot resolve the host of ${target}: check ${hostFlag}`,
      EXIT_FAILURE,
      {
        cause: err,
      },
    );
  }
  if (code === 'ETIMEDOUT' || code === 'EHOSTUNREACH' || code === 'ENETUNREACH') {
    return new CommandError(
      'ERR_CONNECT',
      `${target} does not answer (${code}): check ${hostFlag === '--host' ? '--host and --port' : hostFlag}, and that a firewall lets it through`,
      EXIT_FAILURE,
      { cause: err },
    );
  }
  return err;
}
