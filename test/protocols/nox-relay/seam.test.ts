/**
 * nox-relay's UDP sessions on the connection seam: the `gamewire:connection:*` events for a
 * session (open once it is more than half-open, close with its reason and counters), real
 * clients over real UDP on 127.0.0.1; a TCP client is the framed TCP seam's (transport `tcp`).
 */
import { afterEach, describe, expect, it } from 'vitest';
import { NoxRelayClient } from '../../../src/protocols/nox-relay/client.js';
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

async function client(s: NoxRelayServer, transport: 'tcp' | 'udp'): Promise<NoxRelayClient> {
  const c = new NoxRelayClient({ port: s.port, transport, keepAliveMs: 0 });
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
    await waitFor(() => s.udpTable.size === 1 && watch.of('open', 'tcp').length === 1, {
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
    expect(s.udpTable.size).toBe(0);
    // (A TCP close of the previous test's server may still arrive: UDP events only.)
    expect(watch.events.filter((e) => e.transport === 'udp')).toEqual([]);
  });
});
