/**
 * The command line off the happy path: each test reproduces one failure a new user hit, through
 * the real spawned command, and checks that it now ends with one clear line and the right exit
 * status. The cases run at once (each with its own processes, files and ports; at most 8
 * processes at a time).
 */
import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { connectionCapOption } from '../../src/cli/serve.js';
import { loadProtocols } from '../../src/protocols/registry.js';
import { RmcClient } from '../../src/protocols/rmc/index.js';
import { BIN, concurrencyLimit, errorOf, ROOT, runChild, runCliAsync } from '../helpers/cli.js';

const dir = mkdtempSync(path.join(tmpdir(), 'gamewire-ops-'));
/** The cases' processes run at once, at most 8 at a time (a burst of all would starve other files). */
const limit = concurrencyLimit(8);

/** `gamewire …` to its end, without blocking the other cases. */
function runCli(args: readonly string[]) {
  return limit(() => runCliAsync(args));
}
const children: ChildProcess[] = [];
afterAll(() => {
  for (const c of children) if (c.exitCode === null) c.kill('SIGKILL');
  rmSync(dir, { recursive: true, force: true });
});

/** A data folder of its own for each process that starts servers (the cases run at once). */
function dataDir(): string {
  return mkdtempSync(path.join(dir, 'data-'));
}

function config(name: string, value: unknown): string {
  const file = path.join(dir, name);
  writeFileSync(file, typeof value === 'string' ? value : JSON.stringify(value));
  return file;
}

/** A TCP port held by this test process for the duration of `fn`. */
async function withBusyPort<T>(fn: (port: number) => Promise<T>): Promise<T> {
  const holder = net.createServer();
  await new Promise<void>((resolve) => holder.listen(0, '127.0.0.1', resolve));
  try {
    return await fn((holder.address() as net.AddressInfo).port);
  } finally {
    holder.close();
  }
}

interface Run {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

/**
 * Spawns the CLI (`env`: the environment, this process's by default); `onStdout` may act on the
 * output so far (send a signal). Kills it after 60 s.
 */
function spawnCli(
  args: string[],
  onStdout?: (out: string, child: ChildProcess) => void,
  env?: NodeJS.ProcessEnv,
): Promise<Run> {
  return limit(() => spawnCliNow(args, onStdout, env));
}

function spawnCliNow(
  args: string[],
  onStdout: ((out: string, child: ChildProcess) => void) | undefined,
  env: NodeJS.ProcessEnv | undefined,
): Promise<Run> {
  return runChild(process.execPath, [BIN, ...args], {
    cwd: ROOT,
    env,
    timeoutMs: 60_000,
    endOn: 'exit',
    onSpawn: (child) => children.push(child),
    onStdout,
  });
}

/** Runs a shell command line to its end (without blocking the other cases). */
function sh(line: string): Promise<{ status: number | null; stdout: string; stderr: string }> {
  return limit(() => shNow(line));
}

async function shNow(line: string): Promise<{ status: number | null; stdout: string; stderr: string }> {
  const r = await runChild('sh', ['-c', line], { cwd: ROOT, onSpawn: (child) => children.push(child) });
  return { status: r.code, stdout: r.stdout, stderr: r.stderr };
}

function lastErrorLine(stderr: string): { code: string; message: string } {
  const lines = stderr.trim().split('\n');
  return (JSON.parse(lines[lines.length - 1]!) as { error: { code: string; message: string } }).error;
}

describe.concurrent('start-up failures stop everything and say what to do', () => {
  it('a busy --admin-port ends the process (no kill -9 needed), naming the flag, the key and --no-admin', async () => {
    const r = await withBusyPort((busy) =>
      spawnCli([
        'serve',
        'rmc',
        '--host',
        '127.0.0.1',
        '--port',
        '0',
        '--admin-port',
        String(busy),
        '--data-dir',
        dataDir(),
        '--log-level',
        'silent',
      ]),
    );
    expect(r.signal).toBeNull();
    expect(r.code).toBe(1);
    const e = lastErrorLine(r.stderr);
    expect(e.code).toBe('ERR_LISTEN');
    expect(e.message).toMatch(/already in use/);
    expect(e.message).toMatch(/--admin-port \(config serve\.adminPort\)/);
    expect(e.message).toMatch(/--no-admin/);
  });

  it('a game port in use is one line naming the port, the flag and the config key; no stack', async () => {
    await withBusyPort(async (busy) => {
      const r = await spawnCli([
        'serve',
        'rmc',
        '--host',
        '127.0.0.1',
        '--port',
        String(busy),
        '--data-dir',
        dataDir(),
        '--log-level',
        'silent',
      ]);
      expect(r.code).toBe(1);
      expect(r.stderr.trim().split('\n')).toHaveLength(1);
      expect(r.stderr).not.toMatch(/\n\s+at /);
      const e = errorOf({ code: r.code, stdout: r.stdout, stderr: r.stderr });
      expect(e.code).toBe('ERR_LISTEN');
      expect(e.message).toContain(`port ${busy} is already in use`);
      expect(e.message).toContain('--port (config rmc.port)');
    });
  });

  it('SIGTERM in the middle of start-up stops what started and exits 0', async () => {
    const file = config('all-ephemeral.json', await ephemeralAll());
    const r = await spawnCli(
      ['serve', '--config', file, '--data-dir', dataDir(), '--log-level', 'silent'],
      (out, child) => {
        // The first endpoint line: one server listens, the others are still starting.
        if (out.includes('gamewire: ') && !child.killed) child.kill('SIGTERM');
      },
    );
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/gamewire: stopped/);
  }, 120_000);

  it('logs start and stop at info, and the shutdown summary is one line', async () => {
    const file = config('all-ephemeral-2.json', await ephemeralAll());
    let interrupted = false;
    const r = await spawnCli(
      ['serve', '--config', file, '--data-dir', dataDir(), '--log-level', 'info'],
      (out, child) => {
        // Once: more output (the admin endpoint's line) must not send a second SIGINT.
        if (/gamewire: dashboard /.test(out) && !interrupted) {
          interrupted = true;
          setTimeout(() => child.kill('SIGINT'), 200);
        }
      },
    );
    expect(r.code, r.stderr).toBe(0);
    const logs = r.stderr
      .trim()
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as { level: number; msg: string; protocol?: string });
    const started = logs.filter((l) => l.msg === 'started').map((l) => l.protocol);
    expect(started, r.stderr).toEqual(expect.arrayContaining(['rmc', 'js5', 'unity-relay', 'nox-relay']));
    const stopped = logs.filter((l) => l.msg.startsWith('stopped'));
    expect(stopped, r.stderr).toHaveLength(1);
    expect(stopped[0]!.level).toBe(30);
    expect(stopped[0]!.msg).toMatch(/^stopped; rmc.*; js5.*; unity-relay.*; nox-relay/);
  }, 120_000);
});

let example: Promise<string> | undefined;

/** A config putting every server on 127.0.0.1, port 0. Built from `gamewire config example` (run once). */
async function ephemeralAll(): Promise<Record<string, Record<string, unknown>>> {
  example ??= runCli(['config', 'example']).then((r) => r.stdout);
  const stripped = (await example).replace(/^\s*\/\/.*$/gm, '');
  const parsed = JSON.parse(stripped) as Record<string, Record<string, unknown>>;
  const out: Record<string, Record<string, unknown>> = {};
  for (const [section, values] of Object.entries(parsed)) {
    if (section === 'serve') continue;
    const s: Record<string, unknown> = { host: '127.0.0.1' };
    for (const [k, v] of Object.entries(values)) if (/port$/i.test(k) && typeof v === 'number') s[k] = 0;
    out[section] = s;
  }
  return out;
}

describe.concurrent('config files are validated, each error naming the key and the file', () => {
  const cases: [string, unknown, RegExp][] = [
    [
      'port-abc.json',
      { rmc: { port: 'abc' } },
      /rmc\.port in .*port-abc\.json: expected a whole number, got "abc"/,
    ],
    [
      'port-range.json',
      { rmc: { port: 70000 } },
      /rmc\.port in .*port-range\.json: 70000 is out of range 0\.\.65535/,
    ],
    [
      'unknown-key.json',
      { rmc: { prot: 1 } },
      /unknown-key\.json: unknown key "rmc\.prot" \(did you mean "port"\?\)/,
    ],
    [
      'unknown-section.json',
      { rcm: {} },
      /unknown-section\.json: unknown section "rcm" \(did you mean "rmc"\?\)/,
    ],
    [
      'bad-choice.json',
      { serve: { logLevel: 'loud' } },
      /serve\.logLevel in .*bad-choice\.json: "loud" is not one of/,
    ],
    ['not-json.json', '{ "rmc": ', /not-json\.json is not valid JSON/],
  ];
  for (const [name, value, message] of cases) {
    it(`${name}: exit 2 before anything starts`, async () => {
      const r = await runCli(['serve', 'rmc', '--config', config(name, value), '--data-dir', dir]);
      expect(r.code).toBe(2);
      expect(r.stdout).not.toMatch(/gamewire: rmc/);
      const e = errorOf(r);
      expect(e.code).toBe('ERR_CONFIG');
      expect(e.message).toMatch(message);
    });
  }

  it('config check validates without starting anything, and accepts // comments', async () => {
    const ok = config(
      'ok.json',
      '// a comment\n{ "serve": { "logLevel": "warn" }, /* inline */ "rmc": { "port": 9 } }',
    );
    const r = await runCli(['config', 'check', ok]);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/is valid/);
    expect((await runCli(['config', 'check', config('bad.json', { rmc: { port: -1 } })])).code).toBe(2);
  });

  it('config example is a complete file that config check accepts', async () => {
    const r = await runCli(['config', 'example']);
    expect(r.code).toBe(0);
    for (const section of ['serve', 'rmc', 'js5', 'unity-relay', 'nox-relay'])
      expect(r.stdout).toContain(`"${section}": {`);
    const file = config('example.json', r.stdout);
    expect((await runCli(['config', 'check', file])).code).toBe(0);
  });

  it('secrets come from GAMEWIRE_ environment variables and are checked like flags', async () => {
    const r = await spawnCli(['serve', 'rmc', '--data-dir', dir], undefined, {
      ...process.env,
      GAMEWIRE_LOG_LEVEL: 'loud',
    });
    expect(r.code).toBe(2);
    expect(errorOf({ code: r.code, stdout: r.stdout, stderr: r.stderr }).message).toMatch(
      /GAMEWIRE_LOG_LEVEL: "loud" is not one of/,
    );
  });
});

describe.concurrent('usage errors exit 2 with the valid choices, never help text or a stack', () => {
  it('a command group without its subcommand lists the subcommands', async () => {
    const r = await runCli(['js5']);
    expect(r.code).toBe(2);
    const e = errorOf(r);
    expect(e.message).not.toContain('outputHelp');
    expect(e.message).toMatch(/gamewire js5 needs a command: one of cache, download/);
    expect((await runCli(['js5', 'nope'])).code).toBe(2);
  });

  it('--log-level loud lists the levels', async () => {
    const r = await runCli(['serve', '--log-level', 'loud']);
    expect(r.code).toBe(2);
    expect(errorOf(r).message).toMatch(/fatal, error, warn, info, debug, trace, silent/);
  });

  it('an admin endpoint beyond loopback needs an admin token (also under its former flag names)', async () => {
    for (const args of [
      ['--admin-host', '0.0.0.0'],
      ['--metrics-port', '0', '--metrics-host', '0.0.0.0'],
    ]) {
      const r = await runCli(['serve', 'rmc', ...args, '--data-dir', dir]);
      expect(r.code).toBe(2);
      expect(errorOf(r).message).toMatch(/--admin-token \(or GAMEWIRE_ADMIN_TOKEN\)/);
    }
  });

  it('--port 70000 is a usage error (exit 2)', async () => {
    const r = await runCli(['serve', 'rmc', '--port', '70000']);
    expect(r.code).toBe(2);
    expect(errorOf(r).message).toMatch(/--port: 70000 is out of range 0\.\.65535/);
  });

  it('an unknown protocol lists the known ones', async () => {
    const r = await runCli(['decode', 'nope', '--hex', '00']);
    expect(r.code).toBe(2);
    expect(errorOf(r).message).toMatch(/known: rmc, .*js5/);
  });
});

describe.concurrent('pipes between gamewire commands', () => {
  it('decode | encode - works on a real pipe', async () => {
    const hex = '00000040460000000f00057072696e7473000548656c6c6f';
    const node = JSON.stringify(process.execPath);
    const bin = JSON.stringify(BIN);
    const r = await sh(`${node} ${bin} decode vcmp-rpc --hex ${hex} | ${node} ${bin} encode vcmp-rpc -`);
    expect(r.stderr).toBe('');
    expect(r.status).toBe(0);
    expect(r.stdout).toBe(`${hex}\n`);
  });

  it('a reader that goes away early ends the writer quietly (no EPIPE stack)', async () => {
    const node = JSON.stringify(process.execPath);
    const bin = JSON.stringify(BIN);
    // `config reference` writes far more than one line; `head -c 1` closes the pipe after one byte.
    const r = await sh(`${node} ${bin} config reference | head -c 1 >/dev/null; sleep 1`);
    expect(r.stderr).not.toMatch(/EPIPE|\n\s+at /);
  });
});

describe.concurrent('connection lifecycle logs', () => {
  it('logs each connection open and close at debug, and a full server at info', async () => {
    let remote = '';
    const r = await spawnCli(
      [
        'serve',
        'rmc',
        '--host',
        '127.0.0.1',
        '--port',
        '0',
        '--rmc-max-connections',
        '1',
        '--data-dir',
        dataDir(),
        '--log-level',
        'debug',
      ],
      (out, child) => {
        const m = /gamewire: rmc tcp 127\.0\.0\.1:(\d+)/.exec(out);
        if (m === null || remote !== '') return;
        remote = 'connecting';
        const port = Number(m[1]);
        const first = net.connect(port, '127.0.0.1', () => {
          remote = `127.0.0.1:${first.localPort}`;
          // A second connection while the first is open: refused, the server holds 1.
          const second = net.connect(port, '127.0.0.1');
          second.on('error', () => {});
          second.on('close', () => {
            first.end();
            first.on('close', () => setTimeout(() => child.kill('SIGTERM'), 300));
          });
        });
      },
    );
    expect(r.code, r.stderr).toBe(0);
    const logs = r.stderr
      .trim()
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as { level: number; msg: string; remote?: string; reason?: string });
    expect(logs.find((l) => l.msg === 'connection open' && l.remote === remote)?.level).toBe(20);
    expect(logs.find((l) => l.msg === 'connection closed' && l.remote === remote)?.level).toBe(20);
    const full = logs.find((l) => l.msg.startsWith('connection refused: rmc (tcp) is full'));
    expect(full?.level).toBe(30);
    expect(full?.msg).toMatch(/--rmc-max-connections, config rmc\.maxConnections\)$/);
  }, 120_000);

  it('a full PRUDP endpoint is named in the refusal, with its own cap (not the TCP one)', async () => {
    let started = false;
    let secondRefused: unknown;
    const r = await spawnCli(
      [
        'serve',
        'rmc',
        '--host',
        '127.0.0.1',
        '--port',
        '0',
        '--prudp-max-connections',
        '1',
        '--data-dir',
        dataDir(),
      ],
      (out, child) => {
        const m = /gamewire: rmc udp 127\.0\.0\.1:(\d+)/.exec(out);
        if (m === null || started) return;
        started = true;
        const connect = (timeoutMs: number) =>
          RmcClient.connect({
            host: '127.0.0.1',
            port: Number(m[1]),
            transport: 'prudp',
            accessKey: 'yl4NG7qZ',
            timeoutMs,
          });
        void (async () => {
          const first = await connect(20_000);
          try {
            // The one place is taken by an open connection: the second SYN is refused as full.
            await connect(2_000).then(
              (c) => c.close(),
              (err: unknown) => {
                secondRefused = err;
              },
            );
          } finally {
            await first.close();
            child.kill('SIGTERM');
          }
        })().catch(() => child.kill('SIGTERM'));
      },
    );
    expect(r.code, r.stderr).toBe(0);
    expect(secondRefused).toBeDefined();
    const logs = r.stderr
      .trim()
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as { level: number; msg: string; transport?: string });
    const full = logs.find((l) => l.msg.startsWith('connection refused: rmc'));
    expect(full).toMatchObject({ level: 30, transport: 'prudp' });
    expect(full?.msg).toBe(
      'connection refused: rmc (prudp) is full (raise --prudp-max-connections, config rmc.prudpMaxConnections)',
    );
  }, 120_000);

  it('the cap named for a refusal is the one for its transport, else the protocol-wide one', async () => {
    const protocols = await loadProtocols();
    const optionsOf = (name: string) => protocols.find((p) => p.name === name)!.server!.options;
    expect(connectionCapOption(optionsOf('rmc'), 'prudp')?.key).toBe('prudpMaxConnections');
    expect(connectionCapOption(optionsOf('rmc'), 'tcp')?.key).toBe('maxConnections');
    expect(connectionCapOption(optionsOf('nox-relay'), 'udp')?.key).toBe('maxClients');
    expect(connectionCapOption(optionsOf('nox-relay'), 'tcp')?.key).toBe('maxClients');
    expect(connectionCapOption(optionsOf('js5'), 'tcp')?.key).toBe('maxClients');
    // A transport kind a plug-in brings (core does not know it): its own cap for it, the
    // protocol-wide one for the others.
    const plugin = [
      { key: 'quicMaxConnections', type: 'int' },
      { key: 'maxConnections', type: 'int' },
    ] as unknown as Parameters<typeof connectionCapOption>[0];
    expect(connectionCapOption(plugin, 'quic')?.key).toBe('quicMaxConnections');
    expect(connectionCapOption(plugin, 'tcp')?.key).toBe('maxConnections');
  });
});

describe.concurrent("clients' commands say what to do when no server answers", () => {
  /** A port nothing listens on. */
  async function closedPort(): Promise<number> {
    const s = net.createServer();
    await new Promise<void>((resolve) => s.listen(0, '127.0.0.1', resolve));
    const port = (s.address() as net.AddressInfo).port;
    await new Promise<void>((resolve) => s.close(() => resolve()));
    return port;
  }

  it('unity-relay host (an HTTP API: "fetch failed" before)', async () => {
    const port = await closedPort();
    const r = await runCli(['unity-relay', 'host', '--api', `http://127.0.0.1:${port}`]);
    expect(r.code).toBe(1);
    expect(errorOf(r)).toEqual({
      code: 'ERR_CONNECT',
      message: `no server at http://127.0.0.1:${port}: is \`gamewire serve\` running?`,
    });
  });

  it('rmc call (TCP)', async () => {
    const port = await closedPort();
    const r = await runCli([
      'rmc',
      'call',
      '--host',
      '127.0.0.1',
      '--port',
      String(port),
      'CloudServersProtocol::GetDatacenters_V1',
      '--args',
      '{}',
    ]);
    expect(r.code).toBe(1);
    expect(errorOf(r).message).toBe(`no server at 127.0.0.1:${port}: is \`gamewire serve\` running?`);
  });
});
