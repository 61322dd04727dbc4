/**
 * Two `gamewire serve` processes on one machine (issue 21 item 2), through the real command with
 * its real defaults: the admin endpoint's 9100 (GAMEWIRE_ADMIN_PORT is removed from the
 * children's environment), unity-relay's transport and API ports derived from `--port`. A port
 * nobody set never stops the main job; a port someone set that is taken stops `serve` with one
 * line naming the flag, before anything is announced in Redis.
 *
 * The default admin port is made busy by this test holding 127.0.0.1:9100 itself; when another
 * process on the machine already holds it, that is just as busy (the assertions that need "9100
 * is ours" say so).
 *
 * The cases run at once, each with its own processes, ports and Redis; those that need 9100 taken
 * (held for them all) run before the one that needs it free, and every other case sets its admin
 * port (or 0), so never takes 9100.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import dgram from 'node:dgram';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it, type TestContext, vi } from 'vitest';
import { probeServerBuild } from '../../src/protocols/js5/client.js';
import { NoxRelayClient } from '../../src/protocols/nox-relay/client.js';
import { RelayApiClient, relayServerData, UnityRelayClient } from '../../src/protocols/unity-relay/index.js';
import { BIN, concurrencyLimit, ROOT } from '../helpers/cli.js';
import { freePort, type RedisServer, startRedis } from '../helpers/redis.js';
import { chat, fast, SECRET } from '../protocols/unity-relay/fleet-helpers.js';

const ADMIN_DEFAULT = 9100;
const dir = mkdtempSync(path.join(tmpdir(), 'gamewire-side-by-side-'));
const secretFile = path.join(dir, 'relay-secret');
writeFileSync(secretFile, `${SECRET}\n`, { mode: 0o600 });

afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
});

/** The children's environment: no GAMEWIRE_ADMIN_PORT, so the real default applies. */
function defaultEnv(extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, NO_COLOR: '1', ...extra };
  if (!('GAMEWIRE_ADMIN_PORT' in extra)) delete env.GAMEWIRE_ADMIN_PORT;
  return env;
}

interface Served {
  child: ChildProcess;
  stdout: string;
  stderr: string;
  /** The dashboard's port, from the start-up line. */
  admin: number;
  /** `<protocol> <transport> <port>` of every endpoint line. */
  lines: string[];
}

/**
 * At most 6 `serve` processes starting at once (until each printed its dashboard line, or exited):
 * a burst of all the cases' would starve the test files running beside this one.
 */
const starting = concurrencyLimit(6);

/**
 * What one case starts, stopped when the case ends (the cases run at once: each cleans up only
 * its own): `serve` resolves once the process printed its dashboard line (the last one);
 * `serveFails` runs a `serve` expected to fail and resolves with its exit code and output.
 */
function scope(onTestFinished: TestContext['onTestFinished']) {
  const children: ChildProcess[] = [];
  const clients: UnityRelayClient[] = [];
  onTestFinished(async () => {
    await Promise.all(clients.map((c) => c.close()));
    await Promise.all(children.map((c) => stop(c)));
  });
  const spawnServe = (args: string[], env: NodeJS.ProcessEnv) => {
    const child = spawn(
      process.execPath,
      [BIN, 'serve', ...args, '--data-dir', dataDir(), '--log-level', 'warn'],
      {
        cwd: ROOT,
        env,
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    children.push(child);
    return child;
  };

  function serve(args: string[], env: NodeJS.ProcessEnv = defaultEnv()): Promise<Served> {
    return starting(() => serveNow(args, env));
  }

  function serveNow(args: string[], env: NodeJS.ProcessEnv): Promise<Served> {
    const child = spawnServe(args, env);
    let stdout = '';
    let stderr = '';
    child.stderr!.on('data', (d: Buffer) => {
      stderr += d.toString();
    });
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`serve did not start: ${stdout}${stderr}`)), 60_000);
      child.stdout!.on('data', (d: Buffer) => {
        stdout += d.toString();
        const m = /^gamewire: dashboard http:\/\/127\.0\.0\.1:(\d+)\/.*\n/m.exec(stdout);
        if (m !== null) {
          clearTimeout(timer);
          resolve({
            child,
            stdout,
            // Read live: warnings go to stderr, which may arrive after stdout's dashboard line.
            get stderr() {
              return stderr;
            },
            admin: Number(m[1]),
            lines: stdout.trim().split('\n'),
          });
        }
      });
      child.once('exit', (code) => {
        clearTimeout(timer);
        reject(new Error(`serve exited with ${code}: ${stdout}${stderr}`));
      });
    });
  }

  function serveFails(
    args: string[],
    env: NodeJS.ProcessEnv = defaultEnv(),
  ): Promise<{ code: number | null; stdout: string; stderr: string }> {
    return starting(() => serveFailsNow(args, env));
  }

  function serveFailsNow(
    args: string[],
    env: NodeJS.ProcessEnv,
  ): Promise<{ code: number | null; stdout: string; stderr: string }> {
    const child = spawnServe(args, env);
    let stdout = '';
    let stderr = '';
    child.stdout!.on('data', (d: Buffer) => {
      stdout += d.toString();
    });
    child.stderr!.on('data', (d: Buffer) => {
      stderr += d.toString();
    });
    return new Promise((resolve) => {
      const timer = setTimeout(() => child.kill('SIGKILL'), 60_000);
      child.once('exit', (code) => {
        clearTimeout(timer);
        resolve({ code, stdout, stderr });
      });
    });
  }

  return { serve, serveFails, clients };
}

/** A redis-server of the case's own (its keys are its own), stopped when the case ends. */
async function ownRedis(onTestFinished: TestContext['onTestFinished']): Promise<RedisServer | undefined> {
  const redis = await startRedis();
  onTestFinished(async () => {
    await redis?.dispose();
  });
  return redis;
}

let dataDirs = 0;
/** A data folder per process (each relay generates its own wss certificate). */
function dataDir(): string {
  return path.join(dir, `data-${++dataDirs}`);
}

function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const timer = setTimeout(() => child.kill('SIGKILL'), 15_000);
    child.once('exit', () => {
      clearTimeout(timer);
      resolve();
    });
    child.kill('SIGTERM');
  });
}

/**
 * Holds TCP `port` while `serve` runs with `args`, expecting it to stop: exit 1 and one
 * ERR_LISTEN line naming the port and `flag`.
 */
async function expectBusyTcpPortStops(
  serveFails: ReturnType<typeof scope>['serveFails'],
  port: number,
  args: string[],
  env: NodeJS.ProcessEnv,
  flag: string,
): Promise<void> {
  const held = await hold(port, ['tcp']);
  try {
    const r = await serveFails(args, env);
    expect(r.code).toBe(1);
    const e = errorLine(r.stderr);
    expect(e.code).toBe('ERR_LISTEN');
    expect(e.message).toContain(`port ${port} is already in use`);
    expect(e.message).toContain(flag);
  } finally {
    held.close();
  }
}

/** The one JSON error line of a failed command. */
function errorLine(stderr: string): { code: string; message: string } {
  const lines = stderr.trim().split('\n');
  expect(lines, stderr).toHaveLength(1);
  expect(stderr).not.toMatch(/\n\s+at /);
  return (JSON.parse(lines[0]!) as { error: { code: string; message: string } }).error;
}

/** Holds 127.0.0.1:`port` over TCP (UDP too with `udp`); `held` false when someone else has it. */
async function hold(
  port: number,
  kinds: ('tcp' | 'udp')[] = ['tcp'],
): Promise<{ held: boolean; close(): void }> {
  const closers: (() => void)[] = [];
  let held = true;
  for (const kind of kinds) {
    if (kind === 'tcp') {
      const s = net.createServer();
      const ok = await new Promise<boolean>((resolve) => {
        s.once('error', () => resolve(false));
        s.listen(port, '127.0.0.1', () => resolve(true));
      });
      if (ok) closers.push(() => s.close());
      else held = false;
    } else {
      const s = dgram.createSocket('udp4');
      const ok = await new Promise<boolean>((resolve) => {
        s.once('error', () => resolve(false));
        s.bind(port, '127.0.0.1', () => resolve(true));
      });
      if (ok) closers.push(() => s.close());
      else held = false;
    }
  }
  return {
    held,
    close: () => {
      for (const c of closers) c();
    },
  };
}

/** Every relay base a case has taken: the cases run at once, each on ports of its own. */
const reserved: number[] = [];

/**
 * A base port P where P..P+3 (TCP and UDP) and P+80 (TCP) are free now: a relay's derived ports.
 * Below the ephemeral range (32768 and up), so no outgoing connection takes one meanwhile, and
 * away from every range another case took.
 */
async function freeRelayBase(): Promise<number> {
  for (let attempt = 0; attempt < 200; attempt++) {
    const base = 20_000 + Math.floor(Math.random() * 12_000);
    if (reserved.some((a) => Math.abs(a - base) < 100)) continue;
    reserved.push(base);
    const holds = [];
    let ok = true;
    for (const p of [base, base + 1, base + 2, base + 3]) {
      const h = await hold(p, ['tcp', 'udp']);
      holds.push(h);
      if (!h.held) ok = false;
    }
    const api = await hold(base + 80, ['tcp']);
    holds.push(api);
    for (const h of holds) h.close();
    if (ok && api.held) return base;
  }
  throw new Error('no free range of relay ports');
}

async function health(port: number): Promise<number> {
  return (await fetch(`http://127.0.0.1:${port}/health`)).status;
}

/** The protocols the dashboard at `port` lists (so we know which process answered). */
async function servedBy(port: number): Promise<string[]> {
  const r = (await (await fetch(`http://127.0.0.1:${port}/api/servers`)).json()) as {
    servers: { protocol: string }[];
  };
  return r.servers.map((s) => s.protocol);
}

async function redisKeys(redis: RedisServer): Promise<string[]> {
  const { Redis } = await import('ioredis');
  const c = new Redis(redis.url);
  try {
    return await c.keys('*');
  } finally {
    c.disconnect();
  }
}

/** The environment of a process on `redis` (both fleet protocols' stores). */
function redisEnv(redis: RedisServer, extra: NodeJS.ProcessEnv = {}): NodeJS.ProcessEnv {
  return defaultEnv({ GAMEWIRE_UNITY_RELAY_REDIS: redis.url, GAMEWIRE_RMC_REDIS: redis.url, ...extra });
}

describe.concurrent('two gamewire serve processes on one machine, default flags but --port', () => {
  // The cases that need 9100 taken (held for them all), then the one that needs it free; the
  // other cases never take 9100 (their admin port is set, or 0) and run alongside.
  describe.concurrent('the default admin port, 9100', () => {
    describe.concurrent('9100 taken (held by this test for these cases)', () => {
      let busy: Awaited<ReturnType<typeof hold>>;
      beforeAll(async () => {
        busy = await hold(ADMIN_DEFAULT);
      });
      afterAll(() => busy?.close());

      it('js5 and nox-relay both start and serve; the dashboard that finds 9100 taken moves and says where', async ({
        onTestFinished,
      }) => {
        const { serve } = scope(onTestFinished);
        const [js5Port, noxPort] = [await freePort(), await freePort()];
        const [js5, nox] = await Promise.all([
          serve(['js5', '--host', '127.0.0.1', '--port', String(js5Port)]),
          serve(['nox-relay', '--host', '127.0.0.1', '--port', String(noxPort)]),
        ]);
        for (const s of [js5, nox]) {
          if (busy.held) {
            expect(s.admin).not.toBe(ADMIN_DEFAULT);
            expect(s.lines.at(-1)).toMatch(/port 9100 was in use\)$/);
            await vi.waitFor(() => expect(s.stderr).toMatch(/port 9100 is in use/), { timeout: 15_000 });
          }
          expect(await health(s.admin)).toBe(200);
        }
        expect(js5.admin).not.toBe(nox.admin);
        expect(await servedBy(js5.admin)).toEqual(['js5']);
        expect(await servedBy(nox.admin)).toEqual(['nox-relay']);
        // Each serves its own protocol.
        expect(await probeServerBuild({ host: '127.0.0.1', port: js5Port, timeoutMs: 10_000 })).toBeDefined();
        const client = new NoxRelayClient({ host: '127.0.0.1', port: noxPort });
        await client.connect();
        try {
          expect((await client.handshake()).type).toBe('Handshake');
        } finally {
          await client.close();
        }
      }, 120_000);

      it('two unity-relays with different --port derive their DTLS/WS/WSS (+1..+3) and API (+80) ports and relay', async ({
        onTestFinished,
      }) => {
        const { serve, clients } = scope(onTestFinished);
        const a = await freeRelayBase();
        const b = await freeRelayBase();
        // One on each data plane (auto: native where it is built; its DTLS port is the native socket's).
        const relays = await Promise.all(
          [
            [a, 'auto'],
            [b, 'js'],
          ].map(([p, plane]) =>
            serve(['unity-relay', '--host', '127.0.0.1', '--port', String(p), '--dataplane', String(plane)]),
          ),
        );
        for (const [i, base] of [a, b].entries()) {
          const out = relays[i]!.stdout;
          expect(out).toContain(`gamewire: unity-relay udp 127.0.0.1:${base} `);
          expect(out).toContain(`gamewire: unity-relay udp 127.0.0.1:${base + 1} Unity Relay over DTLS`);
          expect(out).toContain(
            `gamewire: unity-relay tcp 127.0.0.1:${base + 2} Unity Relay over WebSocket (ws)`,
          );
          expect(out).toContain(
            `gamewire: unity-relay tcp 127.0.0.1:${base + 3} Unity Relay over secure WebSocket`,
          );
          expect(out).toContain(`gamewire: unity-relay http 127.0.0.1:${base + 80} allocation API`);
          // A host and a joiner through this relay's API relay through this relay.
          const api = new RelayApiClient(`http://127.0.0.1:${base + 80}`);
          const { client: host, joinCode, allocation } = await UnityRelayClient.host(api, 2, fast);
          clients.push(host);
          expect(allocation.relayServer.port).toBe(base);
          expect(allocation.serverEndpoints.map((e) => e.port)).toEqual([base, base + 1, base + 2, base + 3]);
          const joiner = new UnityRelayClient(relayServerData(await api.join(joinCode)), fast);
          clients.push(joiner);
          await joiner.bind();
          await joiner.connect();
          await chat(host, joiner);
        }
        if (busy.held) expect(relays.every((r) => r.admin !== ADMIN_DEFAULT)).toBe(true);
      }, 180_000);

      // On Redis (with the cases above: it needs 9100 taken, like them).
      it('an allocator next to a relay node, default flags but their ports: both start, allocate and relay', async ({
        onTestFinished,
        skip,
      }) => {
        const redis = await ownRedis(onTestFinished);
        if (redis === undefined) return skip();
        const { serve, clients } = scope(onTestFinished);
        const base = await freeRelayBase();
        const apiPort = await freePort();
        const env = redisEnv(redis);
        const [node, allocator] = await Promise.all([
          serve(
            [
              'unity-relay',
              '--role',
              'relay',
              '--host',
              '127.0.0.1',
              '--port',
              String(base),
              '--relay-secret-file',
              secretFile,
              '--dataplane',
              'js',
            ],
            env,
          ),
          serve(
            [
              'unity-relay',
              '--role',
              'allocator',
              '--api-port',
              String(apiPort),
              '--relay-secret-file',
              secretFile,
            ],
            env,
          ),
        ]);
        expect(node.admin).not.toBe(allocator.admin);
        if (busy.held) expect([node.admin, allocator.admin]).not.toContain(ADMIN_DEFAULT);
        const api = new RelayApiClient(`http://127.0.0.1:${apiPort}`);
        const { client: host, joinCode, allocation } = await UnityRelayClient.host(api, 2, fast);
        clients.push(host);
        expect(allocation.serverEndpoints.map((e) => e.port)).toEqual([base, base + 1, base + 2, base + 3]);
        const joiner = new UnityRelayClient(relayServerData(await api.join(joinCode)), fast);
        clients.push(joiner);
        await joiner.bind();
        await joiner.connect();
        await chat(host, joiner);
      }, 120_000);
    });

    // After the cases above let 9100 go.
    it('with 9100 free, the first takes it and the second moves (the default, both sides)', {
      concurrent: false,
      timeout: 120_000,
    }, async ({ onTestFinished }) => {
      const { serve } = scope(onTestFinished);
      const probe = await hold(ADMIN_DEFAULT);
      probe.close();
      // Another process on this machine holds 9100: the case with 9100 taken covers "taken".
      if (!probe.held) return;
      const first = await serve(['js5', '--host', '127.0.0.1', '--port', String(await freePort())]);
      if (first.admin !== ADMIN_DEFAULT) {
        // Another process on this machine (a developer's `npm start`) took 9100 between the probe
        // and this serve: 9100 was not free after all. Only a free 9100 left untaken fails.
        const again = await hold(ADMIN_DEFAULT);
        again.close();
        if (!again.held) return;
      }
      expect(first.admin).toBe(ADMIN_DEFAULT);
      expect(first.lines.at(-1)).toBe(
        'gamewire: dashboard http://127.0.0.1:9100/ (admin endpoint: /api /metrics /health /ready)',
      );
      const second = await serve(['nox-relay', '--host', '127.0.0.1', '--port', String(await freePort())]);
      expect(second.admin).not.toBe(ADMIN_DEFAULT);
      expect(await servedBy(first.admin)).toEqual(['js5']);
      expect(await servedBy(second.admin)).toEqual(['nox-relay']);
    });
  });

  for (const plane of ['js', 'auto'])
    it(`a taken derived transport port moves to a free one (warned); a taken derived API port stops serve naming --api-port (--dataplane ${plane})`, async ({
      onTestFinished,
    }) => {
      const { serve, serveFails } = scope(onTestFinished);
      const env = defaultEnv({ GAMEWIRE_ADMIN_PORT: '0' });
      const moves = async () => {
        const base = await freeRelayBase();
        const dtls = await hold(base + 1, ['udp']);
        const ws = await hold(base + 2, ['tcp']);
        try {
          const r = await serve(
            ['unity-relay', '--host', '127.0.0.1', '--port', String(base), '--dataplane', plane],
            env,
          );
          const dtlsLine = r.lines.find((l) => l.includes('over DTLS'))!;
          const wsLine = r.lines.find((l) => l.includes('WebSocket (ws)'))!;
          expect(dtlsLine).not.toContain(`:${base + 1} `);
          expect(wsLine).not.toContain(`:${base + 2} `);
          expect(r.stdout).toContain(`127.0.0.1:${base + 3} Unity Relay over secure WebSocket`);
          await vi.waitFor(
            () => {
              expect(r.stderr).toMatch(
                /dtls: port \d+ \(derived from --port\) is in use; listening on a free port instead \(set --dtls-port/,
              );
              expect(r.stderr).toMatch(/ws: port \d+ \(derived from --port\) is in use.*--ws-port/);
            },
            { timeout: 15_000 },
          );
          // The allocation names the ports it really uses.
          const allocation = await new RelayApiClient(`http://127.0.0.1:${base + 80}`).allocate(2);
          const movedDtls = Number(/:(\d+) /.exec(dtlsLine)![1]);
          expect(allocation.serverEndpoints.find((e) => e.connectionType === 'dtls')?.port).toBe(movedDtls);
        } finally {
          dtls.close();
          ws.close();
        }
      };
      const stops = async () => {
        const other = await freeRelayBase();
        await expectBusyTcpPortStops(
          serveFails,
          other + 80,
          ['unity-relay', '--host', '127.0.0.1', '--port', String(other), '--dataplane', plane],
          env,
          '--api-port (config unity-relay.apiPort)',
        );
      };
      await Promise.all([moves(), stops()]);
    }, 120_000);

  it('an explicitly given busy transport port stops serve with one line naming its flag, on both data planes', async ({
    onTestFinished,
  }) => {
    const { serveFails } = scope(onTestFinished);
    const env = defaultEnv({ GAMEWIRE_ADMIN_PORT: '0' });
    const wsTaken = async () => {
      const base = await freeRelayBase();
      await expectBusyTcpPortStops(
        serveFails,
        base + 2,
        [
          'unity-relay',
          '--host',
          '127.0.0.1',
          '--port',
          String(base),
          '--ws-port',
          String(base + 2),
          '--dataplane',
          'js',
        ],
        env,
        '--ws-port (config unity-relay.wsPort)',
      );
    };
    // DTLS on both data planes (on the native one, the native socket binds it).
    const dtlsTaken = async (plane: string) => {
      const base = await freeRelayBase();
      const dtls = await hold(base + 1, ['udp']);
      try {
        const r = await serveFails(
          [
            'unity-relay',
            '--host',
            '127.0.0.1',
            '--port',
            String(base),
            '--dtls-port',
            String(base + 1),
            '--dataplane',
            plane,
          ],
          env,
        );
        expect(r.code, plane).toBe(1);
        const e = errorLine(r.stderr);
        expect(e.message, plane).toContain(`port ${base + 1} is already in use`);
        expect(e.message, plane).toContain('--dtls-port (config unity-relay.dtlsPort)');
      } finally {
        dtls.close();
      }
    };
    await Promise.all([wsTaken(), dtlsTaken('js'), dtlsTaken('auto')]);
  }, 90_000);
});

describe.concurrent('the admin port: set (flag, environment, config) and taken is an error; nobody set it, it moves', () => {
  it('--admin-port, GAMEWIRE_ADMIN_PORT and serve.adminPort that are taken stop serve, each named', async ({
    onTestFinished,
  }) => {
    const { serveFails } = scope(onTestFinished);
    const busy = await freePort();
    const holder = await hold(busy);
    expect(holder.held).toBe(true);
    try {
      const js5 = ['js5', '--host', '127.0.0.1', '--port', '0'];
      const file = path.join(dir, 'admin.json');
      writeFileSync(file, JSON.stringify({ serve: { adminPort: busy } }));
      const [flag, env, config] = await Promise.all([
        serveFails([...js5, '--admin-port', String(busy)]),
        serveFails(js5, defaultEnv({ GAMEWIRE_ADMIN_PORT: String(busy) })),
        serveFails([...js5, '--config', file]),
      ]);
      expect(flag.code).toBe(1);
      expect(errorLine(flag.stderr).message).toMatch(
        new RegExp(
          `admin endpoint 127\\.0\\.0\\.1:${busy} \\(set by --admin-port\\): port ${busy} is already in use: .*--admin-port.*--no-admin`,
        ),
      );
      expect(flag.stdout).toBe('');
      expect(env.code).toBe(1);
      expect(errorLine(env.stderr).message).toContain('(set by GAMEWIRE_ADMIN_PORT)');
      expect(config.code).toBe(1);
      expect(errorLine(config.stderr).message).toContain(`(set by serve.adminPort in ${file})`);
    } finally {
      holder.close();
    }
  }, 60_000);
});

describe.concurrent('on Redis: every listen happens before anything is announced', () => {
  it('a relay node whose --admin-port or --dtls-port is taken fails naming the flag, and Redis holds no key', async ({
    onTestFinished,
    skip,
  }) => {
    const redis = await ownRedis(onTestFinished);
    if (redis === undefined) return skip();
    const { serveFails } = scope(onTestFinished);
    const node = (base: number) => [
      'unity-relay',
      '--role',
      'relay',
      '--node-id',
      'must-not-appear',
      '--host',
      '127.0.0.1',
      '--port',
      String(base),
      '--relay-secret-file',
      secretFile,
      '--dataplane',
      'js',
    ];
    const adminTaken = async () => {
      const adminBusy = await freePort();
      const admin = await hold(adminBusy);
      try {
        const r = await serveFails(
          [...node(await freeRelayBase()), '--admin-port', String(adminBusy)],
          redisEnv(redis),
        );
        expect(r.code).toBe(1);
        expect(errorLine(r.stderr).message).toMatch(/admin endpoint .*--admin-port/);
      } finally {
        admin.close();
      }
    };
    const dtlsTaken = async () => {
      const base = await freeRelayBase();
      const dtls = await hold(base + 1, ['udp']);
      try {
        // The admin endpoint on a free port: 9100 is the other cases' (taken by one, or free for the
        // one after), and its default is not what this half is about.
        const r = await serveFails(
          [...node(base), '--dtls-port', String(base + 1)],
          redisEnv(redis, { GAMEWIRE_ADMIN_PORT: '0' }),
        );
        expect(r.code).toBe(1);
        const e = errorLine(r.stderr);
        expect(e.code).toBe('ERR_LISTEN');
        expect(e.message).toContain('--dtls-port (config unity-relay.dtlsPort)');
      } finally {
        dtls.close();
      }
    };
    await Promise.all([adminTaken(), dtlsTaken()]);
    // Both failed before announcing anything (this Redis is this case's own).
    expect(await redisKeys(redis)).toEqual([]);
  }, 120_000);

  it('two protocols in one serve: a fleet node is announced only once the other protocol listens too', async ({
    onTestFinished,
    skip,
  }) => {
    const redis = await ownRedis(onTestFinished);
    if (redis === undefined) return skip();
    const { serveFails } = scope(onTestFinished);
    const busy = await freePort();
    const holder = await hold(busy);
    try {
      const file = path.join(dir, 'two.json');
      writeFileSync(
        file,
        JSON.stringify({
          rmc: { host: '127.0.0.1', port: 0, nodeId: 'must-not-appear' },
          js5: { host: '127.0.0.1', port: busy },
        }),
      );
      const r = await serveFails(
        ['rmc', 'js5', '--role', 'secure', '--config', file],
        redisEnv(redis, { GAMEWIRE_ADMIN_PORT: '0' }),
      );
      expect(r.code).toBe(1);
      expect(errorLine(r.stderr).message).toContain(`js5: port ${busy} is already in use`);
      const keys = await redisKeys(redis);
      expect(keys.filter((k) => /node|fleet|must-not-appear/.test(k))).toEqual([]);
    } finally {
      holder.close();
    }
  }, 60_000);
});
