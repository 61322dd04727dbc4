import { type Logger, pino } from 'pino';

/**
 * One JSON-lines logger (pino), on stderr so that stdout stays for results and listen lines.
 * Level from `--log-level` or GAMEWIRE_LOG_LEVEL, default info.
 */
export function createLogger(level?: string): Logger {
  return pino(
    { level: level ?? process.env.GAMEWIRE_LOG_LEVEL ?? 'info', base: undefined },
    pino.destination(2),
  );
}

/** A logger that discards everything, for tests and embedded use. */
export function silentLogger(): Logger {
  return pino({ level: 'silent' });
}
