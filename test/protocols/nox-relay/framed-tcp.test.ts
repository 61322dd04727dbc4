/**
 * nox-relay's TCP side on the framed TCP seam (src/core/framed-tcp.ts): what the seam guarantees
 * now holds for nox-relay too. Each test failed on the hand-rolled TCP path it replaced.
 */
import type net from 'node:net';
import { describe, expect, it } from 'vitest';
import { NoxRelayClient } from '../../../src/protocols/nox-relay/client.js';
import type { RelayClient } from '../../../src/protocols/nox-relay/session.js';
import { packet, rawTcp, until, useFixtures } from './helpers.js';

const { server, client, cleanup } = useFixtures();

const handshake = () =>
  packet(1, { type: 'Handshake', protocol: 1, engine: 'raw', platform: 'tcp', addressCookie: null });

describe('nox-relay TCP on the framed TCP seam', () => {
  it('fair turns: a pipelined flood of 4000 packets delays another client by one turn, not by its backlog', async () => {
    const s = await server({
      maxRequestsPerSecond: 1_000_000,
      maxRequestBurst: 1_000_000,
      maxRequestsPerSecondPerIp: 1_000_000,
    });
    const flooder = await client(s, '1', { instance: null });
    const victim = await client(s, '2', { instance: null });
    const flooderPort = (flooder as unknown as { tcp: net.Socket }).tcp.localPort;
    // The order in which the server handles packets, by the sender's port.
    const order: number[] = [];
    const handle = s.onPacket.bind(s);
    s.onPacket = (c: RelayClient, buf: Buffer, start: number, end: number, depth: number) => {
      if (depth === 0) order.push(c.port);
      handle(c, buf, start, end, depth);
    };
    const one = packet(7, { type: 'Latency', timestamp: 1n });
    const burst = Buffer.concat(Array.from({ length: 4000 }, () => one));
    expect(burst.length).toBeLessThan(64 * 1024); // one read on the server side
    flooder.sendRaw(burst);
    victim.sendRaw(packet(8, { type: 'Latency', timestamp: 2n }));
    await until(() => order.length >= 4001, 20_000, 'every packet handled');
    const victimAt = order.findIndex((p) => p !== flooderPort);
    expect(victimAt).toBeGreaterThanOrEqual(0);
    // Before the seam the whole burst was handled first (4000); now one turn of the flooder's.
    expect(victimAt).toBeLessThan(1000);
  });

  it('input budget: connections holding partial 60 KB frames cannot make the server hold more than the per-address budget', async () => {
    const budget = 128 * 1024;
    const s = await server({
      maxPacketSize: 0xffff,
      maxBufferedBytes: 512 * 1024,
      maxBufferedBytesPerIp: budget,
      maxTcpPerIp: 64,
    });
    // 20 connections each announce a 65 000-byte packet and send 60 000 bytes of it.
    const partial = Buffer.alloc(60_000, 0);
    partial.writeUInt16BE(65_000, 0);
    for (let i = 0; i < 20; i++) {
      const raw = await rawTcp(s.port);
      cleanup.push(() => void raw.socket.destroy());
      raw.socket.write(partial);
    }
    // Every connection holds its partial frame, or is not read (wait until each is one or the other).
    await until(
      () => {
        const conns = [...s.tcpTransport!.connections()];
        return conns.length === 20 && conns.every((c) => c.readingPaused || c.bufferedBytes === 60_000);
      },
      10_000,
      'every partial frame held or its connection paused',
    );
    const held = s.tcpTransport!.bufferedBytes;
    // Connections already reading when the budget filled may each finish one read (64 KiB);
    // the rest are not read at all. Before the seam: 20 × 60 000 = 1.2 MB held.
    expect(held).toBeLessThanOrEqual(budget + 4 * 64 * 1024);
    expect([...s.tcpTransport!.connections()].filter((c) => c.readingPaused).length).toBeGreaterThanOrEqual(
      15,
    );
    // A client from another address is still read and answered.
    const other = new NoxRelayClient({ port: s.port, transport: 'tcp', localAddress: '127.0.0.2' });
    cleanup.push(() => other.close());
    await other.connect();
    const reply = await other.handshake();
    expect(reply).toBeDefined();
  });

  it('a frame begun must complete within frameTimeoutMs (a slowloris closes before the connection timeout)', async () => {
    const s = await server({ connectionTimeoutMs: 30_000, frameTimeoutMs: 400 });
    const raw = await rawTcp(s.port);
    cleanup.push(() => void raw.socket.destroy());
    raw.socket.write(handshake());
    await until(() => raw.received().length >= 5, 5000, 'the handshake reply');
    // Three bytes of a 30-byte packet, then nothing.
    raw.socket.write(Buffer.from('001e00', 'hex'));
    let closed = false;
    void raw.closed.then(() => {
      closed = true;
    });
    await until(() => closed, 10_000, 'the slowloris closed');
    expect(s.metrics.closed.get('frame_timeout')).toBe(1);
    await until(() => s.clients.size === 0, 5000, 'the client forgotten');
  });

  it('a TCP client that stops reading has its input held, not buffered, and the server stays bounded', async () => {
    const s = await server({
      maxPacketSize: 0xffff,
      slowConsumerTimeoutMs: 60_000,
      maxRequestsPerSecond: 1_000_000,
      maxRequestBurst: 1_000_000,
      maxRequestsPerSecondPerIp: 1_000_000,
      congestion: { softBytes: 64 * 1024, hardBytes: 128 * 1024, closeBytes: 64 * 1024 * 1024 },
    });
    const raw = await rawTcp(s.port);
    cleanup.push(() => void raw.socket.destroy());
    raw.socket.pause();
    raw.socket.write(handshake());
    await until(() => s.metrics.received >= 1, 5000, 'the handshake at the server');
    // Latency requests: each answered with a Critical reply, which is never dropped.
    const one = packet(7, { type: 'Latency', timestamp: 1n });
    const burst = Buffer.concat(Array.from({ length: 4000 }, () => one));
    for (let i = 0; i < 100; i++) raw.socket.write(burst);
    // The server stops reading once the replies wait for the reader (if it never did, this fails).
    const c = [...s.tcpTransport!.connections()][0]!;
    await until(() => c.readingPaused && c.queuedBytes > 0, 10_000, 'reading paused behind the replies');
    // Replies wait for the reader (bounded near the hard limit); the rest of its input is held.
    expect(c.queuedBytes).toBeLessThan(1024 * 1024);
    expect(s.tcpTransport!.bufferedBytes).toBeLessThan(1024 * 1024);
    expect(s.metrics.received).toBeLessThan(400_000);
    expect(c.readingPaused).toBe(true);
  });
});
