/**
 * `gamewire serve` stops on SIGTERM/SIGINT whatever happened to its stdout and stderr: a reader
 * that closed early (`serve … 2>&1 | head -5`), a closed stderr, a pipe nobody reads that is full
 * (writes fail with EAGAIN). Each case runs the real CLI; the shutdown backstop is set far beyond
 * the test's wait, so an exit status of 0 means the process stopped by itself, cleanly.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import {
  closeSync,
  constants,
  mkdtempSync,
  openSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
  writeSync,
} from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loadProtocols } from '../../src/protocols/registry.js';
import { BIN, cliEnv, ROOT } from '../helpers/cli.js';
import { waitFor as waitUntil } from '../helpers/wait.js';

const servers = (await loadProtocols()).filter((p) => p.server !== undefined);
const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

function tempDir(): string {
  const d = mkdtempSync(path.join(tmpdir(), 'gamewire-shutdown-'));
  dirs.push(d);
  return d;
}

/** One data folder for every run here: the js5 demo cache is generated once, not per test. */
let shared: string | undefined;
function dataDir(): string {
  shared ??= tempDir();
  return shared;
}

/** A config that puts every server (and each of its extra ports) on 127.0.0.1, port 0. */
function allServersConfig(dir: string): string {
  const config: Record<string, Record<string, unknown>> = {};
  for (const p of servers) {
    const section: Record<string, unknown> = { host: '127.0.0.1', port: 0 };
    for (const o of p.server!.options) if (/port$/i.test(o.key) && o.type === 'int') section[o.key] = 0;
    config[p.name] = section;
  }
  const file = path.join(dir, 'config.json');
  writeFileSync(file, JSON.stringify(config));
  return file;
}

/** `serve js5` on a free port, with the backstop far away (a hang must show as a hang). */
function js5Args(dir: string, port = 0): string[] {
  return [
    'serve',
    'js5',
    '--host',
    '127.0.0.1',
    '--port',
    String(port),
    '--data-dir',
    dir,
    '--shutdown-timeout-ms',
    '120000',
  ];
}

/** Resolves with the exit status, or null when the process had to be killed after `limitMs`. */
function exitOf(
  child: ChildProcess,
  limitMs: number,
): Promise<{ code: number | null; signal: string | null }> {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) {
      resolve({ code: child.exitCode, signal: child.signalCode });
      return;
    }
    const timer = setTimeout(() => child.kill('SIGKILL'), limitMs);
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal });
    });
  });
}

/** Waits until `text` has appeared on a stream. */
function waitFor(stream: NodeJS.ReadableStream, test: (seen: string) => boolean): Promise<string> {
  let seen = '';
  return new Promise((resolve, reject) => {
    const onData = (d: Buffer) => {
      seen += d.toString();
      if (test(seen)) {
        stream.off('data', onData);
        resolve(seen);
      }
    };
    stream.on('data', onData);
    stream.once('end', () => reject(new Error(`stream ended before the expected output: ${seen}`)));
  });
}

/** A free TCP port on 127.0.0.1 (bound, noted, released). */
async function freePort(): Promise<number> {
  const s = net.createServer();
  await new Promise<void>((resolve) => s.listen(0, '127.0.0.1', resolve));
  const port = (s.address() as net.AddressInfo).port;
  await new Promise<void>((resolve) => s.close(() => resolve()));
  return port;
}

/** Resolves once something accepts TCP connections on the port. */
async function waitForListener(port: number, child: ChildProcess): Promise<void> {
  await waitUntil(
    () => {
      if (child.exitCode !== null) throw new Error(`serve exited early with ${child.exitCode}`);
      return new Promise<boolean>((resolve) => {
        const s = net.connect(port, '127.0.0.1');
        s.once('connect', () => {
          s.destroy();
          resolve(true);
        });
        s.once('error', () => resolve(false));
      });
    },
    { what: `serve listening on ${port}`, timeoutMs: 60_000, intervalMs: 100 },
  );
}

/** A FIFO opened read-write and non-blocking, filled until a write would block: a full pipe nobody reads. */
function fullPipe(dir: string): { fd: number; bytes: number } {
  const fifo = path.join(dir, 'full.fifo');
  execFileSync('mkfifo', [fifo]);
  const fd = openSync(fifo, constants.O_RDWR | constants.O_NONBLOCK);
  const chunk = Buffer.alloc(4096, 0x2e);
  let bytes = 0;
  for (;;) {
    try {
      bytes += writeSync(fd, chunk);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'EAGAIN') break;
      throw err;
    }
    if (bytes > 16 * 1024 * 1024) throw new Error('the FIFO never filled');
  }
  return { fd, bytes };
}

describe('serve exits on a signal whatever happened to stdout and stderr', { timeout: 90_000 }, () => {
  it('both readers close early (`serve 2>&1 | head -5`): SIGTERM → exit 0', async () => {
    const dir = dataDir();
    const child = spawn(process.execPath, [BIN, ...js5Args(dir)], {
      cwd: ROOT,
      env: cliEnv(),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    await waitFor(child.stdout!, (s) => s.includes('gamewire: dashboard http'));
    // The readers go away, as `head` does after its lines.
    child.stdout!.destroy();
    child.stderr!.destroy();
    child.kill('SIGTERM');
    expect(await exitOf(child, 30_000)).toEqual({ code: 0, signal: null });
  });

  it('the stdout reader closes while stderr is read: the servers keep serving, SIGINT → exit 0', async () => {
    const dir = dataDir();
    const port = await freePort();
    const child = spawn(process.execPath, [BIN, ...js5Args(dir, port)], {
      cwd: ROOT,
      env: cliEnv(),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stderr = '';
    child.stderr!.on('data', (d: Buffer) => {
      stderr += d.toString();
    });
    await waitFor(child.stdout!, (s) => s.includes('gamewire: js5 tcp'));
    child.stdout!.destroy();
    // Its next stdout line (the admin line, or later "stopped") hits the closed pipe; it still serves.
    await waitForListener(port, child);
    child.kill('SIGINT');
    const exit = await exitOf(child, 30_000);
    expect(exit, stderr).toEqual({ code: 0, signal: null });
    expect(stderr).toMatch(/"msg":"stopped; js5/);
    expect(stderr).not.toMatch(/ERR_|at .*\.js:\d+/);
  });

  it('stderr is a closed descriptor: SIGTERM → exit 0', async () => {
    const dir = dataDir();
    const child = spawn('bash', ['-c', 'exec 2>&-; exec "$0" "$@"', process.execPath, BIN, ...js5Args(dir)], {
      cwd: ROOT,
      env: cliEnv(),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    await waitFor(child.stdout!, (s) => s.includes('gamewire: dashboard http'));
    child.kill('SIGTERM');
    const exit = await exitOf(child, 30_000);
    expect(exit).toEqual({ code: 0, signal: null });
  });

  it('stderr and stdout are a full pipe nobody reads (EAGAIN): SIGTERM → exit 0', async () => {
    const dir = dataDir();
    const port = await freePort();
    const pipe = fullPipe(tempDir());
    try {
      // debug logging: every connection the readiness probe makes is one more line that cannot go out.
      const child = spawn(process.execPath, [BIN, ...js5Args(dir, port), '--log-level', 'debug'], {
        cwd: ROOT,
        env: cliEnv(),
        stdio: ['ignore', pipe.fd, pipe.fd],
      });
      await waitForListener(port, child);
      child.kill('SIGTERM');
      expect(await exitOf(child, 30_000)).toEqual({ code: 0, signal: null });
    } finally {
      closeSync(pipe.fd);
    }
  });

  it('every server (what `npm start` runs), readers gone: SIGTERM → exit 0', async () => {
    const dir = dataDir();
    const child = spawn(
      process.execPath,
      [BIN, 'serve', '--config', allServersConfig(dir), '--data-dir', dir, '--shutdown-timeout-ms', '120000'],
      { cwd: ROOT, env: cliEnv(), stdio: ['ignore', 'pipe', 'pipe'] },
    );
    await waitFor(child.stdout!, (s) => s.includes('gamewire: dashboard http'));
    child.stdout!.destroy();
    child.stderr!.destroy();
    child.kill('SIGTERM');
    expect(await exitOf(child, 60_000)).toEqual({ code: 0, signal: null });
  });

  it('npm start itself, its output cut after 5 lines: SIGTERM → npm and every process under it exit', async () => {
    const dir = dataDir();
    const child = spawn(
      'npm',
      [
        'start',
        '--',
        '--config',
        allServersConfig(dir),
        '--data-dir',
        dir,
        '--shutdown-timeout-ms',
        '120000',
      ],
      { cwd: ROOT, env: cliEnv(), stdio: ['ignore', 'pipe', 'pipe'] },
    );
    await waitFor(child.stdout!, (s) => s.split('\n').length > 5 && s.includes('gamewire: dashboard http'));
    // npm's own process, the shell it runs the script in, and the gamewire process under it.
    const tree = descendants(child.pid!);
    expect(tree.length).toBeGreaterThan(0);
    child.stdout!.destroy();
    child.stderr!.destroy();
    // npm forwards the signal to its child only: the start script execs gamewire, so that child
    // is gamewire itself (behind `sh -c` it would be the shell, and gamewire would be orphaned).
    child.kill('SIGTERM');
    const exit = await exitOf(child, 60_000);
    await untilGone(tree, 60_000);
    expect(exit).toEqual({ code: 0, signal: null });
  });
});

/** Every process below `pid` (from /proc: this is Linux). */
function descendants(pid: number): number[] {
  const parentOf = new Map<number, number>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      // The command name may hold spaces: the fields after its closing parenthesis.
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      parentOf.set(Number(entry), Number(fields[1]));
    } catch {
      // gone meanwhile
    }
  }
  const out: number[] = [];
  const walk = (p: number) => {
    for (const [c, parent] of parentOf) {
      if (parent === p) {
        out.push(c);
        walk(c);
      }
    }
  };
  walk(pid);
  return out;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Waits until none of `pids` runs, or `limitMs` passed (then kills what is left). */
async function untilGone(pids: number[], limitMs: number): Promise<void> {
  await waitUntil(() => !pids.some(alive), {
    what: 'every process gone',
    timeoutMs: limitMs,
    intervalMs: 100,
  }).catch(() => undefined);
  const left = pids.filter(alive);
  for (const p of left) process.kill(p, 'SIGKILL');
  if (left.length > 0) throw new Error(`still running after ${limitMs} ms: ${left.join(', ')}`);
}

describe('the shutdown backstop', { timeout: 60_000 }, () => {
  it('a close that cannot finish ends at --shutdown-timeout-ms with status 1 and one error line', async () => {
    const dir = dataDir();
    const port = await freePort();
    const child = spawn(
      process.execPath,
      [
        BIN,
        'serve',
        'js5',
        '--host',
        '127.0.0.1',
        '--port',
        String(port),
        '--data-dir',
        dir,
        '--log-level',
        'silent',
        '--shutdown-timeout-ms',
        '300',
      ],
      { cwd: ROOT, env: cliEnv(), stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let stderr = '';
    child.stderr!.on('data', (d: Buffer) => {
      stderr += d.toString();
    });
    await waitFor(child.stdout!, (s) => s.includes('gamewire: dashboard http'));
    // A peer that never closes its side: the server's close waits up to its 2 s grace for it.
    const peer = net.connect({ port, host: '127.0.0.1', allowHalfOpen: true });
    await new Promise<void>((resolve) => peer.once('connect', () => resolve()));
    peer.on('error', () => {});
    try {
      child.kill('SIGTERM');
      const exit = await exitOf(child, 30_000);
      expect(exit, stderr).toEqual({ code: 1, signal: null });
      const lines = stderr.trim().split('\n');
      expect(lines).toHaveLength(1);
      const error = (JSON.parse(lines[0]!) as { error: { code: string; message: string } }).error;
      expect(error.code).toBe('ERR_SHUTDOWN_TIMEOUT');
      expect(error.message).toMatch(/did not stop within 300 ms of SIGTERM.*--shutdown-timeout-ms/);
    } finally {
      peer.destroy();
    }
  });
});
