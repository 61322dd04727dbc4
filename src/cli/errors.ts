/**
 * The CLI's error output. The error classes live in src/core/errors.ts so protocols can throw
 * them without importing the CLI; they are re-exported here for existing imports.
 */
export { CliError, CommandError, ConfigError, parseIntOption, UsageError } from '../core/errors.js';

/** Writes the contract's error line: `{"error":{"code":…,"message":…,"offset":…}}`. */
export function printError(code: string, message: string, offset?: number, path?: string): void {
  const error: Record<string, unknown> = { code, message };
  if (offset !== undefined) error.offset = offset;
  if (path !== undefined && path !== '') error.path = path;
  process.stderr.write(`${JSON.stringify({ error })}\n`);
}
