/**
 * The connection seam in core: the table's caps (both sides of each), the address key it counts
 * under, and the `gamewire:connection:*` events, first on the table itself, then through the
 * real TCP listener and framed TCP (real sockets on 127.0.0.1).
 */
import net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import {
  addressKey,
  CloseReason,
  type Connection,
  ConnectionTable,
  type TransportKind,
} from '../../src/core/connection.js';
import { listenFramedTcp } from '../../src/core/framed-tcp.js';
import { silentLogger } from '../../src/core/logger.js';
import { ProtocolMetrics } from '../../src/core/metrics.js';
import { listenTcp } from '../../src/core/tcp.js';
import { lengthPrefixed } from '../../src/wire/framing.js';
import { watchConnections } from '../helpers/connection-events.js';
import { waitFor } from '../helpers/wait.js';

const cleanup: (() => unknown)[] = [];
afterEach(async () => {
  while (cleanup.length > 0) await cleanup.pop()!();
});

function peer(remoteAddress: string, remotePort = 1000, transport: TransportKind = 'udp'): Connection {
  return {
    transport,
    remoteAddress,
    remotePort,
    addressKey: addressKey(remoteAddress),
    open: true,
    bytesIn: 10,
    bytesOut: 20,
    messagesIn: 1,
    messagesOut: 2,
    send() {},
    close() {},
  };
}

function table(protocol: string, maxConnections: number, maxConnectionsPerIp: number) {
  return new ConnectionTable({ protocol, transport: 'udp', maxConnections, maxConnectionsPerIp });
}

describe('ConnectionTable', () => {
  it('admits up to the global cap and refuses the next one as over_capacity (drop event)', () => {
    const watch = watchConnections('t-global');
    cleanup.push(() => watch.stop());
    const t = table('t-global', 3, 0);
    const peers = ['10.0.0.1', '10.0.0.2', '10.0.0.3', '10.0.0.4'].map((a) => peer(a));
    expect(peers.slice(0, 3).map((p) => t.open(p))).toEqual([undefined, undefined, undefined]);
    expect(t.open(peers[3]!)).toBe(CloseReason.OverCapacity);
    expect(t.size).toBe(3);
    expect(watch.of('open').map((e) => e.remote)).toEqual([
      '10.0.0.1:1000',
      '10.0.0.2:1000',
      '10.0.0.3:1000',
    ]);
    expect(watch.of('drop')).toEqual([
      expect.objectContaining({ remote: '10.0.0.4:1000', reason: 'over_capacity', transport: 'udp' }),
    ]);
    // A release makes room again.
    t.release(peers[0]!, 'peer_closed');
    expect(t.open(peers[3]!)).toBeUndefined();
  });

  it('per-address cap: a NAT address gets its whole share, the next one is refused, others are not', () => {
    const t = table('t-ip', 100, 4);
    for (let port = 1; port <= 4; port++) expect(t.open(peer('192.0.2.7', port))).toBeUndefined();
    expect(t.open(peer('192.0.2.7', 5))).toBe(CloseReason.PerIpLimit);
    expect(t.open(peer('192.0.2.8', 5))).toBeUndefined();
    expect(t.countFor('192.0.2.7')).toBe(4);
  });

  it('0 means no per-address cap: a venue behind one address is never refused by it', () => {
    const t = table('t-ip0', 1000, 0);
    for (let port = 1; port <= 500; port++) expect(t.open(peer('192.0.2.9', port))).toBeUndefined();
    expect(t.countFor('192.0.2.9')).toBe(500);
  });

  it('two IPv6 addresses in one /64 share the per-address cap; another /64 does not', () => {
    const t = table('t-v6', 100, 2);
    expect(t.open(peer('2001:db8:1:2::1'))).toBeUndefined();
    expect(t.open(peer('2001:db8:1:2:ffff::9'))).toBeUndefined();
    expect(t.open(peer('2001:db8:1:2:aaaa:bbbb:cccc:dddd'))).toBe(CloseReason.PerIpLimit);
    expect(t.open(peer('2001:db8:1:3::1'))).toBeUndefined();
    expect(t.countFor('2001:db8:1:2::/64')).toBe(2);
  });

  it('close publishes once, with the reason and the counters; an unannounced entry publishes nothing', () => {
    const watch = watchConnections('t-close');
    cleanup.push(() => watch.stop());
    const t = table('t-close', 10, 0);
    const a = peer('::1', 7);
    const halfOpen = peer('127.0.0.2', 8);
    t.open(a);
    expect(t.admit(halfOpen)).toBeUndefined();
    expect(t.countFor('127.0.0.2')).toBe(1);
    expect(t.release(a, 'idle_timeout')).toBe(true);
    expect(t.release(a, 'peer_closed')).toBe(false);
    expect(t.release(halfOpen, 'half_open_timeout')).toBe(true);
    expect(t.size).toBe(0);
    expect(t.perAddressCounts.size).toBe(0);
    expect(watch.of('open')).toHaveLength(1);
    expect(watch.of('close')).toEqual([
      expect.objectContaining({
        remote: '[::1]:7',
        addressKey: '0:0:0:0::/64',
        reason: 'idle_timeout',
        bytesIn: 10,
        bytesOut: 20,
        messagesIn: 1,
        messagesOut: 2,
      }),
    ]);
  });

  it('a closing table refuses newcomers as server_closing', () => {
    const t = table('t-closing', 10, 0);
    t.closing();
    expect(t.open(peer('10.1.1.1'))).toBe(CloseReason.ServerClosing);
  });
});

function connect(port: number, localAddress = '127.0.0.1'): Promise<net.Socket> {
  const s = net.connect({ host: '127.0.0.1', port, localAddress });
  cleanup.push(() => void s.destroy());
  s.on('error', () => {});
  return new Promise((resolve, reject) => {
    s.once('connect', () => resolve(s));
    s.once('error', reject);
  });
}

describe('listenTcp on the seam', () => {
  it('publishes open and close (peer_closed, idle_timeout, server_closing) and drops over the caps', async () => {
    const watch = watchConnections('seam-tcp');
    cleanup.push(() => watch.stop());
    const metrics = new ProtocolMetrics('seam-tcp');
    const listener = await listenTcp({
      host: '127.0.0.1',
      port: 0,
      maxConnections: 3,
      maxConnectionsPerIp: 2,
      idleTimeoutMs: 0,
      metrics,
      log: silentLogger(),
      onConnection(socket, connection) {
        expect(connection.transport).toBe('tcp');
        socket.on('data', (d) => connection.send(d));
      },
    });
    let closed = false;
    cleanup.push(() => (closed ? undefined : listener.close(100)));

    const a = await connect(listener.port);
    const opened = await watch.next('open', () => true, 'the first connection');
    expect(opened).toMatchObject({ transport: 'tcp', addressKey: '127.0.0.1' });
    a.write('hello');
    await waitFor(() => a.read(), { what: 'the echo' });
    a.end();
    const close = await watch.next('close', () => true, 'the peer closing');
    expect(close).toMatchObject({ reason: 'peer_closed', bytesIn: 5, bytesOut: 5, messagesOut: 1 });

    // Per-address: two from 127.0.0.1, the third refused; 127.0.0.2 still gets in (global 3).
    await connect(listener.port);
    await connect(listener.port);
    await waitFor(() => listener.table.size === 2, { what: 'two connections' });
    await connect(listener.port);
    expect((await watch.next('drop', () => true, 'the third from 127.0.0.1')).reason).toBe('per_ip_limit');
    await connect(listener.port, '127.0.0.2');
    await waitFor(() => listener.table.size === 3, { what: 'three connections' });
    await connect(listener.port, '127.0.0.3');
    await watch.next('drop', (e) => e.reason === 'over_capacity', 'the fourth, over capacity');
    expect(metrics.snapshot().closed).toMatchObject({ per_ip_limit: 1, over_capacity: 1 });

    await listener.close(1000);
    closed = true;
    await waitFor(() => watch.of('close').filter((e) => e.reason === 'server_closing').length === 3, {
      what: 'three server_closing closes',
    });
  });

  it('an idle connection closes as idle_timeout', async () => {
    const watch = watchConnections('seam-idle');
    cleanup.push(() => watch.stop());
    const listener = await listenTcp({
      host: '127.0.0.1',
      port: 0,
      maxConnections: 10,
      idleTimeoutMs: 50,
      metrics: new ProtocolMetrics('seam-idle'),
      log: silentLogger(),
      onConnection() {},
    });
    cleanup.push(() => listener.close(100));
    await connect(listener.port);
    expect((await watch.next('close', () => true, 'the idle close')).reason).toBe('idle_timeout');
  });
});

describe('framed TCP on the seam', () => {
  it('counts frames in and sends out, and a malformed frame closes as malformed', async () => {
    const watch = watchConnections('seam-framed');
    cleanup.push(() => watch.stop());
    const server = await listenFramedTcp({
      host: '127.0.0.1',
      port: 0,
      measure: lengthPrefixed({ prefix: 'u8', counts: 'rest', maxFrameBytes: 16 }),
      maxFrameBytes: 16,
      metrics: new ProtocolMetrics('seam-framed'),
      log: silentLogger(),
      onConnection: (c) => ({
        onFrame(buf, start, end) {
          c.send(Buffer.from(buf.subarray(start, end)));
          return true;
        },
      }),
    });
    cleanup.push(() => server.close(100));
    const s = await connect(server.port);
    s.write(Buffer.from([2, 1, 2, 2, 4, 5]));
    await waitFor(() => [...server.connections()][0]?.messagesIn === 2, { what: 'two frames in' });
    const c = [...server.connections()][0]!;
    expect(c).toMatchObject({ transport: 'tcp', open: true, messagesOut: 2, bytesIn: 6 });
    s.write(Buffer.from([200]));
    const close = await watch.next('close', () => true, 'the malformed close');
    expect(close).toMatchObject({ reason: 'malformed', messagesIn: 2, bytesIn: 7 });
    expect(c.open).toBe(false);
  });
});
