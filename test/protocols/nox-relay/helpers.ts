import type { EventEmitter } from 'node:events';
import net from 'node:net';
import { afterEach } from 'vitest';
import { NoxRelayClient } from '../../../src/protocols/nox-relay/client.js';
import { writeClientPacket } from '../../../src/protocols/nox-relay/packet.js';
import { type NoxRelayOptions, NoxRelayServer } from '../../../src/protocols/nox-relay/server.js';
import { WireWriter } from '../../../src/wire/index.js';
import { waitFor } from '../../helpers/wait.js';

export async function startServer(options: NoxRelayOptions = {}): Promise<NoxRelayServer> {
  const s = new NoxRelayServer({ host: '127.0.0.1', port: 0, ...options });
  await s.start();
  return s;
}

/** Connect, handshake, authenticate (offline token), and optionally enter + travel to Ready. */
export async function player(
  server: NoxRelayServer,
  token: string,
  options: { transport?: 'tcp' | 'udp'; instance?: number | null; keepAliveMs?: number } = {},
): Promise<NoxRelayClient> {
  const c = new NoxRelayClient({
    port: server.port,
    transport: options.transport ?? 'tcp',
    keepAliveMs: options.keepAliveMs ?? 0,
  });
  await c.connect();
  await c.handshake();
  const auth = await c.authenticate(token);
  if (auth.result !== 0) throw new Error(`auth failed: ${auth.result}`);
  const iid = options.instance === undefined ? 0 : options.instance;
  if (iid !== null) {
    const e = await c.enter(iid);
    if (e.result !== 0) throw new Error(`enter failed: ${e.result} ${e.reason}`);
    await c.travel(iid);
  }
  return c;
}

/** The next `name` event for which `pred` holds, or a rejection after `ms`. */
export function next<T = any>(
  e: EventEmitter,
  name: string,
  pred: (v: T) => boolean = () => true,
  ms = 2000,
): Promise<T> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      e.off(name, on);
      reject(new Error(`no ${name} event within ${ms} ms`));
    }, ms);
    const on = (v: T) => {
      if (!pred(v)) return;
      clearTimeout(timer);
      e.off(name, on);
      resolve(v);
    };
    e.on(name, on);
  });
}

/** A raw TCP socket that collects everything it receives. */
export async function rawTcp(
  port: number,
): Promise<{ socket: net.Socket; received: () => Buffer; closed: Promise<void> }> {
  const socket = net.connect({ host: '127.0.0.1', port });
  await new Promise<void>((resolve, reject) => {
    socket.once('connect', resolve);
    socket.once('error', reject);
  });
  socket.on('error', () => {});
  const chunks: Buffer[] = [];
  socket.on('data', (c) => chunks.push(c));
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
  return { socket, received: () => Buffer.concat(chunks), closed };
}

/** Waits until `check()` is true (polling), or fails after `ms`. */
export async function until(
  check: () => boolean,
  ms = 2000,
  what = 'condition',
  everyMs = 10,
): Promise<void> {
  await waitFor(check, { what, timeoutMs: ms, intervalMs: everyMs });
}

/**
 * Servers, clients and other resources for one test file, closed after each test. Call once at
 * the top level of a test file.
 */
export function useFixtures() {
  const cleanup: (() => unknown)[] = [];
  afterEach(async () => {
    while (cleanup.length > 0) await cleanup.pop()!();
  });
  return {
    cleanup,
    async server(options: NoxRelayOptions = {}): Promise<NoxRelayServer> {
      const s = await startServer(options);
      cleanup.push(() => s.close());
      return s;
    },
    async client(
      s: NoxRelayServer,
      token: string,
      options: Parameters<typeof player>[2] = {},
    ): Promise<NoxRelayClient> {
      const c = await player(s, token, options);
      cleanup.push(() => c.close());
      return c;
    },
  };
}

/** One client packet's bytes. */
export function packet(uid: number, message: Parameters<typeof writeClientPacket>[2]): Buffer {
  const w = new WireWriter();
  writeClientPacket(w, uid, message);
  return w.toBuffer();
}
