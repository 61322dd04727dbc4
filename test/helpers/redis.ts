/**
 * A real `redis-server` for tests: its own free port on 127.0.0.1, a throwaway directory, no
 * persistence unless asked (`startRedis({ persist: true })`: an append-only file, fsynced on
 * every write, in that directory, which `stop()` and `start()` keep, so a restarted server has
 * its data back, as docs/rmc.md recommends for a fleet's Redis). `stop()` and `start()` again on
 * the same port model an outage; `kill()` is kill -9, `pause()`/`resume()` SIGSTOP/SIGCONT.
 * `startSentinelSet()`: a primary, its replicas and three sentinels, each on a free port with a
 * throwaway directory (`SentinelSet`), for failover tests. It starts quickly (short Sentinel
 * periods through `SENTINEL DEBUG`, no full-sync delay), then runs the test with Redis's and
 * Sentinel's own timings until the test asks otherwise (`quickRejoin`); a sentinel leaves TILT
 * after 5 s.
 * Absent `redis-server`: `startRedis` returns undefined (tests skip), except under CI=true where
 * it throws, so CI never passes without the real thing.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import dgram from 'node:dgram';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import type { Redis } from 'ioredis';
import type { RedisConnection } from '../../src/core/redis.js';
import { waitFor } from './wait.js';

/**
 * The ioredis client behind a connection, for tests that inspect keys or cut the connection
 * (the public `RedisClient` type names only the commands the stores send).
 */
export function rawRedis(conn: RedisConnection): Redis {
  return conn.client as unknown as Redis;
}

export function haveRedisServer(): boolean {
  const r = spawnSync('sh', ['-c', 'command -v redis-server'], { encoding: 'utf8' });
  const ok = r.status === 0 && r.stdout.trim() !== '';
  if (!ok && process.env.CI === 'true')
    throw new Error('redis-server is required in CI but is not installed');
  return ok;
}

/**
 * A port number free on 127.0.0.1 for TCP and for UDP alike (callers use it for either, and a
 * NoxVR or rmc server binds both): the system's pick for TCP, kept only if UDP can bind it too.
 * Another process can still take it before the caller binds; that window is as short as it gets.
 */
export async function freePort(): Promise<number> {
  for (;;) {
    const tcp = net.createServer();
    const port = await new Promise<number>((resolve, reject) => {
      tcp.once('error', reject);
      tcp.listen(0, '127.0.0.1', () => resolve((tcp.address() as net.AddressInfo).port));
    });
    const udp = dgram.createSocket('udp4');
    const udpFree = await new Promise<boolean>((resolve) => {
      udp.once('error', () => resolve(false));
      udp.bind(port, '127.0.0.1', () => resolve(true));
    });
    if (udpFree) await new Promise<void>((r) => udp.close(() => r()));
    await new Promise<void>((r) => tcp.close(() => r()));
    if (udpFree) return port;
  }
}

export class RedisServer {
  readonly port: number;
  readonly dir: string;
  /** Keeps its data across stop() and start() (an append-only file in `dir`). */
  readonly persist: boolean;
  private child: ChildProcess | undefined;
  private exited: Promise<void> = Promise.resolve();

  /** Arguments added to every start (`--replicaof …`, `--min-replicas-to-write …`). */
  extraArgs: string[];

  constructor(port: number, dir: string, options: { persist?: boolean; args?: string[] } = {}) {
    this.port = port;
    this.dir = dir;
    this.persist = options.persist ?? false;
    this.extraArgs = options.args ?? [];
  }

  /** host:port, as Sentinel and `gamewire_store_primary_info` name it. */
  get address(): string {
    return `127.0.0.1:${this.port}`;
  }

  /** SIGSTOP: the process stays, its sockets open, nothing answers (a partition, seen from outside). */
  pause(): void {
    this.child?.kill('SIGSTOP');
  }

  /** SIGCONT after `pause()`. */
  resume(): void {
    this.child?.kill('SIGCONT');
  }

  get url(): string {
    return `redis://127.0.0.1:${this.port}`;
  }

  get running(): boolean {
    return this.child !== undefined;
  }

  /** Starts (or restarts) the server and resolves once it accepts connections. */
  async start(): Promise<void> {
    if (this.child !== undefined) return;
    const child = spawn(
      'redis-server',
      [
        '--port',
        String(this.port),
        '--bind',
        '127.0.0.1',
        '--dir',
        this.dir,
        '--save',
        '',
        '--appendonly',
        this.persist ? 'yes' : 'no',
        '--appendfsync',
        'always',
        '--protected-mode',
        'yes',
        '--loglevel',
        'warning',
        ...this.extraArgs,
      ],
      { stdio: ['ignore', 'ignore', 'pipe'] },
    );
    this.child = child;
    this.exited = new Promise((resolve) => child.once('exit', () => resolve()));
    let stderr = '';
    child.stderr?.on('data', (d: Buffer) => {
      stderr += d.toString();
    });
    await waitFor(
      async () => {
        if (child.exitCode !== null) throw new Error(`redis-server exited: ${stderr}`);
        return this.ping();
      },
      { what: () => `redis-server answering on ${this.port} (${stderr})`, intervalMs: 50 },
    );
  }

  /** CONFIG SET on the running server (until its next start). */
  async configSet(name: string, value: string): Promise<void> {
    const { Redis } = await import('ioredis');
    const c = new Redis({ port: this.port, host: '127.0.0.1', lazyConnect: true, retryStrategy: () => null });
    c.on('error', () => {});
    try {
      await c.connect();
      await c.config('SET', name, value);
    } finally {
      c.disconnect();
    }
  }

  /** Stops it cleanly (SIGTERM) and waits for the exit. */
  async stop(): Promise<void> {
    const child = this.child;
    if (child === undefined) return;
    this.child = undefined;
    child.kill('SIGTERM');
    // A paused server takes SIGTERM only once it runs again.
    child.kill('SIGCONT');
    await this.exited;
  }

  /** kill -9. */
  async kill(): Promise<void> {
    const child = this.child;
    if (child === undefined) return;
    this.child = undefined;
    child.kill('SIGKILL');
    await this.exited;
  }

  /** Stops it and removes its directory. */
  async dispose(): Promise<void> {
    await this.stop();
    fs.rmSync(this.dir, { recursive: true, force: true });
  }

  private ping(): Promise<boolean> {
    return pingPort(this.port);
  }
}

/** True when something on 127.0.0.1:`port` answers PING with PONG. */
function pingPort(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    let got = '';
    s.setTimeout(1000);
    s.on('connect', () => s.write('PING\r\n'));
    s.on('data', (d) => {
      got += d.toString();
      if (got.includes('\r\n')) {
        s.destroy();
        resolve(got.startsWith('+PONG'));
      }
    });
    s.on('error', () => resolve(false));
    s.on('timeout', () => {
      s.destroy();
      resolve(false);
    });
  });
}

/** A started redis-server on a free port, or undefined when the program is absent (outside CI). */
export async function startRedis(options: { persist?: boolean } = {}): Promise<RedisServer | undefined> {
  if (!haveRedisServer()) return undefined;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'gamewire-redis-'));
  const server = new RedisServer(await freePort(), dir, options);
  await server.start();
  return server;
}

/** One `redis-server <conf> --sentinel` on a free port, with its config file in a throwaway dir. */
export class SentinelServer {
  readonly port: number;
  readonly dir: string;
  /** The `SENTINEL DEBUG` periods it runs with (set at each start: Sentinel keeps them in memory only). */
  periods: SentinelPeriods = SENTINEL_OWN_PERIODS;
  private child: ChildProcess | undefined;
  private exited: Promise<void> = Promise.resolve();

  constructor(port: number, dir: string, conf: string) {
    this.port = port;
    this.dir = dir;
    // Sentinel rewrites its config file (what it learned); each start keeps what it knew.
    fs.writeFileSync(path.join(dir, 'sentinel.conf'), conf);
  }

  get running(): boolean {
    return this.child !== undefined;
  }

  async start(): Promise<void> {
    if (this.child !== undefined) return;
    const child = spawn('redis-server', [path.join(this.dir, 'sentinel.conf'), '--sentinel'], {
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    this.child = child;
    this.exited = new Promise((resolve) => child.once('exit', () => resolve()));
    let stderr = '';
    child.stderr?.on('data', (d: Buffer) => {
      stderr += d.toString();
    });
    await waitFor(
      async () => {
        if (child.exitCode !== null) throw new Error(`redis-server --sentinel exited: ${stderr}`);
        return pingPort(this.port);
      },
      { what: () => `sentinel answering on ${this.port} (${stderr})`, intervalMs: 50 },
    );
    await sentinelDebug(this.port, { ...this.periods, tiltMs: TILT_PERIOD_MS });
  }

  /** Changes its periods now (when running) and for its later starts. */
  async setPeriods(p: SentinelPeriods): Promise<void> {
    this.periods = { ...this.periods, ...p };
    if (this.running) await sentinelDebug(this.port, p);
  }

  /** kill -9. */
  async kill(): Promise<void> {
    const child = this.child;
    if (child === undefined) return;
    this.child = undefined;
    child.kill('SIGKILL');
    await this.exited;
  }
}

export interface SentinelSetOptions {
  /** Replicas of the primary. Default 2. */
  replicas?: number;
  /** Sentinels (quorum: a majority). Default 3. */
  sentinels?: number;
  /** Sentinel's down-after-milliseconds. Default 500. */
  downAfterMs?: number;
  /** Sentinel's failover-timeout. Default 2000. */
  failoverTimeoutMs?: number;
  /** The primary's name. Default `mymaster`. */
  name?: string;
}

/** `SENTINEL DEBUG` parameters (ms, Redis 7.0+): Sentinel's internal periods a test may shorten. */
export interface SentinelPeriods {
  /** INFO to each instance (Sentinel's own: 10 000; it uses 1 000 for replicas while a failover runs). */
  infoMs?: number;
  /** Hello messages, through which sentinels learn of each other and of a new primary (Sentinel's own: 2 000). */
  publishMs?: number;
}

/** Sentinel's own periods (what a deployment runs with). */
export const SENTINEL_OWN_PERIODS: Required<SentinelPeriods> = { infoMs: 10_000, publishMs: 2000 };

/**
 * Short periods: sentinels learn of each other within a second, and a restarted old primary is
 * made a replica some 2 s after it is back (Sentinel waits 4 hello periods after it reported
 * itself a primary, then re-points it at its next INFO), not 10 to 20 s.
 */
export const SENTINEL_QUICK_PERIODS: Required<SentinelPeriods> = { infoMs: 500, publishMs: 500 };

/**
 * How long a sentinel whose timer stalled for more than 2 s (TILT: a starved machine) stays
 * passive: 5 s here rather than Sentinel's 30 s, so that a failover the tests wait for (15 s at
 * most) still comes. It changes nothing on a machine where no timer stalls.
 */
const TILT_PERIOD_MS = 5000;

async function sentinelDebug(port: number, p: SentinelPeriods & { tiltMs?: number }): Promise<void> {
  const args: string[] = [];
  if (p.infoMs !== undefined) args.push('info-period', String(p.infoMs));
  if (p.publishMs !== undefined) args.push('publish-period', String(p.publishMs));
  if (p.tiltMs !== undefined) args.push('tilt-period', String(p.tiltMs));
  if (args.length === 0) return;
  const { Redis } = await import('ioredis');
  const c = new Redis({ port, host: '127.0.0.1', lazyConnect: true, retryStrategy: () => null });
  c.on('error', () => {});
  try {
    await c.connect();
    await c.call('SENTINEL', 'DEBUG', ...args);
  } finally {
    c.disconnect();
  }
}

/**
 * One primary, its replicas and a quorum of sentinels, each on a free port of 127.0.0.1 with a
 * throwaway directory (append-only files, fsynced on every write: a restarted server has its
 * data). `url()` is the `redis+sentinel://` URL gamewire takes; `primary()` asks a sentinel which
 * server is the primary now; `ready()` waits until every sentinel knows every replica and the
 * other sentinels (before that, a failover could not pick a replica).
 */
export class SentinelSet {
  readonly name: string;
  /** Every data server, the first one the primary at start. */
  readonly servers: RedisServer[];
  readonly sentinels: SentinelServer[];
  readonly root: string;

  constructor(name: string, servers: RedisServer[], sentinels: SentinelServer[], root: string) {
    this.name = name;
    this.servers = servers;
    this.sentinels = sentinels;
    this.root = root;
  }

  url(params = ''): string {
    const hosts = this.sentinels.map((s) => `127.0.0.1:${s.port}`).join(',');
    return `redis+sentinel://${hosts}/${this.name}${params === '' ? '' : `?${params}`}`;
  }

  /** What a running sentinel says about the primary (its `host:port`). */
  async primaryAddress(): Promise<string> {
    const { Redis } = await import('ioredis');
    for (const s of this.sentinels) {
      if (!s.running) continue;
      const c = new Redis({ port: s.port, host: '127.0.0.1', lazyConnect: true, retryStrategy: () => null });
      c.on('error', () => {});
      try {
        await c.connect();
        const r = (await c.call('SENTINEL', 'get-master-addr-by-name', this.name)) as string[] | null;
        if (r !== null) return `${r[0]}:${r[1]}`;
      } catch {
        // the next sentinel
      } finally {
        c.disconnect();
      }
    }
    throw new Error('no sentinel answers');
  }

  /** The data server a sentinel calls the primary. */
  async primary(): Promise<RedisServer> {
    const address = await this.primaryAddress();
    const found = this.servers.find((s) => s.address === address);
    if (found === undefined) throw new Error(`the primary ${address} is none of ours`);
    return found;
  }

  /** Every sentinel running knows `replicas` replicas (not down) and the other running sentinels. */
  async ready(replicas = this.servers.length - 1, timeoutMs = 20_000): Promise<void> {
    const { Redis } = await import('ioredis');
    const running = this.sentinels.filter((s) => s.running);
    await waitFor(
      async () => {
        for (const s of running) {
          const c = new Redis({
            port: s.port,
            host: '127.0.0.1',
            lazyConnect: true,
            retryStrategy: () => null,
          });
          c.on('error', () => {});
          try {
            await c.connect();
            const master = (await c.call('SENTINEL', 'master', this.name)) as string[];
            const flags = master[master.indexOf('flags') + 1] ?? '';
            if (flags !== 'master') return false;
            const reps = (await c.call('SENTINEL', 'replicas', this.name)) as string[][];
            const good = reps.filter((r) => {
              const f = r[r.indexOf('flags') + 1] ?? '';
              const link = r[r.indexOf('master-link-status') + 1] ?? '';
              return f === 'slave' && link === 'ok';
            });
            if (good.length < replicas) return false;
            const others = (await c.call('SENTINEL', 'sentinels', this.name)) as string[][];
            if (others.length < running.length - 1) return false;
          } catch {
            return false;
          } finally {
            c.disconnect();
          }
        }
        return true;
      },
      {
        what: `sentinels of ${this.name} knowing ${replicas} replicas and each other`,
        timeoutMs,
        intervalMs: 100,
      },
    );
  }

  /** Sets Sentinel's internal periods on every sentinel (the running ones now, the others when they start). */
  async setPeriods(p: SentinelPeriods): Promise<void> {
    await Promise.all(this.sentinels.map((s) => s.setPeriods(p)));
  }

  /** `repl-diskless-sync-delay` (s) on every running data server: how long a primary waits for more replicas before a full sync (Redis's own: 5). */
  async setSyncDelay(seconds: number): Promise<void> {
    await Promise.all(
      this.servers
        .filter((s) => s.running)
        .map((s) => s.configSet('repl-diskless-sync-delay', String(seconds))),
    );
  }

  /**
   * From now on, an old primary that comes back rejoins as a replica in some 2 s rather than 15
   * to 20: the sentinels run `SENTINEL_QUICK_PERIODS` (they re-point a server that reports itself
   * a primary 4 hello periods after it said so, at their next INFO), and the primary starts its
   * full sync at once instead of waiting 5 s for more replicas. For the part of a test after the
   * failover it measures.
   */
  async quickRejoin(): Promise<void> {
    await Promise.all([this.setPeriods(SENTINEL_QUICK_PERIODS), this.setSyncDelay(0)]);
  }

  /** The replication role a data server reports (`master`, `slave`), or undefined when it does not answer. */
  async roleOf(server: RedisServer): Promise<string | undefined> {
    const { Redis } = await import('ioredis');
    const c = new Redis({
      port: server.port,
      host: '127.0.0.1',
      lazyConnect: true,
      retryStrategy: () => null,
    });
    c.on('error', () => {});
    try {
      await c.connect();
      const info = await c.info('replication');
      const role = /role:(\w+)/.exec(info)?.[1];
      const link = /master_link_status:(\w+)/.exec(info)?.[1];
      return role === 'slave' && link !== 'up' ? 'slave-syncing' : role;
    } catch {
      return undefined;
    } finally {
      c.disconnect();
    }
  }

  async dispose(): Promise<void> {
    await Promise.all(this.sentinels.map((s) => s.kill()));
    await Promise.all(this.servers.map((s) => s.kill()));
    fs.rmSync(this.root, { recursive: true, force: true });
  }
}

/**
 * A Sentinel set on free ports (see `SentinelSet`), or undefined when redis-server is absent
 * (outside CI; under CI=true it throws, like `startRedis`).
 */
export async function startSentinelSet(options: SentinelSetOptions = {}): Promise<SentinelSet | undefined> {
  if (!haveRedisServer()) return undefined;
  const name = options.name ?? 'mymaster';
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'gamewire-sentinel-set-'));
  const servers: RedisServer[] = [];
  const sentinels: SentinelServer[] = [];
  const set = new SentinelSet(name, servers, sentinels, root);
  try {
    const primaryDir = fs.mkdtempSync(path.join(root, 'redis-'));
    const primary = new RedisServer(await freePort(), primaryDir, { persist: true });
    servers.push(primary);
    await primary.start();
    // The replicas' first full sync starts at once (not after Redis's 5 s wait for more of them).
    await primary.configSet('repl-diskless-sync-delay', '0');
    for (let i = 0; i < (options.replicas ?? 2); i++) {
      const r = new RedisServer(await freePort(), fs.mkdtempSync(path.join(root, 'redis-')), {
        persist: true,
        args: ['--replicaof', '127.0.0.1', String(primary.port)],
      });
      servers.push(r);
    }
    await Promise.all(servers.slice(1).map((r) => r.start()));
    const count = options.sentinels ?? 3;
    const quorum = Math.floor(count / 2) + 1;
    for (let i = 0; i < count; i++) {
      const port = await freePort();
      const dir = fs.mkdtempSync(path.join(root, 'sentinel-'));
      const conf = [
        `port ${port}`,
        'bind 127.0.0.1',
        `dir ${dir}`,
        'loglevel warning',
        `sentinel monitor ${name} 127.0.0.1 ${primary.port} ${quorum}`,
        `sentinel down-after-milliseconds ${name} ${options.downAfterMs ?? 500}`,
        `sentinel failover-timeout ${name} ${options.failoverTimeoutMs ?? 2000}`,
        `sentinel parallel-syncs ${name} 1`,
        '',
      ].join('\n');
      const s = new SentinelServer(port, dir, conf);
      // Quick periods while the sentinels find each other and the replicas; Sentinel's own after.
      s.periods = SENTINEL_QUICK_PERIODS;
      sentinels.push(s);
    }
    await Promise.all(sentinels.map((s) => s.start()));
    await set.ready();
    // The test runs with Redis's and Sentinel's own timings.
    await Promise.all([set.setPeriods(SENTINEL_OWN_PERIODS), set.setSyncDelay(5)]);
    return set;
  } catch (err) {
    await set.dispose();
    throw err;
  }
}
