/** Spawns the real `gamewire` command (the compiled bin) the way a script would. */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
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

/** What {@link runChild} returns: the exit, and all the output as text. */
export interface ChildOutput extends CliResult {
  /** The signal that ended the process (null if it exited). */
  signal: NodeJS.Signals | null;
  /** True if `timeoutMs` passed and the process was killed. */
  timedOut: boolean;
}

export interface RunChildOptions {
  cwd?: string;
  /** The environment (this process's by default). */
  env?: NodeJS.ProcessEnv;
  /** stdin: closed (`'ignore'`, the default) or an open pipe nobody writes to. */
  stdin?: 'ignore' | 'pipe';
  /** Killed with SIGKILL after this long (`timedOut` then says so); no limit by default. */
  timeoutMs?: number;
  /** The event that ends the run: `'close'` (the default: all output read) or `'exit'`. */
  endOn?: 'close' | 'exit';
  /** Called with the child once spawned and watched (to track it for clean-up, to signal it). */
  onSpawn?: (child: ChildProcess) => void;
  /** Called with all of stdout so far each time some comes. */
  onStdout?: (stdout: string, child: ChildProcess) => void;
}

/**
 * Runs a command to its end without blocking the event loop, collecting stdout and stderr as
 * text. Rejects only if the process could not be spawned.
 */
export function runChild(
  cmd: string,
  args: readonly string[],
  options: RunChildOptions = {},
): Promise<ChildOutput> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, {
      cwd: options.cwd,
      env: options.env,
      stdio: [options.stdin ?? 'ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    // Decoded as a stream: a character split between two chunks stays whole.
    child.stdout!.setEncoding('utf8').on('data', (d: string) => {
      stdout += d;
      options.onStdout?.(stdout, child);
    });
    child.stderr!.setEncoding('utf8').on('data', (d: string) => {
      stderr += d;
    });
    let timedOut = false;
    const timer =
      options.timeoutMs === undefined
        ? undefined
        : setTimeout(() => {
            timedOut = true;
            child.kill('SIGKILL');
          }, options.timeoutMs);
    child.once('error', (err) => {
      clearTimeout(timer);
      reject(err);
    });
    const end = (code: number | null, signal: NodeJS.Signals | null): void => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr, timedOut });
    };
    if (options.endOn === 'exit') child.once('exit', end);
    else child.once('close', end);
    // Last: its own listeners come after the ones that collect the output.
    options.onSpawn?.(child);
  });
}

/**
 * Runs `gamewire …` without blocking the event loop, for commands that talk to a server running
 * in the test's own process (`gamewire conform`).
 */
export async function runCliAsync(args: readonly string[], timeoutMs = 60_000): Promise<CliResult> {
  const { code, stdout, stderr } = await runChild(process.execPath, [BIN, ...args], {
    cwd: ROOT,
    env: cliEnv(),
    stdin: 'pipe',
    timeoutMs,
  });
  return { code, stdout, stderr };
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
