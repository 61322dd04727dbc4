import { type Logger, pino } from 'pino';
import pretty from 'pino-pretty';

/**
 * One logger (pino), on stderr so that stdout stays for results and listen lines. JSON lines
 * when stderr is a pipe or a file (for log collectors); readable, coloured lines on a terminal.
 * Level from `--log-level` or GAMEWIRE_LOG_LEVEL, default info.
 */
export function createLogger(level?: string): Logger {
  const options = { level: level ?? process.env.GAMEWIRE_LOG_LEVEL ?? 'info', base: undefined };
  if (process.stderr.isTTY) {
    return pino(options, pretty({ destination: 2, colorize: true, translateTime: 'HH:MM:ss.l', sync: true }));
  }
  return pino(options, pino.destination(2));
}

/** A logger that discards everything, for tests and embedded use. */
export function silentLogger(): Logger {
  return pino({ level: 'silent' });
}
