/**
 * The relay end to end: real UDP sockets on 127.0.0.1, real HTTP through fastify, and a scripted
 * client that behaves like Unity Transport 2.x (./utp.ts), independent of gamewire's codec.
 */
import { afterEach, describe, expect, it } from 'vitest';
import {
  startUnityRelay,
  type UnityRelayInstance,
  type UnityRelayOptions,
} from '../../../src/protocols/unity-relay/index.js';
import { elapse } from '../../helpers/wait.js';
import { unityTransportScenario } from './scenario.js';
import {
  type AllocationJson,
  Peer,
  UtpDriver,
  utpBind,
  utpClose,
  utpConnectRequest,
  utpDisconnect,
  utpHandshake,
  utpPing,
  utpRelay,
} from './utp.js';

let server: UnityRelayInstance | undefined;
const drivers: UtpDriver[] = [];
const peers: Peer[] = [];

afterEach(async () => {
  await Promise.all(drivers.splice(0).map((d) => d.close()));
  await Promise.all(peers.splice(0).map((p) => p.close()));
  await server?.close();
  server = undefined;
});

async function start(options: UnityRelayOptions = {}): Promise<UnityRelayInstance> {
  server = await startUnityRelay({ host: '127.0.0.1', port: 0, apiPort: 0, ...options });
  return server;
}

async function post(path: string, body: unknown): Promise<{ status: number; json: any }> {
  const res = await fetch(`${server!.apiUrl}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: res.status, json: await res.json() };
}

async function allocate(maxConnections = 4): Promise<AllocationJson> {
  const r = await post('/v1/allocate', { maxConnections });
  expect(r.status).toBe(201);
  return r.json.data.allocation;
}

async function joinOf(host: AllocationJson): Promise<AllocationJson> {
  const code = await post('/v1/joincode', { allocationId: host.allocationId });
  expect(code.status).toBe(201);
  const joined = await post('/v1/join', { joinCode: code.json.data.joinCode });
  expect(joined.status).toBe(200);
  return joined.json.data.allocation;
}

async function driver(allocation: AllocationJson): Promise<UtpDriver> {
  const d = await UtpDriver.create(allocation);
  drivers.push(d);
  return d;
}

async function rawPeer(): Promise<Peer> {
  const p = await Peer.open('127.0.0.1', server!.udpPort);
  peers.push(p);
  return p;
}

async function boundHost(maxConnections = 4): Promise<UtpDriver> {
  const h = await driver(await allocate(maxConnections));
  expect(await h.bind()).toBe(true);
  return h;
}

async function connectedClient(host: UtpDriver): Promise<UtpDriver> {
  const c = await driver(await joinOf(host.allocation));
  expect(await c.bind()).toBe(true);
  const accepted = await c.connect();
  expect(accepted?.[3]).toBe(6);
  return c;
}

/**
 * For "nothing arrives" checks on a peer that bound (and connected): bind() and connect() resend
 * every 100 ms until answered, as Unity Transport does, so on a loaded machine a late answer to a
 * resent BIND (BIND_RECEIVED, 1) or CONNECT_REQUEST (ACCEPTED, 6) may still arrive. It says nothing
 * about what the check is about; anything else fails it.
 */
const notLateBindAnswer = (m: Buffer) => m[3] !== 1;
const notLateHandshakeAnswer = (m: Buffer) => m[3] !== 1 && m[3] !== 6;

const errorCode = (b: Buffer | undefined) =>
  b !== undefined && b.length === 21 && b[3] === 12 ? b[20] : undefined;

describe('unity-relay: what a Unity Transport 2.x client does ("Done when")', () => {
  it('the scripted "Done when" run', async () => {
    await start();
    await unityTransportScenario(server!.apiUrl);
  });

  it('allocate, join code, join; bind a host and two clients; connect; relay at 1/100/1362 bytes; ping', async () => {
    await start();
    const hostAlloc = await allocate(4);
    const host = await driver(hostAlloc);
    expect(await host.bind()).toBe(true);
    const c1 = await connectedClient(host);
    const c2 = await connectedClient(host);

    // ACCEPTED: From = host, To = requester, 36 bytes.
    expect(c1.hostId!.equals(host.id)).toBe(true);
    expect(c2.hostId!.equals(host.id)).toBe(true);

    // UTP handshake inside RELAY: the host learns of each client from its first RELAY.
    for (const c of [c1, c2]) {
      const sent = c.relay(host.id, utpHandshake(1, c.token));
      const got = await host.peer.nextOfType(10);
      expect(got?.equals(sent)).toBe(true); // forwarded unchanged
      const reply = host.relay(c.id, utpHandshake(2, c.token));
      expect((await c.peer.nextOfType(10))?.equals(reply)).toBe(true);
    }

    for (const size of [1, 100, 1362]) {
      for (const c of [c1, c2]) {
        const payload = Buffer.alloc(size, size & 0xff);
        const up = c.relay(host.id, payload);
        const atHost = await host.peer.nextOfType(10);
        expect(atHost?.equals(up)).toBe(true);
        expect(atHost!.readUInt16BE(36)).toBe(size);
        const down = host.relay(c.id, Buffer.alloc(size, 0xab));
        expect((await c.peer.nextOfType(10))?.equals(down)).toBe(true);
      }
    }
    // The two clients are not connected to each other: ERROR 5.
    c1.relay(c2.id, Buffer.from('hi'));
    expect(errorCode(await c1.peer.nextOfType(12))).toBe(5);
    expect(await c2.peer.nextOfType(10, 150)).toBeUndefined();

    // PING is echoed as received.
    for (const d of [host, c1, c2]) {
      const ping = utpPing(d.id);
      d.peer.send(ping);
      expect((await d.peer.nextOfType(2))?.equals(ping)).toBe(true);
    }
    expect(server!.metrics.dropped.get('internal_error')).toBeUndefined();
  });

  it('ERROR codes: self-connect 6, unbound sender 3, unconnected pair 5; a bad HMAC gets no reply', async () => {
    await start();
    const host = await boundHost();
    // Self-connect: the host asks to connect to its own connection data.
    host.peer.send(utpConnectRequest(host.id, host.connectionData));
    const self = await host.peer.nextOfType(12);
    expect(errorCode(self)).toBe(6);
    expect(self!.subarray(4, 20).equals(host.id)).toBe(true);

    // Unbound sender: a client that joined but never bound sends RELAY / PING / CONNECT_REQUEST.
    const lurker = await driver(await joinOf(host.allocation));
    lurker.relay(host.id, Buffer.from('x'));
    expect(errorCode(await lurker.peer.nextOfType(12))).toBe(3);
    lurker.peer.send(utpConnectRequest(lurker.id, lurker.hostConnectionData));
    expect(errorCode(await lurker.peer.nextOfType(12))).toBe(3);
    // Someone else's bound allocation, from another address: ERROR 3 too, and nothing forwarded.
    const spoofer = await rawPeer();
    const c = await connectedClient(host);
    spoofer.send(utpRelay(c.id, host.id, Buffer.from('spoof')));
    expect(errorCode(await spoofer.nextOfType(12))).toBe(3);
    expect(await host.peer.nextOfType(10, 150)).toBeUndefined();

    // Unconnected pair: the host relays to a client that never connected to it.
    const other = await driver(await joinOf(host.allocation));
    expect(await other.bind()).toBe(true);
    host.relay(other.id, Buffer.from('?'));
    expect(errorCode(await host.peer.nextOfType(12))).toBe(5);

    // A bad HMAC: silence, and the allocation stays unbound.
    const fresh = await driver(await joinOf(host.allocation));
    const bad = fresh.bindMessage();
    bad[294] ^= 1;
    fresh.peer.send(bad);
    expect(await fresh.peer.next(() => true, 300)).toBeUndefined();
    expect(server!.metrics.dropped.get('bad_hmac')).toBe(1);
    // A BIND signed with a big-endian nonce (the public doc's reading) is a bad HMAC as well.
    const be = utpBind(0x0100, fresh.connectionData, fresh.key);
    be.writeUInt16BE(0x0100, 5);
    fresh.peer.send(be);
    expect(await fresh.peer.next(() => true, 200)).toBeUndefined();
    // The genuine BIND works.
    expect(await fresh.bind()).toBe(true);
  });

  it('CONNECT_REQUEST: ACCEPTED again on every retry, only to the requester; unknown target ERROR 4', async () => {
    await start();
    const host = await boundHost();
    const c = await connectedClient(host);
    c.peer.send(utpConnectRequest(c.id, c.hostConnectionData));
    const again = await c.peer.nextOfType(6);
    expect(again?.length).toBe(36);
    expect(again!.subarray(4, 20).equals(host.id)).toBe(true);
    expect(again!.subarray(20, 36).equals(c.id)).toBe(true);
    expect(await host.peer.next(notLateBindAnswer, 150)).toBeUndefined(); // the host is never told

    const garbage = Buffer.alloc(255, 7);
    c.peer.send(utpConnectRequest(c.id, garbage));
    expect(errorCode(await c.peer.nextOfType(12))).toBe(4);
  });

  it('REJECTED when the host has reached max connections', async () => {
    await start();
    const host = await boundHost(1);
    await connectedClient(host);
    const late = await driver(await joinOf(host.allocation));
    expect(await late.bind()).toBe(true);
    const reply = await late.connect();
    expect(reply?.[3]).toBe(8);
    expect(reply?.length).toBe(36);
    expect(reply!.subarray(4, 20).equals(host.id)).toBe(true);
  });
});

describe('unity-relay: BIND nonce rules', () => {
  it('the same address may repeat its nonce; a new address needs a larger one', async () => {
    await start();
    const host = await boundHost(); // bound with nonce 0
    // Same address, same nonce again (UTP re-BIND on silence): accepted.
    host.peer.send(utpBind(0, host.connectionData, host.key));
    expect((await host.peer.nextOfType(1))?.toString('hex')).toBe('da720001');
    // Same address, lower nonce than the highest seen: still accepted.
    host.peer.send(utpBind(5, host.connectionData, host.key));
    expect(await host.peer.nextOfType(1)).toBeDefined();
    host.peer.send(utpBind(2, host.connectionData, host.key));
    expect(await host.peer.nextOfType(1)).toBeDefined();

    // A new address replaying an old nonce: dropped, binding unchanged.
    const thief = await rawPeer();
    thief.send(utpBind(5, host.connectionData, host.key));
    expect(await thief.next(() => true, 200)).toBeUndefined();
    expect(server!.metrics.dropped.get('stale_nonce')).toBe(1);
    const ping = utpPing(host.id);
    host.peer.send(ping);
    expect(await host.peer.nextOfType(2)).toBeDefined();

    // A new address with a larger nonce (UTP after ERROR 3 or a new driver): moves the binding.
    const moved = await rawPeer();
    moved.send(utpBind(6, host.connectionData, host.key));
    expect((await moved.nextOfType(1))?.length).toBe(4);
    host.peer.send(ping);
    expect(errorCode(await host.peer.nextOfType(12))).toBe(3);
    moved.send(ping);
    expect(await moved.nextOfType(2)).toBeDefined();
  });

  it('nonces compare wrap-aware (RFC 1982 serial numbers over u16): 65535 → 0 is an increment', async () => {
    await start();
    const h = await driver(await allocate());
    // Each BIND from a new address; `ms` is how long to wait for BIND_RECEIVED.
    const bindFrom = async (nonce: number, ms = 1000): Promise<boolean> => {
      const p = await rawPeer();
      p.send(utpBind(nonce, h.connectionData, h.key));
      return (await p.nextOfType(1, ms)) !== undefined;
    };
    expect(await bindFrom(0xfffe)).toBe(true); // first BIND: any nonce
    expect(await bindFrom(0xffff)).toBe(true);
    expect(await bindFrom(0)).toBe(true); // the client's (nonce + 1) & 0xffff
    expect(server!.store.byGuid(h.allocation.allocationId)!.nonce).toBe(0);
    expect(await bindFrom(0xffff, 300)).toBe(false); // behind 0: a replay
    expect(await bindFrom(0x8000, 300)).toBe(false); // exactly half the space away: not newer
    expect(await bindFrom(1)).toBe(true);
    expect(server!.metrics.dropped.get('stale_nonce')).toBe(2);
  });

  it('a fresh UTP driver retries BIND with nonce 0, 1, 2 … and the relay accepts the first it sees', async () => {
    await start();
    const h = await driver(await allocate());
    // Lost BINDs: the first two never reach the relay (sent elsewhere), the third does.
    h.nonce = 2;
    expect(await h.bind()).toBe(true);
    expect(server!.store.byGuid(h.allocation.allocationId)!.nonce).toBe(2);
  });
});

describe('unity-relay: timeouts', () => {
  it('idle allocations expire; a host alone gets longer; a BIND for an expired allocation gets ERROR 4', async () => {
    // Timers are scaled so that keep-alives every 60 ms stay far inside them even under load.
    await start({ idleTimeoutMs: 600, hostAloneTimeoutMs: 1500 });
    const host = await boundHost();
    const lonely = await boundHost();
    const c = await connectedClient(host);
    // Keep the connected pair alive with PINGs while the timers run.
    let clientAlive = true;
    const keepAlive = setInterval(() => {
      host.peer.send(utpPing(host.id));
      if (clientAlive) c.peer.send(utpPing(c.id));
    }, 60);
    try {
      await elapse(1000, 'past the 600 ms idle timeout');
      // The lone host outlived the 600 ms idle timeout.
      lonely.peer.send(utpPing(lonely.id));
      expect(await lonely.peer.nextOfType(2)).toBeDefined();
      await elapse(1700, 'past the 1500 ms host-alone timeout');
      // ...but not the 1500 ms host-alone timeout: PINGs now go unanswered (the real relay is silent).
      lonely.peer.inbox.length = 0;
      lonely.peer.send(utpPing(lonely.id));
      expect(await lonely.peer.nextOfType(2, 200)).toBeUndefined();
      lonely.peer.send(lonely.bindMessage());
      const e = await lonely.peer.nextOfType(12);
      expect(errorCode(e)).toBe(4);
      expect(e!.subarray(4, 20).equals(lonely.id)).toBe(true);
      // The pair that kept pinging is still connected.
      host.peer.inbox.length = 0;
      const m = c.relay(host.id, Buffer.from('still here'));
      expect((await host.peer.nextOfType(10))?.equals(m)).toBe(true);
      // Once the client goes quiet it expires, and the host is told with a DISCONNECT from it.
      clientAlive = false;
      const disc = await host.peer.nextOfType(9, 3000);
      expect(disc?.subarray(4, 20).equals(c.id)).toBe(true);
      expect(disc?.subarray(20, 36).equals(host.id)).toBe(true);
      expect(server!.metrics.closed.get('idle_timeout')).toBeGreaterThanOrEqual(2);
    } finally {
      clearInterval(keepAlive);
    }
  });
});

describe('unity-relay: DISCONNECT and CLOSE', () => {
  it('DISCONNECT is forwarded unchanged and removes the link', async () => {
    await start();
    const host = await boundHost();
    const c = await connectedClient(host);
    const d = utpDisconnect(c.id, host.id);
    c.peer.send(d);
    expect((await host.peer.nextOfType(9))?.equals(d)).toBe(true);
    c.relay(host.id, Buffer.from('after'));
    expect(errorCode(await c.peer.nextOfType(12))).toBe(5);
    // It can connect again.
    expect((await c.connect())?.[3]).toBe(6);
  });

  it('CLOSE unbinds: peers get a DISCONNECT, the binding and links are gone, a later BIND binds again', async () => {
    await start();
    const host = await boundHost();
    const c = await connectedClient(host);
    c.peer.send(utpClose(c.id));
    const disc = await host.peer.nextOfType(9);
    expect(disc?.subarray(4, 20).equals(c.id)).toBe(true);
    expect(server!.metrics.closed.get('close')).toBe(1);
    expect(server!.store.byGuid(c.allocation.allocationId)!.state).toBe('allocated');
    // No longer bound: a PING is not echoed; it gets ERROR 3 (allocated, not bound from here).
    c.peer.send(utpPing(c.id));
    expect(errorCode(await c.peer.nextOfType(12))).toBe(3);
    expect(c.peer.inbox.filter((b) => b[3] === 2)).toHaveLength(0);
    // The link is gone too: the host's RELAY to it gets ERROR 5.
    host.relay(c.id, Buffer.from('?'));
    expect(errorCode(await host.peer.nextOfType(12))).toBe(5);
    // Nonce rules as usual: with no binding, a replayed old nonce is stale...
    c.peer.send(utpBind(0, c.connectionData, c.key));
    expect(await c.peer.nextOfType(1, 200)).toBeUndefined();
    expect(server!.metrics.dropped.get('stale_nonce')).toBe(1);
    // ...and the next one (UTP increments after every BIND sent) binds again: exactly DA 72 00 01.
    c.peer.send(c.bindMessage());
    expect((await c.peer.nextOfType(1))?.toString('hex')).toBe('da720001');
    expect(server!.store.byGuid(c.allocation.allocationId)!.state).toBe('bound');
    // It can connect and relay again.
    expect((await c.connect())?.[3]).toBe(6);
    const m = c.relay(host.id, Buffer.from('back'));
    expect((await host.peer.nextOfType(10))?.equals(m)).toBe(true);
  });

  it('after CLOSE a new address can bind the allocation with a newer nonce', async () => {
    await start();
    const host = await boundHost(); // nonce 0 accepted
    host.peer.send(utpClose(host.id));
    host.peer.send(utpPing(host.id));
    expect(errorCode(await host.peer.nextOfType(12))).toBe(3); // CLOSE took effect
    const moved = await rawPeer();
    moved.send(utpBind(1, host.connectionData, host.key));
    expect((await moved.nextOfType(1))?.toString('hex')).toBe('da720001');
    moved.send(utpPing(host.id));
    expect(await moved.nextOfType(2)).toBeDefined();
    expect(server!.metrics.open).toBe(1);
  });
});

describe('unity-relay: hardening', () => {
  it('drops RELAY whose length field does not match, and datagrams over the size limit', async () => {
    await start({ maxDatagramBytes: 600 });
    const host = await boundHost();
    const c = await connectedClient(host);
    const good = utpRelay(c.id, host.id, Buffer.alloc(10));
    c.peer.send(Buffer.concat([good, Buffer.from([0])])); // one byte more than declared
    const short = Buffer.from(good);
    short.writeUInt16BE(11, 36); // declares one byte more than present
    c.peer.send(short);
    c.peer.send(utpRelay(c.id, host.id, Buffer.alloc(600 - 38 + 1))); // 601 bytes
    expect(await host.peer.next(notLateBindAnswer, 200)).toBeUndefined();
    expect(await c.peer.next(notLateHandshakeAnswer, 50)).toBeUndefined();
    expect(server!.metrics.dropped.get('bad_length')).toBe(2);
    expect(server!.metrics.dropped.get('too_large')).toBe(1);
    c.peer.send(utpRelay(c.id, host.id, Buffer.alloc(562))); // exactly 600
    expect((await host.peer.nextOfType(10))?.length).toBe(600);
  });

  it('accepts datagrams up to 1472 bytes by default', async () => {
    await start();
    const host = await boundHost();
    const c = await connectedClient(host);
    const max = c.relay(host.id, Buffer.alloc(1472 - 38, 1));
    expect((await host.peer.nextOfType(10))?.equals(max)).toBe(true);
    c.relay(host.id, Buffer.alloc(1473 - 38, 1));
    expect(await host.peer.next(notLateBindAnswer, 200)).toBeUndefined();
    expect(server!.metrics.dropped.get('too_large')).toBe(1);
  });

  it('rate-limits ERROR replies per source', async () => {
    await start({ errorRatePerSecond: 2, errorBurst: 3 });
    const host = await boundHost();
    const p = await rawPeer();
    const bad = utpRelay(host.id, host.id, Buffer.alloc(4)); // host's id from the wrong address: ERROR 3
    for (let i = 0; i < 40; i++) p.send(bad);
    const got = await p.drain(300);
    expect(got.length).toBeGreaterThanOrEqual(1);
    expect(got.length).toBeLessThanOrEqual(4);
    expect(server!.metrics.counters.get('error_replies_rate_limited')).toBeGreaterThanOrEqual(30);
    expect(server!.metrics.dropped.get('not_bound_from_address')).toBe(40);
  });

  it('answers no datagram from an unknown source with more bytes than it sent', async () => {
    await start();
    await boundHost();
    const p = await rawPeer();
    const probes = [
      Buffer.from([0xda, 0x72, 0, 2]),
      Buffer.from([0xda, 0x72, 0, 3, 1]),
      utpPing(Buffer.alloc(16, 9)),
      utpClose(Buffer.alloc(16)),
      utpConnectRequest(Buffer.alloc(16, 1), Buffer.alloc(255)),
      utpRelay(Buffer.alloc(16, 1), Buffer.alloc(16, 2), Buffer.alloc(0)),
      utpBind(1, Buffer.alloc(255), Buffer.alloc(64)),
    ];
    for (const probe of probes) {
      p.send(probe);
      const reply = await p.next(() => true, 100);
      // Unknown allocations get silence (no reflection at all).
      expect(reply).toBeUndefined();
    }
  });
});
