/**
 * Unity Relay as a fleet on a real redis-server, in one test process: an allocator and relay
 * nodes started with the library functions (the spawned-CLI "Done when" is fleet-cli.test.ts).
 */
import dgram from 'node:dgram';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import fc from 'fast-check';
import { describe, expect, it, type TestContext } from 'vitest';
import { completeOptions } from '../../../src/core/config.js';
import { silentLogger } from '../../../src/core/logger.js';
import { ProtocolMetrics } from '../../../src/core/metrics.js';
import { RedisNodeRegistry } from '../../../src/core/node-registry.js';
import { createRegistry } from '../../../src/core/prometheus.js';
import { connectRedis } from '../../../src/core/redis.js';
import type { ServerContext } from '../../../src/core/server.js';
import {
  AllocationStore,
  bytesFromGuid,
  createBind,
  describeConnectionData,
  RedisAllocationService,
  RelayApiClient,
  RelayCredentials,
  readIssued,
  relayServerData,
  startUnityRelay,
  startUnityRelayAllocator,
  type UnityRelayAllocatorInstance,
  type UnityRelayAllocatorOptions,
  UnityRelayClient,
  unityRelayServer,
} from '../../../src/protocols/unity-relay/index.js';
import { type RedisServer, startRedis } from '../../helpers/redis.js';
import { elapse } from '../../helpers/wait.js';
import { chat, fast, hostAndJoin, SECRET, until } from './fleet-helpers.js';

/** `gamewire serve unity-relay`'s start, given options as a config section gives them (defaults filled). */
const serveStart = async (values: Record<string, unknown>, ctx: ServerContext) =>
  unityRelayServer.start(completeOptions('unity-relay', unityRelayServer, values), ctx);

const secret = Buffer.from(SECRET);

type NodeExtra = {
  heartbeatTtlMs?: number;
  region?: string;
  maxAllocations?: number;
  transports?: boolean;
  timeouts?: { idleTimeoutMs: number; hostAloneTimeoutMs: number; bindTimeoutMs: number };
};
type AllocatorExtra = Partial<Omit<UnityRelayAllocatorOptions, 'apiLimits'>> & {
  maxAllocationsPerAddress?: number;
};

/**
 * What one test starts, closed when it ends: the tests run concurrently, each with its own
 * redis-server (an empty Redis), data folder (where relay nodes with wss keep their self-signed
 * certificate), servers and clients.
 */
interface Scope {
  running: { close(): Promise<void> }[];
  clients: UnityRelayClient[];
  dataDir: string;
}
interface Fleet extends Scope {
  redis: RedisServer;
  node(id: string, extra?: NodeExtra): ReturnType<typeof startUnityRelay>;
  allocator(extra?: AllocatorExtra): Promise<UnityRelayAllocatorInstance>;
  /** An ioredis client on the test's Redis (closed with the test). */
  redisClient(): Promise<import('ioredis').Redis>;
}

function scope(ctx: TestContext): Scope {
  const s: Scope = {
    running: [],
    clients: [],
    dataDir: mkdtempSync(path.join(tmpdir(), 'gamewire-fleet-test-')),
  };
  ctx.onTestFinished(async () => {
    await Promise.all(s.clients.splice(0).map((c) => c.close()));
    await Promise.all(s.running.splice(0).map((r) => r.close()));
    rmSync(s.dataDir, { recursive: true, force: true });
  });
  return s;
}

/** A scope with its own redis-server, or undefined when redis-server is absent (outside CI). */
async function fleetOf(ctx: TestContext): Promise<Fleet | undefined> {
  const redis = await startRedis();
  if (redis === undefined) return undefined;
  const s = scope(ctx);
  // Closed after everything that uses it (onTestFinished hooks run last registered first).
  ctx.onTestFinished(() => redis.dispose());
  const { running, dataDir } = s;
  const node = async (id: string, extra: NodeExtra = {}) => {
    const n = await startUnityRelay({
      host: '127.0.0.1',
      port: 0,
      dataplane: 'js',
      ...extra.timeouts,
      ...(extra.transports === true ? { dtlsPort: 0, wsPort: 0, wssPort: 0, dataDir } : {}),
      ...(extra.maxAllocations !== undefined ? { maxAllocations: extra.maxAllocations } : {}),
      fleet: {
        redisUrl: redis.url,
        secret,
        nodeId: id,
        ...(extra.region !== undefined ? { region: extra.region } : {}),
        ...(extra.heartbeatTtlMs !== undefined ? { heartbeatTtlMs: extra.heartbeatTtlMs } : {}),
      },
    });
    running.push(n);
    return n;
  };
  const allocator = async (extra: AllocatorExtra = {}) => {
    const { maxAllocationsPerAddress, ...rest } = extra;
    const a = await startUnityRelayAllocator({
      redisUrl: redis.url,
      secret,
      apiPort: 0,
      apiRateLimitPerMinute: 0,
      apiLimits: {
        allocationsPerMinutePerAddress: 0,
        globalAllocationsPerSecond: 0,
        ...(maxAllocationsPerAddress !== undefined ? { maxAllocationsPerAddress } : {}),
      },
      ...rest,
    });
    running.push(a);
    return a;
  };
  const redisClient = async () => {
    const { Redis } = await import('ioredis');
    const c = new Redis(redis.url);
    running.push({ close: async () => void c.disconnect() });
    return c;
  };
  return { ...s, redis, node, allocator, redisClient };
}

async function post(api: string, path: string, body: unknown) {
  const res = await fetch(`${api}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: res.status, headers: res.headers, json: (await res.json()) as any };
}

const nodeOf = (a: { connectionData: string }) =>
  readIssued(Buffer.from(a.connectionData, 'base64'), 0).nodeId;

describe.concurrent('relay credentials (connection data format 2)', () => {
  it('an allocator and a node derive the same key from the secret; another secret verifies nothing', () => {
    const allocatorSide = new RelayCredentials(secret);
    const nodeSide = new RelayCredentials(Buffer.from(SECRET));
    const id = bytesFromGuid('0f8fad5b-d9cb-469f-a165-70867728950e')!;
    expect(allocatorSide.keyFor(id).equals(nodeSide.keyFor(id))).toBe(true);
    expect(allocatorSide.keyFor(id)).toHaveLength(64);
    const other = bytesFromGuid('7c9e6679-7425-40de-944b-e07fc1f90ae7')!;
    expect(allocatorSide.keyFor(id).equals(allocatorSide.keyFor(other))).toBe(false);
    const hostId = bytesFromGuid('16fd2706-8baf-433b-82eb-8c7fada847da')!;
    const data = allocatorSide.issue({
      id,
      createdAt: 1_700_000_000_000,
      bindBy: 1_700_000_060_000,
      role: 'client',
      maxConnections: 1,
      hostId,
      nodeId: 'relay-a',
    });
    expect(data).toHaveLength(255);
    expect(nodeSide.verify(data, 0)).toBe(true);
    expect(readIssued(data, 0)).toEqual({
      id,
      createdAt: 1_700_000_000_000,
      bindBy: 1_700_000_060_000,
      role: 'client',
      maxConnections: 1,
      hostId,
      nodeId: 'relay-a',
    });
    expect(describeConnectionData(data).nodeIdLength).toBe(7);
    expect(new RelayCredentials(Buffer.from(`${SECRET}x`)).verify(data, 0)).toBe(false);
    for (let i = 0; i < 255; i += 17) {
      const tampered = Buffer.from(data);
      tampered[i]! ^= 1;
      expect(nodeSide.verify(tampered, 0)).toBe(false);
    }
  });

  it('arbitrary bytes are never verified and never throw', () => {
    const c = new RelayCredentials(secret);
    fc.assert(
      fc.property(fc.uint8Array({ minLength: 0, maxLength: 300 }), fc.nat(300), (bytes, offset) => {
        expect(c.verify(Buffer.from(bytes), offset)).toBe(false);
      }),
    );
  });

  it('a relay node adopts only data placed on it, before its bind deadline', () => {
    let now = 1_000_000;
    const store = new AllocationStore({
      credentials: new RelayCredentials(secret),
      nodeId: 'relay-a',
      adoptFromConnectionData: true,
      now: () => now,
    });
    const issue = (nodeId: string) =>
      new RelayCredentials(secret).issue({
        id: bytesFromGuid('0f8fad5b-d9cb-469f-a165-70867728950e')!,
        createdAt: now,
        bindBy: now + 60_000,
        role: 'host',
        maxConnections: 3,
        hostId: undefined,
        nodeId,
      });
    expect(store.adopt(issue('relay-b'), 0)).toBe('other_node');
    const late = issue('relay-a');
    now += 60_001;
    expect(store.adopt(late, 0)).toBe('bind_deadline_passed');
    const a = store.adopt(issue('relay-a'), 0);
    expect(typeof a).toBe('object');
    expect(a).toMatchObject({ role: 'host', maxConnections: 3, state: 'allocated' });
  });
});

// First of the Redis tests: its TTL test waits longest, the others run meanwhile.
describe.concurrent('unity-relay fleet: records, caps and join codes in Redis', () => {
  const api = (a: { apiUrl: string }) => new RelayApiClient(a.apiUrl);
  const redisNow = async (c: { time(): Promise<[string, string] | unknown> }) => {
    const [sec, usec] = (await c.time()) as [string, string];
    return Number(sec) * 1000 + Math.floor(Number(usec) / 1000);
  };

  it("a live host's record and join code outlive the record TTL; a gone host's record, code and address count expire", async (ctx) => {
    const f = await fleetOf(ctx);
    if (f === undefined) return ctx.skip();
    // Records live 1 s past their node's last refresh (2 s when new); the node refreshes every 200 ms.
    const n = await f.node('relay-1', {
      heartbeatTtlMs: 600,
      timeouts: { idleTimeoutMs: 1500, hostAloneTimeoutMs: 1500, bindTimeoutMs: 300 },
    });
    const a = await f.allocator({ recordTtlMs: 1000, bindTimeoutMs: 1000, joinCodeTtlMs: 60_000 });
    const options = { retryMs: 100, pingIntervalMs: 300 };
    const { client: host, joinCode, allocation } = await UnityRelayClient.host(api(a), 4, options);
    f.clients.push(host);
    const c = await f.redisClient();
    const recordKey = `gamewire:ur:alloc:${allocation.allocationId}`;
    await elapse(3000, 'past the first life of the record (bind window + TTL)');
    // Past its first life (bind window + record TTL): kept alive by the node's heartbeats.
    expect(await c.exists(recordKey)).toBe(1);
    expect(await c.pttl(recordKey)).toBeLessThanOrEqual(1000);
    expect(
      (await post(a.apiUrl, '/v1/joincode', { allocationId: allocation.allocationId })).json.data.joinCode,
    ).toBe(joinCode);
    const client = await UnityRelayClient.join(api(a), joinCode, options);
    f.clients.push(client);
    await chat(host, client);
    expect(await a.service.liveOf('127.0.0.1')).toBe(2);
    // An owner set that the refresh has to make again (emptied by a trim, or evicted) expires too.
    const owners = await c.keys('gamewire:ur:owner:*');
    expect(owners).toHaveLength(1);
    await c.del(owners[0]!);
    await until('the owner set made again', async () =>
      (await c.exists(owners[0]!)) === 1 ? true : undefined,
    );
    expect(await c.pttl(owners[0]!)).toBeGreaterThan(0);
    await until('both counted again', async () =>
      (await a.service.liveOf('127.0.0.1')) === 2 ? true : undefined,
    );
    await elapse(1500, 'past a TTL: the counts must hold');
    await chat(host, client);
    expect(await a.service.liveOf('127.0.0.1')).toBe(2);
    expect((await post(a.apiUrl, '/v1/joincode', { allocationId: allocation.allocationId })).status).toBe(
      201,
    );

    // Both leave: the node forgets them (CLOSE, then its 300 ms bind timeout) and stops refreshing them.
    await host.close();
    await client.close();
    await until('the node to forget both', async () =>
      n.store.size > 0 && [...n.store.live()].length === 0 ? true : undefined,
    );
    const gone = Date.now();
    const keys = [
      recordKey,
      `gamewire:ur:code:${joinCode}`,
      `gamewire:ur:hostcode:${allocation.allocationId}`,
    ];
    await until('the records, code and address count to expire', async () =>
      (await c.exists(...keys)) === 0 && (await a.service.liveOf('127.0.0.1')) === 0 ? true : undefined,
    );
    // Within the record TTL (1 s) and a heartbeat of the node's last refresh.
    expect(Date.now() - gone).toBeLessThan(4000);
    expect((await post(a.apiUrl, '/v1/joincode', { allocationId: allocation.allocationId })).status).toBe(
      404,
    );
    expect((await post(a.apiUrl, '/v1/join', { joinCode })).status).toBe(404);
  });

  it('concurrent allocations from one address through two allocators stop at its cap exactly', async (ctx) => {
    const f = await fleetOf(ctx);
    if (f === undefined) return ctx.skip();
    await f.node('relay-1');
    await f.node('relay-2');
    const a1 = await f.allocator({ maxAllocationsPerAddress: 5 });
    const a2 = await f.allocator({ maxAllocationsPerAddress: 5 });
    const replies = await Promise.all(
      Array.from({ length: 30 }, (_, i) =>
        post((i % 2 === 0 ? a1 : a2).apiUrl, '/v1/allocate', { maxConnections: 2 }),
      ),
    );
    const statuses = replies.map((r) => r.status);
    expect(statuses.filter((s) => s === 201)).toHaveLength(5);
    expect(statuses.filter((s) => s === 429)).toHaveLength(25);
    expect(replies.find((r) => r.status === 429)?.json.detail).toMatch(/at most 5 live allocations/);
    expect(await a1.service.liveOf('127.0.0.1')).toBe(5);
    // Joins count against the same cap.
    const code = (
      await post(a1.apiUrl, '/v1/joincode', {
        allocationId: replies.find((r) => r.status === 201)!.json.data.allocation.allocationId,
      })
    ).json.data.joinCode;
    expect((await post(a2.apiUrl, '/v1/join', { joinCode: code })).status).toBe(429);
  });

  it('concurrent join code requests through two allocators agree on one code', async (ctx) => {
    const f = await fleetOf(ctx);
    if (f === undefined) return ctx.skip();
    await f.node('relay-1');
    const a1 = await f.allocator();
    const a2 = await f.allocator();
    for (let round = 0; round < 3; round++) {
      const host = (await post(a1.apiUrl, '/v1/allocate', { maxConnections: 2 })).json.data.allocation;
      const codes = await Promise.all(
        Array.from({ length: 16 }, (_, i) =>
          post((i % 2 === 0 ? a1 : a2).apiUrl, '/v1/joincode', { allocationId: host.allocationId }),
        ),
      );
      expect(codes.map((r) => r.status)).toEqual(Array(16).fill(201));
      expect(new Set(codes.map((r) => r.json.data.joinCode)).size).toBe(1);
    }
    const c = await f.redisClient();
    expect(await c.keys('gamewire:ur:code:*')).toHaveLength(3);
  });

  it('an adopted allocation leaves its pending set, so a bound allocation counts once against capacity', async (ctx) => {
    const f = await fleetOf(ctx);
    if (f === undefined) return ctx.skip();
    await f.node('relay-1', { maxAllocations: 3, heartbeatTtlMs: 600 });
    const a = await f.allocator();
    for (let i = 0; i < 2; i++) {
      const { client } = await UnityRelayClient.host(api(a), 2, fast);
      f.clients.push(client);
    }
    const c = await f.redisClient();
    await until('the pending set to empty and the load to show', async () =>
      (await c.zcard('gamewire:ur:pending:relay-1')) === 0 && (await a.fleet())?.[0]?.load === 2
        ? true
        : undefined,
    );
    // Two bound, none pending: room for one more, then none.
    expect((await post(a.apiUrl, '/v1/allocate', { maxConnections: 2 })).status).toBe(201);
    expect((await post(a.apiUrl, '/v1/allocate', { maxConnections: 2 })).status).toBe(503);
  });

  it("placements and address entries are scored in Redis's clock, whatever the allocator's clock says", async (ctx) => {
    const f = await fleetOf(ctx);
    if (f === undefined) return ctx.skip();
    await f.node('relay-1');
    const conn = await connectRedis(f.redis.url);
    f.running.push(conn);
    // An allocator whose clock is ten minutes slow.
    const service = new RedisAllocationService({
      redis: conn,
      registry: new RedisNodeRegistry(conn),
      credentials: new RelayCredentials(secret),
      now: () => Date.now() - 600_000,
    });
    const requester = { keyed: false as const, address: '192.0.2.1', maxLive: 10 };
    const host = await service.allocate(2, undefined, requester, async () => {});
    const code = await service.joinCode(host.allocationId);
    const joiner = await service.join(code, requester, async () => {});
    const c = await f.redisClient();
    const now = await redisNow(c);
    for (const guid of [joiner.allocationId, host.allocationId]) {
      const pending = Number(await c.zscore('gamewire:ur:pending:relay-1', guid));
      expect(pending).toBeGreaterThan(now + 55_000);
      expect(pending).toBeLessThanOrEqual(now + 60_000);
    }
    for (const guid of [joiner.allocationId, host.allocationId])
      expect(Number(await c.zscore('gamewire:ur:owner:192.0.2.1', guid))).toBeGreaterThan(now + 60_000);
    expect(await service.liveOf('192.0.2.1')).toBe(2);
  });
});

describe.concurrent('unity-relay fleet on Redis (in-process)', () => {
  it('spreads a burst of 20 allocations over both nodes, sends joiners to their host, relays on each node', async (ctx) => {
    const f = await fleetOf(ctx);
    if (f === undefined) return ctx.skip();
    const n1 = await f.node('relay-1');
    const n2 = await f.node('relay-2');
    const a = await f.allocator();
    const placed = new Map<string, number>();
    for (let i = 0; i < 20; i++) {
      const r = await post(a.apiUrl, '/v1/allocate', { maxConnections: 2 });
      expect(r.status).toBe(201);
      const alloc = r.json.data.allocation;
      const nodeId = nodeOf(alloc);
      placed.set(nodeId, (placed.get(nodeId) ?? 0) + 1);
      // The JSON names that node's endpoint.
      expect(alloc.relayServer.port).toBe(nodeId === 'relay-1' ? n1.udpPort : n2.udpPort);
      expect(alloc.serverEndpoints[0]).toMatchObject({ connectionType: 'udp', host: '127.0.0.1' });
    }
    expect(placed.get('relay-1')).toBe(10);
    expect(placed.get('relay-2')).toBe(10);

    // Relaying on each node: host and joiner meet on the host's node.
    const seen = new Set<number>();
    for (let i = 0; i < 6 && seen.size < 2; i++) {
      const { host, client, hostAllocation, joinAllocation } = await hostAndJoin(
        a.apiUrl,
        a.apiUrl,
        f.clients,
      );
      expect(joinAllocation.relayServer).toEqual(hostAllocation.relayServer);
      expect(nodeOf(joinAllocation)).toBe(nodeOf(hostAllocation));
      await chat(host, client);
      seen.add(hostAllocation.relayServer.port);
    }
    expect(seen).toEqual(new Set([n1.udpPort, n2.udpPort]));
    expect(n1.metrics.counters.get('allocations_adopted')).toBeGreaterThan(0);

    // The fleet view and the per-node gauges.
    const fleet = await a.fleet();
    expect(fleet?.map((f) => f.id).sort()).toEqual(['relay-1', 'relay-2']);
    expect(fleet?.[0]).toMatchObject({ region: 'local-1', capacity: 10_000, draining: false });
    expect(await n1.fleet()).toHaveLength(2);
    const text = await createRegistry(() => [n1.metrics]).metrics();
    expect(text).toMatch(/gamewire_node_load\{protocol="unity-relay",node="relay-1"\} \d+/);
    expect(text).toMatch(/gamewire_node_heartbeat_age_seconds\{protocol="unity-relay",node="relay-1"\}/);
    expect(text).toMatch(/gamewire_node_allocations\{protocol="unity-relay",node="relay-1"\}/);
  });

  it('a node refuses a BIND placed on another node with ERROR 4', async (ctx) => {
    const f = await fleetOf(ctx);
    if (f === undefined) return ctx.skip();
    const n1 = await f.node('relay-1');
    const n2 = await f.node('relay-2');
    const a = await f.allocator();
    const alloc = (await post(a.apiUrl, '/v1/allocate', { maxConnections: 2 })).json.data.allocation;
    const wrong = nodeOf(alloc) === 'relay-1' ? n2 : n1;
    const sock = dgram.createSocket('udp4');
    await new Promise<void>((r) => sock.bind(0, '127.0.0.1', () => r()));
    const reply = new Promise<Buffer>((r) => sock.once('message', (m) => r(m)));
    sock.send(
      createBind(0, Buffer.from(alloc.connectionData, 'base64'), Buffer.from(alloc.key, 'base64')),
      wrong.udpPort,
      '127.0.0.1',
    );
    const got = await reply;
    sock.close();
    expect(got).toHaveLength(21);
    expect(got[3]).toBe(12);
    expect(got[20]).toBe(4);
    expect(wrong.metrics.dropped.get('placed_on_other_node')).toBe(1);
  });

  it('two allocators share join codes: made on one, joined on the other', async (ctx) => {
    const f = await fleetOf(ctx);
    if (f === undefined) return ctx.skip();
    await f.node('relay-1');
    await f.node('relay-2');
    const a1 = await f.allocator();
    const a2 = await f.allocator();
    const { host, client, hostAllocation, joinAllocation } = await hostAndJoin(
      a1.apiUrl,
      a2.apiUrl,
      f.clients,
    );
    expect(joinAllocation.relayServer).toEqual(hostAllocation.relayServer);
    await chat(host, client);
    // The same code again from the other allocator.
    const code1 = (await post(a1.apiUrl, '/v1/joincode', { allocationId: hostAllocation.allocationId })).json
      .data.joinCode;
    const code2 = (await post(a2.apiUrl, '/v1/joincode', { allocationId: hostAllocation.allocationId })).json
      .data.joinCode;
    expect(code2).toBe(code1);
    expect((await post(a2.apiUrl, '/v1/join', { joinCode: 'ZZZZZZ' })).status).toBe(404);
    expect(
      (await post(a2.apiUrl, '/v1/joincode', { allocationId: joinAllocation.allocationId })).status,
    ).toBe(400);
  });

  it('drain: a draining node gets no new allocations, its bound peers keep relaying', async (ctx) => {
    const f = await fleetOf(ctx);
    if (f === undefined) return ctx.skip();
    await f.node('relay-1');
    const n2 = await f.node('relay-2');
    const a = await f.allocator();
    // Bind a pair on relay-2 first.
    let pair: Awaited<ReturnType<typeof hostAndJoin>> | undefined;
    for (let i = 0; i < 8 && pair === undefined; i++) {
      const p = await hostAndJoin(a.apiUrl, a.apiUrl, f.clients);
      if (p.hostAllocation.relayServer.port === n2.udpPort) pair = p;
    }
    expect(pair).toBeDefined();
    await n2.drain();
    expect(n2.draining).toBe(true);
    await until('the drain to show', async () =>
      (await a.fleet())?.find((f) => f.id === 'relay-2')?.draining === true ? true : undefined,
    );
    for (let i = 0; i < 10; i++) {
      const alloc = (await post(a.apiUrl, '/v1/allocate', { maxConnections: 2 })).json.data.allocation;
      expect(nodeOf(alloc)).toBe('relay-1');
    }
    await chat(pair!.host, pair!.client);
  });

  it('Redis down: bound peers keep relaying, the allocator answers 503 with Retry-After, then 200 once it is back', async (ctx) => {
    const f = await fleetOf(ctx);
    if (f === undefined) return ctx.skip();
    const n = await f.node('relay-1');
    const a = await f.allocator();
    const { host, client } = await hostAndJoin(a.apiUrl, a.apiUrl, f.clients);
    await f.redis.stop();
    const down = await post(a.apiUrl, '/v1/allocate', { maxConnections: 2 });
    expect(down.status).toBe(503);
    expect(down.headers.get('retry-after')).toBe('2');
    expect(down.json.detail).toMatch(/Redis/);
    expect(down.json.details).toEqual([{ key: 'cause', value: 'store_unavailable' }]);
    expect((await post(a.apiUrl, '/v1/join', { joinCode: 'ABCDEF' })).status).toBe(503);
    await chat(host, client);
    await elapse(1500, 'relaying must go on through a Redis outage');
    await chat(host, client);
    await f.redis.start();
    // The node re-announces itself into the empty Redis at its next heartbeat; the allocator reconnects by itself.
    const back = await until('the allocator to answer 201 again', async () => {
      const r = await post(a.apiUrl, '/v1/allocate', { maxConnections: 2 });
      return r.status === 201 ? r : undefined;
    });
    expect(back.json.data.allocation.relayServer.port).toBe(n.udpPort);
    await chat(host, client);
  });

  it('regions come from live nodes; no room, an unknown region and a draining allocator are refused', async (ctx) => {
    const f = await fleetOf(ctx);
    if (f === undefined) return ctx.skip();
    const a = await f.allocator();
    const none = await post(a.apiUrl, '/v1/allocate', { maxConnections: 2 });
    expect(none.status).toBe(503);
    expect(none.json.detail).toMatch(/no live relay node with room/);
    await f.node('eu-1', { region: 'eu-west' });
    const us = await f.node('us-1', { region: 'us-east', maxAllocations: 1 });
    const regions = (await (await fetch(`${a.apiUrl}/v1/regions`)).json()) as any;
    expect(regions.data.regions.map((r: { id: string }) => r.id)).toEqual(['eu-west', 'us-east']);
    const bad = await post(a.apiUrl, '/v1/allocate', { maxConnections: 2, region: 'mars' });
    expect(bad.status).toBe(400);
    expect(bad.json.detail).toMatch(/unknown region "mars" \(regions: eu-west, us-east\)/);
    // us-east holds one allocation: the first fills it (placed, not yet bound), the second finds no room.
    const first = await post(a.apiUrl, '/v1/allocate', { maxConnections: 2, region: 'us-east' });
    expect(first.status).toBe(201);
    expect(first.json.data.allocation.relayServer.port).toBe(us.udpPort);
    expect(first.json.data.allocation.region).toBe('us-east');
    const full = await post(a.apiUrl, '/v1/allocate', { maxConnections: 2, region: 'us-east' });
    expect(full.status).toBe(503);
    expect(full.json.detail).toMatch(/in region "us-east"/);
    expect(nodeOf((await post(a.apiUrl, '/v1/allocate', { maxConnections: 2 })).json.data.allocation)).toBe(
      'eu-1',
    );
    // The allocator's gauges cover every live node.
    await until('the allocator gauges', async () =>
      a.metrics.nodeGauges.get('node_load')?.size === 2 ? true : undefined,
    );
    await a.drain();
    expect(a.draining).toBe(true);
    const drained = await post(a.apiUrl, '/v1/allocate', { maxConnections: 2 });
    expect(drained.status).toBe(503);
    expect(drained.json.detail).toMatch(/draining/);
  });

  it('refuses a 0.0.0.0 advertisement, a missing secret or Redis, and --workers without --redis; --role all ignores --redis', async (testCtx) => {
    const { running } = scope(testCtx);
    await expect(
      startUnityRelay({
        host: '0.0.0.0',
        port: 0,
        publicHost: '0.0.0.0',
        fleet: { redisUrl: 'redis://127.0.0.1:1', secret },
      }),
    ).rejects.toThrow(/cannot advertise 0\.0\.0\.0.*--public-host/);
    const ctx = { log: silentLogger(), metrics: new ProtocolMetrics('unity-relay'), dataDir: '/tmp' };
    const base = { host: '127.0.0.1', port: 0, apiPort: 0 };
    await expect(serveStart({ ...base, role: 'relay' }, ctx)).rejects.toThrow(
      /--role \(config unity-relay\.role\) needs --redis/,
    );
    await expect(
      serveStart({ ...base, role: 'allocator', redis: 'redis://127.0.0.1:1' }, ctx),
    ).rejects.toThrow(/relay secret/);
    await expect(
      serveStart({ ...base, role: 'relay', redis: 'redis://127.0.0.1:1', relaySecret: 'short' }, ctx),
    ).rejects.toThrow(/at least 32 characters/);
    await expect(serveStart({ ...base, workers: 2 }, ctx)).rejects.toThrow(
      /--workers \(config unity-relay\.workers\) needs --redis/,
    );
    // --role all with --redis (e.g. `serve --redis URL` for rmc's sake) stays one process.
    const single = (await serveStart(
      { ...base, redis: 'redis://127.0.0.1:1', dtlsPort: 0, wsPort: 0, wssPort: 0 },
      ctx,
    )) as unknown as { role: string; close(): Promise<void> };
    running.push(single);
    expect(single.role).toBe('all');
  });
});

describe.concurrent('unity-relay fleet: every transport on a relay node', () => {
  for (const type of ['dtls', 'ws', 'wss'] as const) {
    it(`a host and a joiner allocated through an allocator BIND and RELAY over ${type} on a relay node`, async (ctx) => {
      const f = await fleetOf(ctx);
      if (f === undefined) return ctx.skip();
      const n = await f.node('relay-t', { transports: true });
      const a = await f.allocator();
      const options = { ...fast, connectionType: type, tls: { rejectUnauthorized: false } };
      const api = new RelayApiClient(a.apiUrl);
      const { client: host, joinCode, allocation } = await UnityRelayClient.host(api, 4, options);
      f.clients.push(host);
      const endpoint = allocation.serverEndpoints.find((e) => e.connectionType === type);
      expect(endpoint?.port).toBe(type === 'dtls' ? n.dtls?.port : type === 'ws' ? n.ws?.port : n.wss?.port);
      const client = await UnityRelayClient.join(api, joinCode, options);
      f.clients.push(client);
      expect(host.state).toBe('bound');
      expect(client.state).toBe('bound');
      await chat(host, client);
      // Both were learnt from their first BIND on this node, through that transport.
      expect(n.metrics.counters.get('allocations_adopted')).toBe(2);
      if (type === 'dtls') {
        expect(n.metrics.counters.get('dtls_associations')).toBe(2);
        // A key the fleet did not derive for that id completes no handshake (so binds nothing).
        const other = await api.allocate(2);
        const data = relayServerData(other, 'dtls');
        const forged = new UnityRelayClient(
          { ...data, key: Buffer.alloc(64, 7) },
          { ...options, maxAttempts: 2, dtlsTimeoutMs: 1000 },
        );
        f.clients.push(forged);
        await expect(forged.bind()).rejects.toThrow();
        expect(n.metrics.counters.get('dtls_associations')).toBe(2);
        expect(n.metrics.counters.get('allocations_adopted')).toBe(2);
      }
    });
  }
});

describe.concurrent('unity-relay fleet: --unity-redis-prefix', () => {
  it('two fleets with their own prefix share one Redis without seeing each other', async (ctx) => {
    const f = await fleetOf(ctx);
    if (f === undefined) return ctx.skip();
    const context = { log: silentLogger(), metrics: new ProtocolMetrics('unity-relay'), dataDir: f.dataDir };
    const common = { host: '127.0.0.1', port: 0, apiPort: 0, dtlsPort: 0, wsPort: 0, wssPort: 0 };
    const prefixedFleet = async (prefix: string) => {
      const base = {
        ...common,
        redis: f.redis.url,
        relaySecret: SECRET,
        redisPrefix: prefix,
        dataplane: 'js',
      };
      const relay = (await serveStart(
        { ...base, role: 'relay', nodeId: `${prefix.slice(0, -1)}-node` },
        context,
      )) as unknown as { udpPort: number; close(): Promise<void> };
      f.running.push(relay);
      const alloc = (await serveStart(
        { ...base, role: 'allocator' },
        context,
      )) as unknown as UnityRelayAllocatorInstance;
      f.running.push(alloc);
      return { relay, alloc };
    };
    const a = await prefixedFleet('fleet-a:');
    const b = await prefixedFleet('fleet-b:');
    expect((await a.alloc.fleet())?.map((n) => n.id)).toEqual(['fleet-a-node']);
    expect((await b.alloc.fleet())?.map((n) => n.id)).toEqual(['fleet-b-node']);
    const { host, client, hostAllocation } = await hostAndJoin(a.alloc.apiUrl, a.alloc.apiUrl, f.clients);
    expect(hostAllocation.relayServer.port).toBe(a.relay.udpPort);
    await chat(host, client);
    // fleet-a's codes and allocations are not fleet-b's.
    const code = (await post(a.alloc.apiUrl, '/v1/joincode', { allocationId: hostAllocation.allocationId }))
      .json.data.joinCode;
    expect((await post(b.alloc.apiUrl, '/v1/join', { joinCode: code })).status).toBe(404);
    const { Redis } = await import('ioredis');
    const c = new Redis(f.redis.url);
    const keys = await c.keys('*');
    c.disconnect();
    expect(keys.filter((k) => k.startsWith('fleet-a:ur:alloc:'))).toHaveLength(2);
    expect(keys.filter((k) => !k.startsWith('fleet-a:') && !k.startsWith('fleet-b:'))).toEqual([]);
  });
});

// Not concurrent: these bursts keep the test process busy for seconds, which would hold up the
// heartbeats of the short-TTL nodes above (600 ms) past their TTL; they run alone after them.
describe('unity-relay fleet: bursts of allocations', () => {
  it('a keyed backend makes 1,000 allocations in a burst through an allocator at its default limits; none is counted per address', async (ctx) => {
    const f = await fleetOf(ctx);
    if (f === undefined) return ctx.skip();
    await f.node('relay-1');
    await f.node('relay-2');
    const key = 'fleet-backend-key-0123456789';
    // Default limits: only the key makes the difference.
    const a = await startUnityRelayAllocator({ redisUrl: f.redis.url, secret, apiPort: 0, apiKey: key });
    f.running.push(a);
    const headers = { 'content-type': 'application/json', authorization: `Bearer ${key}` };
    let next = 0;
    const statuses: number[] = [];
    const hosts: string[] = [];
    await Promise.all(
      Array.from({ length: 16 }, async () => {
        while (next < 1000) {
          next++;
          const res = await fetch(`${a.apiUrl}/v1/allocate`, {
            method: 'POST',
            headers,
            body: JSON.stringify({ maxConnections: 4 }),
          });
          statuses.push(res.status);
          const body = (await res.json()) as any;
          if (res.status === 201) hosts.push(body.data.allocation.allocationId);
        }
      }),
    );
    expect(statuses.filter((s) => s === 201)).toHaveLength(1000);
    // Joins through the key are not capped per address either (150 > the default cap of 100).
    const codeReply = await fetch(`${a.apiUrl}/v1/joincode`, {
      method: 'POST',
      headers,
      body: JSON.stringify({ allocationId: hosts[0] }),
    });
    const code = ((await codeReply.json()) as any).data.joinCode as string;
    const joins = await Promise.all(
      Array.from({ length: 150 }, () =>
        fetch(`${a.apiUrl}/v1/join`, {
          method: 'POST',
          headers,
          body: JSON.stringify({ joinCode: code }),
        }).then((r) => r.status),
      ),
    );
    expect(joins.filter((s) => s === 200)).toHaveLength(150);
    const c = await f.redisClient();
    expect(await c.keys('gamewire:ur:owner:*')).toEqual([]);
    expect(await c.zcard('gamewire:ur:pending:relay-1')).toBeGreaterThan(0);
    expect(
      (await c.zcard('gamewire:ur:pending:relay-1')) + (await c.zcard('gamewire:ur:pending:relay-2')),
    ).toBe(1150);
    // Without the key: 401, and wrong keys are throttled per address as before.
    expect((await post(a.apiUrl, '/v1/allocate', { maxConnections: 2 })).status).toBe(401);
  }, 120_000);

  it('without an API key, the default live cap (100 per address) holds in a fleet', async (ctx) => {
    const f = await fleetOf(ctx);
    if (f === undefined) return ctx.skip();
    await f.node('relay-1');
    // The per-address rate off (its default burst is checked in api-keyed.test.ts with a frozen clock).
    const a = await startUnityRelayAllocator({
      redisUrl: f.redis.url,
      secret,
      apiPort: 0,
      apiRateLimitPerMinute: 0,
      apiLimits: { allocationsPerMinutePerAddress: 0 },
    });
    f.running.push(a);
    const statuses = await Promise.all(
      Array.from({ length: 130 }, () =>
        post(a.apiUrl, '/v1/allocate', { maxConnections: 2 }).then((r) => r.status),
      ),
    );
    expect(statuses.filter((s) => s === 201)).toHaveLength(100);
    // The rest: the cap (429), or the global rate (503) for those that passed the cap's first look together.
    expect(statuses.filter((s) => s !== 201 && s !== 429 && s !== 503)).toEqual([]);
    expect(await a.service.liveOf('127.0.0.1')).toBe(100);
  });
});
