/**
 * A real `redis-server` for tests: its own free port on 127.0.0.1, a throwaway directory, no
 * persistence unless asked (`startRedis({ persist: true })`: an append-only file, fsynced on
 * every write, in that directory, which `stop()` and `start()` keep, so a restarted server has
 * its data back, as docs/rmc.md recommends for a fleet's Redis). `stop()` and `start()` again on
 * the same port model an outage; `kill()` is kill -9.
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

  constructor(port: number, dir: string, options: { persist?: boolean } = {}) {
    this.port = port;
    this.dir = dir;
    this.persist = options.persist ?? false;
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

  /** Stops it cleanly (SIGTERM) and waits for the exit. */
  async stop(): Promise<void> {
    const child = this.child;
    if (child === undefined) return;
    this.child = undefined;
    child.kill('SIGTERM');
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
    return new Promise((resolve) => {
      const s = net.connect(this.port, '127.0.0.1');
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
}

/** A started redis-server on a free port, or undefined when the program is absent (outside CI). */
export async function startRedis(options: { persist?: boolean } = {}): Promise<RedisServer | undefined> {
  if (!haveRedisServer()) return undefined;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'gamewire-redis-'));
  const server = new RedisServer(await freePort(), dir, options);
  await server.start();
  return server;
}
