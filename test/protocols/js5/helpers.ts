import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { silentLogger } from '../../../src/core/logger.js';
import { ProtocolMetrics } from '../../../src/core/metrics.js';
import { createDemoCache } from '../../../src/protocols/js5/cache/demo.js';
import { openStore } from '../../../src/protocols/js5/cache/store.js';
import type { Js5Profile } from '../../../src/protocols/js5/profiles.js';
import { Js5Server, type Js5ServerOptions } from '../../../src/protocols/js5/server.js';
import { waitFor } from '../../helpers/wait.js';

export function tempDir(prefix = 'gamewire-js5-'): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), prefix));
}

let demo: string | undefined;

/** One demo cache per test file (generation takes under a second). */
export function demoCache(): string {
  if (demo === undefined) {
    demo = path.join(tempDir(), 'demo');
    createDemoCache(demo);
  }
  return demo;
}

export async function startServer(
  profile: Js5Profile,
  extra: Partial<Js5ServerOptions> = {},
  dir = demoCache(),
): Promise<{ server: Js5Server; metrics: ProtocolMetrics }> {
  const metrics = new ProtocolMetrics('js5');
  const server = new Js5Server({
    host: '127.0.0.1',
    port: 0,
    store: openStore(dir),
    profile,
    log: silentLogger(),
    metrics,
    ...extra,
  });
  await server.listen();
  return { server, metrics };
}

/** A raw TCP peer that collects every byte it receives. */
export class RawPeer {
  readonly socket: net.Socket;
  private chunks: Buffer[] = [];
  /** Bytes received so far. */
  length = 0;
  closed = false;

  /** Everything received so far (concatenated on demand). */
  get received(): Buffer {
    if (this.chunks.length !== 1) this.chunks = [Buffer.concat(this.chunks)];
    return this.chunks[0]!;
  }

  set received(b: Buffer) {
    this.chunks = [b];
    this.length = b.length;
  }
  private waiters: (() => void)[] = [];

  private constructor(socket: net.Socket) {
    this.socket = socket;
    socket.on('data', (d: Buffer) => {
      this.chunks.push(d);
      this.length += d.length;
      this.wake();
    });
    socket.on('close', () => {
      this.closed = true;
      this.wake();
    });
    socket.on('error', () => {});
  }

  private wake(): void {
    const w = this.waiters;
    this.waiters = [];
    for (const f of w) f();
  }

  static connect(port: number): Promise<RawPeer> {
    return new Promise((resolve, reject) => {
      const s = net.connect({ host: '127.0.0.1', port }, () => resolve(new RawPeer(s)));
      s.once('error', reject);
    });
  }

  send(hex: string | Buffer): void {
    this.socket.write(typeof hex === 'string' ? Buffer.from(hex.replace(/\s+/g, ''), 'hex') : hex);
  }

  /** Waits until `n` bytes arrived (or the peer closed, or a timeout). */
  async waitFor(n: number, timeoutMs = 5000): Promise<Buffer> {
    const deadline = Date.now() + timeoutMs;
    while (this.length < n && !this.closed && Date.now() < deadline) {
      await new Promise<void>((r) => {
        const t = setTimeout(r, Math.max(1, deadline - Date.now()));
        this.waiters.push(() => {
          clearTimeout(t);
          r();
        });
      });
    }
    return this.received;
  }

  async waitClosed(timeoutMs = 5000): Promise<boolean> {
    await waitFor(() => this.closed, { what: 'the connection closed', timeoutMs }).catch(() => undefined);
    return this.closed;
  }

  destroy(): void {
    this.socket.destroy();
  }
}

/**
 * `fn`, but at most `n` calls running at once (the others wait their turn, in order): for tests
 * that run concurrently and spawn CPU-bound commands, so that a 2-core machine is kept busy
 * without starving the servers the same tests started.
 */
export function limited<A extends unknown[], R>(
  n: number,
  fn: (...args: A) => Promise<R>,
): (...args: A) => Promise<R> {
  let running = 0;
  const waiting: (() => void)[] = [];
  return async (...args: A) => {
    if (running >= n) await new Promise<void>((resolve) => waiting.push(resolve));
    running++;
    try {
      return await fn(...args);
    } finally {
      running--;
      waiting.shift()?.();
    }
  };
}
