/**
 * Issue 17's attacks on nox-relay, each reproduced at a bounded scale on loopback: an attacker
 * on 127.0.0.1 (or several spoofed-looking addresses in 127/8), and a legitimate player on
 * 127.0.0.2 that must still be served. Real sockets, port 0.
 */
import dgram from 'node:dgram';
import { describe, expect, it } from 'vitest';
import { ProtocolMetrics } from '../../../src/core/metrics.js';
import { NoxRelayClient } from '../../../src/protocols/nox-relay/client.js';
import { AuthFlags, Priority } from '../../../src/protocols/nox-relay/constants.js';
import type { InstanceConfig } from '../../../src/protocols/nox-relay/instances.js';
import type { NoxRelayServer } from '../../../src/protocols/nox-relay/server.js';
import { RelayClient } from '../../../src/protocols/nox-relay/session.js';
import { UdpAdmission } from '../../../src/protocols/nox-relay/udp-admission.js';
import { elapse } from '../../helpers/wait.js';
import { next, packet, until, useFixtures } from './helpers.js';

const { cleanup, server } = useFixtures();

const LEGIT = '127.0.0.2';

/** A raw UDP socket on `address` that counts what it sends and receives. */
async function udpPeer(port: number, address = '127.0.0.1') {
  const sock = dgram.createSocket('udp4');
  cleanup.push(() => new Promise<void>((r) => sock.close(() => r())));
  const replies: Buffer[] = [];
  const peer = {
    sent: 0,
    replies,
    get received(): number {
      return replies.reduce((n, r) => n + r.length, 0);
    },
    send(b: Buffer) {
      peer.sent += b.length;
      sock.send(b, port, '127.0.0.1');
    },
  };
  sock.on('message', (m) => replies.push(m));
  await new Promise<void>((r) => sock.bind(0, address, () => r()));
  return peer;
}

/** The smallest valid Handshake: 11 bytes (empty engine and platform), as the attack used. */
const tinyHandshake = () =>
  packet(1, { type: 'Handshake', protocol: 1, engine: '', platform: '', addressCookie: null });

/** A player on `address` that connects over `transport`, authenticates and (optionally) enters 0. */
async function player(
  s: NoxRelayServer,
  token: string,
  o: { transport?: 'tcp' | 'udp'; address?: string; prove?: boolean; enter?: boolean } = {},
): Promise<NoxRelayClient> {
  const c = new NoxRelayClient({
    port: s.port,
    transport: o.transport ?? 'udp',
    localAddress: o.address ?? LEGIT,
    proveAddress: o.prove ?? true,
    keepAliveMs: 0,
    requestTimeoutMs: 4000,
  });
  cleanup.push(() => c.close());
  await c.connect();
  await c.handshake('unity', 'windows');
  expect((await c.authenticate(token)).result).toBe(0);
  if (o.enter !== false) {
    expect((await c.enter(0)).result).toBe(0);
    await c.travel(0);
  }
  return c;
}

const manyInstances = (n: number): InstanceConfig[] =>
  Array.from({ length: n }, (_, id) => ({ id, capacity: 0 }) as InstanceConfig);

describe('issue 17 item 1: one address cannot keep new UDP players out', () => {
  it('a Handshake flood from 40 ports of one address leaves room for a player from another address', async () => {
    const s = await server({ maxHalfOpenUdp: 32 });
    const ports = await Promise.all(Array.from({ length: 40 }, () => udpPeer(s.port)));
    const flood = () => {
      for (const p of ports) p.send(tinyHandshake());
    };
    flood();
    const timer = setInterval(flood, 100);
    try {
      await until(
        () => s.halfOpenClients >= s.options.maxHalfOpenUdpPerIp,
        5000,
        'the flood holding the share of half-open slots of its address',
      );
      // A real client (no cookie) and a gamewire client (cookie) both get in during the flood.
      await player(s, '1', { prove: false });
      await player(s, '2', { prove: true });
      expect(s.options.maxHalfOpenUdpPerIp).toBeLessThan(s.options.maxHalfOpenUdp);
      expect(s.halfOpenClients).toBeLessThanOrEqual(s.options.maxHalfOpenUdpPerIp);
      expect(s.metrics.closed.get('half_open_evicted')).toBeGreaterThan(0);
    } finally {
      clearInterval(timer);
    }
  });

  it('when spoofed addresses fill the half-open table, a new player evicts the oldest entry', async () => {
    const s = await server({ maxHalfOpenUdp: 4 });
    for (let i = 3; i < 11; i++) (await udpPeer(s.port, `127.0.0.${i}`)).send(tinyHandshake());
    await until(() => (s.metrics.closed.get('half_open_evicted') ?? 0) === 4);
    expect(s.halfOpenClients).toBe(4);
    await player(s, '1', { prove: false, enter: false });
    expect(s.establishedClients).toBe(1);
  });
});

describe('per-address limits and IPv6', () => {
  it('count an IPv6 /64 as one address (one host usually holds a whole /64)', () => {
    const metrics = new ProtocolMetrics('nox-relay');
    const limits = {
      congestion: { softBytes: 1000, hardBytes: 4000, closeBytes: 16_000 },
      udpReplyFactor: 3,
      udpSendBytesPerSecond: 1000,
      slowConsumerTimeoutMs: 5000,
      maxRequestsPerSecond: 100,
      maxRequestBurst: 100,
    };
    const udp = { send: () => {} } as never;
    const at = (ip: string, port: number) =>
      new RelayClient(port, { udp, ip, port, queue: { bytes: 0 } }, limits, metrics);
    const a = at('2001:db8:0:1::5', 1);
    const b = at('2001:db8:0:1:ffff::6', 2);
    const c = at('2001:db8:0:2::5', 3);
    expect(a.addressKey).toBe(b.addressKey);
    expect(a.addressKey).not.toBe(c.addressKey);
    expect(at('::ffff:10.1.2.3', 4).addressKey).toBe('10.1.2.3');
    const admission = new UdpAdmission({ addressCookieLifetimeMs: 10_000 });
    for (const x of [a, b, c]) admission.add(x);
    expect(admission.countFor(a.addressKey)).toBe(2);
    expect(admission.oldest(b.addressKey)).toBe(a);
    admission.remove(a);
    expect(admission.oldest(a.addressKey)).toBe(b);
    expect(admission.size).toBe(2);
  });
});

describe('issue 17 item 2: never more than 3x to an unproven UDP source, across all its datagrams', () => {
  const settle = (s: NoxRelayServer, n: number) =>
    until(() => s.metrics.received >= n, 3000).then(() =>
      elapse(200, 'replies beyond the 3x cap, if any, would go out within this window'),
    );

  it('Handshake + Auth(UseGuest): 19 bytes in, at most 57 out', async () => {
    const s = await server();
    const a = await udpPeer(s.port);
    a.send(tinyHandshake());
    await until(() => a.replies.length === 1);
    a.send(packet(2, { type: 'Authentification', flags: AuthFlags.UseGuest, accessToken: '' }));
    await settle(s, 2);
    expect(a.sent).toBe(19);
    expect(a.received).toBeLessThanOrEqual(3 * a.sent);
    expect(s.metrics.dropped.get('udp_amplification')).toBeGreaterThan(0);
    // A player on another address is served in full.
    const c = await player(s, '7', { enter: false });
    expect((await c.sessions(0)).instances.length).toBe(1);
  });

  it('200 UseGuest Auths in one datagram stay within 3x of everything the source sent', async () => {
    const s = await server();
    const a = await udpPeer(s.port);
    a.send(tinyHandshake());
    await until(() => a.replies.length === 1);
    const auth = packet(2, { type: 'Authentification', flags: AuthFlags.UseGuest, accessToken: '' });
    a.send(Buffer.concat(Array.from({ length: 200 }, () => auth)));
    await settle(s, 201);
    expect(a.sent).toBe(11 + 200 * 8);
    expect(a.received).toBeLessThanOrEqual(3 * a.sent);
    await player(s, '7');
  });

  it('200 Sessions requests against 256 public instances stay within 3x; a proven client gets every page', async () => {
    const s = await server({ instances: manyInstances(256) });
    const a = await udpPeer(s.port);
    a.send(tinyHandshake());
    await until(() => a.replies.length === 1);
    const sessions = packet(3, { type: 'Sessions', page: 0 });
    a.send(Buffer.concat(Array.from({ length: 200 }, () => sessions)));
    await settle(s, 201);
    expect(a.received).toBeLessThanOrEqual(3 * a.sent);
    // The gamewire client proved its address with the cookie: no budget, every page answered.
    const c = await player(s, '7', { enter: false });
    let listed = 0;
    const first = await c.sessions(0);
    for (let page = 0; page < first.totalPages; page++) listed += (await c.sessions(page)).instances.length;
    expect(listed).toBe(256);
    expect(s.metrics.counters.get('address_proven')).toBe(1);
  });

  it('a cookie from another address or a forged one proves nothing', async () => {
    const s = await server();
    const a = await udpPeer(s.port);
    a.send(tinyHandshake());
    await until(() => a.replies.length === 1);
    const cookie = a.replies[0]!.subarray(a.replies[0]!.length - 8);
    const b = await udpPeer(s.port);
    b.send(
      Buffer.concat([
        packet(1, { type: 'Handshake', protocol: 1, engine: '', platform: '', addressCookie: cookie }),
        Buffer.alloc(64),
      ]),
    );
    const forged = Buffer.from(cookie);
    forged[0]! ^= 1;
    a.send(packet(2, { type: 'Handshake', protocol: 1, engine: '', platform: '', addressCookie: forged }));
    await until(() => s.metrics.dropped.get('bad_cookie') === 2);
    expect(s.metrics.counters.get('address_proven')).toBeUndefined();
    // The genuine cookie, sent back from its own address, proves it.
    a.send(packet(3, { type: 'Handshake', protocol: 1, engine: '', platform: '', addressCookie: cookie }));
    await until(() => s.metrics.counters.get('address_proven') === 1);
  });
});

describe('address cookies', () => {
  it('verify for one to two lifetimes, for their own address and port only', () => {
    const admission = new UdpAdmission({ addressCookieLifetimeMs: 10_000 });
    const t0 = 1_000_000_000_000; // the start of a period
    const cookie = admission.cookie('10.0.0.1', 5000, t0);
    expect(cookie.length).toBe(8);
    expect(admission.verify('10.0.0.1', 5000, cookie, t0 + 9_999)).toBe(true);
    expect(admission.verify('10.0.0.1', 5000, cookie, t0 + 19_999)).toBe(true);
    expect(admission.verify('10.0.0.1', 5000, cookie, t0 + 20_000)).toBe(false);
    expect(admission.verify('10.0.0.1', 5001, cookie, t0)).toBe(false);
    expect(admission.verify('10.0.0.2', 5000, cookie, t0)).toBe(false);
    expect(admission.verify('10.0.0.1', 5000, cookie.subarray(0, 7), t0)).toBe(false);
    // Another server process has another secret.
    expect(new UdpAdmission({ addressCookieLifetimeMs: 10_000 }).verify('10.0.0.1', 5000, cookie, t0)).toBe(
      false,
    );
  });

  it('with addressCookies off, Handshake replies carry none and UDP sources stay under the budget', async () => {
    const s = await server({ addressCookies: false, instances: manyInstances(256) });
    const c = await player(s, '1', { enter: false });
    expect(c.handshakeInfo!.addressCookie).toBeNull();
    expect(s.metrics.counters.get('address_proven')).toBeUndefined();
    // Four 1 KB Sessions pages for a few tiny requests: the budget stops some.
    const pages = await Promise.allSettled([0, 1, 2, 3].map((p) => c.sessions(p)));
    expect(pages.some((p) => p.status === 'rejected')).toBe(true);
    expect(s.metrics.dropped.get('udp_amplification')).toBeGreaterThan(0);
  });

  it('random first datagrams from unknown sources build no state and crash nothing', async () => {
    const fc = (await import('fast-check')).default;
    const s = await server();
    const a = await udpPeer(s.port);
    const junk = fc.sample(fc.uint8Array({ minLength: 0, maxLength: 600 }), { numRuns: 300, seed: 17 });
    for (const j of junk) {
      // Keep byte 4 at 0x01 half of the time, so the Handshake path is exercised too.
      const b = Buffer.from(j);
      if (b.length > 4 && b[0]! % 2 === 0) b[4] = 0x01;
      a.send(b);
    }
    await until(() => (s.metrics.dropped.get('unknown_source') ?? 0) + s.clients.size >= 290, 5000);
    expect(s.clients.size).toBe(0);
    expect(s.metrics.counters.get('handler_error')).toBeUndefined();
    await player(s, '1', { enter: false });
  });
});

describe('issue 17 item 8: one client cannot degrade everyone', () => {
  it('a UDP client sending 100 Latency requests per datagram is rate limited; the others keep their transforms', async () => {
    const s = await server({ maxRequestsPerSecond: 200, maxRequestBurst: 200 });
    const a = await player(s, '1');
    const b = await player(s, '2');
    const flooder = await player(s, '3', { address: '127.0.0.1', enter: false });
    let pongs = 0;
    flooder.on('message', (m: { type: string }) => {
      if (m.type === 'Latency') pongs++;
    });
    const latency = packet(0, { type: 'Latency', timestamp: 1n });
    const datagram = Buffer.concat(Array.from({ length: 100 }, () => latency));
    const started = performance.now();
    for (let i = 0; i < 50; i++) {
      flooder.sendRaw(datagram);
      if (i % 10 === 9) await elapse(5, 'pace the flood so that the socket buffers do not drop it');
    }
    // While the flood is handled, a's transforms reach b.
    const got = next<any>(b, 'transform', (t) => t.position?.x === 42, 5000);
    a.sendTransform(0, 5, { position: { x: 42, y: 0, z: 0 } });
    await got;
    await until(() => (s.metrics.dropped.get('rate_limited') ?? 0) > 0, 5000);
    await elapse(300, 'answers still in flight are counted before the bound is checked');
    const seconds = (performance.now() - started) / 1000;
    // At most the burst plus the rate over the elapsed time, out of 5000 requests.
    expect(pongs).toBeLessThanOrEqual(200 + 200 * seconds + 20);
    expect(pongs).toBeLessThan(5000);
    expect((await a.latency()).type).toBe('Latency');
  });

  it('the clients of one address share a request budget; another address keeps its own', async () => {
    const s = await server({ maxRequestsPerSecond: 10_000, maxRequestsPerSecondPerIp: 200 });
    const many = await Promise.all(
      [1, 2, 3, 4].map((i) => player(s, `${i}`, { transport: 'tcp', address: '127.0.0.1', enter: false })),
    );
    let pongs = 0;
    for (const c of many)
      c.on('message', (m: { type: string }) => {
        if (m.type === 'Latency') pongs++;
      });
    const started = performance.now();
    for (const c of many) for (let i = 0; i < 250; i++) c.post({ type: 'Latency', timestamp: 1n });
    await until(() => (s.metrics.dropped.get('rate_limited') ?? 0) > 0, 5000);
    const other = await player(s, '9', { transport: 'tcp', enter: false });
    expect((await other.latency()).type).toBe('Latency');
    await elapse(300, 'answers still in flight are counted before the bound is checked');
    const seconds = (performance.now() - started) / 1000;
    // 1000 requests from one address: at most its burst (2 s worth) plus its rate meanwhile.
    expect(pongs).toBeLessThanOrEqual(400 + 200 * seconds + 20);
    expect(pongs).toBeLessThan(1000);
  });

  it("a UDP client's congestion is its own: its backlog never drops another client's traffic", () => {
    const metrics = new ProtocolMetrics('nox-relay');
    let sent = 0;
    const udp = { send: () => sent++ };
    const shared = { bytes: 0 };
    const limits = {
      congestion: { softBytes: 1000, hardBytes: 4000, closeBytes: 16_000 },
      udpReplyFactor: 3,
      udpSendBytesPerSecond: 1000,
      slowConsumerTimeoutMs: 5000,
      maxRequestsPerSecond: 100,
      maxRequestBurst: 100,
    };
    const make = (port: number) => {
      const c = new RelayClient(
        port,
        { udp: udp as never, ip: '127.0.0.1', port, queue: shared },
        limits,
        metrics,
      );
      c.addressProven = true;
      return c;
    };
    const busy = make(1);
    const quiet = make(2);
    const b = Buffer.alloc(100);
    let busyOk = 0;
    for (let i = 0; i < 100; i++) if (busy.send(b, Priority.Low)) busyOk++;
    expect(busyOk).toBeLessThan(20);
    expect(metrics.dropped.get('congestion_low')).toBeGreaterThan(80);
    expect(quiet.send(b, Priority.Low)).toBe(true);
    expect(busy.send(b, Priority.Critical)).toBe(true);
  });

  it('a TCP client that never reads is closed as a slow consumer even though it is only sent Low traffic', async () => {
    const s = await server({
      maxPacketSize: 0xffff,
      slowConsumerTimeoutMs: 500,
      maxRequestsPerSecond: 100_000,
      maxRequestBurst: 100_000,
      congestion: { softBytes: 16 * 1024 },
    });
    const sender = await player(s, '1', { transport: 'tcp' });
    const watcher = await player(s, '2', { transport: 'tcp' });
    const stalled = await player(s, '3', { transport: 'tcp', address: '127.0.0.1' });
    (stalled as unknown as { tcp: { pause(): void } }).tcp.pause();
    let customs = 0;
    watcher.on('message', (m: { type: string }) => {
      if (m.type === 'Custom') customs++;
    });
    const data = Buffer.alloc(60_000, 7);
    // 10 datagrams of 60 KB every 20 ms until the reader that does not read is closed.
    await until(
      () => {
        if ((s.metrics.closed.get('slow_consumer') ?? 0) > 0) return true;
        for (let i = 0; i < 10; i++) sender.post({ type: 'Custom', instanceId: 0, data });
        return false;
      },
      20_000,
      'the slow consumer closed',
      20,
    ).catch(() => undefined);
    expect(s.metrics.closed.get('slow_consumer')).toBe(1);
    await until(() => s.clients.size === 2, 5000);
    await until(() => customs > 0, 5000);
    expect((await sender.latency()).type).toBe('Latency');
  });
});

describe('logs', () => {
  it('a refusal because a cap is reached is logged at info, once per interval; closes at debug', async () => {
    const { pino } = await import('pino');
    const lines: { level: number; msg: string; cap?: string; flag?: string; reason?: string }[] = [];
    const log = pino({ level: 'debug' }, { write: (l: string) => lines.push(JSON.parse(l)) });
    const s = await server({ maxClients: 1, log });
    // The UDP player takes the one slot; TCP newcomers are refused by the relay (not the listener).
    await player(s, '1', { transport: 'udp', enter: false });
    for (let i = 0; i < 3; i++) {
      const c = new NoxRelayClient({ port: s.port, transport: 'tcp', keepAliveMs: 0 });
      cleanup.push(() => c.close());
      await c.connect();
      await until(() => c.isClosed, 3000);
    }
    const full = lines.filter((l) => l.level === 30 && l.cap !== undefined);
    expect(full).toHaveLength(1);
    expect(full[0]).toMatchObject({ cap: 'maxClients', flag: '--nox-max-clients' });
    expect(lines.filter((l) => l.level === 20 && l.reason === 'over_capacity')).toHaveLength(3);
    expect(lines.some((l) => l.level === 20 && l.msg === 'client connected')).toBe(true);
  });
});

describe('issue 17 item 11: reassembly per address, and the open gauge', () => {
  it("one address cannot spend the whole reassembly budget; another address's segments still reassemble", async () => {
    const s = await server({
      maxPacketSize: 0xffff,
      maxReassemblyBudget: 200_000,
      maxReassemblyBytesPerIp: 100_000,
      maxRequestsPerSecond: 10_000,
      maxRequestBurst: 10_000,
    });
    const attackers = await Promise.all(
      [1, 2].map((i) => player(s, `${i}`, { transport: 'tcp', address: '127.0.0.1', enter: false })),
    );
    const chunk = Buffer.alloc(30_000, 1);
    for (const a of attackers)
      for (let id = 0; id < 8; id++)
        a.post({
          type: 'Segmentation',
          segmentId: id,
          totalSegments: 2,
          currentSegment: 0,
          segmentData: chunk,
        });
    await until(() => (s.metrics.dropped.get('reassembly_budget_ip') ?? 0) > 0, 5000);
    expect(s.reassembly.bytesHeldBy('127.0.0.1')).toBeLessThanOrEqual(100_000);
    // The legitimate player sends a Latency request in two segments and gets its answer.
    const c = await player(s, '9', { transport: 'tcp', enter: false });
    const inner = packet(77, { type: 'Latency', timestamp: 5n });
    const reply = next<any>(c, 'message', (m) => m.type === 'Latency', 3000);
    c.post({
      type: 'Segmentation',
      segmentId: 1,
      totalSegments: 2,
      currentSegment: 0,
      segmentData: inner.subarray(0, 6),
    });
    c.post({
      type: 'Segmentation',
      segmentId: 1,
      totalSegments: 2,
      currentSegment: 1,
      segmentData: inner.subarray(6),
    });
    expect((await reply).clientTimestamp).toBe(5n);
  });

  it('gamewire_open goes back to 0 after a UDP and a TCP client connect and leave, and never below', async () => {
    const s = await server();
    const seen: number[] = [];
    const sample = setInterval(() => seen.push(s.metrics.open), 5);
    try {
      const u = await player(s, '1', { transport: 'udp', enter: false });
      const t = await player(s, '2', { transport: 'tcp', enter: false });
      expect(s.metrics.open).toBe(2);
      await t.disconnect();
      await u.disconnect();
      await until(() => s.clients.size === 0, 3000);
      await elapse(50, 'a second decrement of the open count (the bug) would come within this window');
      expect(s.metrics.open).toBe(0);
    } finally {
      clearInterval(sample);
    }
    expect(Math.min(...seen)).toBeGreaterThanOrEqual(0);
  });
});
