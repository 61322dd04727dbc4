/**
 * A one-address attacker against the JS5 server, at a bounded scale: handshaken sessions held
 * open with keep-alives, slow drips, silent connections. A client from a second loopback address
 * (127.0.0.2) must still get in and be served.
 */
import net from 'node:net';
import { afterAll, describe, expect, test } from 'vitest';
import { Js5Client } from '../../../src/protocols/js5/client.js';
import type { Js5Server } from '../../../src/protocols/js5/server.js';
import { elapse, waitFor } from '../../helpers/wait.js';
import { RawPeer, startServer } from './helpers.js';

const servers: Js5Server[] = [];
const peers: RawPeer[] = [];
const timers: NodeJS.Timeout[] = [];
afterAll(async () => {
  for (const t of timers) clearInterval(t);
  for (const p of peers) p.destroy();
  await Promise.all(servers.map((s) => s.close()));
});

async function peer(port: number): Promise<RawPeer> {
  const p = await RawPeer.connect(port);
  peers.push(p);
  return p;
}

function handshake(build: number): string {
  return `0f${build.toString(16).padStart(8, '0')}`;
}

describe('one address cannot lock new clients out', () => {
  test('handshaken sessions with keep-alives from 127.0.0.1 leave room for a client from 127.0.0.2', async () => {
    const { server: s, metrics } = await startServer('530', { maxClients: 12 });
    servers.push(s);
    // The attacker opens 20 connections, handshakes each and keeps them alive (02 000000).
    const attackers: RawPeer[] = [];
    for (let i = 0; i < 20; i++) {
      const p = await peer(s.port);
      p.send(handshake(530));
      attackers.push(p);
    }
    for (const p of attackers) await p.waitFor(1);
    const accepted = attackers.filter((p) => p.received[0] === 0);
    const refused = attackers.filter((p) => p.received[0] === 9);
    expect(accepted).toHaveLength(8); // the default per-address cap
    expect(refused).toHaveLength(12);
    expect(metrics.closed.get('ip_limit')).toBe(12);
    const keepAlive = setInterval(() => {
      for (const p of accepted) if (!p.closed) p.send('02000000');
    }, 100);
    timers.push(keepAlive);
    // A new player from another address gets in and is served.
    const c = await Js5Client.connect({
      host: '127.0.0.1',
      port: s.port,
      build: 530,
      profile: '530',
      localAddress: '127.0.0.2',
    });
    const master = await c.masterIndex();
    expect(master.entries).toHaveLength(28);
    await c.close();
    clearInterval(keepAlive);
  });

  test('keep-alives do not keep an idle session: no request for idleTimeoutMs closes it', async () => {
    const { server: s, metrics } = await startServer('530', { idleTimeoutMs: 3000 });
    servers.push(s);
    const idle = await peer(s.port);
    idle.send(handshake(530));
    const busy = await peer(s.port);
    busy.send(handshake(530));
    await idle.waitFor(1);
    await busy.waitFor(1);
    const started = Date.now();
    const keepAlive = setInterval(() => {
      if (!idle.closed) idle.send('02000000 03000000 06000003');
      if (!busy.closed) busy.send('01000000'); // a real request every 200 ms
    }, 200);
    timers.push(keepAlive);
    expect(await idle.waitClosed(20_000)).toBe(true);
    expect(Date.now() - started).toBeGreaterThanOrEqual(2900);
    expect(metrics.closed.get('idle_timeout')).toBe(1);
    // The session that sends requests is still open well past the idle time.
    await elapse(
      Math.max(0, 6500 - (Date.now() - started)),
      'the busy session must outlive twice the idle time',
    );
    expect(busy.closed).toBe(false);
    clearInterval(keepAlive);
  });

  test('a handshake must complete within handshakeTimeoutMs: a slow drip and a silent peer are closed', async () => {
    const { server: s, metrics } = await startServer('530', { handshakeTimeoutMs: 600 });
    servers.push(s);
    const silent = await peer(s.port);
    const drip = await peer(s.port);
    const bytes = Buffer.from(handshake(530), 'hex');
    let i = 0;
    const dripper = setInterval(() => {
      if (i < bytes.length && !drip.closed) drip.send(bytes.subarray(i, ++i));
    }, 250);
    timers.push(dripper);
    expect(await silent.waitClosed(10_000)).toBe(true);
    expect(await drip.waitClosed(10_000)).toBe(true);
    clearInterval(dripper);
    expect(drip.received.length).toBe(0); // never answered
    expect(metrics.closed.get('handshake_timeout')).toBe(2);
  });

  test('connections are counted from accept: unhandshaken connections use the per-address budget too', async () => {
    const { server: s, metrics } = await startServer('530', { maxPerIp: 3 });
    servers.push(s);
    const held = [await peer(s.port), await peer(s.port), await peer(s.port)];
    const fourth = await peer(s.port);
    expect((await fourth.waitFor(1))[0]).toBe(9);
    expect(await fourth.waitClosed()).toBe(true);
    // One leaves: a new connection from the same address is accepted again.
    held[0]!.destroy();
    await waitFor(() => metrics.open === 2, { what: 'the server to see the connection go' });
    const again = await peer(s.port);
    again.send(handshake(530));
    expect((await again.waitFor(1))[0]).toBe(0);
  });

  test('a refused peer that never closes its side is dropped: it cannot keep its per-address slot', async () => {
    const { server: s, metrics } = await startServer('530', { maxPerIp: 2, handshakeTimeoutMs: 500 });
    servers.push(s);
    const stubborn: net.Socket[] = [];
    for (let i = 0; i < 2; i++) {
      const sock = net.connect({ host: '127.0.0.1', port: s.port, allowHalfOpen: true });
      sock.on('error', () => {});
      sock.on('end', () => {}); // keep our side open after the server's FIN
      await new Promise<void>((r) => sock.once('connect', () => r()));
      sock.write(Buffer.from(handshake(1), 'hex'));
      stubborn.push(sock);
    }
    await waitFor(() => metrics.closed.get('out_of_date') === 2, { what: 'both refused as out of date' });
    // Once the linger time is over, the server drops them and the address has room again.
    await waitFor(
      async () => {
        const p = await peer(s.port);
        p.send(handshake(530));
        if ((await p.waitFor(1))[0] === 0) return true;
        p.destroy();
        return false;
      },
      { what: 'a handshake accepted once the lingering connections are dropped', intervalMs: 200 },
    );
    for (const sock of stubborn) sock.destroy();
  });
});
