/**
 * Crowds that do not know gamewire's extensions (issue 21 item 14): reference v1 clients prove
 * their UDP address through what they already do (the instance id the room list gave them), so a
 * busy instance reaches them in full, while a blind spoofer gets only a few guesses per address.
 */
import dgram from 'node:dgram';
import { describe, expect, it } from 'vitest';
import { NoxRelayClient } from '../../../src/protocols/nox-relay/client.js';
import { readServerPacket } from '../../../src/protocols/nox-relay/packet.js';
import type { NoxRelayServer } from '../../../src/protocols/nox-relay/server.js';
import { AliasGuessBudget } from '../../../src/protocols/nox-relay/udp-admission.js';
import { WireReader } from '../../../src/wire/index.js';
import { elapse } from '../../helpers/wait.js';
import { packet, until, useFixtures } from './helpers.js';
import { ReferenceV1Client } from './reference-client.js';

const { cleanup, server } = useFixtures();

async function referenceClient(s: NoxRelayServer, i: number, address: string): Promise<ReferenceV1Client> {
  const c = new ReferenceV1Client({
    port: s.port,
    localAddress: address,
    token: `${i + 1}`,
    requestTimeoutMs: 5000,
  });
  cleanup.push(() => c.close());
  await c.connect();
  return c;
}

describe('issue 21 item 14: reference v1 clients in a busy instance', () => {
  it('20 reference clients, each from its own address, at 10 Hz: each receives >= 90 % of the others', async () => {
    const s = await server();
    const clients = await Promise.all(
      Array.from({ length: 20 }, (_, i) => referenceClient(s, i, `127.0.0.${10 + i}`)),
    );
    // The list walk, Enter with the listed id, Travel, Ready: as Runtime/Helper.cs does it.
    for (const c of clients) await c.join(0);
    for (const c of clients) c.startMoving(10);
    await elapse(3000, 'three seconds of play at 10 Hz: the rate is measured over a fixed span');
    for (const c of clients) c.stopMoving();
    const sent = new Map(clients.map((c) => [c.playerId, c.transformsSent]));
    const expected = (c: ReferenceV1Client) => {
      let n = 0;
      for (const [id, count] of sent) if (id !== c.playerId) n += count;
      return n;
    };
    // Everything sent is either delivered or dropped by now; wait until deliveries stop growing.
    let last = -1;
    await until(
      () => {
        const now = clients.reduce((n, c) => n + c.transformsReceived, 0);
        const settled = now === last;
        last = now;
        return settled;
      },
      5000,
      'deliveries to settle',
    );
    const shares = clients.map((c) => c.transformsReceived / expected(c));
    expect(Math.min(...shares)).toBeGreaterThanOrEqual(0.9);
    for (const c of clients) expect(c.unknownRoom).toBe(0);
    expect(s.metrics.counters.get('address_proven_alias')).toBe(20);
    expect(s.metrics.dropped.get('udp_amplification') ?? 0).toBe(0);
  });
});

/**
 * A UDP source on `address` that plays the reference client's steps by hand and records what it
 * sends and receives (a spoofer would see nothing; the test reads the replies only to choose its
 * ids on purpose).
 */
async function rawSession(s: NoxRelayServer, address: string) {
  const sock = dgram.createSocket('udp4');
  cleanup.push(() => new Promise<void>((r) => sock.close(() => r())));
  const replies: any[] = [];
  const peer = { sent: 0, received: 0, replies };
  sock.on('message', (m) => {
    peer.received += m.length;
    try {
      replies.push(readServerPacket(new WireReader().reset(m, 0, m.length)).message);
    } catch {}
  });
  await new Promise<void>((r) => sock.bind(0, address, () => r()));
  const send = (b: Buffer) => {
    peer.sent += b.length;
    sock.send(b, s.port, '127.0.0.1');
  };
  const reply = async (type: string) => {
    await until(() => replies.some((r) => r.type === type), 3000, type);
    return replies.find((r) => r.type === type);
  };
  return {
    peer,
    send,
    /** Handshake, Authentification and one Sessions page, as the reference client starts. */
    async listed(padTo = 0): Promise<number[]> {
      const hs = packet(0, {
        type: 'Handshake',
        protocol: 1,
        engine: 'unity',
        platform: 'windows',
        addressCookie: null,
      });
      send(hs.length < padTo ? Buffer.concat([hs, Buffer.alloc(padTo - hs.length)]) : hs);
      await reply('Handshake');
      send(packet(1, { type: 'Authentification', flags: 0, accessToken: '5' }));
      await reply('Authentification');
      send(packet(2, { type: 'Sessions', page: 0 }));
      return (await reply('Sessions')).instances.map((i: { internalId: number }) => i.internalId);
    },
    enter: (instanceId: number) => send(packet(3, { type: 'Enter', instanceId, flags: 0 })),
    reply,
  };
}

describe('instance aliases: the address proof of clients without the cookie', () => {
  it('a spoofer gets two wrong guesses per address; after them no id is checked, not even the right one', async () => {
    const s = await server();
    const proven = () => s.metrics.counters.get('address_proven_alias') ?? 0;
    const sessions = [];
    for (const wrong of [true, true, false]) {
      const x = await rawSession(s, '127.0.0.30');
      sessions.push(x);
      const [alias] = await x.listed();
      expect(alias).not.toBe(0); // the real id is never listed to an unproven source
      // A wrong id: neither the instance's real id nor this session's alias.
      x.enter(wrong ? (alias === 1 ? 2 : 1) : alias!);
      await x.reply('Enter');
    }
    expect(s.metrics.dropped.get('alias_wrong')).toBe(2);
    expect(s.metrics.dropped.get('alias_unchecked')).toBe(1);
    expect(proven()).toBe(0);
    // The third session used its right alias: it is served (entered), but stays under the budget.
    expect(sessions[2]!.peer.replies.find((r) => r.type === 'Enter').result).toBe(0);
    await elapse(100, 'replies over the 3x budget, if any, would arrive within this window');
    for (const x of sessions) expect(x.peer.received).toBeLessThanOrEqual(3 * x.peer.sent);
    // Another address is not affected: its reference client proves itself.
    const c = await referenceClient(s, 9, '127.0.0.31');
    await c.join(0);
    expect(proven()).toBe(1);
  });

  it('a source that enters by the real id is served unproven; its instance messages keep the real id', async () => {
    const s = await server();
    const a = await referenceClient(s, 1, '127.0.0.32');
    await a.join(0);
    const x = await rawSession(s, '127.0.0.33');
    await x.listed();
    x.enter(0);
    expect((await x.reply('Enter')).instanceId).toBe(0);
    expect(s.metrics.counters.get('address_proven_alias')).toBe(1);
    expect(s.metrics.dropped.get('alias_wrong')).toBeUndefined();
  });

  it('with more public instances than aliasMaxInstances, no aliases are listed and nothing is proven by them', async () => {
    const instances = Array.from({ length: 5 }, (_, id) => ({ id }));
    const s = await server({ instances });
    const x = await rawSession(s, '127.0.0.34');
    // (Five listed instances outgrow a bare Handshake's budget: this source pads its first datagram.)
    expect(await x.listed(512)).toEqual([0, 1, 2, 3, 4]);
    const few = await server({ instances: instances.slice(0, 4) });
    const y = await rawSession(few, '127.0.0.34');
    const ids = await y.listed(512);
    expect(ids.filter((id) => id < 4)).toEqual([]);
    expect(new Set(ids).size).toBe(4);
  });

  it('a source that keeps repeating its Handshake is answered three times at once, then once a second', async () => {
    const s = await server();
    const x = await rawSession(s, '127.0.0.35');
    const hs = packet(0, {
      type: 'Handshake',
      protocol: 1,
      engine: 'unity',
      platform: 'windows',
      addressCookie: null,
    });
    for (let i = 0; i < 10; i++) x.send(hs);
    await until(() => (s.metrics.dropped.get('handshake_repeated') ?? 0) === 7);
    await until(() => x.peer.replies.length >= 3);
    await elapse(100, 'a fourth Handshake reply must not come');
    expect(x.peer.replies.filter((r) => r.type === 'Handshake').length).toBe(3);
    // A client on a lossy path resends every 2 s: such a resend is answered.
    await elapse(1100, 'the Handshake budget earns one more');
    x.send(hs);
    await until(() => x.peer.replies.filter((r) => r.type === 'Handshake').length === 4);
    x.send(hs);
    await until(() => (s.metrics.dropped.get('handshake_repeated') ?? 0) === 8);
  });

  it('the guess budget refills over its window and forgets the least recently used address first', () => {
    const b = new AliasGuessBudget({ aliasGuessesPerIp: 2, aliasGuessWindowMs: 1000 }, 2);
    expect(b.open('a', 0)).toBe(true);
    b.spend('a', 0);
    b.spend('a', 0);
    expect(b.open('a', 0)).toBe(false);
    expect(b.open('a', 499)).toBe(false);
    expect(b.open('a', 500)).toBe(true); // one guess back after half the window
    b.spend('b', 600);
    b.spend('c', 700); // the table holds 2: 'a' (least recently used) goes
    expect(b.size).toBe(2);
    expect(b.open('a', 700)).toBe(true);
    expect(b.open('b', 600)).toBe(true);
  });
});

describe('issue 24 item 4: a crowd behind one address', () => {
  it('65 reference clients over UDP and 65 players over TCP from one address all get in (defaults)', async () => {
    const s = await server({ instances: [{ id: 0, capacity: 0 }] });
    const udp = await Promise.all(Array.from({ length: 65 }, (_, i) => referenceClient(s, i, '127.0.0.40')));
    // All at once, as a venue's players join when the match starts.
    await Promise.all(udp.map((c) => c.join(0)));
    expect(s.metrics.counters.get('address_proven_alias')).toBe(65);
    const tcp = await Promise.all(
      Array.from({ length: 65 }, async (_, i) => {
        const c = new NoxRelayClient({
          port: s.port,
          transport: 'tcp',
          localAddress: '127.0.0.41',
          keepAliveMs: 0,
        });
        cleanup.push(() => c.close());
        await c.connect();
        await c.handshake();
        expect((await c.authenticate(`${100 + i}`)).result).toBe(0);
        return c;
      }),
    );
    expect(tcp.length).toBe(65);
    expect(s.establishedClients).toBe(130);
    expect(s.metrics.closed.get('over_capacity_ip')).toBeUndefined();
    expect(s.metrics.closed.get('half_open_evicted')).toBeUndefined();
  });
});

describe('issue 24 item 5: a full server protects proven sessions first', () => {
  /** Unproven UDP sessions (Handshake + Authentification, never listed or proven) from `address`. */
  async function unproven(s: NoxRelayServer, address: string, n: number) {
    const list = [];
    for (let i = 0; i < n; i++) {
      const x = await rawSession(s, address);
      x.send(
        packet(0, {
          type: 'Handshake',
          protocol: 1,
          engine: 'unity',
          platform: 'windows',
          addressCookie: null,
        }),
      );
      await x.reply('Handshake');
      x.send(packet(1, { type: 'Authentification', flags: 0, accessToken: `${i + 50}` }));
      await x.reply('Authentification');
      list.push(x);
    }
    return list;
  }

  it('at maxClients, a proven newcomer (cookie, TCP or alias) evicts the oldest unproven session, never a proven one', async () => {
    const s = await server({ maxClients: 4 });
    const proven = await referenceClient(s, 1, '127.0.0.50');
    await proven.join(0);
    await unproven(s, '127.0.0.51', 3);
    expect(s.establishedClients).toBe(4);
    // A gamewire client (cookie), a TCP player and a reference client each get in by evicting one.
    const c = new NoxRelayClient({
      port: s.port,
      transport: 'udp',
      localAddress: '127.0.0.52',
      keepAliveMs: 0,
    });
    cleanup.push(() => c.close());
    await c.connect();
    await c.handshake();
    expect((await c.authenticate('7')).result).toBe(0);
    const t = new NoxRelayClient({
      port: s.port,
      transport: 'tcp',
      localAddress: '127.0.0.52',
      keepAliveMs: 0,
    });
    cleanup.push(() => t.close());
    await t.connect();
    await t.handshake();
    expect((await t.authenticate('8')).result).toBe(0);
    const r = await referenceClient(s, 9, '127.0.0.53');
    await r.join(0);
    expect(s.metrics.closed.get('evicted')).toBe(3);
    expect(s.establishedClients).toBe(4);
    // Now every session is proven: a newcomer is refused and nobody is evicted.
    const late = new NoxRelayClient({
      port: s.port,
      transport: 'tcp',
      localAddress: '127.0.0.54',
      keepAliveMs: 0,
    });
    cleanup.push(() => late.close());
    await late.connect();
    await until(() => late.isClosed, 3000, 'the refusal');
    expect(s.metrics.closed.get('over_capacity')).toBe(1);
    expect(s.metrics.closed.get('evicted')).toBe(3);
    expect((await proven.latencyNow()).type).toBe('Latency');
  });

  it('an unproven newcomer may take an unproven slot, not a TCP one', async () => {
    const s = await server({ maxClients: 2 });
    const t = new NoxRelayClient({
      port: s.port,
      transport: 'tcp',
      localAddress: '127.0.0.55',
      keepAliveMs: 0,
    });
    cleanup.push(() => t.close());
    await t.connect();
    const [first] = await unproven(s, '127.0.0.56', 1);
    // Full: one TCP connection without a Handshake and one unproven UDP session.
    const [second] = await unproven(s, '127.0.0.57', 1);
    expect(s.metrics.closed.get('evicted')).toBe(1);
    await until(
      () => first!.peer.replies.some((m) => m.type === 'Disconnect'),
      5000,
      'the Disconnect to the evicted',
    );
    await until(
      () => second!.peer.replies.some((m) => m.type === 'Authentification'),
      5000,
      'the Authentification to the newcomer',
    );
    expect(t.isClosed).toBe(false);
  });
});
