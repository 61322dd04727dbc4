/**
 * What a hostile internet does to the relay and its API (issue 17, items 7 and 10), reproduced at
 * a bounded scale over real sockets, with a legitimate client from a second address (127.0.0.2)
 * that must still be served.
 */
import dgram from 'node:dgram';
import http from 'node:http';
import net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import {
  startUnityRelay,
  type UnityRelayInstance,
  type UnityRelayOptions,
} from '../../../src/protocols/unity-relay/index.js';
import { elapse, waitFor } from '../../helpers/wait.js';
import { type AllocationJson, UtpDriver, utpBind, utpRelay } from './utp.js';

let server: UnityRelayInstance | undefined;
const sockets: dgram.Socket[] = [];
const drivers: UtpDriver[] = [];
let agent: http.Agent | undefined;

afterEach(async () => {
  for (const s of sockets.splice(0)) s.close();
  await Promise.all(drivers.splice(0).map((d) => d.close()));
  agent?.destroy();
  agent = undefined;
  await server?.close();
  server = undefined;
});

async function start(options: UnityRelayOptions = {}): Promise<UnityRelayInstance> {
  server = await startUnityRelay({ host: '127.0.0.1', port: 0, apiPort: 0, ...options });
  return server;
}

/** One HTTP request over a real socket, from `localAddress` (127.0.0.1 by default). */
function request(
  method: string,
  pathName: string,
  options: { body?: unknown; localAddress?: string; headers?: Record<string, string> } = {},
): Promise<{ status: number; json: any }> {
  agent ??= new http.Agent({ keepAlive: true, maxSockets: 16 });
  const body = options.body === undefined ? undefined : JSON.stringify(options.body);
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: '127.0.0.1',
        port: server!.apiPort,
        method,
        path: pathName,
        // A second address needs its own connection (the agent pools by local address too).
        ...(options.localAddress !== undefined
          ? { localAddress: options.localAddress, agent: false }
          : { agent }),
        headers: {
          ...(body !== undefined ? { 'content-type': 'application/json' } : {}),
          ...options.headers,
        },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString();
          let json: unknown;
          try {
            json = JSON.parse(text);
          } catch {
            json = text;
          }
          resolve({ status: res.statusCode ?? 0, json });
        });
      },
    );
    req.on('error', reject);
    if (body !== undefined) req.write(body);
    req.end();
  });
}

/**
 * GETs `count` paths (`pathOf(i)`) over `connections` keep-alive sockets, pipelined in batches
 * (a flood spends nothing on waiting for each reply), and counts the replies by status. Reads
 * each reply's head and skips its body by its Content-Length.
 */
async function pipelinedGets(
  port: number,
  count: number,
  pathOf: (i: number) => string,
  connections = 16,
  batch = 200,
): Promise<Map<number, number>> {
  const statuses = new Map<number, number>();
  let next = 0;
  const one = async (): Promise<void> => {
    const socket = net.connect(port, '127.0.0.1');
    await new Promise<void>((resolve, reject) => {
      socket.once('connect', resolve);
      socket.once('error', reject);
    });
    let buffered: Buffer = Buffer.alloc(0);
    let waiting: (() => void) | undefined;
    let failed: Error | undefined;
    socket.on('data', (d: Buffer) => {
      buffered = buffered.length === 0 ? d : Buffer.concat([buffered, d]);
      waiting?.();
    });
    socket.on('error', (err) => {
      failed = err;
      waiting?.();
    });
    socket.on('close', () => {
      failed ??= new Error('the server closed the connection');
      waiting?.();
    });
    /** The next whole reply's status, waiting for its bytes. */
    const reply = async (): Promise<number> => {
      for (;;) {
        const end = buffered.indexOf('\r\n\r\n');
        if (end >= 0) {
          const head = buffered.subarray(0, end).toString('latin1');
          const length = Number(/\r\ncontent-length: *(\d+)/i.exec(head)?.[1] ?? 0);
          if (buffered.length >= end + 4 + length) {
            buffered = buffered.subarray(end + 4 + length);
            return Number(head.slice(9, 12));
          }
        }
        if (failed !== undefined) throw failed;
        await new Promise<void>((resolve) => {
          waiting = resolve;
        });
        waiting = undefined;
      }
    };
    try {
      while (next < count) {
        const requests: string[] = [];
        while (requests.length < batch && next < count)
          requests.push(`GET ${pathOf(next++)} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`);
        socket.write(requests.join(''));
        for (let i = 0; i < requests.length; i++) {
          const status = await reply();
          statuses.set(status, (statuses.get(status) ?? 0) + 1);
        }
      }
    } finally {
      socket.destroy();
    }
  };
  await Promise.all(Array.from({ length: connections }, one));
  return statuses;
}

async function openUdp(address: string): Promise<dgram.Socket> {
  const s = dgram.createSocket('udp4');
  await new Promise<void>((r) => s.bind(0, address, () => r()));
  sockets.push(s);
  return s;
}

function nextDatagram(s: dgram.Socket, type: number, ms = 1000): Promise<Buffer | undefined> {
  return new Promise((resolve) => {
    const on = (m: Buffer) => {
      if (m[3] === type) {
        clearTimeout(t);
        s.off('message', on);
        resolve(m);
      }
    };
    const t = setTimeout(() => {
      s.off('message', on);
      resolve(undefined);
    }, ms);
    s.on('message', on);
  });
}

describe('unity-relay API hardening (issue 17 item 7)', () => {
  it('50,010 distinct 404 URLs do not reset anyone’s limits, and the limiter table stays small', async () => {
    // A frozen clock: nothing refills while the flood runs, so the counts are exact.
    const s = await start({ apiRateLimitPerMinute: 5, store: { now: () => 1_000_000 } });
    for (let i = 0; i < 5; i++) expect((await request('GET', '/v1/regions')).status).toBe(200);
    expect((await request('GET', '/v1/regions')).status).toBe(429);
    // The flood: 50,010 different unknown URLs, 16 connections in parallel.
    const statuses = await pipelinedGets(s.apiPort, 50_010, (i) => `/nope/${i}`);
    expect((statuses.get(404) ?? 0) + (statuses.get(429) ?? 0)).toBe(50_010);
    expect(statuses.get(404)).toBe(5); // every unknown URL shares one bucket per address
    // Still limited: nothing was cleared.
    expect((await request('GET', '/v1/regions')).status).toBe(429);
    expect(s.apiLimits.requests.size).toBeLessThanOrEqual(3);
    // Another address has its own budget.
    expect((await request('GET', '/v1/regions', { localAddress: '127.0.0.2' })).status).toBe(200);
  }, 240_000);

  it('sustained allocation attempts from one address get about the nominal rate, not more', async () => {
    let now = 1_000_000;
    const s = await start({
      store: { now: () => now, maxAllocations: 100_000 },
      apiRateLimitPerMinute: 0,
      apiLimits: { allocationsPerMinutePerAddress: 120, maxAllocationsPerAddress: 100_000 },
    });
    // 60 simulated seconds, 25 attempts per second.
    let created = 0;
    for (let i = 0; i < 60 * 25; i++) {
      const r = await request('POST', '/v1/allocate', { body: { maxConnections: 1 } });
      if (r.status === 201) created++;
      else expect(r.status).toBe(429);
      now += 40;
    }
    // Nominal: 2/s for 60 s = 120, plus the burst of 20.
    expect(created).toBeGreaterThanOrEqual(120);
    expect(created).toBeLessThanOrEqual(141);
    expect(s.store.liveOf('127.0.0.1')).toBe(created);
  }, 120_000);

  it('caps live allocations per address, and allocations per second from everyone', async () => {
    let now = 5_000_000;
    await start({
      store: { now: () => now },
      apiLimits: { maxAllocationsPerAddress: 4, globalAllocationsPerSecond: 3 },
    });
    for (let i = 0; i < 4; i++)
      expect((await request('POST', '/v1/allocate', { body: { maxConnections: 1 } })).status).toBe(201);
    const capped = await request('POST', '/v1/allocate', { body: { maxConnections: 1 } });
    expect(capped.status).toBe(429);
    expect(capped.json.detail).toMatch(/live allocations per client address/);
    // 127.0.0.2 is not capped by 127.0.0.1's allocations…
    const other = () =>
      request('POST', '/v1/allocate', { body: { maxConnections: 1 }, localAddress: '127.0.0.2' });
    for (let i = 0; i < 2; i++) expect((await other()).status).toBe(201);
    // …but the global rate (3/s, burst 6) is reached now: 503 until time passes.
    expect((await other()).status).toBe(503);
    now += 1000;
    expect((await other()).status).toBe(201);
  });

  it('refuses long URLs cheaply (414) without growing any table', async () => {
    const s = await start();
    const long = `/v1/regions?${'x'.repeat(15_000)}`;
    for (let i = 0; i < 200; i++) expect((await request('GET', `${long}${i}`)).status).toBe(414);
    expect(s.apiLimits.requests.size).toBe(0);
    expect((await request('GET', '/v1/regions')).status).toBe(200);
  });

  it('throttles wrong API keys per address; the right key from another address still works', async () => {
    const key = 'k'.repeat(24);
    await start({ apiKey: key, apiLimits: { authFailuresPerMinute: 5 }, store: { now: () => 1_000_000 } });
    const wrong = { authorization: 'Bearer wrong-wrong-wrong-wrong' };
    for (let i = 0; i < 5; i++)
      expect((await request('GET', '/v1/regions', { headers: wrong })).status).toBe(401);
    // The sixth and later are refused outright (no key comparison), even with the right key.
    expect((await request('GET', '/v1/regions', { headers: wrong })).status).toBe(429);
    expect(
      (await request('GET', '/v1/regions', { headers: { authorization: `Bearer ${key}` } })).status,
    ).toBe(429);
    expect(
      (
        await request('GET', '/v1/regions', {
          headers: { authorization: `Bearer ${key}` },
          localAddress: '127.0.0.2',
        })
      ).status,
    ).toBe(200);
  });
});

describe('unity-relay flood hardening (issue 17 item 10)', () => {
  async function allocation(): Promise<AllocationJson> {
    return (await request('POST', '/v1/allocate', { body: { maxConnections: 2 } })).json.data.allocation;
  }

  it('a BIND flood from one address is cut by a per-source bucket before any HMAC; 127.0.0.2 still binds', async () => {
    const s = await start({ hmacRatePerSecond: 10, hmacBurst: 20 });
    const victim = await allocation();
    const cd = Buffer.from(victim.connectionData, 'base64');
    // Valid magic and connection data, wrong key: each one would cost two HMACs.
    const forged = utpBind(1, cd, Buffer.alloc(64, 9));
    const attackers = await Promise.all(Array.from({ length: 8 }, () => openUdp('127.0.0.1')));
    for (let i = 0; i < 2000; i++) attackers[i % 8]!.send(forged, s.udpPort, '127.0.0.1');
    const legit = await openUdp('127.0.0.2');
    const mine = await allocation();
    const bind = utpBind(0, Buffer.from(mine.connectionData, 'base64'), Buffer.from(mine.key, 'base64'));
    let ok: Buffer | undefined;
    for (let i = 0; i < 20 && ok === undefined; i++) {
      legit.send(bind, s.udpPort, '127.0.0.1');
      ok = await nextDatagram(legit, 1, 300);
    }
    expect(ok?.toString('hex')).toBe('da720001');
    // Wait until the relay has seen the whole flood, then check where it went.
    await waitFor(() => s.metrics.received >= 2000, { what: 'the whole flood at the relay' });
    // The forgeries named the victim's allocation but spent none of its budget: it binds at once.
    const victimSocket = await openUdp('127.0.0.2');
    victimSocket.send(utpBind(0, cd, Buffer.from(victim.key, 'base64')), s.udpPort, '127.0.0.1');
    expect((await nextDatagram(victimSocket, 1, 2000))?.toString('hex')).toBe('da720001');
    expect(s.metrics.dropped.get('allocation_hmac_rate_limited') ?? 0).toBe(0);
    const limited = s.metrics.dropped.get('hmac_rate_limited') ?? 0;
    const hmacs = s.metrics.dropped.get('bad_hmac') ?? 0;
    // At most the burst plus what refilled during the test reached the HMAC.
    expect(hmacs).toBeLessThanOrEqual(20 + 10 * 10);
    expect(limited).toBeGreaterThan(1000);
  });

  it('a crowd behind one address binds at once on a small address budget: valid BINDs are paid by their allocations', async () => {
    const key = 'hardening-backend-key';
    // An address budget of 20 failures; 120 players behind one address bind in one go.
    const s = await start({ hmacRatePerSecond: 1, hmacBurst: 20, apiKey: key });
    const headers = { authorization: `Bearer ${key}` };
    const allocations: AllocationJson[] = await Promise.all(
      Array.from(
        { length: 120 },
        async () =>
          (await request('POST', '/v1/allocate', { body: { maxConnections: 2 }, headers })).json.data
            .allocation,
      ),
    );
    const players = await Promise.all(allocations.map(() => openUdp('127.0.0.3')));
    const answers = players.map((p) => nextDatagram(p, 1, 5000));
    for (const [i, a] of allocations.entries()) {
      const bind = utpBind(0, Buffer.from(a.connectionData, 'base64'), Buffer.from(a.key, 'base64'));
      players[i]!.send(bind, s.udpPort, '127.0.0.1');
    }
    // Every player's first BIND is answered: none waits for a retry.
    expect((await Promise.all(answers)).every((a) => a?.toString('hex') === 'da720001')).toBe(true);
    expect(s.metrics.dropped.get('hmac_rate_limited') ?? 0).toBe(0);
    expect(s.metrics.dropped.get('allocation_hmac_rate_limited') ?? 0).toBe(0);
  });

  it('one valid BIND replayed in a flood: its allocation’s budget, then its address’s, cut it before any HMAC', async () => {
    const s = await start({
      hmacRatePerSecond: 10,
      hmacBurst: 20,
      allocationHmacRatePerSecond: 5,
      allocationHmacBurst: 10,
    });
    const mine = await allocation();
    const bind = utpBind(0, Buffer.from(mine.connectionData, 'base64'), Buffer.from(mine.key, 'base64'));
    const player = await openUdp('127.0.0.4');
    let received = 0;
    player.on('message', (m) => {
      if (m[3] === 1) received++;
    });
    const started = performance.now();
    for (let i = 0; i < 2000; i++) player.send(bind, s.udpPort, '127.0.0.1');
    await waitFor(() => s.metrics.received >= 2000, { what: 'the whole flood at the relay' });
    const seconds = (performance.now() - started) / 1000 + 1;
    const perAllocation = s.metrics.dropped.get('allocation_hmac_rate_limited') ?? 0;
    const limited = s.metrics.dropped.get('hmac_rate_limited') ?? 0;
    // The allocation's burst (plus refill) was answered; the address's burst (plus refill) paid for
    // refusals; everything else was dropped before an HMAC.
    await waitFor(() => received > 0, { what: 'the first BIND_RECEIVED' });
    expect(received).toBeLessThanOrEqual(10 + 5 * seconds);
    expect(perAllocation).toBeLessThanOrEqual(20 + 10 * seconds);
    expect(perAllocation).toBeGreaterThan(0);
    expect(limited).toBeGreaterThan(2000 - (10 + 5 * seconds) - (20 + 10 * seconds) - 1);
    // Another player of the same address still binds (its allocation has its own budget; the
    // address's failures budget refills at 10/s).
    const other = await allocation();
    const second = await openUdp('127.0.0.4');
    let ok: Buffer | undefined;
    for (let i = 0; i < 20 && ok === undefined; i++) {
      second.send(
        utpBind(0, Buffer.from(other.connectionData, 'base64'), Buffer.from(other.key, 'base64')),
        s.udpPort,
        '127.0.0.1',
      );
      ok = await nextDatagram(second, 1, 300);
    }
    expect(ok?.toString('hex')).toBe('da720001');
  });

  it('the ERROR limiter is keyed by IP: rotating source ports does not buy more ERROR replies', async () => {
    const s = await start({ errorRatePerSecond: 1, errorBurst: 5 });
    const host = await allocation();
    const d = await UtpDriver.create(host);
    drivers.push(d);
    expect(await d.bind()).toBe(true);
    // RELAY "from" the host's allocation, from 60 other ports: each would get ERROR 3.
    const spoof = utpRelay(d.id, Buffer.alloc(16, 1), Buffer.alloc(4));
    const ports = await Promise.all(Array.from({ length: 60 }, () => openUdp('127.0.0.1')));
    let errors = 0;
    for (const p of ports) p.on('message', (m) => m[3] === 12 && errors++);
    for (const p of ports) p.send(spoof, s.udpPort, '127.0.0.1');
    await waitFor(() => (s.metrics.counters.get('error_replies_rate_limited') ?? 0) >= 50, {
      what: 'the error replies rate limited',
    });
    await elapse(100, 'error replies still in flight are counted');
    expect(errors).toBeLessThanOrEqual(5 + 2);
    expect(s.metrics.counters.get('error_replies_rate_limited') ?? 0).toBeGreaterThanOrEqual(50);
    // A different address has its own bucket.
    const other = await openUdp('127.0.0.2');
    other.send(spoof, s.udpPort, '127.0.0.1');
    expect((await nextDatagram(other, 12))?.[20]).toBe(3);
  });
});
