/**
 * Issue 24 item 5 for unity-relay: proven games on one address against attackers on many, on a
 * spawned `gamewire serve unity-relay` with default limits (and an API key: the recommended
 * deployment, a game backend allocating for its players). Loopback, bounded in time and traffic;
 * the bounds are stated in docs/security.md.
 *
 * - Before the attack, games allocated by the backend bind from one address (127.0.0.80): 24 pairs
 *   over UDP, 4 over DTLS and 4 over WebSocket; each player then sends its partner a RELAY every
 *   50 ms, numbered and timestamped, for the whole attack.
 * - For 8 s, 1000 attacker addresses (127.1.x.y, in a process of their own) send BINDs for a real
 *   allocation with a bad HMAC and junk datagrams (one of each per address per second), open two
 *   half-open DTLS handshakes each, twice (4000 past the cookie: the handshake table holds 1024),
 *   hold two half-open WebSocket upgrades each (filling the 10 000 default takes more than this
 *   shared machine should spend here: transport-limits.test.ts fills a small one), and ask the
 *   API for allocations with a wrong key (one per address per second).
 * - Meanwhile the proven games keep relaying (loss and latency measured), and new games from
 *   another address (127.0.0.81) keep getting in over UDP, DTLS and WebSocket.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  type ConnectionType,
  RelayApiClient,
  relayServerData,
  UnityRelayClient,
} from '../../../src/protocols/unity-relay/client.js';
import { attackerAddresses, flood, type Served, spawnServe } from '../../helpers/crowd.js';
import { elapse, waitFor } from '../../helpers/wait.js';
import { utpBind } from './utp.js';

const KEY = 'crowd-attack-backend-key-0123';
const CROWD = '127.0.0.80';
const NEWCOMERS = '127.0.0.81';
const ATTACKERS = attackerAddresses(1000);
const ATTACK_MS = 8000;
const TICK_MS = 50;

let served: Served;
let backend: RelayApiClient;
const clients: UnityRelayClient[] = [];

// The hook's limit is longer than spawnServe's own start-up limit, which kills what it started.
beforeAll(async () => {
  served = await spawnServe(['unity-relay', '--port', '0', '--api-key', KEY]);
  backend = new RelayApiClient(`http://127.0.0.1:${served.port('unity-relay', 'http')}`, { apiKey: KEY });
}, 90_000);

afterAll(async () => {
  await Promise.allSettled(clients.splice(0).map((c) => c.close()));
  expect(await served.stop()).toBe(0);
}, 30_000);

/** The port of an endpoint by what `serve` printed about it. */
function endpointPort(what: RegExp): number {
  const e = served.endpoints.find((x) => x.protocol === 'unity-relay' && what.test(x.description));
  if (e === undefined) throw new Error(`no endpoint like ${what} in ${JSON.stringify(served.endpoints)}`);
  return e.port;
}

interface Game {
  transport: ConnectionType;
  host: UnityRelayClient;
  joiner: UnityRelayClient;
}

/** The backend allocates a pair; both bind from `address` over `transport`; the joiner connects. */
async function startGame(transport: ConnectionType, address: string): Promise<Game> {
  const hostAlloc = await backend.allocate(1);
  const joinAlloc = await backend.join(await backend.joinCode(hostAlloc.allocationId));
  const options = { localAddress: address, connectionType: transport };
  const host = new UnityRelayClient(relayServerData(hostAlloc, transport), options);
  const joiner = new UnityRelayClient(relayServerData(joinAlloc, transport), options);
  clients.push(host, joiner);
  for (const c of [host, joiner]) c.on('error', () => {});
  await Promise.all([host.bind(), joiner.bind()]);
  await joiner.connect();
  return { transport, host, joiner };
}

/** Each player of each game sends its partner a numbered, timestamped 64-byte RELAY every tick. */
class Traffic {
  sent = 0;
  received = 0;
  corrupt = 0;
  readonly latencies: number[] = [];
  private timer: NodeJS.Timeout | undefined;
  private seq = 0;

  private readonly games: Game[];

  constructor(games: Game[]) {
    this.games = games;
    for (const g of games)
      for (const c of [g.host, g.joiner])
        c.on('message', (data: Buffer) => {
          if (data.length !== 64 || data.readUInt32BE(12) !== 0x5eed5eed) {
            this.corrupt++;
            return;
          }
          this.received++;
          this.latencies.push(performance.now() - data.readDoubleBE(4));
        });
  }

  start(): void {
    this.timer = setInterval(() => {
      const b = Buffer.alloc(64, 0xa5);
      b.writeUInt32BE(this.seq++, 0);
      b.writeDoubleBE(performance.now(), 4);
      b.writeUInt32BE(0x5eed5eed, 12);
      for (const g of this.games) {
        g.joiner.send(b);
        g.host.send(b, g.joiner.data.allocationId);
        this.sent += 2;
      }
    }, TICK_MS);
  }

  stop(): void {
    clearInterval(this.timer);
  }

  report() {
    const sorted = [...this.latencies].sort((a, b) => a - b);
    const at = (q: number) =>
      Math.round(sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? 0);
    return {
      sent: this.sent,
      received: this.received,
      lossPercent: this.sent === 0 ? 0 : Math.round((1 - this.received / this.sent) * 10_000) / 100,
      corrupt: this.corrupt,
      p50Ms: at(0.5),
      p99Ms: at(0.99),
      maxMs: Math.round(sorted.at(-1) ?? 0),
    };
  }
}

const dropped = (reason: string) =>
  served.metric('gamewire_dropped_total', { protocol: 'unity-relay', reason });
const closed = (reason: string) =>
  served.metric('gamewire_connections_closed_total', { protocol: 'unity-relay', reason });

describe('issue 24 item 5: unity-relay, proven games versus attackers on many addresses', () => {
  it('proven games keep relaying and new games get in while 1000 addresses flood every door', async () => {
    const udpPort = served.port('unity-relay', 'udp');
    const dtlsPort = endpointPort(/DTLS/);
    const wsPort = endpointPort(/WebSocket \(ws\)/);
    const httpPort = served.port('unity-relay', 'http');

    const proven = await Promise.all([
      ...Array.from({ length: 24 }, () => startGame('udp', CROWD)),
      ...Array.from({ length: 4 }, () => startGame('dtls', CROWD)),
      ...Array.from({ length: 4 }, () => startGame('ws', CROWD)),
    ]);
    const traffic = {
      udp: new Traffic(proven.filter((g) => g.transport === 'udp')),
      dtls: new Traffic(proven.filter((g) => g.transport === 'dtls')),
      ws: new Traffic(proven.filter((g) => g.transport === 'ws')),
    };
    for (const t of Object.values(traffic)) t.start();

    // A BIND for a real allocation (the relay checks its connection data, then the HMAC) signed
    // with a wrong key.
    const victim = await backend.allocate(1);
    const badBind = utpBind(
      7,
      Buffer.concat([Buffer.from(victim.connectionData, 'base64'), Buffer.alloc(255)]).subarray(0, 255),
      Buffer.alloc(64, 0x42),
    );
    const attack = flood({
      udpPort,
      tcpPort: wsPort,
      httpPort,
      addresses: ATTACKERS,
      durationMs: ATTACK_MS,
      intervalMs: 1000,
      udpFlood: [badBind.toString('hex'), 'da7200ff00112233445566778899', 'deadbeefdeadbeefdeadbeef'],
      dtlsHalfOpen: { port: dtlsPort, perAddress: 2, rounds: 2, gapMs: 2000 },
      tcpHolds: [{ hex: Buffer.from('GET / HTTP/1.1\r\nHost: relay\r\n').toString('hex'), perAddress: 2 }],
      http: {
        method: 'POST',
        path: '/v1/allocate',
        body: { maxConnections: 1 },
        headers: { authorization: 'Bearer not-the-backend-key-0000' },
        overlap: true,
      },
    });

    // New games during the attack, one every 500 ms from another address, over each transport
    // in turn: the time from allocation to connected counts.
    const newcomers: Promise<{ transport: ConnectionType; ms: number }>[] = [];
    const transports: ConnectionType[] = ['udp', 'dtls', 'ws'];
    for (let i = 0; i < 12; i++) {
      await elapse(500, 'arrivals: a new game every 500 ms while the attack runs');
      const transport = transports[i % 3]!;
      newcomers.push(
        (async () => {
          const t0 = performance.now();
          await startGame(transport, NEWCOMERS);
          return { transport, ms: performance.now() - t0 };
        })(),
      );
    }
    const a = await attack;
    for (const t of Object.values(traffic)) t.stop();
    const joined = await Promise.all(newcomers);
    // Deliveries still on their way: wait until every count stops growing.
    let last = -1;
    await waitFor(
      () => {
        const now = Object.values(traffic).reduce((n, t) => n + t.received, 0);
        const settled = now === last;
        last = now;
        return settled;
      },
      { what: 'deliveries to settle', timeoutMs: 15_000, intervalMs: 500 },
    );

    const report = {
      plane: served.endpoints.find((e) => e.port === udpPort)?.description,
      proven: {
        udp: traffic.udp.report(),
        dtls: traffic.dtls.report(),
        ws: traffic.ws.report(),
      },
      newcomersMs: joined.map((j) => `${j.transport} ${Math.round(j.ms)}`),
      badHmac: await dropped('bad_hmac'),
      hmacRateLimited: await dropped('hmac_rate_limited'),
      dtlsEvicted: await dropped('dtls_handshake-evicted'),
      dtlsLimit: await dropped('dtls_handshake-limit'),
      wsEvicted: await closed('ws_evicted'),
      wsCap: await dropped('ws_connection_cap'),
      attack: { ...a, perAddress: undefined },
    };
    console.log(JSON.stringify(report));

    // The proven games kept relaying, every byte intact. UDP↔UDP RELAYs never touch JavaScript
    // (the native data plane) nor do DTLS records once the association is up; their latency here
    // is mostly this test process's own timers on a loaded machine. WebSocket relaying shares the
    // relay's event loop with the attack's handshakes, TCP accepts and API calls: it lags, but
    // loses nothing.
    // On the JavaScript data plane (the fallback, and the suite's second run) UDP and DTLS records
    // queue behind the attack in the same event loop: nothing is lost, but everything waits
    // (3–5 s measured on the loaded machine).
    const native = /native data plane/.test(
      served.endpoints.find((e) => e.port === udpPort)?.description ?? '',
    );
    for (const t of [report.proven.udp, report.proven.dtls]) {
      expect(t.corrupt).toBe(0);
      expect(t.lossPercent).toBeLessThanOrEqual(native ? 1 : 5);
      expect(t.p99Ms).toBeLessThan(native ? 1000 : 15_000);
    }
    expect(report.proven.ws.corrupt).toBe(0);
    expect(report.proven.ws.lossPercent).toBe(0);
    expect(report.proven.ws.p99Ms).toBeLessThan(native ? 5000 : 15_000);
    // Every new game got in during the attack.
    expect(joined).toHaveLength(12);
    expect(joined.every((j) => j.ms < 45_000)).toBe(true);
    // The attack was what it says.
    expect(a.rounds).toBeGreaterThanOrEqual(1);
    expect(a.tcpConnected).toBeGreaterThanOrEqual(1900);
    expect(a.dtlsServerHellos).toBeGreaterThanOrEqual(1500);
    expect(report.badHmac).toBeGreaterThanOrEqual(ATTACKERS.length);
    expect(report.dtlsEvicted).toBeGreaterThan(0);
    expect(a.addressesOver3x).toBe(0);
  }, 120_000);
});
