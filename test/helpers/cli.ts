/** Spawns the real `gamewire` command (the compiled bin) the way a script would. */
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const BIN = path.join(ROOT, 'bin/gamewire.js');

export interface CliResult {
  status: number | null;
  stdout: string;
  stderr: string;
}

export function runCli(args: readonly string[], input?: string | Buffer): CliResult {
  const r = spawnSync(process.execPath, [BIN, ...args], {
    cwd: ROOT,
    input,
    encoding: 'utf8',
    timeout: 20_000,
    env: { ...process.env, NO_COLOR: '1' },
  });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** Parses the contract's one-line error JSON from stderr. */
export function errorOf(r: CliResult): { code: string; message: string; offset?: number } {
  const lines = r.stderr.trim().split('\n');
  if (lines.length !== 1) throw new Error(`expected one stderr line, got: ${r.stderr}`);
  return (JSON.parse(lines[0]!) as { error: { code: string; message: string; offset?: number } }).error;
}
