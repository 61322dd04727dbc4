/**
 * RMC over PRUDP end to end with real UDP sockets on 127.0.0.1: RmcClient (transport prudp)
 * against PrudpServer + the RMC dispatcher. Fragmentation across sizes, pipelining, a lossy
 * link, malformed datagrams and SYN floods, limits.
 */
import dgram from 'node:dgram';
import { describe, expect, it, type TestContext } from 'vitest';
import {
  accessKeyByte,
  ClassicPayloadCodec,
  Flag,
  type HyperscapeMessage,
  hyperscapePacket,
  newPacket,
  PacketType,
  RmcClient,
  readPacket,
  writePacket,
} from '../../../src/protocols/rmc/index.js';
import { PrudpClientConnection } from '../../../src/protocols/rmc/prudp/client.js';
import { type Codec, encode, WireWriter } from '../../../src/wire/index.js';
import { elapse, waitFor } from '../../helpers/wait.js';
import { EchoProtocol, LossyProxy, type PrudpFixture, sizedData, startPrudp } from './prudp-helpers.js';

const KEY = 'yl4NG7qZ';
/**
 * What a test opens (servers, clients, sockets), each closed when that test ends (its
 * onTestFinished hooks run in reverse order): the tests run concurrently.
 */
function kit(defer: TestContext['onTestFinished']) {
  async function fixture(options: Parameters<typeof startPrudp>[0] = {}): Promise<PrudpFixture> {
    const f = await startPrudp(options);
    defer(() => f.close());
    return f;
  }

  async function client(
    port: number,
    extra: Partial<Parameters<typeof RmcClient.connect>[0]> = {},
  ): Promise<RmcClient> {
    const c = await RmcClient.connect({
      host: '127.0.0.1',
      port,
      transport: 'prudp',
      accessKey: KEY,
      timeoutMs: 20_000,
      ...extra,
    });
    defer(() => c.close());
    return c;
  }

  function rawSocket(address = '127.0.0.1'): Promise<dgram.Socket> {
    const s = dgram.createSocket('udp4');
    defer(() => new Promise<void>((r) => s.close(() => r())));
    return new Promise((r) => s.bind(0, address, () => r(s)));
  }

  return { fixture, client, rawSocket };
}

/** Waits until `cond` holds (polling; generous for a loaded machine), or fails. */
async function until(cond: () => boolean, ms = 10_000): Promise<void> {
  await waitFor(cond, { what: String(cond), timeoutMs: ms, intervalMs: 20 });
}

function syn(): Buffer {
  const w = new WireWriter();
  writePacket(
    w,
    {
      source: 0x3f,
      destination: 0x31,
      type: PacketType.SYN,
      flags: Flag.NEED_ACK,
      sessionId: 0,
      packetSignature: 0,
      sequenceId: 0,
      connectionSignature: 0,
    },
    undefined,
    { width: 1, keyByte: accessKeyByte(KEY) },
  );
  return w.toBuffer();
}

/** A client's CONNECT (sequence 1, no payload) stamped with `signature`, the SYN-ACK's. */
function connectPacket(signature: number, sessionId = 0x21): Buffer {
  const w = new WireWriter();
  writePacket(
    w,
    {
      source: 0x3f,
      destination: 0x31,
      type: PacketType.CONNECT,
      flags: Flag.RELIABLE | Flag.NEED_ACK,
      sessionId,
      packetSignature: signature,
      sequenceId: 1,
      connectionSignature: 0x0100007f,
    },
    undefined,
    { width: 1, keyByte: accessKeyByte(KEY) },
  );
  return w.toBuffer();
}

// Every test has its own server (and its own client addresses where a limit is per address): they
// run concurrently.
describe.concurrent('RMC over PRUDP', () => {
  it('calls complete over PRUDP (hyperscape RMC variant, classic payloads)', async ({ onTestFinished }) => {
    const { fixture, client } = kit(onTestFinished);
    const f = await fixture();
    const c = await client(f.port);
    const r = await c.call(EchoProtocol, 'Echo', { data: Buffer.from('hello') });
    expect(r.data.toString()).toBe('hello');
    expect(f.prudp.connections).toBe(1);
  });

  it('the classic packed variant works over PRUDP too', async ({ onTestFinished }) => {
    const { fixture, client } = kit(onTestFinished);
    const f = await fixture({ variant: 'classic' });
    const c = await client(f.port, { variant: 'classic' });
    const r = await c.call(EchoProtocol, 'Echo', { data: Buffer.from('classic') });
    expect(r.data.toString()).toBe('classic');
  });

  it('fragments and reassembles responses from 962 bytes to 100 KB', async ({ onTestFinished }) => {
    const { fixture, client } = kit(onTestFinished);
    const f = await fixture();
    const c = await client(f.port);
    for (const n of [0, 1, 900, 940, 941, 942, 962, 963, 964, 1926, 5000, 32_768, 100_000]) {
      const r = await c.call(EchoProtocol, 'Sized', { n, tag: n & 0xff });
      expect(r.data.length).toBe(n);
      expect(r.data.equals(sizedData(n, n & 0xff))).toBe(true);
    }
    // Large requests are fragmented by the client and reassembled by the server.
    // Over 255 fragments: ids run 1 … 255, 1 … and only the last is 0.
    const big = sizedData(300_000, 3);
    const e = await c.call(EchoProtocol, 'Echo', { data: big });
    expect(e.data.equals(big)).toBe(true);
  });

  it('a lossy link (10% dropped, duplicated, reordered): 1000 pipelined calls each complete exactly once', async ({
    onTestFinished,
  }) => {
    const { fixture, client } = kit(onTestFinished);
    const f = await fixture({ retransmitMs: 100, retransmitMaxMs: 400, maxRetransmits: 30 });
    const proxy = await LossyProxy.start(f.port, { drop: 0.1, dup: 0.1, reorder: 0.1 });
    onTestFinished(() => proxy.close());
    const c = await client(proxy.port, {
      timeoutMs: 60_000,
      prudp: { retransmitMs: 100, retransmitMaxMs: 400, maxRetransmits: 30, connectTimeoutMs: 20_000 },
    });
    const results = await Promise.all(
      Array.from({ length: 1000 }, (_, i) =>
        c.call(EchoProtocol, 'Sized', { n: i % 3 === 0 ? 1500 : 10, tag: i }),
      ),
    );
    for (let i = 0; i < 1000; i++) {
      expect(results[i]!.tag).toBe(i);
      expect(results[i]!.data.equals(sizedData(i % 3 === 0 ? 1500 : 10, i))).toBe(true);
      expect(f.calls.get(i)).toBe(1);
    }
    expect(proxy.dropped).toBeGreaterThan(0);
    expect(proxy.duplicated).toBeGreaterThan(0);
    expect(proxy.reordered).toBeGreaterThan(0);
    expect(f.metrics.counters.get('prudp_duplicates') ?? 0).toBeGreaterThan(0);
    expect(c.unmatched).toBe(0);
  }, 120_000);

  it('malformed datagrams and bad checksums are dropped and counted; the open connection keeps working', async ({
    onTestFinished,
  }) => {
    const { fixture, client, rawSocket } = kit(onTestFinished);
    const f = await fixture();
    const c = await client(f.port);
    const s = await rawSocket();
    const bad = syn();
    bad[bad.length - 1] ^= 0x55;
    const junk = [
      Buffer.alloc(0),
      Buffer.from([1, 2, 3]),
      bad,
      Buffer.alloc(40, 0xff),
      Buffer.from('3f3132000000000000000000', 'hex'),
    ];
    for (let i = 0; i < 200; i++)
      junk.push(Buffer.from(Array.from({ length: 5 + (i % 60) }, (_, j) => (i * 31 + j * 17) & 0xff)));
    for (const j of junk) s.send(j, f.port, '127.0.0.1');
    const r = await c.call(EchoProtocol, 'Echo', { data: Buffer.from('still') });
    expect(r.data.toString()).toBe('still');
    const dropped = [...f.metrics.dropped.values()].reduce((a, b) => a + b, 0);
    expect(dropped).toBeGreaterThan(100);
    expect(f.metrics.dropped.get('prudp_bad_checksum') ?? 0).toBeGreaterThan(0);
  });

  it('a SYN flood fills the half-open table: the oldest half-open entries make room (counted); open connections are untouched', async ({
    onTestFinished,
  }) => {
    const { fixture, client, rawSocket } = kit(onTestFinished);
    const f = await fixture({ maxHalfOpen: 50, maxConnectionsPerIp: 1000 });
    const c = await client(f.port);
    const sockets = await Promise.all(Array.from({ length: 80 }, () => rawSocket()));
    for (const s of sockets) s.send(syn(), f.port, '127.0.0.1');
    await until(() => (f.metrics.counters.get('prudp_syn') ?? 0) >= 80);
    expect(f.prudp.halfOpenConnections).toBe(50);
    expect(f.metrics.counters.get('prudp_half_open_evicted')).toBe(30);
    expect(f.prudp.connections).toBe(1);
    const r = await c.call(EchoProtocol, 'Echo', { data: Buffer.from('ok') });
    expect(r.data.toString()).toBe('ok');
  });

  it('issue 24: while spoofed SYNs keep the half-open table full, a new player still connects', async ({
    onTestFinished,
  }) => {
    const { fixture, client, rawSocket } = kit(onTestFinished);
    const f = await fixture({ maxHalfOpen: 50 });
    // 100 spoofing sources on 100 addresses, 1000 SYNs a second in bursts of 10: the table is
    // always full and an entry lasts about 50 ms (a round trip on loopback is well under that).
    const flooders = await Promise.all(Array.from({ length: 100 }, (_, i) => rawSocket(`127.1.9.${i + 1}`)));
    let next = 0;
    const flood = setInterval(() => {
      for (let i = 0; i < 10; i++) flooders[next++ % flooders.length]!.send(syn(), f.port, '127.0.0.1');
    }, 10);
    try {
      await until(() => (f.metrics.counters.get('prudp_half_open_evicted') ?? 0) > 40);
      // (Before: every SYN past the limit was refused, and so was the player's, until the flood stopped.)
      const c = await client(f.port, { prudp: { connectTimeoutMs: 10_000, retransmitMs: 200 } });
      expect((await c.call(EchoProtocol, 'Echo', { data: Buffer.from('in') })).data.toString()).toBe('in');
    } finally {
      clearInterval(flood);
    }
  });

  it('issue 24: a CONNECT whose half-open entry a flood evicted is admitted by its SYN cookie; a guessed signature is not', async ({
    onTestFinished,
  }) => {
    const { fixture, rawSocket } = kit(onTestFinished);
    const f = await fixture({ maxHalfOpen: 1 });
    const checksum = { width: 1 as const, keyByte: accessKeyByte(KEY) };
    const replies: Buffer[] = [];
    const player = await rawSocket('127.0.0.74');
    player.on('message', (m) => replies.push(m));
    player.send(syn(), f.port, '127.0.0.1');
    await until(() => replies.length === 1);
    const synAck = newPacket();
    readPacket(replies[0]!, 0, checksum, synAck);
    // Another source's SYN takes the only half-open slot: the player's entry is gone.
    (await rawSocket('127.0.0.75')).send(syn(), f.port, '127.0.0.1');
    await until(() => f.metrics.counters.get('prudp_half_open_evicted') === 1);
    const connect = (signature: number) => connectPacket(signature);
    // A guess from a third source (no SYN-ACK seen): dropped.
    (await rawSocket('127.0.0.76')).send(connect(synAck.connectionSignature ^ 1), f.port, '127.0.0.1');
    await until(() => (f.metrics.dropped.get('prudp_unknown_connection') ?? 0) === 1);
    player.send(connect(synAck.connectionSignature), f.port, '127.0.0.1');
    await until(() => replies.length === 2);
    const ack = newPacket();
    readPacket(replies[1]!, 0, checksum, ack);
    expect(ack.type).toBe(PacketType.CONNECT);
    expect(ack.flags & Flag.ACK).toBe(Flag.ACK);
    expect(f.prudp.connections).toBe(1);
    expect(f.metrics.counters.get('prudp_cookie_connects')).toBe(1);
  });

  it('a client restarted on the same address and port connects at once; a SYN alone closes nothing', async ({
    onTestFinished,
  }) => {
    const { fixture, client } = kit(onTestFinished);
    const f = await fixture();
    // A port the restarted client gets again (a NAT keeps its mapping; an OS reuses ports).
    const probe = dgram.createSocket('udp4');
    await new Promise<void>((r) => probe.bind(0, '127.0.0.1', () => r()));
    const localPort = probe.address().port;
    await new Promise<void>((r) => probe.close(() => r()));
    const crashed = await PrudpClientConnection.connect({
      host: '127.0.0.1',
      port: f.port,
      accessKey: KEY,
      localPort,
    });
    crashed.abort();
    expect(f.prudp.connections).toBe(1);

    // A SYN from that source (a spoofer could send it) is answered, and the connection stays.
    const checksum = { width: 1 as const, keyByte: accessKeyByte(KEY) };
    const replies: Buffer[] = [];
    const spoofer = dgram.createSocket('udp4');
    await new Promise<void>((r) => spoofer.bind(localPort, '127.0.0.1', () => r()));
    spoofer.on('message', (m) => replies.push(m));
    spoofer.send(syn(), f.port, '127.0.0.1');
    await until(() => replies.length === 1);
    const synAck = newPacket();
    readPacket(replies[0]!, 0, checksum, synAck);
    expect(synAck.type).toBe(PacketType.SYN);
    expect(synAck.flags & Flag.ACK).toBe(Flag.ACK);
    expect(f.metrics.counters.get('prudp_restart_syn')).toBe(1);
    expect(f.prudp.connections).toBe(1);
    expect(f.metrics.counters.get('prudp_restarts')).toBeUndefined();
    await new Promise<void>((r) => spoofer.close(() => r()));

    // The restarted client completes its handshake on the same port and is served.
    const restarted = await client(f.port, { prudp: { localPort } });
    const r = await restarted.call(EchoProtocol, 'Echo', { data: Buffer.from('again') });
    expect(r.data.toString()).toBe('again');
    expect(f.metrics.counters.get('prudp_restarts')).toBe(1);
    expect(f.prudp.connections).toBe(1);
  });

  it('after a SYN from its source, the open connection’s own resent CONNECT is answered as before, not taken for a restart', async ({
    onTestFinished,
  }) => {
    const { fixture, rawSocket } = kit(onTestFinished);
    const f = await fixture();
    const checksum = { width: 1 as const, keyByte: accessKeyByte(KEY) };
    const replies: Buffer[] = [];
    const player = await rawSocket('127.0.0.77');
    player.on('message', (m) => replies.push(m));
    player.send(syn(), f.port, '127.0.0.1');
    await until(() => replies.length === 1);
    const synAck = newPacket();
    readPacket(replies[0]!, 0, checksum, synAck);
    const connect = (sessionId: number) => connectPacket(synAck.connectionSignature, sessionId);
    player.send(connect(0x21), f.port, '127.0.0.1');
    await until(() => replies.length === 2);
    expect(f.prudp.connections).toBe(1);
    // A late copy of its SYN, then (its CONNECT-ACK lost) its CONNECT again: the same CONNECT-ACK.
    player.send(syn(), f.port, '127.0.0.1');
    await until(() => replies.length === 3);
    // A second SYN within 500 ms is not answered (spoofed SYNs cannot make it a reflector).
    player.send(syn(), f.port, '127.0.0.1');
    await until(() => f.metrics.dropped.get('prudp_restart_syn_rate') === 1);
    player.send(connect(0x21), f.port, '127.0.0.1');
    await until(() => replies.length === 4);
    expect(replies[3]!.equals(replies[1]!)).toBe(true);
    expect(f.metrics.counters.get('prudp_restarts')).toBeUndefined();
    // A CONNECT of another session (a new client on that port) with the cookie replaces it.
    player.send(connect(0x22), f.port, '127.0.0.1');
    // Its CONNECT-ACK is a new one. (On a starved machine a copy of the old one, answering the
    // resent CONNECT above, may come first: the new session's is looked for among what follows.)
    await until(() => replies.slice(4).some((r) => !r.equals(replies[1]!)));
    const fresh = replies.slice(4).find((r) => !r.equals(replies[1]!))!;
    const ack = newPacket();
    readPacket(fresh, 0, checksum, ack);
    expect(ack.type).toBe(PacketType.CONNECT);
    expect(f.metrics.counters.get('prudp_restarts')).toBe(1);
    expect(f.prudp.connections).toBe(1);
  });

  it('one address holds at most maxHalfOpenPerIp half-open connections; another address is not affected', async ({
    onTestFinished,
  }) => {
    const { fixture, client, rawSocket } = kit(onTestFinished);
    const f = await fixture({ maxHalfOpenPerIp: 5, maxHalfOpen: 100 });
    const sockets = await Promise.all(Array.from({ length: 12 }, () => rawSocket('127.0.0.70')));
    for (const s of sockets) s.send(syn(), f.port, '127.0.0.1');
    await until(() => (f.metrics.dropped.get('prudp_half_open_per_ip_limit') ?? 0) >= 7);
    expect(f.prudp.halfOpenConnections).toBe(5);
    expect(f.metrics.counters.get('prudp_half_open_evicted')).toBeUndefined();
    const c = await client(f.port, { localAddress: '127.0.0.71' });
    expect((await c.call(EchoProtocol, 'Echo', { data: Buffer.from('x') })).data.toString()).toBe('x');
  });

  it('issue 24: the default per-address limit is max(64, maxConnections / 4): 130 connections from one address open', async ({
    onTestFinished,
  }) => {
    const { fixture, client } = kit(onTestFinished);
    const f = await fixture();
    const all = await Promise.all(
      Array.from({ length: 130 }, () => client(f.port, { localAddress: '127.0.0.72' })),
    );
    expect(f.prudp.connections).toBe(130);
    expect(f.metrics.dropped.get('prudp_per_ip_limit')).toBeUndefined();
    expect((await all[129]!.call(EchoProtocol, 'Echo', { data: Buffer.from('y') })).data.toString()).toBe(
      'y',
    );
    // With a small table, a quarter of it (but never under 64).
    const small = await fixture({ maxConnections: 400 });
    const got = await Promise.allSettled(
      Array.from({ length: 101 }, () =>
        client(small.port, {
          localAddress: '127.0.0.73',
          prudp: { connectTimeoutMs: 3000, retransmitMs: 200 },
        }),
      ),
    );
    expect(got.filter((g) => g.status === 'fulfilled').length).toBe(100);
    expect(small.metrics.dropped.get('prudp_per_ip_limit') ?? 0).toBeGreaterThan(0);
  });

  it('per-IP connection limit', async ({ onTestFinished }) => {
    const { fixture, client } = kit(onTestFinished);
    const f = await fixture({ maxConnectionsPerIp: 2 });
    await client(f.port);
    await client(f.port);
    await expect(
      client(f.port, { prudp: { connectTimeoutMs: 1500, retransmitMs: 200 } }),
    ).rejects.toMatchObject({
      code: 'ERR_PRUDP_TIMEOUT',
    });
    expect(f.metrics.dropped.get('prudp_per_ip_limit') ?? 0).toBeGreaterThan(0);
  });

  it('half-open connections expire', async ({ onTestFinished }) => {
    const { fixture, rawSocket } = kit(onTestFinished);
    const f = await fixture({ halfOpenTimeoutMs: 200 });
    const s = await rawSocket();
    s.send(syn(), f.port, '127.0.0.1');
    await until(() => f.metrics.counters.get('prudp_syn') === 1);
    await until(() => f.prudp.halfOpenConnections === 0);
    expect(f.metrics.counters.get('prudp_half_open_expired')).toBe(1);
  });

  it('no reply to an unknown source larger than the allowed factor of its datagram', async ({
    onTestFinished,
  }) => {
    const { fixture, rawSocket } = kit(onTestFinished);
    const f = await fixture({ maxUnprovenReplyFactor: 1 });
    const s = await rawSocket();
    const got: Buffer[] = [];
    s.on('message', (m) => got.push(m));
    s.send(syn(), f.port, '127.0.0.1');
    await until(() => f.metrics.dropped.get('prudp_amplification') === 1);
    await elapse(200, 'no reply may come to an unproven source over its budget');
    expect(got).toHaveLength(0);
    expect(f.metrics.dropped.get('prudp_amplification')).toBe(1);
  });

  it('idle connections are closed; the client sees the DISCONNECT', async ({ onTestFinished }) => {
    const { fixture, client } = kit(onTestFinished);
    const f = await fixture({ idleTimeoutMs: 300 });
    const c = await client(f.port, { prudp: { pingIntervalMs: 0 } });
    await c.call(EchoProtocol, 'Echo', { data: Buffer.from('x') });
    await until(() => f.prudp.connections === 0 && c.closed);
    expect(f.prudp.connections).toBe(0);
    expect(f.metrics.closed.get('idle_timeout')).toBe(1);
    expect(c.closed).toBe(true);
  });

  it('client PINGs keep an idle connection alive', async ({ onTestFinished }) => {
    const { fixture, client } = kit(onTestFinished);
    const f = await fixture({ idleTimeoutMs: 1500 });
    const c = await client(f.port, { prudp: { pingIntervalMs: 200 } });
    await elapse(3000, 'twice the idle timeout: the PINGs must keep the connection');
    expect(f.prudp.connections).toBe(1);
    const r = await c.call(EchoProtocol, 'Echo', { data: Buffer.from('alive') });
    expect(r.data.toString()).toBe('alive');
  });

  it('a message larger than the reassembly budget closes that connection only', async ({
    onTestFinished,
  }) => {
    const { fixture, client } = kit(onTestFinished);
    const f = await fixture({ maxReassemblyBytes: 10_000 });
    const ok = await client(f.port);
    const c = await client(f.port);
    await expect(
      c.call(EchoProtocol, 'Echo', { data: Buffer.alloc(20_000, 1) }, { timeoutMs: 20_000 }),
    ).rejects.toMatchObject({ code: 'ERR_RMC_CLOSED' });
    expect(f.metrics.dropped.get('prudp_reassembly_limit')).toBe(1);
    const r = await ok.call(EchoProtocol, 'Echo', { data: Buffer.from('fine') });
    expect(r.data.toString()).toBe('fine');
  });

  it('the client gives up after its retransmissions when the server vanishes', async ({ onTestFinished }) => {
    const { fixture, client } = kit(onTestFinished);
    const f = await fixture();
    const c = await client(f.port, { prudp: { retransmitMs: 50, retransmitMaxMs: 100, maxRetransmits: 3 } });
    await f.close();
    await expect(c.call(EchoProtocol, 'Echo', { data: Buffer.from('gone') })).rejects.toMatchObject({
      code: expect.stringMatching(/ERR_PRUDP_LINK|ERR_RMC_CLOSED|ERR_PRUDP_CLOSED/),
    });
  });

  it('wrong signatures and session ids are dropped and counted; the right ones go through', async ({
    onTestFinished,
  }) => {
    const { fixture, rawSocket } = kit(onTestFinished);
    const f = await fixture();
    const s = await rawSocket();
    const cfg = { width: 1 as const, keyByte: accessKeyByte(KEY) };
    const inbox: Buffer[] = [];
    s.on('message', (m) => inbox.push(m));
    const send = (fields: Parameters<typeof writePacket>[1], payload?: Buffer) => {
      const w = new WireWriter();
      writePacket(w, fields, payload, cfg);
      s.send(w.toBuffer(), f.port, '127.0.0.1');
    };
    send({
      source: 0x3f,
      destination: 0x31,
      type: 0,
      flags: Flag.NEED_ACK,
      sessionId: 0,
      packetSignature: 0,
      sequenceId: 0,
      connectionSignature: 0,
    });
    await until(() => inbox.length === 1);
    const serverSig = inbox[0]!.readUInt32LE(10);
    const connect = (sig: number) =>
      send({
        source: 0x3f,
        destination: 0x31,
        type: 1,
        flags: 0x30,
        sessionId: 7,
        packetSignature: sig,
        sequenceId: 1,
        connectionSignature: 0xabcd,
      });
    connect((serverSig + 1) >>> 0);
    await until(() => f.metrics.dropped.get('prudp_bad_signature') === 1);
    expect(f.prudp.connections).toBe(0);
    connect(serverSig);
    // Connected, and its CONNECT-ACK received (the server counts the connection before the
    // datagram reaches the socket).
    await until(() => f.prudp.connections === 1 && inbox.length === 2);
    const ping = (session: number, sig: number) =>
      send({
        source: 0x3f,
        destination: 0x31,
        type: PacketType.PING,
        flags: Flag.NEED_ACK,
        sessionId: session,
        packetSignature: sig,
        sequenceId: 1,
      });
    const before = inbox.length;
    ping(8, serverSig);
    ping(7, 0x1234);
    await until(
      () =>
        f.metrics.dropped.get('prudp_bad_session') === 1 &&
        f.metrics.dropped.get('prudp_bad_signature') === 2,
    );
    expect(inbox.length).toBe(before);
    ping(7, serverSig);
    await until(() => inbox.length === before + 1);
    expect(inbox.at(-1)![2]).toBe(0x4c); // PING|ACK|HAS_SIZE
    // A coalesced datagram (two sized PINGs) gets both acked.
    const w = new WireWriter();
    for (const seq of [2, 3])
      writePacket(
        w,
        {
          source: 0x3f,
          destination: 0x31,
          type: PacketType.PING,
          flags: Flag.NEED_ACK | Flag.HAS_SIZE,
          sessionId: 7,
          packetSignature: serverSig,
          sequenceId: seq,
        },
        undefined,
        cfg,
      );
    s.send(w.toBuffer(), f.port, '127.0.0.1');
    await until(() => inbox.length === before + 3);
    expect(inbox.slice(-2).map((d) => d.readUInt16LE(8))).toEqual([2, 3]);
  });

  it('a peer that never acks while calling on is cut off at the send-queue limit', async ({
    onTestFinished,
  }) => {
    const { fixture, rawSocket } = kit(onTestFinished);
    const f = await fixture({ sendWindow: 4, maxQueued: 10 });
    const s = await rawSocket();
    const cfg = { width: 1 as const, keyByte: accessKeyByte(KEY) };
    const inbox: Buffer[] = [];
    s.on('message', (m) => inbox.push(m));
    const send = (fields: Parameters<typeof writePacket>[1], payload?: Buffer) => {
      const w = new WireWriter();
      writePacket(w, fields, payload, cfg);
      s.send(w.toBuffer(), f.port, '127.0.0.1');
    };
    send({
      source: 0x3f,
      destination: 0x31,
      type: 0,
      flags: Flag.NEED_ACK,
      sessionId: 0,
      packetSignature: 0,
      sequenceId: 0,
      connectionSignature: 0,
    });
    await until(() => inbox.length === 1);
    const sig = inbox[0]!.readUInt32LE(10);
    send({
      source: 0x3f,
      destination: 0x31,
      type: 1,
      flags: 0x30,
      sessionId: 7,
      packetSignature: sig,
      sequenceId: 1,
      connectionSignature: 1,
    });
    await until(() => f.prudp.connections === 1);
    const frame = encode(EchoProtocol.methods.Echo.args, { data: Buffer.from('x') });
    const codec = new ClassicPayloadCodec();
    for (let i = 0; i < 30; i++) {
      const body = Buffer.concat([
        encode(hyperscapePacket as Codec<HyperscapeMessage>, {
          type: 'request',
          protocol: 'EchoProtocol',
          callId: i + 1,
          method: 'EchoProtocol::Echo',
          classVersions: [],
          args: frame,
        }),
      ]);
      send(
        {
          source: 0x3f,
          destination: 0x31,
          type: 2,
          flags: 0x30,
          sessionId: 7,
          packetSignature: sig,
          sequenceId: 2 + i,
          fragmentId: 0,
        },
        codec.encode(body),
      );
    }
    await until(() => f.metrics.dropped.get('prudp_send_queue_full') === 1);
    expect(f.metrics.dropped.get('prudp_send_queue_full')).toBe(1);
    expect(f.metrics.closed.get('send_queue_full')).toBe(1);
    expect(f.prudp.connections).toBe(0);
  });
});
