/**
 * An RMC fleet started from the CLI, as an operator would: one redis-server, one
 * `serve rmc --role auth` and two `serve rmc --role secure`, each its own process on free ports.
 * Logins spread over both secure servers by StationURL; two players on different secure servers
 * share one session and see each other; PIDs and connection ids are unique over the fleet; the
 * same over PRUDP; with Redis stopped, session calls and logins fail with
 * RendezVous::ConnectionFailure while other calls work, and all recovers when it is back; a
 * secure server killed with -9 gets no logins once its TTL has run out. Then two processes
 * racing for the last account slots and for the same new account: the store lets exactly one win.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  CloudServersProtocol,
  ecdhCredentials,
  LoginProtocol,
  parseStationUrl,
  RmcClient,
  SessionProtocol,
} from '../../../src/protocols/rmc/index.js';
import { BIN, ROOT } from '../../helpers/cli.js';
import { type RedisServer, startRedis } from '../../helpers/redis.js';
import { elapse, waitFor } from '../../helpers/wait.js';

const TTL_MS = 3000;

interface Served {
  child: ChildProcess;
  port: number;
  output: () => string;
}

const children: ChildProcess[] = [];
const dirs: string[] = [];
const clients: RmcClient[] = [];

async function serve(args: string[]): Promise<Served> {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'gw-rmc-fleet-'));
  dirs.push(dataDir);
  const child = spawn(
    process.execPath,
    [BIN, 'serve', 'rmc', '--host', '127.0.0.1', '--port', '0', '--data-dir', dataDir, ...args],
    { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, GAMEWIRE_ADMIN_PORT: '0' } },
  );
  children.push(child);
  let out = '';
  const port = await new Promise<number>((resolve, reject) => {
    const t = setTimeout(
      () => reject(new Error(`no endpoint from serve rmc ${args.join(' ')}: ${out}`)),
      30_000,
    );
    const on = (d: Buffer) => {
      out += d.toString();
      const m = /rmc tcp 127\.0\.0\.1:(\d+)/.exec(out);
      if (m !== null && /"msg":"started"/.test(out)) {
        clearTimeout(t);
        resolve(Number(m[1]));
      }
    };
    child.stdout!.on('data', on);
    child.stderr!.on('data', on);
    child.once('exit', (code) => reject(new Error(`serve rmc exited (${code}): ${out}`)));
  });
  return { child, port, output: () => out };
}

async function stop(child: ChildProcess, signal: NodeJS.Signals = 'SIGTERM'): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((r) => child.once('exit', r));
  child.kill(signal);
  await exited;
}

const loginArgs = (token: string) => ({
  token,
  clientVersionInfo: { major: 1, minor: 0, patch: 0, build: 0, custom: '' },
  connectionData: { urlRegularProtocols: 'prudp:/', lstSpecialProtocols: [], urlSpecialProtocols: 'prudp:/' },
});
const jwt = (sub: string, name: string) =>
  `x.${Buffer.from(JSON.stringify({ sub, name })).toString('base64url')}.y`;
const sid = (n: number) => Buffer.from(n.toString(16).padStart(32, '0'), 'hex');
const createArgs = (n: number) => ({
  sessionType: 'PartySession',
  sessionId: sid(n),
  reserved: Buffer.alloc(9),
  sessionKey: `${sid(n).toString('hex')}-key`,
});

async function connect(port: number, transport: 'tcp' | 'prudp' = 'tcp'): Promise<RmcClient> {
  const c =
    transport === 'tcp'
      ? await RmcClient.connect({ host: '127.0.0.1', port })
      : await RmcClient.connect({
          host: '127.0.0.1',
          port,
          transport: 'prudp',
          accessKey: 'yl4NG7qZ',
          prudp: { credentials: ecdhCredentials(), connectTimeoutMs: 20_000 },
        });
  clients.push(c);
  return c;
}

/** Logs in at the auth server; answers the PID and the secure server's port from the StationURL. */
async function authLogin(authPort: number, token: string, transport: 'tcp' | 'prudp' = 'tcp') {
  const c = await connect(authPort, transport);
  const r = await c.call(LoginProtocol, 'LoginWithToken_V1', loginArgs(token));
  await c.close();
  const url = r.connectionData.urlRegularProtocols;
  return { pid: r.userPid.toString('hex'), url, port: Number(parseStationUrl(url).params.get('port')) };
}

/** A player on a secure server: connected, logged in, registered. */
async function player(port: number, token: string, transport: 'tcp' | 'prudp' = 'tcp') {
  const c = await connect(port, transport);
  const { userPid } = await c.call(LoginProtocol, 'LoginWithToken_V1', loginArgs(token));
  const reg = await c.call(LoginProtocol, 'Register_V1', {
    vecMyURLs: ['prudp:/address=10.0.0.1;port=3074;sid=15'],
  });
  return { c, pid: userPid.toString('hex'), connectionId: reg.pidConnectionID };
}

const until = async (what: string, f: () => Promise<boolean>, ms = 20_000) => {
  await waitFor(f, { what, timeoutMs: ms, intervalMs: 100, retryErrors: true });
};

let redis: RedisServer | undefined;

beforeAll(async () => {
  redis = await startRedis();
}, 30_000);

afterAll(async () => {
  for (const c of clients) await c.close().catch(() => {});
  for (const child of children) await stop(child);
  await redis?.dispose();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
}, 60_000);

describe('rmc fleet from the CLI: one auth server, two secure servers, one Redis', () => {
  let auth: Served;
  let s1: Served;
  let s2: Served;
  const common = () => [
    '--redis',
    redis!.url,
    '--heartbeat-ttl-ms',
    String(TTL_MS),
    '--prudp-access-key',
    'yl4NG7qZ',
    // Every test client comes from 127.0.0.1: the fleet-wide per-address limit would stop them.
    '--rmc-registrations-per-ip-per-hour',
    '0',
  ];

  beforeAll(async () => {
    if (redis === undefined) return;
    [auth, s1, s2] = await Promise.all([
      serve(['--role', 'auth', '--node-id', 'auth-1', ...common()]),
      serve(['--role', 'secure', '--node-id', 'secure-1', ...common()]),
      serve(['--role', 'secure', '--node-id', 'secure-2', ...common()]),
    ]);
  }, 90_000);

  it('logins spread over both secure servers; the StationURL is the prudps form clients parse', async (ctx) => {
    if (redis === undefined) return ctx.skip();
    const ports = new Set<number>();
    for (let i = 0; i < 8; i++) {
      const r = await authLogin(auth.port, `spread-${i}`);
      expect(r.url).toMatch(/^prudps:\/address=127\.0\.0\.1;port=\d+;CID=1;PID=2;sid=1;stream=3;type=2$/);
      ports.add(r.port);
    }
    expect([...ports].sort()).toEqual([s1.port, s2.port].sort());
  });

  it('two players on different secure servers create and join one session and see each other', async (ctx) => {
    if (redis === undefined) return ctx.skip();
    const fromAuth = await authLogin(auth.port, jwt('alice', 'Alice'));
    const alice = await player(s1.port, jwt('alice', 'Alice'));
    const bob = await player(s2.port, jwt('bob', 'Bob'));
    // The same account wherever it logs in.
    expect(alice.pid).toBe(fromAuth.pid);
    expect(bob.pid).not.toBe(alice.pid);
    expect(alice.connectionId).not.toBe(bob.connectionId);
    expect(await alice.c.call(SessionProtocol, 'CreateSession_V1', createArgs(1))).toMatchObject({
      memberCount: 1,
    });
    const joined = await bob.c.call(SessionProtocol, 'JoinSession_V1', { sessionId: sid(1) });
    expect(joined.sessionType).toBe('PartySession');
    expect(joined.members.map((m) => m.toString('hex')).sort()).toEqual([alice.pid, bob.pid].sort());
    const seen = await alice.c.call(SessionProtocol, 'JoinSession_V1', { sessionId: sid(1) });
    expect(seen.members.map((m) => m.toString('hex')).sort()).toEqual([alice.pid, bob.pid].sort());
    // Bob leaves (his server), Alice sees it (hers).
    await bob.c.close();
    await until('bob gone', async () => {
      const r = await alice.c.call(SessionProtocol, 'JoinSession_V1', { sessionId: sid(1) });
      return r.members.length === 1;
    });
    await alice.c.close();
  });

  it('PIDs and connection ids are unique over the fleet', async (ctx) => {
    if (redis === undefined) return ctx.skip();
    const pids = new Set<string>();
    const connectionIds = new Set<number>();
    for (let i = 0; i < 6; i++) pids.add((await authLogin(auth.port, `unique-a-${i}`)).pid);
    for (let i = 0; i < 6; i++) {
      const p = await player(i % 2 === 0 ? s1.port : s2.port, `unique-s-${i}`);
      pids.add(p.pid);
      connectionIds.add(p.connectionId);
      await p.c.close();
    }
    expect(pids.size).toBe(12);
    expect(connectionIds.size).toBe(6);
  });

  it('over PRUDP: login at the auth server, then two players on both secure servers join one session', async (ctx) => {
    if (redis === undefined) return ctx.skip();
    const ports = new Set<number>();
    for (let i = 0; i < 4; i++) ports.add((await authLogin(auth.port, `udp-${i}`, 'prudp')).port);
    expect([...ports].sort()).toEqual([s1.port, s2.port].sort());
    const carol = await player(s1.port, jwt('carol', 'Carol'), 'prudp');
    const dave = await player(s2.port, jwt('dave', 'Dave'), 'prudp');
    await carol.c.call(SessionProtocol, 'CreateSession_V1', createArgs(7));
    const joined = await dave.c.call(SessionProtocol, 'JoinSession_V1', { sessionId: sid(7) });
    expect(joined.members.map((m) => m.toString('hex')).sort()).toEqual([carol.pid, dave.pid].sort());
    await carol.c.close();
    await dave.c.close();
  }, 60_000);

  it('Redis stopped: session calls and logins fail with RendezVous::ConnectionFailure, other calls work; then recovery', async (ctx) => {
    if (redis === undefined) return ctx.skip();
    const erin = await player(s1.port, 'erin');
    await erin.c.call(SessionProtocol, 'CreateSession_V1', createArgs(20));
    await redis.stop();
    await until('secure server sees Redis down', async () => {
      try {
        await erin.c.call(SessionProtocol, 'CreateSession_V1', createArgs(21));
        return false;
      } catch (err) {
        return (err as { namespace?: string; code?: number }).code === 0x01;
      }
    });
    const session = erin.c.call(SessionProtocol, 'JoinSession_V1', { sessionId: sid(20) });
    const datacenters = erin.c.call(CloudServersProtocol, 'GetDatacenters_V1', {});
    await expect(session).rejects.toMatchObject({ namespace: 'RendezVous', code: 0x01 });
    expect((await datacenters).datacenters.length).toBeGreaterThan(0);
    const c = await connect(auth.port);
    await expect(
      c.call(LoginProtocol, 'LoginWithToken_V1', loginArgs('during-outage')),
    ).rejects.toMatchObject({
      namespace: 'RendezVous',
      code: 0x01,
    });
    // Back (this test's Redis keeps no data across a restart): nodes re-announce, all works again.
    await redis.start();
    await until('logins again', async () => {
      const r = await c.call(LoginProtocol, 'LoginWithToken_V1', loginArgs('after-outage'));
      return r.userPid.length === 16;
    });
    await until('sessions again', async () => {
      await erin.c.call(SessionProtocol, 'CreateSession_V1', createArgs(22));
      return true;
    });
    // Each secure server re-announces at its next heartbeat; then logins spread again.
    let n = 0;
    await until('both secure servers chosen again', async () => {
      const ports = new Set<number>();
      for (let i = 0; i < 6; i++) ports.add((await authLogin(auth.port, `back-${n++}`)).port);
      return ports.size === 2;
    });
    await erin.c.close();
  }, 90_000);

  it('kill -9 of a secure server: once its TTL has run out, every login goes to the other', async (ctx) => {
    if (redis === undefined) return ctx.skip();
    await stop(s1.child, 'SIGKILL');
    await elapse(TTL_MS + 1500, 'the TTL of the killed node must run out');
    for (let i = 0; i < 6; i++) expect((await authLogin(auth.port, `after-kill-${i}`)).port).toBe(s2.port);
    // The survivor still serves.
    const frank = await player(s2.port, 'frank');
    await frank.c.call(SessionProtocol, 'CreateSession_V1', createArgs(30));
    await frank.c.close();
  }, 60_000);
});

describe('rmc fleet from the CLI: two processes racing on one store', () => {
  it('for the last account slots and for the same new account: exactly one wins each', async (ctx) => {
    if (redis === undefined) return ctx.skip();
    if (!redis.running) await redis.start();
    const args = [
      '--role',
      'all',
      '--redis',
      redis.url,
      '--rmc-redis-prefix',
      'race:',
      '--rmc-max-accounts',
      '10',
      '--rmc-registrations-per-ip-per-hour',
      '0',
      // Ten logins of one account at once would meet the login-session cap (8) instead.
      '--rmc-max-logins-per-account',
      '0',
    ];
    const [a, b] = await Promise.all([serve(args), serve(args)]);
    // The same new account from both processes at once, 10 times over: one account, one PID.
    const same = await Promise.all(
      Array.from({ length: 10 }, async (_, i) => {
        const c = await connect(i % 2 === 0 ? a.port : b.port);
        const r = await c.call(LoginProtocol, 'LoginWithToken_V1', loginArgs('the-same-name'));
        await c.close();
        return r.userPid.toString('hex');
      }),
    );
    expect(new Set(same).size).toBe(1);
    // 9 slots left, 20 new accounts racing for them through both processes.
    const outcomes = await Promise.all(
      Array.from({ length: 20 }, async (_, i) => {
        const c = await connect(i % 2 === 0 ? a.port : b.port);
        try {
          await c.call(LoginProtocol, 'LoginWithToken_V1', loginArgs(`racer-${i}`));
          return 'won';
        } catch (err) {
          expect(err).toMatchObject({ namespace: 'RendezVous', code: 0xdf });
          return 'refused';
        } finally {
          await c.close();
        }
      }),
    );
    expect(outcomes.filter((o) => o === 'won')).toHaveLength(9);
    await stop(a.child);
    await stop(b.child);
  }, 90_000);
});
