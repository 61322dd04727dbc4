import dgram from 'node:dgram';
import { type FastifyInstance, fastify } from 'fastify';
import { describe, expect, it } from 'vitest';
import { ProtocolMetrics } from '../../../src/core/metrics.js';
import { NoxRelayClient } from '../../../src/protocols/nox-relay/client.js';
import { Priority } from '../../../src/protocols/nox-relay/constants.js';
import { kickPlayer } from '../../../src/protocols/nox-relay/handlers/membership.js';
import { transformMessage, writeTransformRelay } from '../../../src/protocols/nox-relay/handlers/relay.js';
import type { StoredTransform } from '../../../src/protocols/nox-relay/instances.js';
import type { ServerMessage } from '../../../src/protocols/nox-relay/messages.js';
import { writeServerPacket } from '../../../src/protocols/nox-relay/packet.js';
import { RelayClient } from '../../../src/protocols/nox-relay/session.js';
import { WireWriter } from '../../../src/wire/index.js';
import { elapse } from '../../helpers/wait.js';
import { next, packet, player, rawTcp, startServer, until, useFixtures } from './helpers.js';

const { cleanup, server, client } = useFixtures();

/** A packet followed by zero padding up to `size` bytes (a UDP Handshake datagram). */
function padded(b: Buffer, size = 64): Buffer {
  return Buffer.concat([b, Buffer.alloc(Math.max(0, size - b.length))]);
}

describe('nox-relay server: handshake and authentication', () => {
  it('answers the handshake with the id, the peer address, offline flags and the limits', async () => {
    const s = await server({ connectionTimeoutMs: 15000 });
    const c = new NoxRelayClient({ port: s.port, keepAliveMs: 0 });
    cleanup.push(() => c.close());
    await c.connect();
    const h = await c.handshake('unity', 'windows');
    expect(h).toMatchObject({
      protocol: 1,
      flags: 1,
      maxPacketSize: 1024,
      connectionTimeout: 15,
      keepAliveInterval: 5,
      segmentationTimeout: 30,
    });
    expect(h.masterAddr).toBeUndefined();
    expect(Buffer.from(h.clientIp).toString('hex')).toBe('7f000001');
    expect(h.clientPort).toBeGreaterThan(0);
    const a = await c.authenticate('1066');
    expect(a).toMatchObject({ result: 0, userId: 1066, serverAddress: 'localhost' });
  });

  it('disconnects a client speaking another protocol version, with the reason', async () => {
    const s = await server();
    const c = new NoxRelayClient({ port: s.port });
    cleanup.push(() => c.close());
    await c.connect();
    const reason = next<string>(c, 'disconnect');
    const closed = next(c, 'close');
    c.post({ type: 'Handshake', protocol: 2, engine: 'x', platform: 'y', addressCookie: null }, 1);
    expect(await reason).toBe('Incompatible protocol version (2 != 1).');
    await closed;
  });

  it('refuses Enter before authentication and ignores requests before the handshake', async () => {
    const s = await server();
    const c = new NoxRelayClient({ port: s.port, keepAliveMs: 0, requestTimeoutMs: 300 });
    cleanup.push(() => c.close());
    await c.connect();
    await expect(c.sessions()).rejects.toThrow(/no Sessions reply/);
    expect(s.metrics.dropped.get('not_handshaked')).toBe(1);
    await c.handshake();
    const e = await c.enter(0);
    expect(e).toMatchObject({ result: 8, reason: 'You are not authenticated.' });
    expect(s.instances.get(0)!.players.size).toBe(0);
    const g = await c.authenticate('t', 0x02);
    expect(g).toMatchObject({ result: 4, reason: 'This server does not support unauthenticated access.' });
    expect(await c.authenticate('')).toMatchObject({ result: 1 });
  });

  it('checks tokens against a master server over HTTP', async () => {
    const master: FastifyInstance = fastify();
    const seen: unknown[] = [];
    master.post('/api/relays/checkbearer', async (req) => {
      const body = req.body as { access_token: string; token_type: string; ip: string };
      seen.push(body);
      if (body.access_token === 'good')
        return { valid: true, user: { id: 77, display: 'Alice', server: 'nox.server' } };
      if (body.access_token === 'banned')
        return {
          valid: false,
          is_blacklisted: true,
          blacklisted: { expires: 1693058039808, reason: 'Cheating detected' },
        };
      return { valid: false, is_invalid_token: true };
    });
    await master.listen({ host: '127.0.0.1', port: 0 });
    cleanup.push(() => master.close());
    const url = `http://127.0.0.1:${(master.server.address() as { port: number }).port}`;
    const s = await server({ master: url });
    const c = new NoxRelayClient({ port: s.port, keepAliveMs: 0, requestTimeoutMs: 1500 });
    cleanup.push(() => c.close());
    await c.connect();
    const h = await c.handshake();
    expect(h).toMatchObject({ flags: 0, masterAddr: url });
    expect(await c.authenticate('bad')).toMatchObject({ result: 1 });
    expect(await c.authenticate('banned')).toMatchObject({
      result: 3,
      expireAt: 1693058039808n,
      reason: 'Cheating detected',
    });
    expect(await c.authenticate('good', 1)).toMatchObject({
      result: 0,
      userId: 77,
      displayName: 'Alice',
      serverAddress: 'nox.server',
    });
    expect(seen[2]).toMatchObject({ access_token: 'good', token_type: 'integrity', ip: '127.0.0.1' });
    // Asked again once authenticated (a UDP client whose reply was lost): the same identity,
    // without asking the master again.
    expect(await c.authenticate('good', 1)).toMatchObject({
      result: 0,
      userId: 77,
      displayName: 'Alice',
      serverAddress: 'nox.server',
    });
    expect(seen).toHaveLength(3);
    expect(s.metrics.counters.get('auth_repeated_answered')).toBe(1);
    // Another token on an authenticated session is ignored (no answer), as the reference server does.
    await expect(c.authenticate('bad', 0)).rejects.toMatchObject({ code: 'ERR_NOX_TIMEOUT' });
    expect(seen).toHaveLength(3);
    expect(s.metrics.dropped.get('auth_repeated')).toBe(1);
    expect(s.metrics.counters.get('auth_repeated_answered')).toBe(1);
    // Unreachable master: MasterError.
    const s2 = await server({ master: 'http://127.0.0.1:1' });
    const c2 = new NoxRelayClient({ port: s2.port, keepAliveMs: 0 });
    cleanup.push(() => c2.close());
    await c2.connect();
    await c2.handshake();
    expect(await c2.authenticate('x')).toMatchObject({ result: 2 });
  });
});

describe('nox-relay server: instances and membership', () => {
  it('two clients enter the same instance and each sees the other one Join', async () => {
    const s = await server();
    const a = await client(s, '1');
    const b = new NoxRelayClient({ port: s.port, keepAliveMs: 0 });
    cleanup.push(() => b.close());
    await b.connect();
    await b.handshake('unity', 'windows');
    await b.authenticate('2');
    const aSeesB = next<Extract<ServerMessage, { type: 'Join' }>>(a, 'join');
    const bSeesA = next<Extract<ServerMessage, { type: 'Join' }>>(b, 'join');
    const e = await b.enter(0);
    expect(e).toMatchObject({ result: 0, playerId: 1, userId: 2, tps: 24 });
    expect((await bSeesA).playerId).toBe(0);
    expect(await aSeesB).toMatchObject({
      playerId: 1,
      userId: 2,
      engine: 'unity',
      platform: 'windows',
      instanceId: 0,
    });
  });

  it('relays transforms to the others, with the accumulated state, and Quit produces a Leave', async () => {
    const s = await server();
    const a = await client(s, '1');
    const b = await client(s, '2');
    const got = next<any>(b, 'transform');
    a.sendTransform(0, 5, { position: { x: 1, y: 1.5, z: -2 } });
    expect(await got).toMatchObject({ playerId: 0, rig: 5, flags: 1, position: { x: 1, y: 1.5, z: -2 } });
    await elapse(60, 'the instance TPS window must pass before the next transform is relayed');
    const got2 = next<any>(b, 'transform');
    a.sendTransform(0, 5, { rotation: { x: 0, y: 0, z: 0, w: 1 } });
    expect(await got2).toMatchObject({ flags: 3, position: { x: 1, y: 1.5, z: -2 }, rotation: { w: 1 } });
    // Below the threshold: nothing is relayed.
    const before = s.metrics.counters.get('transforms_relayed');
    await elapse(60, 'the TPS window must pass, so that only the threshold can hold this one back');
    a.sendTransform(0, 5, { position: { x: 1, y: 1.5, z: -2 } });
    await until(() => s.metrics.dropped.get('transform_below_threshold') === 1);
    expect(s.metrics.counters.get('transforms_relayed')).toBe(before);
    // A newcomer gets the stored transform after the Join.
    const c = new NoxRelayClient({ port: s.port, keepAliveMs: 0 });
    cleanup.push(() => c.close());
    await c.connect();
    await c.handshake();
    await c.authenticate('3');
    const replay = next<any>(c, 'transform');
    await c.enter(0);
    expect(await replay).toMatchObject({ playerId: 0, flags: 3 });

    const leave = next<any>(b, 'leave');
    const q = await a.quit(0, 'bye');
    expect(q).toMatchObject({ type: 'Quit', instanceId: 0, quitType: 0, reason: 'bye' });
    expect(await leave).toMatchObject({ instanceId: 0, quitType: 0, playerId: 0 });
    expect(s.instances.get(0)!.players.size).toBe(2);
    // Quit again: not in the instance any more.
    expect(await a.quit(0)).toMatchObject({ quitType: 5, reason: 'You are not in this instance.' });
    expect(await a.quit(9)).toMatchObject({ quitType: 5, reason: 'Instance not found.' });
  });

  it('holds transforms back to the instance TPS and flushes the latest state', async () => {
    const s = await server({ instances: [{ id: 0, tps: 5 }] });
    const a = await client(s, '1');
    const b = await client(s, '2');
    const seen: any[] = [];
    b.on('transform', (m) => seen.push(m));
    for (let i = 1; i <= 5; i++) a.sendTransform(0, 0, { position: { x: i, y: 0, z: 0 } });
    await until(() => seen.length >= 2, 1500, 'the held transform');
    await elapse(250, 'no third transform may be relayed: the held state was flushed once');
    expect(seen.length).toBe(2);
    expect(seen[0].position.x).toBe(1);
    expect(seen[1].position.x).toBe(5);
  });

  it('gates Enter: capacity, password, whitelist, bots, pseudonyme; PasswordRequirement answers', async () => {
    const s = await server({
      instances: [
        { id: 1, capacity: 1 },
        { id: 2, password: 'secret123' },
        { id: 3, whitelist: [10] },
        { id: 4, bots: false },
        { id: 5, blacklist: [{ userId: 11, reason: 'Disruptive behavior' }] },
      ],
    });
    const a = await client(s, '10', { instance: null });
    const b = await client(s, '11', { instance: null });
    expect(await a.enter(1)).toMatchObject({ result: 0 });
    expect(await b.enter(1)).toMatchObject({ result: 2, reason: 'Instance is full.' });
    expect(await b.enter(2)).toMatchObject({ result: 6 });
    expect(await b.enter(2, { password: 'nope' })).toMatchObject({
      result: 6,
      reason: 'Incorrect password.',
    });
    expect(await b.enter(2, { password: 'secret123', pseudonyme: 'Bobby' })).toMatchObject({
      result: 0,
      displayName: 'Bobby',
    });
    expect(await b.enter(2)).toMatchObject({ result: 7, reason: 'Already in an instance.' });
    expect(await b.enter(3)).toMatchObject({ result: 4 });
    expect(await a.enter(3)).toMatchObject({ result: 0 });
    expect(await a.enter(4, { asBot: true })).toMatchObject({ result: 8 });
    expect(await a.enter(4, { pseudonyme: 'x' })).toMatchObject({ result: 9 });
    expect(await b.enter(5)).toMatchObject({ result: 3, expiresAt: 0n, reason: 'Disruptive behavior' });
    expect(await a.enter(99)).toMatchObject({ result: 1, reason: 'Instance not found.' });
    expect(
      await a.request({ type: 'PasswordRequirement', instanceId: 2 }, 'PasswordRequirement'),
    ).toMatchObject({ result: 1 });
    expect(
      await a.request({ type: 'PasswordRequirement', instanceId: 1 }, 'PasswordRequirement'),
    ).toMatchObject({ result: 0 });
    expect(
      await a.request({ type: 'PasswordRequirement', instanceId: 77 }, 'PasswordRequirement'),
    ).toMatchObject({ result: 2 });
  });

  it('pages Sessions (public instances only) and echoes an out-of-range page', async () => {
    const instances = Array.from({ length: 100 }, (_, i) => ({ id: i, masterId: 1000 + i }));
    instances.push({ id: 200, masterId: 1, public: false } as never);
    const s = await server({ instances });
    const c = await client(s, '1', { instance: null });
    const p0 = await c.sessions(0);
    expect(p0.instances.length).toBe(78);
    expect(p0).toMatchObject({ currentPage: 0, totalPages: 2 });
    expect(p0.instances[0]).toMatchObject({
      internalId: 0,
      masterId: 1000,
      currentPlayers: 0,
      capacity: 32,
      flags: 0x09,
    });
    const p1 = await c.sessions(1);
    expect(p1.instances.length).toBe(22);
    expect(p1.instances.at(-1)!.internalId).toBe(99);
    const p5 = await c.sessions(5);
    expect(p5).toMatchObject({ instances: [], currentPage: 5, totalPages: 2 });
  });

  it('refuses ServerConfig to ordinary players and applies it for the owner, telling the others', async () => {
    const s = await server({ instances: [{ id: 0, owners: [42] }] });
    const owner = await client(s, '42');
    const pleb = await client(s, '7');
    expect(await pleb.serverConfig({ instanceId: 0, configFlags: 1, tps: 60 })).toMatchObject({
      result: 1,
      reason: 'Permission denied.',
    });
    expect(s.instances.get(0)!.tps).toBe(24);
    const change = next<any>(pleb, 'message', (m) => m.type === 'ServerConfig');
    const r = await owner.serverConfig({
      instanceId: 0,
      configFlags: 0x0d,
      tps: 60,
      capacity: 10,
      password: 'pw',
    });
    expect(r).toMatchObject({ result: 0, configFlags: 0x0d, tps: 60, capacity: 10, hasPassword: 1 });
    expect(await change).toMatchObject({ result: 2, tps: 60 });
    const q = await owner.serverConfig({ instanceId: 0, configFlags: 0 });
    expect(q).toMatchObject({ result: 0, configFlags: 0x1f, instanceFlags: 0x0b, hasPassword: 1 });
    expect(await owner.serverConfig({ instanceId: 5, configFlags: 0 })).toMatchObject({
      result: 1,
      reason: 'Instance not found.',
    });
  });

  it('relays avatars, avatar parameters, Custom and Teleport; kicks send a moderation Leave', async () => {
    const s = await server();
    const a = await client(s, '1');
    const b = await client(s, '2');
    const bcast = next<any>(b, 'message', (m) => m.type === 'AvatarChanged');
    const reply = await a.request(
      {
        type: 'AvatarChanged',
        instanceId: 0,
        playerId: 0xffff,
        avatarId: 1234,
        avatarServer: 'nox.server',
        avatarVersion: 1,
      },
      'AvatarChanged',
    );
    expect(reply).toMatchObject({ result: 3 });
    expect(await bcast).toMatchObject({ result: 0, playerId: 0, avatarId: 1234, avatarServer: 'nox.server' });
    expect(
      await b.request(
        {
          type: 'AvatarChanged',
          instanceId: 0,
          playerId: 0,
          avatarId: 1,
          avatarServer: 'x',
          avatarVersion: 1,
        },
        'AvatarChanged',
      ),
    ).toMatchObject({ result: 2, reason: "You are not allowed to change this player's avatar" });
    const params = next<any>(b, 'message', (m) => m.type === 'AvatarParams');
    a.post({
      type: 'AvatarParams',
      instanceId: 0,
      playerId: 0xffff,
      parameters: [{ parameterId: 7, value: Buffer.from('3f000000', 'hex') }],
    });
    expect(await params).toMatchObject({ playerId: 0, parameters: [{ parameterId: 7 }] });
    const custom = next<any>(b, 'message', (m) => m.type === 'Custom');
    a.post({ type: 'Custom', instanceId: 0, data: Buffer.from('hello') });
    expect(Buffer.from((await custom).data).toString()).toBe('hello');
    const tp = next<any>(b, 'message', (m) => m.type === 'Teleport');
    a.post({
      type: 'Teleport',
      instanceId: 0,
      playerId: 0xffff,
      position: { x: 5, y: 0, z: 5 },
      rotation: { x: 0, y: 0, z: 0, w: 1 },
    });
    expect(await tp).toMatchObject({ playerId: 0, position: { x: 5, y: 0, z: 5 } });
    const kicked = next<any>(a, 'message', (m) => m.type === 'Quit');
    const leave = next<any>(b, 'leave');
    expect(kickPlayer(s, 0, 0, 'Toxic behavior')).toBe(true);
    expect(await kicked).toMatchObject({ quitType: 2, reason: 'Toxic behavior' });
    expect(await leave).toMatchObject({ quitType: 2, playerId: 0, moderatorId: 0xffff, reason: null });
  });
});

describe('nox-relay server: transports and bad input', () => {
  it('speaks UDP: join, transforms, several packets in one datagram, malformed datagrams dropped', async () => {
    const s = await server();
    const a = await client(s, '1', { transport: 'udp' });
    const b = await client(s, '2', { transport: 'udp' });
    const got = next<any>(b, 'transform');
    a.sendTransform(0, 1, { position: { x: 3, y: 2, z: 1 } });
    expect(await got).toMatchObject({ playerId: 0, rig: 1 });

    const sock = dgram.createSocket('udp4');
    cleanup.push(() => new Promise<void>((r) => sock.close(() => r())));
    const replies: Buffer[] = [];
    sock.on('message', (m) => replies.push(m));
    await new Promise<void>((r) => sock.bind(0, '127.0.0.1', () => r()));
    const send = (b: Buffer) => sock.send(b, s.port, '127.0.0.1');
    // Non-handshake traffic from an unknown source creates no state.
    send(packet(1, { type: 'Sessions', page: 0 }));
    await until(() => s.metrics.dropped.get('unknown_source') === 1);
    // A first Handshake datagram must be at least as large as the reply (anti-amplification).
    send(
      padded(
        packet(1, { type: 'Handshake', protocol: 1, engine: 'raw', platform: 'udp', addressCookie: null }),
      ),
    );
    await until(() => replies.length === 1);
    send(
      Buffer.concat([
        packet(2, { type: 'Latency', timestamp: 5n }),
        packet(3, { type: 'Sessions', page: 0 }),
      ]),
    );
    await until(() => replies.length >= 2);
    const all = Buffer.concat(replies.slice(1));
    // Latency (uid 2) and Sessions (uid 3) came back, in order.
    expect(all.readUInt16BE(2)).toBe(2);
    expect(all[4]).toBe(0x04);
    const second = all.readUInt16BE(0);
    await until(() => Buffer.concat(replies.slice(1)).length > second);
    const all2 = Buffer.concat(replies.slice(1));
    expect(all2.readUInt16BE(second + 2)).toBe(3);
    expect(all2[second + 4]).toBe(0x12);
    // A datagram whose second packet is cut short is dropped whole.
    const before = s.metrics.dropped.get('malformed') ?? 0;
    send(Buffer.concat([packet(4, { type: 'Latency', timestamp: 5n }), Buffer.from('0009000004', 'hex')]));
    send(Buffer.from('000300', 'hex'));
    await until(() => (s.metrics.dropped.get('malformed') ?? 0) === before + 2);
    // Everyone else is still served.
    expect((await a.latency()).type).toBe('Latency');
  });

  it('a length-3 frame or an oversized frame closes only its own TCP connection', async () => {
    const s = await server();
    const good = await client(s, '1', { instance: null });
    const bad = await rawTcp(s.port);
    bad.socket.write(Buffer.from('0003000000', 'hex'));
    await bad.closed;
    const big = await rawTcp(s.port);
    big.socket.write(Buffer.from('0800000004', 'hex'));
    await big.closed;
    expect(s.metrics.closed.get('malformed')).toBe(2);
    expect((await good.latency()).type).toBe('Latency');
    // A well-framed but undecodable packet is dropped; the connection stays.
    good.sendRaw(Buffer.from('0006000004ff', 'hex'));
    expect((await good.latency()).type).toBe('Latency');
    expect(s.metrics.dropped.get('malformed')).toBeGreaterThanOrEqual(1);
  });

  it('answers frames written one byte at a time, and two frames in one write', async () => {
    const s = await server();
    const raw = await rawTcp(s.port);
    cleanup.push(() => void raw.socket.destroy());
    const hs = packet(9, {
      type: 'Handshake',
      protocol: 1,
      engine: 'raw',
      platform: 'tcp',
      addressCookie: null,
    });
    for (const byte of hs) {
      raw.socket.write(Buffer.from([byte]));
      await elapse(1, 'space the bytes so that they arrive in separate reads');
    }
    await until(() => raw.received().length >= 5 && raw.received().length >= raw.received().readUInt16BE(0));
    expect(raw.received().readUInt16BE(2)).toBe(9);
    const n = raw.received().length;
    raw.socket.write(
      Buffer.concat([
        packet(10, { type: 'Latency', timestamp: 1n }),
        packet(11, { type: 'Latency', timestamp: 2n }),
      ]),
    );
    await until(() => raw.received().length >= n + 2 * 21);
    const r = raw.received().subarray(n);
    expect([r.readUInt16BE(2), r.readUInt16BE(21 + 2)]).toEqual([10, 11]);
  });

  it('reassembles segments in any order, and forgets them after the segmentation timeout', async () => {
    const s = await server({ segmentationTimeoutMs: 200 });
    const c = await client(s, '1', { instance: null });
    const inner = packet(33, { type: 'Latency', timestamp: 12345n });
    const parts = [inner.subarray(0, 4), inner.subarray(4, 9), inner.subarray(9)];
    const reply = next<any>(c, 'message', (m) => m.type === 'Latency');
    for (const i of [2, 0, 1])
      c.post({
        type: 'Segmentation',
        segmentId: 42,
        totalSegments: 3,
        currentSegment: i,
        segmentData: parts[i]!,
      });
    expect(await reply).toMatchObject({ clientTimestamp: 12345n });
    c.post({
      type: 'Segmentation',
      segmentId: 43,
      totalSegments: 3,
      currentSegment: 0,
      segmentData: parts[0]!,
    });
    c.post({
      type: 'Segmentation',
      segmentId: 43,
      totalSegments: 3,
      currentSegment: 1,
      segmentData: parts[1]!,
    });
    await elapse(450, 'the segmentation timeout (200 ms) must lapse before the last segment');
    c.post({
      type: 'Segmentation',
      segmentId: 43,
      totalSegments: 3,
      currentSegment: 2,
      segmentData: parts[2]!,
    });
    await until(() => (s.metrics.dropped.get('segment_expired') ?? 0) >= 1);
    expect(s.metrics.counters.get('segments_reassembled')).toBe(1);
    // Caps: index out of range, too many segments.
    c.post({
      type: 'Segmentation',
      segmentId: 1,
      totalSegments: 2,
      currentSegment: 2,
      segmentData: Buffer.alloc(1),
    });
    c.post({
      type: 'Segmentation',
      segmentId: 1,
      totalSegments: 5000,
      currentSegment: 0,
      segmentData: Buffer.alloc(1),
    });
    await until(() => s.metrics.dropped.get('bad_segment') === 2);
  });

  it('processes a Reliable batch of whole packets in order, each reply with its own uid', async () => {
    const s = await server();
    const c = await client(s, '1', { instance: null });
    const uids: number[] = [];
    c.on('message', (_m, uid: number) => uids.push(uid));
    c.post({
      type: 'Reliable',
      messages: [packet(7, { type: 'Latency', timestamp: 1n }), packet(8, { type: 'Sessions', page: 0 })],
    });
    await until(() => uids.includes(8));
    expect(uids.slice(-2)).toEqual([7, 8]);
  });

  it('times out a silent client: Disconnect with the reason, Leave (Timeout) for the others', async () => {
    // Wide margins: the alive client's 100 ms keep-alives must beat the 1 s timeout even under load.
    const s = await server({ connectionTimeoutMs: 1000 });
    const silent = await client(s, '1');
    const alive = await client(s, '2', { keepAliveMs: 100 });
    const why = next<string>(silent, 'disconnect', () => true, 5000);
    const leave = next<any>(alive, 'leave', () => true, 5000);
    expect(await why).toBe('Connection timed out.');
    expect(await leave).toMatchObject({ quitType: 1, playerId: 0 });
    await elapse(400, 'the client sending keep-alives must stay connected past the timeout');
    expect(alive.isClosed).toBe(false);
    expect(s.metrics.closed.get('timeout')).toBe(1);
  });

  it('drops Low and Normal before High and Critical when a connection is congested', () => {
    const metrics = new ProtocolMetrics('nox-relay');
    const written: Buffer[] = [];
    const fake = {
      writableLength: 0,
      remoteAddress: '127.0.0.1',
      remotePort: 1,
      write: (b: Buffer) => written.push(b),
      destroy: () => {},
    };
    const rc = new RelayClient(
      0,
      { tcp: fake as never },
      {
        congestion: { softBytes: 100, hardBytes: 400, closeBytes: 1600 },
        udpReplyFactor: 3,
        udpSendBytesPerSecond: 1 << 20,
        slowConsumerTimeoutMs: 60_000,
        maxRequestsPerSecond: 100,
        maxRequestBurst: 100,
      },
      metrics,
    );
    const b = Buffer.alloc(5);
    fake.writableLength = 200;
    expect(rc.send(b, Priority.Low)).toBe(false);
    expect(rc.send(b, Priority.Normal)).toBe(false);
    expect(rc.send(b, Priority.High)).toBe(true);
    fake.writableLength = 500;
    expect(rc.send(b, Priority.High)).toBe(false);
    expect(rc.send(b, Priority.Critical)).toBe(true);
    fake.writableLength = 0;
    expect(rc.send(b, Priority.Low)).toBe(true);
    expect(written.length).toBe(3);
    expect(Object.fromEntries(metrics.dropped)).toEqual({
      congestion_low: 1,
      congestion_normal: 1,
      congestion_high: 1,
    });
  });

  it('the hand-written transform relay writer matches the declared codec byte for byte', () => {
    const st: StoredTransform = {
      rig: 5,
      flags: 0x1f,
      // position 1,2,3; rotation 0.5,0,0,1; scale 1,1,1; velocity -1,0,2; angular 0.25,0,0
      values: Float64Array.of(1, 2, 3, 0.5, 0, 0, 1, 1, 1, 1, -1, 0, 2, 0.25, 0, 0),
      lastSent: 0,
      dirty: false,
    };
    for (const flags of [0, 1, 3, 0x1f, 0x18]) {
      st.flags = flags;
      const fast = new WireWriter();
      writeTransformRelay(fast, 3, 7, st);
      const declared = new WireWriter();
      writeServerPacket(declared, 0, transformMessage(3, 7, st));
      expect(fast.toBuffer().toString('hex')).toBe(declared.toBuffer().toString('hex'));
    }
  });
});

describe('nox-relay server: audiences and lifecycle', () => {
  it('tells a loading member about newcomers when it becomes Ready (catch-up Join)', async () => {
    const s = await server();
    const loading = await client(s, '1', { instance: null });
    expect(await loading.enter(0)).toMatchObject({ result: 0 });
    const joins: any[] = [];
    loading.on('join', (j) => joins.push(j));
    const b = await client(s, '2');
    await elapse(100, 'a member still loading must get no Join');
    expect(joins).toEqual([]); // not Ready: no Join yet
    await loading.travel(0);
    await until(() => joins.length === 1);
    expect(joins[0]).toMatchObject({ playerId: 1, userId: 2 });
    expect(b.isClosed).toBe(false);
  });

  it('filters Leave by audience: the moderator sees details, privileged players see Normal', async () => {
    const s = await server({ instances: [{ id: 0, moderators: [100, 101] }] });
    const mod = await client(s, '100');
    const otherMod = await client(s, '101');
    const victim = await client(s, '5');
    const plain = await client(s, '6');
    const seen = (c: NoxRelayClient) => next<any>(c, 'leave', (l) => l.playerId === 2);
    const [a, b, c] = [seen(mod), seen(otherMod), seen(plain)];
    const victimQuit = next<any>(victim, 'message', (m) => m.type === 'Quit');
    expect(kickPlayer(s, 0, 2, 'Toxic behavior', 0)).toBe(true);
    expect(await a).toMatchObject({ quitType: 2, moderatorId: 0, reason: 'Toxic behavior' });
    expect(await b).toMatchObject({ quitType: 0, moderatorId: null, reason: null });
    expect(await c).toMatchObject({ quitType: 2, moderatorId: 0, reason: null });
    expect(await victimQuit).toMatchObject({ quitType: 2, reason: 'Toxic behavior' });
  });

  it('a Disconnect is confirmed with the uid, then the others get a Leave and the client is forgotten', async () => {
    const s = await server();
    const a = await client(s, '1', { transport: 'udp' });
    const b = await client(s, '2');
    const leave = next<any>(b, 'leave');
    await a.disconnect('User logout');
    expect(await leave).toMatchObject({ quitType: 0, playerId: 0 });
    await until(() => s.clients.size === 1);
    expect(s.metrics.closed.get('disconnect')).toBe(1);
    expect(s.instances.get(0)!.players.size).toBe(1);
  });

  it('caps UDP sessions per source address', async () => {
    const s = await server({ maxUdpPerIp: 2 });
    await client(s, '1', { transport: 'udp', instance: null });
    await client(s, '2', { transport: 'udp', instance: null });
    const third = new NoxRelayClient({
      port: s.port,
      transport: 'udp',
      requestTimeoutMs: 300,
      keepAliveMs: 0,
    });
    cleanup.push(() => third.close());
    await third.connect();
    await expect(third.handshake()).rejects.toThrow(/no Handshake reply/);
    expect(s.metrics.dropped.get('over_capacity')).toBe(1);
  });

  it('tells every client when the server shuts down', async () => {
    const s = await startServer();
    const a = await player(s, '1');
    cleanup.push(() => a.close());
    const why = next<string>(a, 'disconnect');
    const closed = next(a, 'close');
    await s.close();
    expect(await why).toBe('Server is shutting down.');
    await closed;
  });

  it('validates instance definitions', async () => {
    const { parseInstances } = await import('../../../src/protocols/nox-relay/instances.js');
    expect(parseInstances([{ id: 1 }, { id: 2, capacity: 4 }]).map((i) => i.id)).toEqual([1, 2]);
    expect(parseInstances({ instances: [{ id: 3 }] })[0]!.id).toBe(3);
    expect(() => parseInstances([{ id: 300 }])).toThrow(/id must be an integer 0..255/);
    expect(() => parseInstances([{ id: 1 }, { id: 1 }])).toThrow(/used twice/);
    expect(() => parseInstances([{ id: 1, whitelist: ['x'] }])).toThrow(/whitelist\[0\]/);
    expect(() => parseInstances(JSON.parse('[{"id":1,"__proto__":{"x":1}}]'))).toThrow(/not allowed/);
    expect(() => parseInstances('nope')).toThrow(/must be an array/);
  });
});

describe('nox-relay server definition (gamewire serve)', () => {
  it('starts from config-file options, with instances inline, on one port for TCP and UDP', async () => {
    const { noxRelayServer: def, loadInstances } = await import('../../../src/protocols/nox-relay/index.js');
    const { silentLogger } = await import('../../../src/core/logger.js');
    // Instances inline, as a config file gives them (start() reads a file name or the array).
    const options = {
      ...def.resolve({ host: '127.0.0.1', port: 0 }),
      instances: [{ id: 9, capacity: 2 }],
    };
    const running = await def.start(options, {
      log: silentLogger(),
      metrics: new ProtocolMetrics('nox-relay'),
      dataDir: '/tmp',
    });
    cleanup.push(() => running.close());
    const [tcp, udp] = running.endpoints;
    expect(tcp).toMatchObject({ transport: 'tcp', host: '127.0.0.1' });
    expect(udp).toMatchObject({ transport: 'udp', port: tcp!.port });
    const c = new NoxRelayClient({ port: tcp!.port, transport: 'udp', keepAliveMs: 0 });
    cleanup.push(() => c.close());
    await c.connect();
    await c.handshake();
    expect((await c.sessions()).instances).toMatchObject([{ internalId: 9, capacity: 2 }]);
    expect(() => loadInstances('/nonexistent/instances.json')).toThrow(/cannot read instance file/);
    await expect(
      def.start(
        { ...options, instances: [{ id: -1 }] },
        { log: silentLogger(), metrics: new ProtocolMetrics('x'), dataDir: '/tmp' },
      ),
    ).rejects.toThrow(/id must be an integer/);
  });

  it('passes the limit options (--nox-max-udp-per-ip, …) to the server and refuses values out of range', async () => {
    const { noxRelayServer: def } = await import('../../../src/protocols/nox-relay/index.js');
    const { silentLogger } = await import('../../../src/core/logger.js');
    const flags = def.options.map((o) => o.flag);
    expect(flags).toContain('--nox-max-half-open-udp-per-ip <n>');
    expect(flags).toContain('--nox-max-reassembly-bytes-per-ip <n>');
    const options = def.resolve({ host: '127.0.0.1', port: 0 });
    const ctx = () => ({ log: silentLogger(), metrics: new ProtocolMetrics('nox-relay'), dataDir: '/tmp' });
    const running = await def.start({ ...options, maxUdpPerIp: 1, udpReplyFactor: 1 }, ctx());
    cleanup.push(() => running.close());
    const port = running.endpoints[0]!.port;
    const a = new NoxRelayClient({ port, transport: 'udp', keepAliveMs: 0, requestTimeoutMs: 1500 });
    const b = new NoxRelayClient({ port, transport: 'udp', keepAliveMs: 0, requestTimeoutMs: 1500 });
    cleanup.push(
      () => a.close(),
      () => b.close(),
    );
    await a.connect();
    await b.connect();
    await a.handshake();
    await a.authenticate('1');
    // One UDP session per address: the second client from 127.0.0.1 is refused.
    await expect(b.handshake()).rejects.toThrow(/no Handshake reply/);
    await expect(def.start({ ...options, maxHalfOpenUdp: 0 }, ctx())).rejects.toMatchObject({
      code: 'ERR_CONFIG',
      message: expect.stringMatching(/maxHalfOpenUdp/),
    });
  });
});

describe('nox-relay errors', () => {
  it('are GamewireErrors with stable codes: ERR_CONFIG for options and instances, ERR_NOX_* for the client', async () => {
    const { GamewireError } = await import('../../../src/wire/errors.js');
    const { ConfigError } = await import('../../../src/core/errors.js');
    const { NoxRelayServer } = await import('../../../src/protocols/nox-relay/server.js');
    const { parseInstances } = await import('../../../src/protocols/nox-relay/instances.js');
    let err: unknown;
    try {
      new NoxRelayServer({ maxPacketSize: 5 });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ConfigError);
    expect(err).toBeInstanceOf(GamewireError);
    expect(err).toMatchObject({
      code: 'ERR_CONFIG',
      exitCode: 2,
      message: expect.stringMatching(/maxPacketSize/),
    });
    expect(() => parseInstances([{ id: 300 }])).toThrow(GamewireError);
    const c = new NoxRelayClient({ port: 1, transport: 'udp' });
    await c.close();
    await expect(c.latency()).rejects.toMatchObject({ code: 'ERR_NOX_CLOSED' });
  });
});

describe('nox-relay server: random traffic', () => {
  it('survives random well-framed packets of every type from a member, with no handler fault', async () => {
    const fc = (await import('fast-check')).default;
    const s = await server({ instances: [{ id: 0, owners: [1] }] });
    const attacker = await client(s, '1');
    const observer = await client(s, '2');
    const frames = fc.sample(
      fc
        .tuple(
          fc.integer({ min: 0, max: 0x12 }),
          fc.uint8Array({ maxLength: 40 }),
          fc.integer({ min: 0, max: 0xffff }),
        )
        .map(([type, body, uid]) => {
          const b = Buffer.alloc(5 + body.length);
          b.writeUInt16BE(b.length, 0);
          b.writeUInt16BE(uid, 2);
          b[4] = type === 0x01 ? 0x04 : type; // keep the session: no re-handshake with a random protocol
          b.set(body, 5);
          // Mostly aim at instance 0 so the handlers get past the membership checks.
          if (body.length > 0 && type !== 0x00) b[5] = body[0]! % 4 === 0 ? body[0]! : 0;
          return b;
        }),
      { numRuns: 600, seed: 42 },
    );
    for (const f of frames) if (f[4] !== 0x00) attacker.sendRaw(f);
    expect((await observer.latency()).type).toBe('Latency');
    expect((await attacker.latency()).type).toBe('Latency');
    expect(s.metrics.counters.get('handler_error')).toBeUndefined();
    expect(s.metrics.received).toBeGreaterThan(500);
  });
});
