/**
 * The CLI's standard streams when their readers go away, and its last-resort error handler.
 *
 * - stdout: a one-shot command whose reader is gone (`gamewire decode … | head -1`) stops
 *   quietly with status 141, like other tools killed by SIGPIPE. A long-running command
 *   (`serve`) calls `keepRunningWithoutStdout()`: its stdout lines are information, so it keeps
 *   serving and drops them.
 * - stderr: a failed stderr is remembered and nothing more is written to it (no error is thrown
 *   from a write, no exit waits for it).
 * - Anything thrown that no command caught (an error in an event handler of a long-running
 *   command, a promise rejected with nobody waiting) ends the process with the documented error
 *   line, never Node's stack trace.
 */
import { isGamewireError } from '../core/errors.js';
import { printError } from './errors.js';

let stdoutFailed = false;
let stderrFailed = false;
let stdoutLossEndsCommand = true;
let installed = false;

/** Installs the stream guards and the last-resort handler (once per process). */
export function guardProcess(): void {
  if (installed) return;
  installed = true;
  process.stdout.on('error', (err: NodeJS.ErrnoException) => {
    stdoutFailed = true;
    if (!stdoutLossEndsCommand) return;
    if (err.code === 'EPIPE') process.exit(141);
    printError('ERR_STDOUT', `cannot write the output: ${err.message}`);
    process.exit(1);
  });
  process.stderr.on('error', () => {
    stderrFailed = true;
  });
  process.on('uncaughtException', lastResort);
  process.on('unhandledRejection', lastResort);
}

/** For long-running commands: losing stdout does not end them; their stdout lines are dropped. */
export function keepRunningWithoutStdout(): void {
  stdoutLossEndsCommand = false;
}

/** Writes to stdout unless its reader is gone. */
export function writeOut(text: string): void {
  if (stdoutFailed || process.stdout.destroyed) return;
  process.stdout.write(text);
}

/** Whether stderr can still be written to. */
export function stderrUsable(): boolean {
  return !stderrFailed && !process.stderr.destroyed;
}

/**
 * The last resort: one error line, exit 1. `GAMEWIRE_DEBUG=1` adds the stack to the line (as a
 * `stack` field), for bug reports.
 */
function lastResort(err: unknown): void {
  const e = err instanceof Error ? err : new Error(String(err));
  const own = isGamewireError(e) && typeof e.code === 'string';
  printError(
    own ? (e.code as string) : 'ERR_INTERNAL',
    `${own ? '' : `unexpected ${e.name}: `}${e.message} (a bug in gamewire: please report it; GAMEWIRE_DEBUG=1 adds the stack)`,
    undefined,
    undefined,
    process.env.GAMEWIRE_DEBUG === '1' ? e.stack : undefined,
  );
  process.exit(1);
}
