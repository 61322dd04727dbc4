/**
 * The CLI's error output. The error classes live in src/core/errors.ts so protocols can throw
 * them without importing the CLI; they are re-exported here for existing imports.
 */
export {
  CliError,
  CommandError,
  ConfigError,
  connectFailure,
  parseIntOption,
  UsageError,
} from '../core/errors.js';

/**
 * Writes the contract's error line: `{"error":{"code":…,"message":…,"offset":…}}` (`stack` only
 * when GAMEWIRE_DEBUG=1 asked for it). A stderr whose reader is gone is skipped, never thrown at.
 */
export function printError(
  code: string,
  message: string,
  offset?: number,
  path?: string,
  stack?: string,
): void {
  const error: Record<string, unknown> = { code, message };
  if (offset !== undefined) error.offset = offset;
  if (path !== undefined && path !== '') error.path = path;
  if (stack !== undefined) error.stack = stack;
  if (process.stderr.destroyed) return;
  try {
    process.stderr.write(`${JSON.stringify({ error })}\n`);
  } catch {
    // stderr closed under us: there is nowhere left to say it.
  }
}
