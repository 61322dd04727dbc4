/**
 * nox-relay's UDP sessions on the connection seam: the `gamewire:connection:*` events for a
 * session (open once it is more than half-open, close with its reason and counters), real
 * clients over real UDP on 127.0.0.1; a TCP client is the framed TCP seam's (transport `tcp`).
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { NoxRelayClient } from '../../../src/protocols/nox-relay/client.js';
import type { ServerMessage } from '../../../src/protocols/nox-relay/messages.js';
import type { NoxRelayServer } from '../../../src/protocols/nox-relay/server.js';
import { watchConnections } from '../../helpers/connection-events.js';
import { waitFor } from '../../helpers/wait.js';
import { startServer } from './helpers.js';

const cleanup: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
});

async function server(options: Parameters<typeof startServer>[0] = {}): Promise<NoxRelayServer> {
  const s = await startServer(options);
  cleanup.push(() => s.close());
  return s;
}

async function client(
  s: NoxRelayServer,
  transport: 'tcp' | 'udp',
  localAddress?: string,
): Promise<NoxRelayClient> {
  const c = new NoxRelayClient({
    port: s.port,
    transport,
    keepAliveMs: 0,
    requestTimeoutMs: 2000,
    ...(localAddress === undefined ? {} : { localAddress }),
  });
  cleanup.push(() => c.close());
  await c.connect();
  await c.handshake();
  return c;
}

describe('nox-relay on the connection seam', () => {
  it('a UDP session: open once proven, close with its reason (disconnect, server_closing)', async () => {
    const watch = watchConnections('nox-relay');
    cleanup.push(() => watch.stop());
    const s = await server();

    const leaving = await client(s, 'udp');
    const open = await watch.next('open', (e) => e.transport === 'udp', 'the UDP session');
    expect(open.addressKey).toBe('127.0.0.1');
    await leaving.latency();
    await leaving.disconnect();
    const left = await watch.next('close', (e) => e.transport === 'udp', 'the Disconnect');
    // Two Handshakes, a Latency and the Disconnect in; their replies out.
    expect(left).toMatchObject({ reason: 'disconnect', messagesIn: 4 });
    expect(left.messagesOut).toBeGreaterThanOrEqual(3);
    expect(left.bytesIn).toBeGreaterThan(0);

    await client(s, 'udp');
    await client(s, 'tcp');
    await waitFor(() => s.udpTable?.size === 1 && watch.of('open', 'tcp').length === 1, {
      what: 'one UDP session and one TCP connection',
    });
    await s.close();
    await watch.next(
      'close',
      (e) => e.reason === 'server_closing' && e.transport === 'udp',
      'the server closing',
    );
    expect(watch.of('open', 'udp')).toHaveLength(2);
  });

  it('a silent UDP session closes as timeout', async () => {
    const watch = watchConnections('nox-relay');
    cleanup.push(() => watch.stop());
    const s = await server({ connectionTimeoutMs: 300 });
    await client(s, 'udp');
    const closed = await watch.next('close', (e) => e.transport === 'udp', 'the timeout');
    expect(closed.reason).toBe('timeout');
  });

  it('a Handshake that never proves its address is a half-open session: no open or close', async () => {
    const watch = watchConnections('nox-relay');
    cleanup.push(() => watch.stop());
    const s = await server({ halfOpenTimeoutMs: 200 });
    const c = new NoxRelayClient({ port: s.port, transport: 'udp', keepAliveMs: 0, proveAddress: false });
    cleanup.push(() => c.close());
    await c.connect();
    await c.handshake();
    // It was a session (the timeout closed it), never announced: nothing on the seam.
    await waitFor(() => s.metrics.closed.get('half_open_timeout') === 1, {
      what: 'the half-open session expiring',
    });
    expect(s.halfOpenClients).toBe(0);
    expect(s.udpTable?.size).toBe(0);
    // (A TCP close of the previous test's server may still arrive: UDP events only.)
    expect(watch.events.filter((e) => e.transport === 'udp')).toEqual([]);
  });
});

describe('nox-relay: a client is handled the same whatever its transport', () => {
  it('the server, dispatch and handlers never branch on a transport name (only links.ts knows them)', () => {
    const dir = join(import.meta.dirname, '../../../src/protocols/nox-relay');
    const files = [
      ...['server.ts', 'session.ts', 'dispatch.ts', 'context.ts', 'reassembly.ts', 'udp-admission.ts'],
      ...readdirSync(join(dir, 'handlers')).map((f) => join('handlers', f)),
    ];
    const branches: string[] = [];
    for (const f of files) {
      const lines = readFileSync(join(dir, f), 'utf8').split('\n');
      lines.forEach((line, i) => {
        if (/transport\s*[!=]==|[!=]==\s*'(?:tcp|udp)'|'(?:tcp|udp)'\s*[!=]==/.test(line))
          branches.push(`${f}:${i + 1}: ${line.trim()}`);
      });
    }
    expect(branches).toEqual([]);
  });

  it('each transport counts its own clients per address: a UDP session and a TCP connection from one address both fit caps of 1', async () => {
    const s = await server({ maxTcpPerIp: 1, maxUdpPerIp: 1 });
    const udp = await client(s, 'udp', '127.0.0.52');
    const tcp = await client(s, 'tcp', '127.0.0.52');
    expect(s.establishedClients).toBe(2);
    // A second of each from that address is refused by its own transport's cap.
    const tcp2 = new NoxRelayClient({
      port: s.port,
      transport: 'tcp',
      localAddress: '127.0.0.52',
      keepAliveMs: 0,
    });
    cleanup.push(() => tcp2.close());
    const refused = new Promise((resolve) => tcp2.once('close', resolve));
    await tcp2.connect().catch(() => undefined);
    await refused;
    expect(s.metrics.closed.get('over_capacity_ip')).toBe(1);
    const udp2 = new NoxRelayClient({
      port: s.port,
      transport: 'udp',
      localAddress: '127.0.0.52',
      keepAliveMs: 0,
      requestTimeoutMs: 300,
    });
    cleanup.push(() => udp2.close());
    await udp2.connect();
    await expect(udp2.handshake()).rejects.toThrow(/no Handshake reply/);
    // (Its Handshake may still be in the socket's queue when the wait ends on a loaded machine.)
    await waitFor(() => (s.metrics.dropped.get('over_capacity') ?? 0) >= 1, {
      what: 'the refused UDP Handshake',
    });
    // Released under the right count: once each leaves, another of its transport gets in.
    await udp.disconnect();
    await tcp.disconnect();
    await waitFor(() => s.clients.size === 0, { what: 'both clients gone' });
    await client(s, 'tcp', '127.0.0.52');
    await client(s, 'udp', '127.0.0.52');
    expect(s.establishedClients).toBe(2);
  });

  for (const transport of ['tcp', 'udp'] as const) {
    it(`a Handshake of another protocol version is answered with its own uid, then the ${transport} client is closed`, async () => {
      const s = await server();
      const c = await client(s, transport);
      const disconnect = new Promise<{ uid: number; reason: string | null }>((resolve) => {
        c.on('message', (m: ServerMessage, uid: number) => {
          if (m.type === 'Disconnect') resolve({ uid, reason: m.reason });
        });
      });
      c.post({ type: 'Handshake', protocol: 2, engine: 'x', platform: 'y', addressCookie: null }, 7);
      expect(await disconnect).toEqual({ uid: 7, reason: 'Incompatible protocol version (2 != 1).' });
      await waitFor(() => s.clients.size === 0, { what: 'the client dropped' });
      expect(s.metrics.closed.get('bad_protocol')).toBe(1);
    });
  }
});
