/** CLI-level errors. Protocol subcommands throw these; main() turns them into the error JSON. */
export class CliError extends Error {
  readonly code: string;
  readonly exitCode: number;

  constructor(code: string, message: string, exitCode = 1) {
    super(message);
    this.code = code;
    this.exitCode = exitCode;
  }
}

/** Bad usage: exit 2. */
export class UsageError extends CliError {
  constructor(message: string) {
    super('ERR_USAGE', message, 2);
  }
}

/** Writes the contract's error line: `{"error":{"code":…,"message":…,"offset":…}}`. */
export function printError(code: string, message: string, offset?: number, path?: string): void {
  const error: Record<string, unknown> = { code, message };
  if (offset !== undefined) error.offset = offset;
  if (path !== undefined && path !== '') error.path = path;
  process.stderr.write(`${JSON.stringify({ error })}\n`);
}

/** Parses an integer option for commander, or fails as a usage error. */
export function parseIntOption(value: string): number {
  if (!/^\d+$/.test(value)) throw new UsageError(`"${value}" is not a whole number`);
  return Number(value);
}
