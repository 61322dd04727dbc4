/**
 * Regression tests for the review of the NoxVR Relay module: UDP anti-amplification and
 * half-open sessions, liveness and caps, master-auth robustness, avatar caps, ServerConfig
 * atomicity and the client's request bookkeeping. Real sockets on 127.0.0.1, port 0.
 */
import dgram from 'node:dgram';
import { type FastifyInstance, fastify } from 'fastify';
import { describe, expect, it } from 'vitest';
import type { AuthOutcome } from '../../../src/protocols/nox-relay/auth.js';
import { NoxRelayClient } from '../../../src/protocols/nox-relay/client.js';
import { AuthResult } from '../../../src/protocols/nox-relay/constants.js';
import { elapse, waitFor } from '../../helpers/wait.js';
import { packet, rawTcp, until, useFixtures } from './helpers.js';

const { cleanup, server, client } = useFixtures();

function padded(b: Buffer, size: number): Buffer {
  return Buffer.concat([b, Buffer.alloc(Math.max(0, size - b.length))]);
}

/** A raw UDP socket that records every datagram it receives. */
async function udpSocket(port: number): Promise<{ send: (b: Buffer) => void; replies: Buffer[] }> {
  const sock = dgram.createSocket('udp4');
  cleanup.push(() => new Promise<void>((r) => sock.close(() => r())));
  const replies: Buffer[] = [];
  sock.on('message', (m) => replies.push(m));
  await new Promise<void>((r) => sock.bind(0, '127.0.0.1', () => r()));
  return { send: (b) => sock.send(b, port, '127.0.0.1'), replies };
}

const handshake = (protocol = 1) =>
  packet(1, { type: 'Handshake', protocol, engine: 'e', platform: 'p', addressCookie: null });

describe('nox-relay review 1: UDP anti-amplification and half-open sessions', () => {
  it('junk datagrams with byte 4 = 0x01 create no session and cannot starve TCP players', async () => {
    const s = await server({ maxClients: 2 });
    for (let i = 0; i < 2; i++) {
      const u = await udpSocket(s.port);
      u.send(Buffer.from('0005000001', 'hex'));
      u.send(padded(Buffer.from('0005000001', 'hex'), 64));
    }
    await until(() => (s.metrics.dropped.get('unknown_source') ?? 0) === 4);
    expect(s.clients.size).toBe(0);
    await client(s, '1', { instance: null });
    await client(s, '2', { instance: null });
    expect(s.clients.size).toBe(2);
  });

  it('answers an unpadded real-size UDP Handshake (reply within 3× the datagram)', async () => {
    const s = await server();
    const u = await udpSocket(s.port);
    const hs = handshake();
    expect(hs.length).toBeLessThan(24);
    u.send(hs);
    await until(() => u.replies.length === 1);
    expect(u.replies[0]!.length).toBeLessThanOrEqual(hs.length * 3);
    expect(u.replies[0]![4]).toBe(0x01);
    expect(s.metrics.dropped.get('udp_amplification')).toBeUndefined();
  });

  it('with udpReplyFactor 1, answers a UDP Handshake only within the bytes the source sent so far', async () => {
    const s = await server({ udpReplyFactor: 1 });
    const u = await udpSocket(s.port);
    const hs = handshake();
    expect(hs.length).toBeLessThan(24);
    u.send(hs);
    await until(() => s.metrics.dropped.get('udp_amplification') === 1);
    expect(s.clients.size).toBe(0);
    u.send(padded(hs, 64));
    await until(() => u.replies.length === 1);
    expect(u.replies[0]![4]).toBe(0x01);
    // Repeated small Handshakes on the session: answered only while the total stays within budget.
    for (let i = 0; i < 6; i++) u.send(hs);
    await until(() => (s.metrics.dropped.get('udp_amplification') ?? 0) >= 2);
    await elapse(50, 'replies over the budget, if any, would arrive within this window');
    const sentByServer = u.replies.reduce((n, r) => n + r.length, 0);
    expect(sentByServer).toBeLessThanOrEqual(64 + 6 * hs.length);
    expect(u.replies.length).toBeGreaterThan(1);
  });

  it('a protocol mismatch over UDP gets the Disconnect only if it fits, and never a session', async () => {
    const s = await server({ udpReplyFactor: 1 });
    const small = await udpSocket(s.port);
    small.send(handshake(2));
    await until(() => s.metrics.dropped.get('udp_amplification') === 1);
    const big = await udpSocket(s.port);
    big.send(padded(handshake(2), 128));
    await until(() => big.replies.length === 1);
    expect(big.replies[0]!.length).toBeLessThanOrEqual(128);
    expect(big.replies[0]![4]).toBe(0x00);
    expect(big.replies[0]!.subarray(5).toString()).toContain('Incompatible protocol version (2 != 1).');
    await elapse(50, 'the small Handshake must get no reply');
    expect(small.replies.length).toBe(0);
    expect(s.clients.size).toBe(0);
    expect(s.metrics.closed.get('bad_protocol')).toBe(2);
  });

  it('half-open UDP sessions have their own cap (the oldest is evicted) and short timeout, and get no timeout Disconnect', async () => {
    const s = await server({ maxClients: 2, maxHalfOpenUdp: 1, halfOpenTimeoutMs: 1500 });
    const a = await udpSocket(s.port);
    const b = await udpSocket(s.port);
    a.send(padded(handshake(), 64));
    await until(() => a.replies.length === 1);
    b.send(padded(handshake(), 64));
    await until(() => b.replies.length === 1);
    expect(s.metrics.closed.get('half_open_evicted')).toBe(1);
    expect(s.halfOpenClients).toBe(1);
    // The half-open session does not take a client slot: two TCP players still get in.
    await client(s, '1', { instance: null });
    await client(s, '2', { instance: null });
    expect(s.clients.size).toBe(3);
    await until(() => s.metrics.closed.get('half_open_timeout') === 1, 5000);
    expect(s.clients.size).toBe(2);
    await elapse(100, 'no timeout message may follow the Handshake replies');
    // The Handshake replies only, no "Connection timed out." to either.
    expect(a.replies.length).toBe(1);
    expect(b.replies.length).toBe(1);
  });

  it('a UDP client that sends a second valid packet is promoted and served normally', async () => {
    const s = await server({ maxHalfOpenUdp: 1, halfOpenTimeoutMs: 1000 });
    const c = await client(s, '1', { transport: 'udp', instance: null });
    // Promoted by its Authentification: the half-open slot is free again, the session outlives 1 s.
    const d = await client(s, '2', { transport: 'udp', instance: null });
    await elapse(1300, 'the half-open timeout (1 s) must lapse: promoted sessions outlive it');
    expect((await c.latency()).type).toBe('Latency');
    expect((await d.latency()).type).toBe('Latency');
    expect(s.metrics.closed.get('half_open_timeout')).toBeUndefined();
  });
});

describe('nox-relay review 2: liveness and caps', () => {
  it('undecodable packets do not keep a connection alive', async () => {
    const s = await server({ connectionTimeoutMs: 500 });
    const raw = await rawTcp(s.port);
    cleanup.push(() => void raw.socket.destroy());
    const junk = setInterval(() => raw.socket.write(Buffer.from('0006000004ff', 'hex')), 50);
    cleanup.push(() => clearInterval(junk));
    let closed = false;
    void raw.closed.then(() => {
      closed = true;
    });
    await waitFor(() => closed, { what: 'the connection closed by its 500 ms timeout', timeoutMs: 3000 });
    clearInterval(junk);
    expect(raw.received().subarray(5).toString()).toContain('Connection timed out.');
    expect(s.metrics.closed.get('timeout')).toBe(1);
  });

  it('Segmentation and Reliable are refused before the handshake', async () => {
    const s = await server();
    const raw = await rawTcp(s.port);
    cleanup.push(() => void raw.socket.destroy());
    raw.socket.write(
      packet(0, {
        type: 'Segmentation',
        segmentId: 1,
        totalSegments: 2,
        currentSegment: 0,
        segmentData: Buffer.alloc(100),
      }),
    );
    raw.socket.write(packet(0, { type: 'Reliable', messages: [packet(5, { type: 'Sessions', page: 0 })] }));
    await until(() => s.metrics.dropped.get('not_handshaked') === 2);
    expect(s.reassemblyBytesHeld).toBe(0);
    expect([...s.clients.values()][0]!.segments.size).toBe(0);
    expect(s.metrics.counters.get('reliable_batches')).toBeUndefined();
  });

  it('caps TCP connections per source address', async () => {
    const s = await server({ maxTcpPerIp: 2 });
    const a = await rawTcp(s.port);
    const b = await rawTcp(s.port);
    cleanup.push(() => void a.socket.destroy());
    cleanup.push(() => void b.socket.destroy());
    const c = await rawTcp(s.port);
    await c.closed;
    expect(s.metrics.closed.get('over_capacity_ip')).toBe(1);
    expect(s.clients.size).toBe(2);
    a.socket.destroy();
    await until(() => s.clients.size === 1);
    const d = await client(s, '1', { instance: null });
    expect((await d.latency()).type).toBe('Latency');
  });

  it('a server-wide reassembly budget drops new segments beyond it', async () => {
    const s = await server({ maxReassemblyBudget: 10 });
    const a = await client(s, '1', { instance: null });
    const b = await client(s, '2', { instance: null });
    const seg = (c: NoxRelayClient, n: number) =>
      c.post({
        type: 'Segmentation',
        segmentId: 1,
        totalSegments: 3,
        currentSegment: 0,
        segmentData: Buffer.alloc(n),
      });
    seg(a, 6);
    await until(() => s.reassemblyBytesHeld === 6);
    seg(b, 6);
    await until(() => s.metrics.dropped.get('reassembly_budget') === 1);
    expect(s.reassemblyBytesHeld).toBe(6);
    await a.close();
    await until(() => s.reassemblyBytesHeld === 0);
    seg(b, 6);
    await until(() => s.reassemblyBytesHeld === 6);
  });
});

describe('nox-relay review 3: master authentication robustness', () => {
  it('survives bad master replies and answers every attempt (no unhandled rejection, no stuck state)', async () => {
    const master: FastifyInstance = fastify();
    master.post('/api/relays/checkbearer', async (req) => {
      const token = (req.body as { access_token: string }).access_token;
      if (token === 'frac')
        return { is_blacklisted: true, blacklisted: { expires: 1700000000000.5, reason: 'r' } };
      if (token === 'bigname')
        return { valid: true, user: { id: 5, display: 'x'.repeat(70000), server: 's' } };
      if (token === 'bigserver')
        return { valid: true, user: { id: 5, display: 'd', server: 'y'.repeat(70000) } };
      if (token === 'fracid') return { valid: true, user: { id: 1.5, display: 'd', server: 's' } };
      return { valid: true, user: { id: 77, display: 'Alice', server: 'nox.server' } };
    });
    await master.listen({ host: '127.0.0.1', port: 0 });
    cleanup.push(() => master.close());
    const url = `http://127.0.0.1:${(master.server.address() as { port: number }).port}`;
    const s = await server({ master: url });
    const c = new NoxRelayClient({ port: s.port, keepAliveMs: 0, requestTimeoutMs: 3000 });
    cleanup.push(() => c.close());
    await c.connect();
    await c.handshake();
    expect(await c.authenticate('frac')).toMatchObject({ result: 3, expireAt: 1700000000000n, reason: 'r' });
    expect(await c.authenticate('bigname')).toMatchObject({ result: 2 });
    expect(await c.authenticate('bigserver')).toMatchObject({ result: 2 });
    expect(await c.authenticate('fracid')).toMatchObject({ result: 2 });
    expect(await c.authenticate('good')).toMatchObject({ result: 0, userId: 77, displayName: 'Alice' });
  });

  it('an authenticator outcome that cannot be encoded is answered with MasterError and the state reset', async () => {
    let n = 0;
    const s = await server({
      authenticate: async (): Promise<AuthOutcome> => {
        n++;
        if (n === 1)
          return {
            result: AuthResult.Success,
            userId: 1,
            serverAddress: 's',
            displayName: 'x'.repeat(70000),
          };
        if (n === 2) return { result: AuthResult.Blacklisted, expireAt: 1.5e12 + 0.5, reason: 'b' };
        if (n === 3) throw new Error('boom');
        return { result: AuthResult.Success, userId: 9, serverAddress: 's', displayName: 'ok' };
      },
    });
    const c = new NoxRelayClient({ port: s.port, keepAliveMs: 0, requestTimeoutMs: 2000 });
    cleanup.push(() => c.close());
    await c.connect();
    await c.handshake();
    expect(await c.authenticate('t')).toMatchObject({ result: 2 });
    expect(s.metrics.counters.get('auth_error')).toBe(1);
    expect([...s.clients.values()][0]!.auth).toBe('none');
    expect(await c.authenticate('t')).toMatchObject({ result: 3, expireAt: 1500000000000n });
    expect(await c.authenticate('t')).toMatchObject({ result: 2, reason: 'boom' });
    expect(await c.authenticate('t')).toMatchObject({ result: 0, userId: 9 });
  });
});

describe('nox-relay review 4: avatar caps', () => {
  it('caps parameter values, the stored total per player and the relayed packet size', async () => {
    const s = await server({ maxAvatarParamsTotal: 600 });
    const a = await client(s, '1');
    const b = await client(s, '2');
    const relayed: unknown[] = [];
    b.on('message', (m: { type: string }) => {
      if (m.type === 'AvatarParams') relayed.push(m);
    });
    expect(
      await a.request(
        {
          type: 'AvatarChanged',
          instanceId: 0,
          playerId: 0xffff,
          avatarId: 1,
          avatarServer: 'z'.repeat(300),
          avatarVersion: 1,
        },
        'AvatarChanged',
      ),
    ).toMatchObject({ result: 2, reason: 'Invalid avatar server' });
    await a.request(
      {
        type: 'AvatarChanged',
        instanceId: 0,
        playerId: 0xffff,
        avatarId: 1,
        avatarServer: 'ok',
        avatarVersion: 1,
      },
      'AvatarChanged',
    );
    const owner = s.instances.get(0)!.players.get(0)!;
    const params = (id: number, size: number) => ({
      type: 'AvatarParams' as const,
      instanceId: 0,
      playerId: 0xffff,
      parameters: [{ parameterId: id, value: Buffer.alloc(size) }],
    });
    a.post(params(1, 300)); // over the 256-byte value cap
    await until(() => s.metrics.dropped.get('avatar_params_too_large') === 1);
    a.post(params(1, 250));
    a.post(params(2, 250));
    a.post(params(3, 250)); // 750 > 600 stored bytes
    await until(() => s.metrics.dropped.get('avatar_params_too_large') === 2);
    a.post(params(1, 100)); // replacing a value frees room
    await until(() => relayed.length === 3);
    expect(owner.paramBytes).toBe(350);
    expect(owner.params.size).toBe(2);
    // A (segmented) message whose relay would exceed maxPacketSize (1024) is dropped whole.
    const s2 = await server();
    const c = await client(s2, '1');
    await c.request(
      {
        type: 'AvatarChanged',
        instanceId: 0,
        playerId: 0xffff,
        avatarId: 1,
        avatarServer: 'ok',
        avatarVersion: 1,
      },
      'AvatarChanged',
    );
    const big = packet(0, {
      type: 'AvatarParams',
      instanceId: 0,
      playerId: 0xffff,
      parameters: [1, 2, 3, 4, 5].map((parameterId) => ({ parameterId, value: Buffer.alloc(250) })),
    });
    const half = Math.ceil(big.length / 2);
    for (const [i, part] of [big.subarray(0, half), big.subarray(half)].entries())
      c.post({ type: 'Segmentation', segmentId: 9, totalSegments: 2, currentSegment: i, segmentData: part });
    await until(() => s2.metrics.dropped.get('avatar_params_too_large') === 1);
    expect(s2.instances.get(0)!.players.get(0)!.params.size).toBe(0);
  });
});

describe('nox-relay review 5: ServerConfig is all or nothing', () => {
  it('a request with one invalid field changes nothing and tells nobody', async () => {
    const s = await server({ instances: [{ id: 0, owners: [42] }] });
    const owner = await client(s, '42');
    const other = await client(s, '7');
    let changes = 0;
    other.on('message', (m: { type: string }) => {
      if (m.type === 'ServerConfig') changes++;
    });
    expect(
      await owner.serverConfig({ instanceId: 0, configFlags: 0x03, tps: 10, threshold: Number.NaN }),
    ).toMatchObject({ result: 1 });
    expect(s.instances.get(0)!.tps).toBe(24);
    await elapse(100, 'a refused change must reach no other member');
    expect(changes).toBe(0);
  });

  it('keeps instance flags and the password consistent', async () => {
    const s = await server({ instances: [{ id: 0, owners: [42] }] });
    const owner = await client(s, '42');
    const inst = s.instances.get(0)!;
    expect(await owner.serverConfig({ instanceId: 0, configFlags: 0x08, password: 'pw' })).toMatchObject({
      result: 0,
      hasPassword: 1,
    });
    // Clearing UsePassword through the flags removes the password too.
    expect(await owner.serverConfig({ instanceId: 0, configFlags: 0x10, instanceFlags: 0x09 })).toMatchObject(
      {
        result: 0,
        instanceFlags: 0x09,
      },
    );
    expect(inst.hasPassword).toBe(false);
    const guest = await client(s, '8', { instance: null });
    expect((await guest.enter(0)).result).toBe(0);
    // UsePassword without a password is refused, and nothing is applied.
    expect(
      await owner.serverConfig({ instanceId: 0, configFlags: 0x11, tps: 5, instanceFlags: 0x0b }),
    ).toMatchObject({ result: 1, reason: 'UsePassword needs a password.' });
    expect(inst.tps).toBe(24);
    expect(inst.flags).toBe(0x09);
  });
});

describe('nox-relay review 6: client request bookkeeping', () => {
  it('an encoding error in request() leaves no pending entry or timer', async () => {
    const c = new NoxRelayClient({ port: 1, requestTimeoutMs: 60_000 });
    await expect(c.authenticate('x'.repeat(70000))).rejects.toThrow();
    expect(c.pendingRequests).toBe(0);
  });
});
