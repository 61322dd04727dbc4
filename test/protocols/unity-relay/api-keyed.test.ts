/**
 * A caller with the API key is a game backend allocating for every player (issue 21 item 1): the
 * per-address limits do not apply to it, its own global rate and the store's capacity do; callers
 * without a key keep every per-address limit; wrong keys stay throttled. Real HTTP against an
 * in-process relay; a frozen clock where counts must be exact (nothing refills meanwhile).
 */
import http from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';
import {
  startUnityRelay,
  type UnityRelayInstance,
  type UnityRelayOptions,
} from '../../../src/protocols/unity-relay/index.js';

const KEY = 'backend-key-0123456789abcdef';
const BEARER = { authorization: `Bearer ${KEY}` };

let server: UnityRelayInstance | undefined;
let agent: http.Agent | undefined;

afterEach(async () => {
  agent?.destroy();
  agent = undefined;
  await server?.close();
  server = undefined;
});

async function start(options: UnityRelayOptions = {}): Promise<UnityRelayInstance> {
  server = await startUnityRelay({ host: '127.0.0.1', port: 0, apiPort: 0, dataplane: 'js', ...options });
  return server;
}

/** One HTTP request over a real socket, from `localAddress` (127.0.0.1 by default). */
function request(
  method: string,
  pathName: string,
  options: { body?: unknown; localAddress?: string; headers?: Record<string, string> } = {},
): Promise<{ status: number; json: any; retryAfter: string | undefined }> {
  agent ??= new http.Agent({ keepAlive: true, maxSockets: 16 });
  const body = options.body === undefined ? undefined : JSON.stringify(options.body);
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: '127.0.0.1',
        port: server!.apiPort,
        method,
        path: pathName,
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
          const retry = res.headers['retry-after'];
          resolve({ status: res.statusCode ?? 0, json, retryAfter: Array.isArray(retry) ? retry[0] : retry });
        });
      },
    );
    req.on('error', reject);
    if (body !== undefined) req.write(body);
    req.end();
  });
}

const allocate = (headers: Record<string, string> = {}, localAddress?: string) =>
  request('POST', '/v1/allocate', {
    body: { maxConnections: 4 },
    headers,
    ...(localAddress !== undefined ? { localAddress } : {}),
  });

/** `count` requests, 16 at a time; the status of each, in order. */
async function burst(count: number, one: () => Promise<{ status: number }>): Promise<number[]> {
  const statuses: number[] = new Array(count);
  let next = 0;
  await Promise.all(
    Array.from({ length: 16 }, async () => {
      while (next < count) {
        const i = next++;
        statuses[i] = (await one()).status;
      }
    }),
  );
  return statuses;
}

const tally = (statuses: number[]) => {
  const out: Record<number, number> = {};
  for (const s of statuses) out[s] = (out[s] ?? 0) + 1;
  return out;
};

describe('unity-relay API: a caller with the API key is a backend, not an attacker', () => {
  it('a keyed backend makes 2,000 allocations in a burst from one address (the default keyed burst), then 503', async () => {
    // Frozen clock: the burst is exactly what passes.
    const s = await start({ apiKey: KEY, store: { now: () => 1_000_000 } });
    const statuses = await burst(2000, () => allocate(BEARER));
    expect(tally(statuses)).toEqual({ 201: 2000 });
    // Not counted against its address: no per-address cap can stop it later.
    expect(s.store.liveOf('127.0.0.1')).toBe(0);
    expect([...s.store.live()]).toHaveLength(2000);
    // The other side of the default: its own global rate (1000/s, burst 2000) still holds.
    const over = await allocate(BEARER);
    expect(over.status).toBe(503);
    expect(over.json.detail).toMatch(/API key holders are allocating at their limit/);
    expect(Number(over.retryAfter)).toBeGreaterThanOrEqual(1);
  }, 120_000);

  it('per-route request limits do not apply to a keyed caller; joins and join codes are not capped per address', async () => {
    await start({ apiKey: KEY, apiRateLimitPerMinute: 3, store: { now: () => 1_000_000 } });
    for (let i = 0; i < 50; i++)
      expect((await request('GET', '/v1/regions', { headers: BEARER })).status).toBe(200);
    const host = (await allocate(BEARER)).json.data.allocation;
    const code = (
      await request('POST', '/v1/joincode', { body: { allocationId: host.allocationId }, headers: BEARER })
    ).json.data.joinCode;
    // 150 joins from one address: past the per-address burst (20) and live cap (100).
    const joins = await burst(150, () =>
      request('POST', '/v1/join', { body: { joinCode: code }, headers: BEARER }),
    );
    expect(tally(joins)).toEqual({ 200: 150 });
  }, 60_000);

  it('--unity-keyed-allocations-per-second is enforced (3/s: burst 6, then 503 until it refills); 0 turns it off', async () => {
    let now = 1_000_000;
    await start({ apiKey: KEY, apiLimits: { keyedAllocationsPerSecond: 3 }, store: { now: () => now } });
    for (let i = 0; i < 6; i++) expect((await allocate(BEARER)).status).toBe(201);
    expect((await allocate(BEARER)).status).toBe(503);
    now += 1000;
    for (let i = 0; i < 3; i++) expect((await allocate(BEARER)).status).toBe(201);
    expect((await allocate(BEARER)).status).toBe(503);
    await server!.close();
    await start({ apiKey: KEY, apiLimits: { keyedAllocationsPerSecond: 0 }, store: { now: () => now } });
    expect(tally(await burst(2100, () => allocate(BEARER)))).toEqual({ 201: 2100 });
  }, 120_000);

  it("the store's capacity still applies to a keyed caller", async () => {
    await start({ apiKey: KEY, store: { maxAllocations: 5 } });
    for (let i = 0; i < 5; i++) expect((await allocate(BEARER)).status).toBe(201);
    const full = await allocate(BEARER);
    expect(full.status).toBe(503);
    expect(full.json.detail).toMatch(/no room/);
  });

  it('draining still refuses a keyed caller', async () => {
    const s = await start({ apiKey: KEY });
    await s.drain();
    expect((await allocate(BEARER)).status).toBe(503);
  });

  it('wrong keys are still 401, then 429 for that address (even with the right key) at the default 10 a minute', async () => {
    let now = 1_000_000;
    await start({ apiKey: KEY, store: { now: () => now } });
    const wrong = { authorization: `Bearer ${'x'.repeat(KEY.length)}` };
    for (let i = 0; i < 10; i++) expect((await allocate(wrong)).status).toBe(401);
    expect((await allocate({})).status).toBe(429);
    expect((await allocate(BEARER)).status).toBe(429);
    // Another address holding the key is not affected.
    expect((await allocate(BEARER, '127.0.0.2')).status).toBe(201);
    // One token back after 6 s (10 a minute): the key works again from the first address.
    now += 6000;
    expect((await allocate(BEARER)).status).toBe(201);
  });
});

describe('unity-relay API: callers without an API key keep the per-address limits', () => {
  it('300 allocations from one address: 20 pass (the default burst), 280 get 429', async () => {
    const s = await start({ store: { now: () => 1_000_000 } });
    const statuses = await burst(300, () => allocate());
    expect(tally(statuses)).toEqual({ 201: 20, 429: 280 });
    expect(s.store.liveOf('127.0.0.1')).toBe(20);
    // Another address has its own burst.
    expect((await allocate({}, '127.0.0.2')).status).toBe(201);
  }, 60_000);

  it('the default live cap (100 per address) and global rate (50/s, burst 100) hold', async () => {
    await start({
      store: { now: () => 1_000_000 },
      apiRateLimitPerMinute: 0,
      apiLimits: { allocationsPerMinutePerAddress: 0 },
    });
    expect(tally(await burst(100, () => allocate()))).toEqual({ 201: 100 });
    const capped = await allocate();
    expect(capped.status).toBe(429);
    expect(capped.json.detail).toMatch(/at most 100 live allocations per client address/);
    // The global burst (100) is spent too: a fresh address gets 503.
    const global = await allocate({}, '127.0.0.2');
    expect(global.status).toBe(503);
    expect(global.json.detail).toMatch(/allocating at its limit/);
  }, 60_000);

  it('with an API key configured, a request without it is 401 (never allocated under per-address limits)', async () => {
    await start({ apiKey: KEY });
    expect((await allocate()).status).toBe(401);
  });
});
