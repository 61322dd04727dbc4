import { randomBytes } from 'node:crypto';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  MemoryNodeRegistry,
  type NodeInfo,
  type NodeRecord,
  type NodeRegistry,
  pickLeastLoaded,
  RedisNodeRegistry,
} from '../../src/core/node-registry.js';
import {
  connectRedis,
  type RedisConnection,
  StoreUnavailableError,
  storeCall,
} from '../../src/core/redis.js';
import { freePort, haveRedisServer, type RedisServer, rawRedis, startRedis } from '../helpers/redis.js';
import { elapse, waitFor } from '../helpers/wait.js';

function node(id: string, load: number, extra: Partial<NodeInfo> = {}): NodeInfo {
  return {
    id,
    kind: 'unity-relay',
    region: 'eu',
    endpoints: [{ transport: 'udp', host: '127.0.0.1', port: 1000 + load }],
    capacity: 10,
    load,
    draining: false,
    startedAt: Date.now(),
    ...extra,
  };
}

describe('pickLeastLoaded', () => {
  const rec = (id: string, load: number, capacity = 10, draining = false): NodeRecord => ({
    ...node(id, load, { capacity, draining }),
    heartbeatAgeMs: 0,
  });
  it('picks the lowest load relative to capacity, skipping full and draining nodes', () => {
    expect(pickLeastLoaded([rec('a', 5), rec('b', 2), rec('c', 1, 10, true)])?.id).toBe('b');
    expect(pickLeastLoaded([rec('a', 5, 10), rec('b', 5, 100)])?.id).toBe('b');
    expect(pickLeastLoaded([rec('a', 10, 10), rec('b', 0, 0)])).toBeUndefined();
  });
  it('spreads over equally loaded nodes', () => {
    const seen = new Set<string>();
    for (let i = 0; i < 200; i++) seen.add(pickLeastLoaded([rec('a', 1), rec('b', 1)])!.id);
    expect([...seen].sort()).toEqual(['a', 'b']);
  });
});

// One redis-server for the file: the contract's Redis runs and the Redis-only tests below.
let shared: RedisServer | undefined;
const sharedConnections: RedisConnection[] = [];
beforeAll(async () => {
  shared = await startRedis();
});
afterAll(async () => {
  await Promise.all(sharedConnections.map((c) => c.close()));
  await shared?.dispose();
});

/** A RedisNodeRegistry on the shared server under its own key prefix (its own fleet). */
async function redisRegistry(prefix = `nr${randomBytes(4).toString('hex')}:`): Promise<RedisNodeRegistry> {
  const conn = await connectRedis(shared!.url, { prefix });
  sharedConnections.push(conn);
  return new RedisNodeRegistry(conn, { ttlMs: 1000, heartbeatMs: 200 });
}

const without = (r: NodeRecord): NodeInfo => {
  const { heartbeatAgeMs: _age, ...info } = r;
  return info;
};

/** What a node's info may hold: ids and regions as node ids are written, any endpoints and meta. */
const nodeInfoArb: fc.Arbitrary<NodeInfo> = fc.record(
  {
    id: fc.stringMatching(/^[A-Za-z0-9._-]{1,64}$/),
    kind: fc.constant('unity-relay'),
    region: fc.stringMatching(/^[a-z0-9-]{1,16}$/),
    endpoints: fc.array(
      fc.record({
        transport: fc.constantFrom('udp', 'dtls', 'ws', 'wss', 'tcp', 'prudp', 'http'),
        host: fc.oneof(fc.ipV4(), fc.ipV6(), fc.domain()),
        port: fc.integer({ min: 1, max: 65535 }),
      }),
      { maxLength: 5 },
    ),
    capacity: fc.nat({ max: 1_000_000 }),
    load: fc.nat({ max: 1_000_000 }),
    draining: fc.boolean(),
    startedAt: fc.integer({ min: 0, max: 4_102_444_800_000 }),
    meta: fc.dictionary(fc.string({ maxLength: 12 }), fc.string({ maxLength: 40 }), { maxKeys: 4 }),
  },
  { requiredKeys: ['id', 'kind', 'region', 'endpoints', 'capacity', 'load', 'draining', 'startedAt'] },
);

/**
 * The NodeRegistry contract, run against both implementations (MemoryNodeRegistry for one
 * process, RedisNodeRegistry for a fleet). Registries here live 1000 ms without a heartbeat and
 * heartbeat every 200 ms.
 */
function registryContract(name: string, make: () => Promise<NodeRegistry | undefined>) {
  describe(`NodeRegistry contract: ${name}`, () => {
    it('lists announced nodes by kind and region, and forgets a stopped one', async (ctx) => {
      const reg = await make();
      if (reg === undefined) return ctx.skip();
      const a = await reg.announce(node('a', 3));
      const b = await reg.announce(node('b', 1, { region: 'us' }));
      const s = await reg.announce(node('s', 0, { kind: 'rmc-secure' }));
      expect((await reg.live('unity-relay')).map((n) => n.id).sort()).toEqual(['a', 'b']);
      expect((await reg.live('unity-relay', 'us')).map((n) => n.id)).toEqual(['b']);
      expect(await reg.live('unity-relay', 'nowhere')).toEqual([]);
      expect(await reg.live('no-such-kind')).toEqual([]);
      expect((await reg.live('rmc-secure')).map((n) => n.id)).toEqual(['s']);
      expect((await reg.pick('unity-relay'))?.id).toBe('b');
      b.update({ load: 9 });
      await b.flush();
      expect((await reg.pick('unity-relay'))?.id).toBe('a');
      a.update({ draining: true });
      await a.flush();
      expect((await reg.pick('unity-relay'))?.id).toBe('b');
      await b.stop();
      expect((await reg.live('unity-relay')).map((n) => n.id)).toEqual(['a']);
      await a.stop();
      await s.stop();
      await reg.close();
    });

    it('keeps a heartbeating node alive past its TTL, with a fresh heartbeat age', async (ctx) => {
      const reg = await make();
      if (reg === undefined) return ctx.skip();
      const alive = await reg.announce(node('alive', 0));
      await elapse(1400, 'longer than the 1000 ms TTL: only heartbeats can keep the record');
      const rec = (await reg.live('unity-relay')).find((n) => n.id === 'alive');
      expect(rec).toBeDefined();
      expect(rec!.heartbeatAgeMs).toBeLessThan(1000);
      expect(alive.heartbeatAgeMs()).toBeLessThan(1000);
      await reg.close();
      expect(await reg.live('unity-relay')).toEqual([]);
    });

    it('a change without flush is published by the next heartbeat', async (ctx) => {
      const reg = await make();
      if (reg === undefined) return ctx.skip();
      const a = await reg.announce(node('a', 1));
      await reg.announce(node('b', 2));
      expect((await reg.pick('unity-relay'))?.id).toBe('a');
      a.update({ load: 10 });
      const picked = await waitFor(async () => (await reg.pick('unity-relay'))?.id === 'b', {
        what: "node a's new load, published by a heartbeat",
      });
      expect(picked).toBe(true);
      expect((await reg.live('unity-relay')).find((n) => n.id === 'a')?.load).toBe(10);
      await reg.close();
    });

    it("lists a node's info as announced, whatever the caller changes afterwards (fast-check)", async (ctx) => {
      const reg = await make();
      if (reg === undefined) return ctx.skip();
      await fc.assert(
        fc.asyncProperty(nodeInfoArb, async (info) => {
          const announced = structuredClone(info);
          const announcement = await reg.announce(info);
          // The caller's object is not the record: changing it changes nothing.
          info.endpoints.push({ transport: 'udp', host: 'elsewhere', port: 1 });
          info.region = 'changed';
          if (info.meta !== undefined) info.meta.extra = 'x';
          const listed = (await reg.live('unity-relay', announced.region)).find((n) => n.id === announced.id);
          expect(listed).toBeDefined();
          expect(without(listed!)).toEqual(announced);
          expect(listed!.heartbeatAgeMs).toBeGreaterThanOrEqual(0);
          await announcement.stop();
          expect((await reg.live('unity-relay')).some((n) => n.id === announced.id)).toBe(false);
        }),
        { numRuns: 40 },
      );
      await reg.close();
    });

    it('one record per kind and id: announcing an id again replaces it', async (ctx) => {
      const reg = await make();
      if (reg === undefined) return ctx.skip();
      await reg.announce(node('same', 1));
      await reg.announce(node('same', 7, { region: 'us' }));
      await reg.announce(node('same', 0, { kind: 'rmc-secure' }));
      const listed = await reg.live('unity-relay');
      expect(listed.map((n) => [n.id, n.load, n.region])).toEqual([['same', 7, 'us']]);
      expect((await reg.live('rmc-secure')).map((n) => n.id)).toEqual(['same']);
      await reg.close();
    });

    it('pick finds nothing when every node is full, draining or without capacity', async (ctx) => {
      const reg = await make();
      if (reg === undefined) return ctx.skip();
      expect(await reg.pick('unity-relay')).toBeUndefined();
      await reg.announce(node('full', 10, { capacity: 10 }));
      await reg.announce(node('draining', 0, { draining: true }));
      await reg.announce(node('none', 0, { capacity: 0 }));
      expect(await reg.pick('unity-relay')).toBeUndefined();
      await reg.announce(node('room', 9, { capacity: 10, region: 'us' }));
      expect((await reg.pick('unity-relay'))?.id).toBe('room');
      expect(await reg.pick('unity-relay', 'eu')).toBeUndefined();
      await reg.close();
    });

    it('close() stops every announcement and removes its records; a stopped announcement stays stopped', async (ctx) => {
      const reg = await make();
      if (reg === undefined) return ctx.skip();
      const a = await reg.announce(node('a', 0));
      await reg.announce(node('b', 0));
      await reg.close();
      expect(await reg.live('unity-relay')).toEqual([]);
      // A flush after stop publishes nothing; stop twice is harmless.
      await a.flush();
      await a.stop();
      expect(await reg.live('unity-relay')).toEqual([]);
    });
  });
}

registryContract('MemoryNodeRegistry', async () => new MemoryNodeRegistry({ ttlMs: 1000, heartbeatMs: 200 }));
registryContract('RedisNodeRegistry', async () => (shared === undefined ? undefined : redisRegistry()));

describe.skipIf(!haveRedisServer())('RedisNodeRegistry on a real redis-server', () => {
  const connect = async (prefix = 'test:') => {
    const c = await connectRedis(shared!.url, { prefix });
    sharedConnections.push(c);
    return c;
  };

  it('shares nodes between two connections (two processes in a fleet)', async () => {
    const one = new RedisNodeRegistry(await connect('share:'), { ttlMs: 1000, heartbeatMs: 200 });
    const two = new RedisNodeRegistry(await connect('share:'), { ttlMs: 1000, heartbeatMs: 200 });
    const other = new RedisNodeRegistry(await connect('otherfleet:'), { ttlMs: 1000, heartbeatMs: 200 });
    const a = await one.announce(node('a', 1));
    const b = await two.announce(node('b', 4));
    expect((await two.live('unity-relay')).map((n) => n.id).sort()).toEqual(['a', 'b']);
    expect((await one.pick('unity-relay'))?.id).toBe('a');
    expect(await other.live('unity-relay')).toEqual([]);
    await a.stop();
    expect((await two.live('unity-relay')).map((n) => n.id)).toEqual(['b']);
    await b.stop();
  });

  it('a node whose heartbeats stop lapses within its TTL', async () => {
    const conn = await connect('lapse:');
    const dying = new RedisNodeRegistry(conn, { ttlMs: 1000, heartbeatMs: 200 });
    const watcher = new RedisNodeRegistry(await connect('lapse:'), { ttlMs: 1000, heartbeatMs: 200 });
    await dying.announce(node('dying', 0));
    expect((await watcher.live('unity-relay')).map((n) => n.id)).toEqual(['dying']);
    // kill -9 of the process: its connection drops, nothing deregisters it.
    rawRedis(conn).disconnect();
    await elapse(1300, 'past the 1000 ms TTL with no heartbeat: Redis must have expired the record');
    expect(await watcher.live('unity-relay')).toEqual([]);
  });

  it('commands fail fast with StoreUnavailableError while Redis is down, and work again after', async () => {
    const port = await freePort();
    const { RedisServer } = await import('../helpers/redis.js');
    const fs = await import('node:fs');
    const os = await import('node:os');
    const path = await import('node:path');
    const own = new RedisServer(port, fs.mkdtempSync(path.join(os.tmpdir(), 'gamewire-redis-')));
    await own.start();
    const states: boolean[] = [];
    const conn = await connectRedis(own.url, { prefix: 'down:', onStatus: (up) => states.push(up) });
    sharedConnections.push(conn);
    const reg = new RedisNodeRegistry(conn, { ttlMs: 5000, heartbeatMs: 1000 });
    await reg.announce(node('n', 0));
    await own.stop();
    const started = Date.now();
    await expect(reg.live('unity-relay')).rejects.toBeInstanceOf(StoreUnavailableError);
    expect(Date.now() - started).toBeLessThan(3000);
    await own.start();
    await waitFor(() => conn.up, { what: 'the connection back up' });
    // The record was lost with the server (no persistence); the next heartbeat brings it back.
    await waitFor(async () => (await reg.live('unity-relay')).some((n) => n.id === 'n'), {
      what: 'the record back after a heartbeat',
    });
    expect((await reg.live('unity-relay')).map((n) => n.id)).toEqual(['n']);
    expect(states).toEqual([true, false, true]);
    await reg.close();
    await own.dispose();
  });

  it('a node heartbeats as soon as its connection is back, before the connection reports itself up', async () => {
    const { RedisServer } = await import('../helpers/redis.js');
    const fs = await import('node:fs');
    const os = await import('node:os');
    const path = await import('node:path');
    const own = new RedisServer(await freePort(), fs.mkdtempSync(path.join(os.tmpdir(), 'gamewire-redis-')));
    await own.start();
    const conn = await connectRedis(own.url, { prefix: 'back:', maxBackoffMs: 100 });
    sharedConnections.push(conn);
    // The next tick is 20 s away: only a beat on reconnection can bring the record back sooner.
    const reg = new RedisNodeRegistry(conn, { ttlMs: 60_000, heartbeatMs: 20_000 });
    await reg.announce(node('n', 0));
    await own.stop();
    await waitFor(() => !conn.up, { what: 'the connection to notice the outage', intervalMs: 5 });
    // Restarted empty (no persistence): the record is back only if the node heartbeated.
    await own.start();
    const watching = await connectRedis(own.url, { prefix: 'back:' });
    const watcher = new RedisNodeRegistry(watching, { ttlMs: 60_000 });
    await waitFor(() => conn.up, { what: 'the connection back up', intervalMs: 2 });
    // The moment the connection says it is up, its record is back.
    expect((await watcher.live('unity-relay')).map((n) => n.id)).toEqual(['n']);
    await reg.close();
    await watching.close();
    await own.dispose();
  }, 20_000);

  it('a heartbeat after a fleet-wide silence sets fleet:recovering for two TTLs; steady heartbeats never do', async () => {
    const conn = await connect('quiet:');
    const admin = await connect('quiet:');
    const reg = new RedisNodeRegistry(conn, { ttlMs: 1000, heartbeatMs: 200 });
    await reg.announce(node('q', 0));
    await elapse(700, 'several steady heartbeats, none of which may set fleet:recovering');
    expect(await rawRedis(admin).exists('quiet:fleet:recovering:unity-relay')).toBe(0);
    expect(Number(await admin.client.get('quiet:fleet:beat-due:unity-relay'))).toBeGreaterThan(0);
    // No heartbeat reaches Redis for longer than one period plus a quarter of the rest of the TTL.
    rawRedis(conn).disconnect();
    await elapse(700, 'a silence longer than a heartbeat period plus a quarter of the rest of the TTL');
    rawRedis(conn)
      .connect()
      .catch(() => {});
    await waitFor(() => conn.up, { what: 'the connection back up', intervalMs: 5 });
    const pttl = await rawRedis(admin).pttl('quiet:fleet:recovering:unity-relay');
    // Two TTLs, but at least a TTL plus 8 s (the reconnection's backoff and hooks).
    expect(pttl).toBeGreaterThan(8000);
    expect(pttl).toBeLessThanOrEqual(9000);
    // Another kind is not recovering: its own keys say nothing of this one's silence.
    expect(await rawRedis(admin).exists('quiet:fleet:recovering:rmc-secure')).toBe(0);
    await reg.close();
  });

  it('start-up against no server fails with one line naming the URL and the flag', async () => {
    const port = await freePort();
    const err = await connectRedis(`redis://127.0.0.1:${port}`, {
      connectTimeoutMs: 500,
      flag: '--redis',
    }).catch((e: unknown) => e);
    expect((err as Error).message).toMatch(new RegExp(`no Redis at redis://127.0.0.1:${port}.*--redis`));
    expect((err as { code: string }).code).toBe('ERR_REDIS');
  });

  it('storeCall passes through errors that are not outages', async () => {
    const conn = await connect('wrongtype:');
    await rawRedis(conn).set('wrongtype:k', 'v');
    await expect(storeCall('x', () => rawRedis(conn).hget('wrongtype:k', 'f'))).rejects.toThrow(/WRONGTYPE/);
  });
});
