/**
 * How a `gamewire unity-relay host` / `join` chat ends, through the real commands: the relay
 * dies (both sides say so within --relay-timeout-ms and exit 1, typing meanwhile never prints a
 * stack trace), the host leaves or vanishes (the joiner says so and exits 0).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, it } from 'vitest';
import { BIN, cliEnv, ROOT } from '../../helpers/cli.js';

interface Proc {
  child: ChildProcess;
  stdout: () => string;
  stderr: () => string;
  exit: Promise<number | null>;
}

const dataDir = mkdtempSync(path.join(tmpdir(), 'gamewire-chat-'));
afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

/**
 * The processes of one test (the tests run at once): `start` spawns one, and whatever is still
 * running when the test ends is killed.
 */
function processes(onTestFinished: (fn: () => void) => void): (args: string[]) => Proc {
  const children: ChildProcess[] = [];
  onTestFinished(() => {
    for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  });
  return (args) => start(args, children);
}

function start(args: string[], children: ChildProcess[]): Proc {
  const child = spawn(process.execPath, [BIN, ...args], {
    cwd: ROOT,
    env: cliEnv(),
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  children.push(child);
  let out = '';
  let err = '';
  child.stdout!.on('data', (d: Buffer) => {
    out += d.toString();
  });
  child.stderr!.on('data', (d: Buffer) => {
    err += d.toString();
  });
  const exit = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  return { child, stdout: () => out, stderr: () => err, exit };
}

/** Resolves when `re` matches what `get` returns (checked as output arrives). */
function waitFor(p: Proc, which: 'stdout' | 'stderr', re: RegExp, ms = 30_000): Promise<RegExpMatchArray> {
  const get = which === 'stdout' ? p.stdout : p.stderr;
  const stream = which === 'stdout' ? p.child.stdout! : p.child.stderr!;
  return new Promise((resolve, reject) => {
    const check = () => {
      const m = get().match(re);
      if (m === null) return false;
      stream.off('data', check);
      clearTimeout(timer);
      resolve(m);
      return true;
    };
    const timer = setTimeout(() => {
      stream.off('data', check);
      reject(new Error(`no ${re} on ${which}; stdout: ${p.stdout()} stderr: ${p.stderr()}`));
    }, ms);
    if (!check()) stream.on('data', check);
  });
}

/** Exit status, or a failure after `ms` (the process is killed by afterEach). */
async function exitWithin(p: Proc, ms: number): Promise<number | null> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new Error(`still running after ${ms} ms; stdout: ${p.stdout()} stderr: ${p.stderr()}`)),
      ms,
    );
  });
  try {
    return await Promise.race([p.exit, late]);
  } finally {
    clearTimeout(timer);
  }
}

async function freeTcpPort(): Promise<number> {
  const s = net.createServer();
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', () => r()));
  const port = (s.address() as net.AddressInfo).port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

async function startRelay(
  start: (args: string[]) => Proc,
  extra: string[] = [],
): Promise<{ relay: Proc; api: string }> {
  const relay = start([
    'serve',
    'unity-relay',
    '--host',
    '127.0.0.1',
    '--port',
    '0',
    '--api-port',
    '0',
    '--dtls-port',
    '0',
    '--wss-port',
    '0',
    '--log-level',
    'warn',
    '--no-admin',
    '--data-dir',
    // Its own: relays starting at once would each write the self-signed wss certificate.
    mkdtempSync(path.join(dataDir, 'relay-')),
    ...(extra.includes('--ws-port') ? [] : ['--ws-port', '0']),
    ...extra,
  ]);
  const m = await waitFor(relay, 'stdout', /unity-relay http 127\.0\.0\.1:(\d+)/);
  return { relay, api: `http://127.0.0.1:${m[1]}` };
}

/** A host and a joiner chatting: returns both once a line went from the joiner to the host. */
async function startChat(
  start: (args: string[]) => Proc,
  api: string,
  flags: string[],
): Promise<{ host: Proc; join: Proc }> {
  const host = start(['unity-relay', 'host', '--api', api, ...flags]);
  const code = (await waitFor(host, 'stdout', /^([A-Z2-9]{6})$/m))[1]!;
  const join = start(['unity-relay', 'join', code, '--api', api, ...flags]);
  await waitFor(join, 'stderr', /connected to host/);
  join.child.stdin!.write('hello host\n');
  await waitFor(host, 'stdout', /\] hello host/);
  return { host, join };
}

/** The last stderr line, parsed as the CLI's error line. */
function lastError(p: Proc): { code: string; message: string } {
  const last = p.stderr().trim().split('\n').at(-1)!;
  return (JSON.parse(last) as { error: { code: string; message: string } }).error;
}

const noStack = /^\s+at .+[:(]\d+/m;
const FAST = ['--ping-interval-ms', '300', '--relay-timeout-ms', '2500'];

// The tests run at once, each with processes (and a relay) of its own.
describe.concurrent('the chat demo when the relay dies', () => {
  for (const transport of ['udp', 'ws'] as const) {
    it(`over ${transport}: host and joiner say the relay is gone, exit 1; typing meanwhile prints no stack trace`, async ({
      expect,
      onTestFinished,
    }) => {
      const start = processes(onTestFinished);
      const wsPort = await freeTcpPort();
      const { relay, api } = await startRelay(start, ['--ws-port', String(wsPort)]);
      const relayPort =
        transport === 'ws' ? String(wsPort) : relay.stdout().match(/unity-relay udp 127\.0\.0\.1:(\d+)/)![1];
      const { host, join } = await startChat(start, api, [...FAST, '--transport', transport]);
      relay.child.kill('SIGKILL');
      await relay.exit;
      // Typing while the relay is gone, before and after the clients give up on it.
      join.child.stdin!.write('anyone there?\n');
      host.child.stdin!.write('host here\n');
      for (const p of [host, join]) {
        expect(await exitWithin(p, 20_000)).toBe(1);
        const error = lastError(p);
        expect(error.code).toBe('ERR_RELAY_LOST');
        expect(error.message).toContain(`the relay at 127.0.0.1:${relayPort} (${transport})`);
        expect(p.stderr()).not.toMatch(noStack);
        expect(p.stdout()).not.toMatch(noStack);
      }
    }, 90_000);
  }
});

describe.concurrent('the chat demo when the host goes', () => {
  it('the host ends (stdin closed): the joiner says the host left and exits 0', async ({
    expect,
    onTestFinished,
  }) => {
    const start = processes(onTestFinished);
    const { relay, api } = await startRelay(start);
    const { host, join } = await startChat(start, api, FAST);
    host.child.stdin!.end();
    expect(await exitWithin(host, 20_000)).toBe(0);
    await waitFor(join, 'stderr', /the host left/);
    expect(await exitWithin(join, 20_000)).toBe(0);
    relay.child.kill('SIGTERM');
    expect(await exitWithin(relay, 20_000)).toBe(0);
  }, 90_000);

  it('the host vanishes (killed): its allocation times out on the relay, and the joiner exits 0', async ({
    expect,
    onTestFinished,
  }) => {
    const start = processes(onTestFinished);
    const { relay, api } = await startRelay(start, ['--unity-idle-timeout-ms', '1500']);
    const { host, join } = await startChat(start, api, FAST);
    host.child.kill('SIGKILL');
    await waitFor(join, 'stderr', /the host left/);
    expect(await exitWithin(join, 20_000)).toBe(0);
    // It left because the host's allocation ended, not because its own did.
    expect(join.stderr()).not.toMatch(/relay ERROR/);
    relay.child.kill('SIGTERM');
    await relay.exit;
  }, 90_000);
});

describe.concurrent('chat flags', () => {
  it('--relay-timeout-ms must exceed 3 × --ping-interval-ms: usage error, exit 2', async ({
    expect,
    onTestFinished,
  }) => {
    const p = processes(onTestFinished)([
      'unity-relay',
      'join',
      'ABCDEF',
      '--api',
      'http://127.0.0.1:9',
      '--ping-interval-ms',
      '300',
      '--relay-timeout-ms',
      '900',
    ]);
    expect(await exitWithin(p, 20_000)).toBe(2);
    expect(lastError(p)).toMatchObject({ code: 'ERR_USAGE' });
    expect(lastError(p).message).toMatch(
      /--relay-timeout-ms \(900\) must be more than 3 × --ping-interval-ms/,
    );
  }, 30_000);
});
