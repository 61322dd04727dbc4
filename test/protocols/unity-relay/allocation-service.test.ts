/**
 * The `AllocationService` contract, run against both implementations: one process's
 * `LocalAllocationService` over an in-memory `AllocationStore`, and a fleet allocator's
 * `RedisAllocationService` on a real redis-server with relay nodes in its node registry. The
 * allocation API (api.ts) relies on exactly these behaviours, whichever service it stands on:
 * what an allocation's JSON and connection data say, regions, join codes, admission before
 * anything is created, the per-address live cap (atomic under concurrency), capacity, and an
 * unbound allocation lapsing.
 */
import { randomBytes } from 'node:crypto';
import fc from 'fast-check';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { RedisNodeRegistry } from '../../../src/core/node-registry.js';
import { connectRedis, StoreUnavailableError } from '../../../src/core/redis.js';
import {
  type AllocationJson,
  type AllocationService,
  AllocationStore,
  ApiError,
  allocationJson,
  bytesFromGuid,
  LocalAllocationService,
  RELAY_NODE_KIND,
  RedisAllocationService,
  type Region,
  RelayCredentials,
  type Requester,
  readIssued,
  StoreFullError,
  serverEndpoint,
} from '../../../src/protocols/unity-relay/index.js';
import { type RedisServer, startRedis } from '../../helpers/redis.js';
import { waitFor } from '../../helpers/wait.js';

const REGIONS: Region[] = [
  { id: 'eu-1', description: 'Europe' },
  { id: 'us-1', description: 'America' },
];
const RELAY_HOST = '127.0.0.1';
const RELAY_PORT = 7777;
const DTLS_PORT = 7778;
const ENDPOINTS = [
  serverEndpoint('udp', RELAY_HOST, RELAY_PORT),
  serverEndpoint('dtls', RELAY_HOST, DTLS_PORT),
];
const BIND_MS = 60_000;
const JOIN_CODE = /^[ABCDEFGHJKMNPQRSTUVWXYZ23456789]{6}$/;

interface Options {
  /** Allocations one region takes (memory: the store's maximum; Redis: the node's capacity). */
  capacity?: number;
  /** Short lifetimes, for the lapse test (Redis expires records in its own clock). */
  short?: boolean;
}

interface Harness {
  service: AllocationService;
  credentials: RelayCredentials;
  bindTimeoutMs: number;
  /** The relay node serving `region` (named in connection data). */
  nodeOf(region: string): string;
  /** Lets every allocation made so far pass its bind deadline unbound. */
  lapse(): Promise<void>;
  close(): Promise<void>;
}

let redis: RedisServer | undefined;
beforeAll(async () => {
  redis = await startRedis();
}, 30_000);
afterAll(async () => {
  await redis?.dispose();
});

const open: Harness[] = [];
afterEach(async () => {
  for (const h of open.splice(0)) await h.close();
});

const backends: { name: string; build(o?: Options): Promise<Harness | undefined> }[] = [
  {
    name: 'memory (LocalAllocationService)',
    async build(o = {}) {
      let now = Date.now();
      const credentials = RelayCredentials.random();
      const bindTimeoutMs = o.short === true ? 500 : BIND_MS;
      const store = new AllocationStore({
        regions: REGIONS,
        credentials,
        nodeId: 'node-local',
        bindTimeoutMs,
        maxAllocations: o.capacity ?? 10_000,
        now: () => now,
      });
      const service = new LocalAllocationService(store, (a) =>
        allocationJson(a, RELAY_HOST, RELAY_PORT, ENDPOINTS),
      );
      return {
        service,
        credentials,
        bindTimeoutMs,
        nodeOf: () => 'node-local',
        async lapse() {
          // The store's clock, then the sweep the relay runs on its timer.
          now += bindTimeoutMs + 1;
          store.sweep(() => {});
        },
        async close() {},
      };
    },
  },
  {
    name: 'Redis (RedisAllocationService)',
    async build(o = {}) {
      if (redis === undefined) return undefined;
      const conn = await connectRedis(redis.url, { prefix: `ac${randomBytes(4).toString('hex')}:` });
      const registry = new RedisNodeRegistry(conn, { ttlMs: 10_000 });
      for (const r of REGIONS) {
        await registry.announce({
          id: `node-${r.id}`,
          kind: RELAY_NODE_KIND,
          region: r.id,
          endpoints: [
            { transport: 'udp', host: RELAY_HOST, port: RELAY_PORT },
            { transport: 'dtls', host: RELAY_HOST, port: DTLS_PORT },
          ],
          capacity: o.capacity ?? 10_000,
          load: 0,
          draining: false,
          startedAt: Date.now(),
        });
      }
      const credentials = RelayCredentials.random();
      const bindTimeoutMs = o.short === true ? 500 : BIND_MS;
      const service = new RedisAllocationService({
        redis: conn,
        registry,
        credentials,
        bindTimeoutMs,
        recordTtlMs: o.short === true ? 300 : 30_000,
      });
      return {
        service,
        credentials,
        bindTimeoutMs,
        nodeOf: (region) => `node-${region}`,
        async lapse() {
          // Redis expires the records (and owner entries) in its own clock: wait until it has.
          await waitFor(
            async () =>
              ((await conn.client.call('KEYS', `${conn.prefix}ur:alloc:*`)) as string[]).length === 0 &&
              ((await conn.client.call('KEYS', `${conn.prefix}ur:code:*`)) as string[]).length === 0,
            { what: 'the allocation records and join codes to expire in Redis' },
          );
        },
        async close() {
          await registry.close();
          await conn.close();
        },
      };
    },
  },
];

const player = (address: string, maxLive = 100): Requester => ({ keyed: false, address, maxLive });
const KEYED: Requester = { keyed: true };

/** An admission check that counts its calls (and refuses with `refuse`, when given). */
function admission(refuse?: Error) {
  const a = {
    calls: 0,
    admit: async () => {
      a.calls++;
      if (refuse !== undefined) throw refuse;
    },
  };
  return a;
}

/** The HTTP status the allocation API answers an error with (api.ts's error handler). */
function statusOf(err: unknown): number {
  if (err instanceof ApiError) return err.status;
  if (err instanceof StoreFullError || err instanceof StoreUnavailableError) return 503;
  throw err;
}

async function rejection(p: Promise<unknown>): Promise<unknown> {
  return p.then(
    (v) => {
      throw new Error(`expected a refusal, got ${JSON.stringify(v)}`);
    },
    (e: unknown) => e,
  );
}

function issued(h: Harness, json: AllocationJson) {
  const data = Buffer.from(json.connectionData, 'base64');
  expect(data).toHaveLength(255);
  expect(h.credentials.verify(data, 0)).toBe(true);
  return readIssued(data, 0);
}

for (const backend of backends) {
  describe(`AllocationService contract: ${backend.name}`, () => {
    const setup = async (o?: Options): Promise<Harness | undefined> => {
      const h = await backend.build(o);
      if (h !== undefined) open.push(h);
      return h;
    };

    it('lists the regions it serves', async (ctx) => {
      const h = await setup();
      if (h === undefined) return ctx.skip();
      expect((await h.service.regions()).map((r) => r.id).sort()).toEqual(['eu-1', 'us-1']);
    });

    it('a host allocation: id, signed connection data, key and endpoints all agree', async (ctx) => {
      const h = await setup();
      if (h === undefined) return ctx.skip();
      const gate = admission();
      const json = await h.service.allocate(4, 'us-1', player('10.0.0.1'), gate.admit);
      expect(gate.calls).toBe(1);
      expect(json.region).toBe('us-1');
      const id = Buffer.from(json.allocationIdBytes, 'base64');
      expect(id).toHaveLength(16);
      expect(bytesFromGuid(json.allocationId)?.equals(id)).toBe(true);
      const i = issued(h, json);
      expect(i.id.equals(id)).toBe(true);
      expect(i.role).toBe('host');
      expect(i.maxConnections).toBe(4);
      expect(i.hostId).toBeUndefined();
      expect(i.bindBy - i.createdAt).toBe(h.bindTimeoutMs);
      expect(i.nodeId).toBe(h.nodeOf('us-1'));
      expect(Buffer.from(json.key, 'base64').equals(h.credentials.keyFor(id))).toBe(true);
      expect(json.serverEndpoints).toEqual(ENDPOINTS);
      expect(json.relayServer).toEqual({ ipV4: RELAY_HOST, port: RELAY_PORT });
      expect(json.hostConnectionData).toBeUndefined();
      expect(await h.service.liveOf('10.0.0.1')).toBe(1);
    });

    it('no region, or "default" (the SDK when its region lookup fails), is one of its regions', async (ctx) => {
      const h = await setup();
      if (h === undefined) return ctx.skip();
      for (const asked of [undefined, 'default']) {
        const json = await h.service.allocate(2, asked, KEYED, admission().admit);
        expect(['eu-1', 'us-1']).toContain(json.region);
        expect(issued(h, json).nodeId).toBe(h.nodeOf(json.region));
      }
    });

    it('an unknown region is a 400 naming it, answered before admission; nothing is created', async (ctx) => {
      const h = await setup();
      if (h === undefined) return ctx.skip();
      const gate = admission();
      const err = await rejection(h.service.allocate(2, 'mars-1', player('10.0.0.2'), gate.admit));
      expect(statusOf(err)).toBe(400);
      expect((err as ApiError).message).toContain('mars-1');
      expect((err as ApiError).details).toEqual([{ key: 'region', value: 'mars-1' }]);
      expect(gate.calls).toBe(0);
      expect(await h.service.liveOf('10.0.0.2')).toBe(0);
    });

    it("admission's refusal is the answer, and nothing is created", async (ctx) => {
      const h = await setup();
      if (h === undefined) return ctx.skip();
      const refusal = new ApiError(429, 'Too Many Requests', 'too many allocations from this address');
      const host = await h.service.allocate(2, 'eu-1', KEYED, admission().admit);
      const code = await h.service.joinCode(host.allocationId);
      const gate = admission(refusal);
      expect(await rejection(h.service.allocate(2, 'eu-1', player('10.0.0.3'), gate.admit))).toBe(refusal);
      expect(await rejection(h.service.join(code, player('10.0.0.3'), gate.admit))).toBe(refusal);
      expect(gate.calls).toBe(2);
      expect(await h.service.liveOf('10.0.0.3')).toBe(0);
    });

    it('one join code per host: the same on every ask, concurrent ones included', async (ctx) => {
      const h = await setup();
      if (h === undefined) return ctx.skip();
      const host = await h.service.allocate(3, 'eu-1', KEYED, admission().admit);
      const codes = await Promise.all(Array.from({ length: 8 }, () => h.service.joinCode(host.allocationId)));
      expect(codes[0]).toMatch(JOIN_CODE);
      expect(new Set(codes).size).toBe(1);
      expect(await h.service.joinCode(host.allocationId)).toBe(codes[0]);
      const other = await h.service.allocate(3, 'eu-1', KEYED, admission().admit);
      expect(await h.service.joinCode(other.allocationId)).not.toBe(codes[0]);
    });

    it('join codes: 404 for an allocation it does not know, 400 for a client allocation', async (ctx) => {
      const h = await setup();
      if (h === undefined) return ctx.skip();
      const unknown = '0badc0de-0000-4000-8000-000000000000';
      expect(statusOf(await rejection(h.service.joinCode(unknown)))).toBe(404);
      expect(statusOf(await rejection(h.service.joinCode('not-a-guid')))).toBe(404);
      const host = await h.service.allocate(3, 'eu-1', KEYED, admission().admit);
      const client = await h.service.join(
        await h.service.joinCode(host.allocationId),
        KEYED,
        admission().admit,
      );
      expect(statusOf(await rejection(h.service.joinCode(client.allocationId)))).toBe(400);
    });

    it("join: a client allocation on its host's region and node, carrying the host's connection data", async (ctx) => {
      const h = await setup();
      if (h === undefined) return ctx.skip();
      const host = await h.service.allocate(5, 'us-1', KEYED, admission().admit);
      const code = await h.service.joinCode(host.allocationId);
      const gate = admission();
      // Codes are typed by people: any case, stray spaces.
      const json = await h.service.join(` ${code.toLowerCase()} `, player('10.0.0.4'), gate.admit);
      expect(gate.calls).toBe(1);
      expect(json.region).toBe('us-1');
      expect(json.hostConnectionData).toBe(host.connectionData);
      const i = issued(h, json);
      expect(i.role).toBe('client');
      expect(i.maxConnections).toBe(1);
      expect(i.hostId?.equals(Buffer.from(host.allocationIdBytes, 'base64'))).toBe(true);
      expect(i.nodeId).toBe(issued(h, host).nodeId);
      const id = Buffer.from(json.allocationIdBytes, 'base64');
      expect(bytesFromGuid(json.allocationId)?.equals(id)).toBe(true);
      expect(Buffer.from(json.key, 'base64').equals(h.credentials.keyFor(id))).toBe(true);
      expect(json.allocationId).not.toBe(host.allocationId);
      expect(await h.service.liveOf('10.0.0.4')).toBe(1);
    });

    it('an unknown join code is a 404, answered before admission', async (ctx) => {
      const h = await setup();
      if (h === undefined) return ctx.skip();
      const gate = admission();
      for (const code of ['ZZZZZZ', '', 'not a code!', 'x'.repeat(100)])
        expect(statusOf(await rejection(h.service.join(code, player('10.0.0.5'), gate.admit)))).toBe(404);
      expect(gate.calls).toBe(0);
    });

    it('the live cap: an address holds at most its maximum, allocations and joins alike; others and key holders are not held', async (ctx) => {
      const h = await setup();
      if (h === undefined) return ctx.skip();
      const host = await h.service.allocate(8, 'eu-1', KEYED, admission().admit);
      const code = await h.service.joinCode(host.allocationId);
      const a = player('10.0.1.1', 2);
      await h.service.allocate(2, 'eu-1', a, admission().admit);
      await h.service.join(code, a, admission().admit);
      const over = await rejection(h.service.allocate(2, 'eu-1', a, admission().admit));
      expect(statusOf(over)).toBe(429);
      expect(statusOf(await rejection(h.service.join(code, a, admission().admit)))).toBe(429);
      expect(await h.service.liveOf('10.0.1.1')).toBe(2);
      // Another address, and a caller with the API key (a backend for many players), go on.
      await h.service.allocate(2, 'eu-1', player('10.0.1.2', 2), admission().admit);
      for (let i = 0; i < 5; i++) await h.service.allocate(2, 'eu-1', KEYED, admission().admit);
      expect(await h.service.liveOf('10.0.1.2')).toBe(1);
      expect(await h.service.liveOf('10.0.1.1')).toBe(2);
    });

    it('concurrent requests from one address never pass its live cap (fast-check over request mixes)', async (ctx) => {
      const h = await setup();
      if (h === undefined) return ctx.skip();
      const host = await h.service.allocate(8, 'eu-1', KEYED, admission().admit);
      const code = await h.service.joinCode(host.allocationId);
      let round = 0;
      await fc.assert(
        fc.asyncProperty(
          fc.integer({ min: 1, max: 4 }),
          fc.array(fc.constantFrom('allocate', 'join'), { minLength: 1, maxLength: 12 }),
          async (cap, kinds) => {
            // A fresh address per run: the service keeps what earlier runs created.
            const address = `10.1.${Math.floor(round / 250)}.${round++ % 250}`;
            const who = player(address, cap);
            const outcomes = await Promise.allSettled(
              kinds.map((k) =>
                k === 'allocate'
                  ? h.service.allocate(2, 'eu-1', who, admission().admit)
                  : h.service.join(code, who, admission().admit),
              ),
            );
            const granted = outcomes.filter((o) => o.status === 'fulfilled').length;
            expect(granted).toBe(Math.min(cap, kinds.length));
            for (const o of outcomes) if (o.status === 'rejected') expect(statusOf(o.reason)).toBe(429);
            expect(await h.service.liveOf(address)).toBe(granted);
          },
        ),
        { numRuns: 25 },
      );
    });

    it('capacity: with room for N allocations the next is refused as unavailable (503), counting nothing', async (ctx) => {
      const h = await setup({ capacity: 3 });
      if (h === undefined) return ctx.skip();
      for (let i = 0; i < 3; i++) await h.service.allocate(2, 'eu-1', player('10.0.2.1'), admission().admit);
      expect(
        statusOf(await rejection(h.service.allocate(2, 'eu-1', player('10.0.2.1'), admission().admit))),
      ).toBe(503);
      expect(await h.service.liveOf('10.0.2.1')).toBe(3);
    });

    it('an allocation never bound lapses: it stops counting, and its join code goes with it', async (ctx) => {
      const h = await setup({ short: true });
      if (h === undefined) return ctx.skip();
      const a = player('10.0.3.1', 1);
      const host = await h.service.allocate(2, 'eu-1', a, admission().admit);
      const code = await h.service.joinCode(host.allocationId);
      expect(statusOf(await rejection(h.service.allocate(2, 'eu-1', a, admission().admit)))).toBe(429);
      await h.lapse();
      expect(await h.service.liveOf('10.0.3.1')).toBe(0);
      expect(statusOf(await rejection(h.service.join(code, KEYED, admission().admit)))).toBe(404);
      expect(statusOf(await rejection(h.service.joinCode(host.allocationId)))).toBe(404);
      // The address may allocate again.
      await h.service.allocate(2, 'eu-1', a, admission().admit);
      expect(await h.service.liveOf('10.0.3.1')).toBe(1);
    });
  });
}
