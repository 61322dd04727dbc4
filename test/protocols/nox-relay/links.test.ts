/**
 * nox-relay's links (links.ts): what each transport does for a client, checked on the links
 * themselves (a TCP peer that records what it is asked, a UDP socket that counts its sends), so
 * the rules hold whichever server code calls them.
 */
import type dgram from 'node:dgram';
import { afterEach, describe, expect, it } from 'vitest';
import { ProtocolMetrics } from '../../../src/core/metrics.js';
import { Priority } from '../../../src/protocols/nox-relay/constants.js';
import {
  TcpClients,
  TcpPlayerLink,
  UdpPlayerLink,
  UdpSessions,
} from '../../../src/protocols/nox-relay/links.js';
import { RelayClient, type SendLimits } from '../../../src/protocols/nox-relay/session.js';
import { watchConnections } from '../../helpers/connection-events.js';

const limits: SendLimits = {
  congestion: { softBytes: 100, hardBytes: 400, closeBytes: 1600 },
  udpReplyFactor: 3,
  udpSendBytesPerSecond: 1,
  slowConsumerTimeoutMs: 5000,
  maxRequestsPerSecond: 100,
  maxRequestBurst: 100,
};

const stops: (() => void)[] = [];
afterEach(() => {
  for (const stop of stops.splice(0)) stop();
});

/** A TCP peer whose queue the test sets, recording writes, ends and destroys. */
function fakePeer(address = '127.0.0.1', port = 1) {
  return {
    remoteAddress: address,
    remotePort: port,
    writableLength: 0,
    destroyed: false,
    written: [] as Buffer[],
    ended: 0,
    destroyedWith: [] as (string | undefined)[],
    write(bytes: Buffer) {
      this.written.push(bytes);
    },
    end() {
      this.ended++;
    },
    destroy(reason?: string) {
      this.destroyed = true;
      this.destroyedWith.push(reason);
    },
  };
}

describe('TcpPlayerLink', () => {
  it('closes a consumer stalled over the soft limit on the sweep, even when nothing is sent to it', () => {
    const metrics = new ProtocolMetrics('nox-relay');
    const peer = fakePeer();
    const link = new TcpPlayerLink(peer, new TcpClients(), limits, metrics);
    peer.writableLength = 101;
    link.watch(1000);
    link.watch(5999);
    expect(peer.destroyedWith).toEqual([]);
    link.watch(6000);
    expect(peer.destroyedWith).toEqual(['slow_consumer']);
    expect(metrics.closed.get('slow_consumer')).toBe(1);
    // Closed once: a later sweep or send does not count it again.
    link.watch(7000);
    expect(peer.destroyedWith).toEqual(['slow_consumer']);
    expect(metrics.closed.get('slow_consumer')).toBe(1);
  });

  it('a queue that drains below the soft limit starts the slow-consumer clock again', () => {
    const peer = fakePeer();
    const link = new TcpPlayerLink(peer, new TcpClients(), limits, new ProtocolMetrics('nox-relay'));
    peer.writableLength = 101;
    link.watch(1000);
    peer.writableLength = 100;
    link.watch(4000);
    peer.writableLength = 101;
    link.watch(5000);
    link.watch(9999);
    expect(peer.destroyed).toBe(false);
    link.watch(10_000);
    expect(peer.destroyed).toBe(true);
  });

  it('a queue at the close limit closes the connection at once, whatever the priority', () => {
    const metrics = new ProtocolMetrics('nox-relay');
    const peer = fakePeer();
    const link = new TcpPlayerLink(peer, new TcpClients(), limits, metrics);
    peer.writableLength = 1600;
    expect(link.allows(Priority.Critical)).toBe(false);
    expect(peer.destroyedWith).toEqual(['slow_consumer']);
    expect(metrics.dropped.size).toBe(0);
  });

  it('counts its clients per address key (IPv6 by /64), ends after flushing on release, resets on abort', () => {
    const metrics = new ProtocolMetrics('nox-relay');
    const clients = new TcpClients();
    const make = (address: string, port: number) => {
      const peer = fakePeer(address, port);
      return {
        peer,
        client: new RelayClient(port, new TcpPlayerLink(peer, clients, limits, metrics), limits, metrics),
      };
    };
    const a = make('2001:db8:0:1::5', 1);
    const b = make('2001:db8:0:1:ffff::6', 2);
    const c = make('10.0.0.1', 3);
    for (const x of [a, b, c]) x.client.link.attach(x.client);
    expect(clients.size).toBe(3);
    expect(clients.countFor(a.client.addressKey)).toBe(2);
    expect(clients.countFor('10.0.0.1')).toBe(1);
    a.client.link.release(a.client, 'timeout');
    expect(a.peer.ended).toBe(1);
    expect(a.peer.destroyed).toBe(false);
    expect(clients.countFor(b.client.addressKey)).toBe(1);
    c.client.link.abort();
    expect(c.peer.destroyedWith).toEqual([undefined]);
    c.client.link.release(c.client, 'evicted');
    expect(clients.countFor('10.0.0.1')).toBe(0);
    expect(clients.size).toBe(1);
    // A stream's peer proved its address by connecting.
    expect(b.client.addressProven).toBe(true);
    expect(b.client.link.datagram).toBe(false);
  });
});

describe('UdpPlayerLink', () => {
  it("sheds all but Critical while the shared socket's queue is over the close limit", () => {
    const metrics = new ProtocolMetrics('nox-relay');
    let sent = 0;
    const socket = { send: () => sent++ } as unknown as dgram.Socket;
    const queue = { bytes: 0 };
    const sessions = new UdpSessions(socket, queue);
    const link = new UdpPlayerLink(
      '127.0.0.1',
      1,
      sessions,
      { ...limits, udpSendBytesPerSecond: 1 << 30 },
      metrics,
    );
    queue.bytes = 1601;
    expect(link.allows(Priority.Low)).toBe(false);
    expect(link.allows(Priority.Normal)).toBe(false);
    expect(link.allows(Priority.High)).toBe(false);
    expect(link.allows(Priority.Critical)).toBe(true);
    queue.bytes = 1600;
    expect(link.allows(Priority.Low)).toBe(true);
    expect(Object.fromEntries(metrics.dropped)).toEqual({
      congestion_low: 1,
      congestion_normal: 1,
      congestion_high: 1,
    });
    expect(sent).toBe(0);
  });

  it('its own backlog grows with what it sends and never closes it', () => {
    const metrics = new ProtocolMetrics('nox-relay');
    const socket = { send: () => {} } as unknown as dgram.Socket;
    const link = new UdpPlayerLink('127.0.0.1', 1, new UdpSessions(socket, { bytes: 0 }), limits, metrics);
    link.queued(); // drained up to now: the 1 byte/s drain is then negligible
    link.write(Buffer.alloc(450));
    expect(link.queued()).toBeGreaterThan(400);
    expect(link.allows(Priority.Normal)).toBe(false);
    expect(link.allows(Priority.High)).toBe(false);
    expect(link.allows(Priority.Critical)).toBe(true);
    link.watch();
    expect(metrics.closed.size).toBe(0);
  });

  it('a session is found by its source, counted per address key, and on the seam from announce to release', () => {
    const watch = watchConnections('nox-relay');
    stops.push(() => watch.stop());
    const metrics = new ProtocolMetrics('nox-relay');
    const socket = { send: () => {} } as unknown as dgram.Socket;
    const sessions = new UdpSessions(socket, { bytes: 0 });
    const at = (port: number) =>
      new RelayClient(port, new UdpPlayerLink('127.0.0.7', port, sessions, limits, metrics), limits, metrics);
    const a = at(1000);
    const b = at(1001);
    a.link.attach(a);
    b.link.attach(b);
    expect(sessions.get('127.0.0.7', 1000)).toBe(a);
    expect(sessions.countFor('127.0.0.7')).toBe(2);
    expect(a.link.datagram).toBe(true);
    expect(a.addressProven).toBe(false);
    // Admitted but not announced (half-open): nothing published yet.
    expect(watch.events).toEqual([]);
    a.link.announce(a);
    a.link.release(a, 'timeout');
    b.link.release(b, 'half_open_timeout');
    expect(watch.events.map((e) => [e.kind, e.transport, e.remote, e.reason])).toEqual([
      ['open', 'udp', '127.0.0.7:1000', undefined],
      ['close', 'udp', '127.0.0.7:1000', 'timeout'],
    ]);
    expect(sessions.size).toBe(0);
    expect(sessions.countFor('127.0.0.7')).toBe(0);
    expect(sessions.get('127.0.0.7', 1001)).toBeUndefined();
  });
});
