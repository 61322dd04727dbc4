/**
 * Issue 24 item 4 for unity-relay: a crowd on one address, on a spawned `gamewire serve
 * unity-relay` with default limits (only an API key, as the recommended deployment has).
 *
 * - A game backend with the key allocates 64 host/join pairs; their 128 game sockets all run on
 *   one address (127.0.0.70, one port each) and bind over UDP at once, as Unity Transport does
 *   (BIND every second until answered), connect, and relay both ways: every socket binds, every
 *   joiner connects, every RELAY arrives with its bytes intact.
 * - Smaller crowds do the same over DTLS (32 pairs: 64 handshakes from one address at once, the
 *   per-address handshake cap) and WebSocket (32 pairs).
 * - Players behind one address that allocate for themselves (a relay without a key) get the
 *   documented allowance: a burst of 20 allocations, then 429, then more as it refills; with a
 *   key, the backend allocates past every per-address allowance from one address.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type ConnectionType,
  RelayApiClient,
  relayServerData,
  UnityRelayClient,
} from '../../../src/protocols/unity-relay/client.js';
import { RelayApiError } from '../../../src/protocols/unity-relay/errors.js';
import { type Served, spawnServe } from '../../helpers/crowd.js';
import { elapse, waitFor } from '../../helpers/wait.js';

const KEY = 'crowd-backend-key-0123456789';
let served: Served;
let apiUrl: string;
const clients: UnityRelayClient[] = [];

// The hook's limit is longer than spawnServe's own start-up limit, which kills what it started.
beforeAll(async () => {
  served = await spawnServe(['unity-relay', '--port', '0', '--api-key', KEY]);
  apiUrl = `http://127.0.0.1:${served.port('unity-relay', 'http')}`;
}, 90_000);

afterAll(async () => {
  await Promise.allSettled(clients.splice(0).map((c) => c.close()));
  expect(await served.stop()).toBe(0);
}, 30_000);

interface Pair {
  host: UnityRelayClient;
  joiner: UnityRelayClient;
}

/** The backend allocates a host and a joiner (allocate, join code, join). */
async function allocatePair(api: RelayApiClient) {
  const host = await api.allocate(1);
  const joined = await api.join(await api.joinCode(host.allocationId));
  return { host, joined };
}

/** Binds both players from `address` over `transport` and connects the joiner to the host. */
async function playPair(
  allocation: Awaited<ReturnType<typeof allocatePair>>,
  transport: ConnectionType,
  address: string,
): Promise<Pair> {
  const options = { localAddress: address, connectionType: transport, tls: { rejectUnauthorized: false } };
  const host = new UnityRelayClient(relayServerData(allocation.host, transport), options);
  const joiner = new UnityRelayClient(relayServerData(allocation.joined, transport), options);
  clients.push(host, joiner);
  for (const c of [host, joiner]) c.on('error', () => {});
  await Promise.all([host.bind(), joiner.bind()]);
  await joiner.connect();
  return { host, joiner };
}

/** The bytes of message `seq` from `sender`: a pattern no other message shares. */
function content(sender: number, seq: number, size: number): Buffer {
  const b = Buffer.alloc(size);
  b.writeUInt16BE(sender, 0);
  b.writeUInt16BE(seq, 2);
  for (let i = 4; i < size; i++) b[i] = (sender * 31 + seq * 7 + i) & 0xff;
  return b;
}

/**
 * Each player sends `count` RELAYs to its partner (joiner → host, host → joiner), `spacingMs`
 * apart; resolves once every one has arrived, and checks each byte for byte.
 */
async function relayBothWays(pairs: Pair[], count: number, size: number, spacingMs: number) {
  const received = new Map<UnityRelayClient, Buffer[]>();
  const players = pairs.flatMap((p) => [p.host, p.joiner]);
  for (const c of players) {
    const got: Buffer[] = [];
    received.set(c, got);
    c.on('message', (data: Buffer) => got.push(Buffer.from(data)));
  }
  for (let seq = 0; seq < count; seq++) {
    pairs.forEach((p, i) => {
      p.joiner.send(content(2 * i + 1, seq, size));
      p.host.send(content(2 * i, seq, size), p.joiner.data.allocationId);
    });
    await elapse(spacingMs, 'pacing: each player sends at its game tick, not all at once');
  }
  const total = () => players.reduce((n, c) => n + received.get(c)!.length, 0);
  await waitFor(() => total() >= players.length * count, {
    what: () => `${players.length * count} RELAYs (got ${total()})`,
    timeoutMs: 15_000,
  });
  pairs.forEach((p, i) => {
    // What each player received is exactly what its partner sent, in full.
    const fromJoiner = received.get(p.host)!.map((b) => b.toString('hex'));
    const fromHost = received.get(p.joiner)!.map((b) => b.toString('hex'));
    const expected = (sender: number) =>
      Array.from({ length: count }, (_, seq) => content(sender, seq, size).toString('hex'));
    expect(fromJoiner.sort()).toEqual(expected(2 * i + 1).sort());
    expect(fromHost.sort()).toEqual(expected(2 * i).sort());
  });
  return total();
}

/** A crowd of `pairs` games on `address` over `transport`: all bound, connected, relayed intact. */
async function crowd(transport: ConnectionType, address: string, pairs: number) {
  const backend = new RelayApiClient(apiUrl, { apiKey: KEY });
  const allocations = await Promise.all(Array.from({ length: pairs }, () => allocatePair(backend)));
  const started = performance.now();
  const games = await Promise.all(allocations.map((a) => playPair(a, transport, address)));
  const joinSeconds = (performance.now() - started) / 1000;
  expect(games.every((g) => g.host.state === 'bound' && g.joiner.state === 'bound')).toBe(true);
  expect(games.every((g) => g.joiner.hostId?.equals(g.host.data.allocationId) === true)).toBe(true);
  const delivered = await relayBothWays(games, 20, 200, 25);
  console.log(JSON.stringify({ transport, sockets: 2 * pairs, joinSeconds, delivered }));
  await Promise.all(
    games
      .flatMap((g) => [g.host, g.joiner])
      .map(async (c) => {
        await c.close();
        clients.splice(clients.indexOf(c), 1);
      }),
  );
}

describe('issue 24 item 4: unity-relay, a crowd on one address', () => {
  it('128 UDP game sockets on one address, allocated by the keyed backend, all bind, connect and relay intact', async () => {
    await crowd('udp', '127.0.0.70', 64);
    // 128 BINDs and 64 CONNECT_REQUESTs from one address at once: each is paid by its own
    // allocation's budget, none by the address's (which only pays for failures), so none waited
    // for a retry.
    for (const reason of ['bad_hmac', 'hmac_rate_limited', 'allocation_hmac_rate_limited'])
      expect(await served.metric('gamewire_dropped_total', { protocol: 'unity-relay', reason }), reason).toBe(
        0,
      );
  }, 60_000);

  it('64 DTLS game sockets on one address all handshake, bind and relay intact', async () => {
    await crowd('dtls', '127.0.0.71', 32);
    // The per-address handshake cap (64) holds the whole crowd: nobody waited for a resend.
    expect(
      await served.metric('gamewire_dropped_total', {
        protocol: 'unity-relay',
        reason: 'dtls_handshake-limit-per-ip',
      }),
    ).toBe(0);
  }, 60_000);

  it('64 WebSocket game sockets on one address all bind and relay intact', async () => {
    await crowd('ws', '127.0.0.72', 32);
  }, 60_000);

  it('players allocating for themselves behind one address (no API key) get a burst of 20, then 429, then more as it refills', async () => {
    // A relay without a key: every caller allocates for itself, as players do in a game without
    // a backend, and every per-address limit applies.
    const open = await spawnServe(['unity-relay', '--port', '0']);
    try {
      const url = `http://127.0.0.1:${open.port('unity-relay', 'http')}`;
      const players = new RelayApiClient(url, { localAddress: '127.0.0.73' });
      // 10 hosts and 10 joiners: 20 allocations in one burst, all served.
      const hosts = await Promise.all(Array.from({ length: 10 }, () => players.allocate(1)));
      const codes = await Promise.all(hosts.map((h) => players.joinCode(h.allocationId)));
      await Promise.all(codes.map((c) => players.join(c)));
      // The 21st in the same instant waits: 429.
      const refused = await players.allocate(1).catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(RelayApiError);
      expect((refused as RelayApiError).status).toBe(429);
      // Players behind another address are not held back by this one's allowance.
      const others = new RelayApiClient(url, { localAddress: '127.0.0.74' });
      await Promise.all(Array.from({ length: 20 }, () => others.allocate(1)));
      // The allowance refills at 120 a minute (one every 0.5 s): the first players get in again.
      const again = await waitFor(
        () =>
          players.allocate(1).then(
            (a) => a,
            (e: unknown) => {
              if (e instanceof RelayApiError && e.status === 429) return undefined;
              throw e;
            },
          ),
        { what: 'an allocation once the allowance refilled', timeoutMs: 5000, intervalMs: 250 },
      );
      expect(again.allocationId).toMatch(/-/);
    } finally {
      expect(await open.stop()).toBe(0);
    }
  }, 90_000);

  it('with the key configured, the backend allocates past every per-address allowance and callers without it get 401', async () => {
    const address = '127.0.0.75';
    const backend = new RelayApiClient(apiUrl, { apiKey: KEY, localAddress: address });
    // 150 live allocations from one address in one burst: past the unkeyed burst (20) and live cap (100).
    const many = await Promise.all(Array.from({ length: 150 }, () => backend.allocate(1)));
    expect(new Set(many.map((a) => a.allocationId)).size).toBe(150);
    const anonymous = await new RelayApiClient(apiUrl, { localAddress: address })
      .allocate(1)
      .catch((e: unknown) => e);
    expect((anonymous as RelayApiError).status).toBe(401);
  }, 30_000);
});
