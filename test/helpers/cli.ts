/** Spawns the real `gamewire` command (the compiled bin) the way a script would. */
import { spawn, spawnSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const BIN = path.join(ROOT, 'bin/gamewire.js');

export interface CliResult {
  /** Exit code (null if the process was killed). */
  code: number | null;
  stdout: string;
  stderr: string;
}

/**
 * The environment for a spawned `gamewire`: the admin endpoint on a free port (never 9100: many
 * `serve` processes run in parallel) unless the test set GAMEWIRE_ADMIN_PORT itself.
 */
export function cliEnv(extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  return {
    ...process.env,
    GAMEWIRE_ADMIN_PORT: process.env.GAMEWIRE_ADMIN_PORT ?? '0',
    NO_COLOR: '1',
    ...extra,
  };
}

/** Runs `gamewire …` to completion with optional stdin (text or raw bytes). */
export function runCli(args: readonly string[], input?: string | Buffer, timeoutMs = 60_000): CliResult {
  const r = spawnSync(process.execPath, [BIN, ...args], {
    cwd: ROOT,
    // Text input is passed as UTF-8 bytes: with `encoding: 'buffer'` spawnSync would not encode it.
    input: typeof input === 'string' ? Buffer.from(input, 'utf8') : input,
    encoding: 'buffer',
    timeout: timeoutMs,
    env: cliEnv(),
  });
  return { code: r.status, stdout: r.stdout.toString(), stderr: r.stderr.toString() };
}

/**
 * Runs `gamewire …` without blocking the event loop, for commands that talk to a server running
 * in the test's own process (`gamewire conform`).
 */
export function runCliAsync(args: readonly string[], timeoutMs = 60_000): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [BIN, ...args], { cwd: ROOT, env: cliEnv() });
    const out: Buffer[] = [];
    const err: Buffer[] = [];
    child.stdout.on('data', (d: Buffer) => out.push(d));
    child.stderr.on('data', (d: Buffer) => err.push(d));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout: Buffer.concat(out).toString(), stderr: Buffer.concat(err).toString() });
    });
  });
}

/** Parses the contract's one-line error JSON from stderr. */
export function errorOf(r: CliResult): { code: string; message: string; offset?: number } {
  const lines = r.stderr.trim().split('\n');
  if (lines.length !== 1) throw new Error(`expected one stderr line, got: ${r.stderr}`);
  return (JSON.parse(lines[0]!) as { error: { code: string; message: string; offset?: number } }).error;
}

/**
 * A limit of `n` at once: the returned function runs `fn` when fewer than `n` of the functions
 * passed to it are running, else once one ends (in the order they came). For a test file that runs
 * many commands at once, so that a burst of processes does not starve the files running beside it.
 */
export function concurrencyLimit(n: number): <T>(fn: () => Promise<T>) => Promise<T> {
  let running = 0;
  const waiting: (() => void)[] = [];
  return async (fn) => {
    if (running < n) running++;
    // A slot is handed over by the run that ends (`running` stays as it is).
    else await new Promise<void>((resolve) => waiting.push(resolve));
    try {
      return await fn();
    } finally {
      const next = waiting.shift();
      if (next === undefined) running--;
      else next();
    }
  };
}
