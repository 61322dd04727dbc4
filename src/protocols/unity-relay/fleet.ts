/**
 * Unity Relay as a fleet on Redis: stateless allocators in front of relay nodes.
 *
 * - A relay node announces itself in the node registry (src/core/node-registry.ts, kind
 *   `unity-relay`): id, region, its endpoints per transport, capacity (`maxAllocations`), load (bound
 *   allocations), draining. It never asks Redis anything on the datapath: BINDs are verified from
 *   the connection data and the fleet secret alone (`RelayCredentials`, `AllocationStore.adopt`).
 * - An allocator (`RedisAllocationService`) keeps allocations and join codes in Redis with their
 *   expiry, places each host allocation on the least-loaded live node of its region, and each
 *   joiner on its host's node.
 *
 * Redis layout, every key under the connection's prefix (`gamewire:` by default):
 *
 * | key | type | holds | expires |
 * |---|---|---|---|
 * | `ur:alloc:<guid>` | string | JSON `StoredAllocation` | `recordTtlMs` after creation |
 * | `ur:code:<CODE>` | string | JSON `StoredJoinCode` | `joinCodeTtlMs`, never after its host's record |
 * | `ur:hostcode:<guid>` | string | the host's current join code | with the code |
 * | `ur:pending:<node>` | sorted set | allocation ids placed on a node, scored by bind deadline | entries at their deadline |
 * | `ur:owner:<address>` | sorted set | allocation ids per API client address, scored by record expiry | entries with their record |
 */
import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import type { ProtocolMetrics } from '../../core/metrics.js';
import type { NodeAnnouncement, NodeRecord, NodeRegistry } from '../../core/node-registry.js';
import { type RedisConnection, storeCall } from '../../core/redis.js';
import {
  bytesFromGuid,
  guidFromBytes,
  newAllocationId,
  type Region,
  type RelayCredentials,
} from './allocations.js';
import {
  type AllocationJson,
  type AllocationService,
  ApiError,
  type ServerEndpointJson,
  STORE_RETRY_AFTER_SECONDS,
  serverEndpoint,
} from './api.js';

/** The registry kind of Unity Relay nodes. */
export const RELAY_NODE_KIND = 'unity-relay';

/** One live relay node as the dashboard shows it (`fleet()` on a running allocator or node). */
export interface FleetNodeView {
  id: string;
  region: string;
  endpoints: { transport: string; host: string; port: number }[];
  /** Bound allocations. */
  load: number;
  /** Most allocations it takes (`maxAllocations`). */
  capacity: number;
  /** Allocations it holds (bound or not yet expired), as it last reported. */
  allocations: number;
  draining: boolean;
  heartbeatAgeMs: number;
}

/** What a running unity-relay server offers the admin endpoint about the fleet. */
export interface FleetAdmin {
  readonly role: 'allocator' | 'relay' | 'all';
  /** This node's id (relay role). */
  readonly nodeId: string | undefined;
  /** Live relay nodes, or undefined when not scaled out (`--role all`). */
  fleet(): Promise<FleetNodeView[] | undefined>;
  /** No new allocations from now on; current ones finish. */
  drain(): Promise<void>;
  readonly draining: boolean;
}

export function fleetView(n: NodeRecord): FleetNodeView {
  return {
    id: n.id,
    region: n.region,
    endpoints: n.endpoints.map((e) => ({ transport: e.transport, host: e.host, port: e.port })),
    load: n.load,
    capacity: n.capacity,
    allocations: Number(n.meta?.allocations ?? n.load),
    draining: n.draining,
    heartbeatAgeMs: n.heartbeatAgeMs,
  };
}

/** The `serverEndpoints` and `relayServer` of a node's allocations, from what it advertises. */
export function nodeEndpoints(n: NodeRecord): {
  serverEndpoints: ServerEndpointJson[];
  relayServer: { ipV4: string; port: number };
} {
  const serverEndpoints: ServerEndpointJson[] = [];
  for (const e of n.endpoints) {
    if (e.transport === 'udp' || e.transport === 'dtls' || e.transport === 'ws' || e.transport === 'wss')
      serverEndpoints.push(serverEndpoint(e.transport, e.host, e.port));
  }
  const udp = serverEndpoints.find((e) => e.connectionType === 'udp') ?? serverEndpoints[0];
  return { serverEndpoints, relayServer: { ipV4: udp?.host ?? '', port: udp?.port ?? 0 } };
}

interface StoredAllocation {
  role: 'host' | 'client';
  node: string;
  region: string;
  connectionData: string;
  maxConnections: number;
  createdAt: number;
  expiresAt: number;
}

interface StoredJoinCode {
  host: string;
  node: string;
  region: string;
  hostConnectionData: string;
}

export interface RedisAllocationServiceOptions {
  redis: RedisConnection;
  registry: NodeRegistry;
  credentials: RelayCredentials;
  /** Time a new allocation has to bind (written into its connection data). Default 60 s. */
  bindTimeoutMs?: number;
  /** Join code lifetime. Default 15 min (never past the host's record). */
  joinCodeTtlMs?: number;
  /**
   * How long an allocation's record lives in Redis (join codes for it can be made, and it counts
   * against its address's live cap, that long). Default `joinCodeTtlMs`.
   */
  recordTtlMs?: number;
  now?: () => number;
}

/** Join code alphabet: no 0/O, 1/I/L (as in Unity's 6-character codes). */
const JOIN_ALPHABET = 'ABCDEFGHJKMNPQRSTUVWXYZ23456789';

// Places an allocation on the candidate with the lowest (reported load + placements not yet
// bound) / capacity, and records the placement, atomically: allocators that place at the same
// time see each other's placements, so a burst spreads although the nodes' reported load lags.
// KEYS: each candidate's pending set. ARGV: allocation id, bind window ms, first index to look
// at (random, so ties spread), then load and capacity of each candidate.
const PLACE_SCRIPT = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local n = #KEYS
local window = tonumber(ARGV[2])
local start = tonumber(ARGV[3])
local best = -1
local bestScore = math.huge
for j = 0, n - 1 do
  local i = (start + j) % n + 1
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now)
  local pending = redis.call('ZCARD', KEYS[i])
  local load = tonumber(ARGV[2 + 2 * i])
  local cap = tonumber(ARGV[3 + 2 * i])
  if load + pending < cap then
    local score = (load + pending) / cap
    if score < bestScore then
      best = i
      bestScore = score
    end
  end
end
if best < 0 then return -1 end
redis.call('ZADD', KEYS[best], now + window, ARGV[1])
redis.call('PEXPIRE', KEYS[best], window)
return best - 1`;

/** The allocation service of a fleet's allocator: state in Redis, placement over live nodes. */
export class RedisAllocationService implements AllocationService {
  readonly bindTimeoutMs: number;
  readonly joinCodeTtlMs: number;
  readonly recordTtlMs: number;
  private readonly redis: RedisConnection;
  private readonly registry: NodeRegistry;
  private readonly credentials: RelayCredentials;
  private readonly now: () => number;

  constructor(o: RedisAllocationServiceOptions) {
    this.redis = o.redis;
    this.registry = o.registry;
    this.credentials = o.credentials;
    this.bindTimeoutMs = o.bindTimeoutMs ?? 60_000;
    this.joinCodeTtlMs = o.joinCodeTtlMs ?? 900_000;
    this.recordTtlMs = o.recordTtlMs ?? this.joinCodeTtlMs;
    this.now = o.now ?? Date.now;
  }

  private key(...parts: string[]): string {
    return `${this.redis.prefix}ur:${parts.join(':')}`;
  }

  private nodes(): Promise<NodeRecord[]> {
    return this.registry.live(RELAY_NODE_KIND);
  }

  async regions(): Promise<readonly Region[]> {
    const ids = [...new Set((await this.nodes()).map((n) => n.region))].sort();
    return ids.map((id) => ({ id, description: `gamewire relay nodes in ${id}` }));
  }

  async allocate(
    maxConnections: number,
    asked: string | undefined,
    owner: string,
    admit: () => Promise<void>,
  ): Promise<AllocationJson> {
    const nodes = await this.nodes();
    // The SDK sends "default" when its QoS region lookup fails: any region will do then.
    const region = asked === undefined || asked === 'default' ? undefined : asked;
    const inRegion = region === undefined ? nodes : nodes.filter((n) => n.region === region);
    if (region !== undefined && inRegion.length === 0) {
      const known = [...new Set(nodes.map((n) => n.region))].sort().join(', ') || 'none live';
      throw new ApiError(400, 'Bad Request', `unknown region "${region}" (regions: ${known})`, [
        { key: 'region', value: region },
      ]);
    }
    const candidates = inRegion.filter((n) => !n.draining && n.capacity > 0 && n.load < n.capacity);
    if (candidates.length === 0) throw noRoom(region);
    await admit();
    const id = newAllocationId();
    const guid = guidFromBytes(id);
    const node = await this.place(candidates, guid);
    if (node === undefined) throw noRoom(region);
    return this.create(id, 'host', maxConnections, node, owner, undefined);
  }

  async joinCode(guid: string): Promise<string> {
    const stored = await this.record(guid);
    if (stored === undefined) throw new ApiError(404, 'Not Found', 'allocation not found');
    if (stored.role !== 'host') throw new ApiError(400, 'Bad Request', 'join codes are for host allocations');
    const client = this.redis.client;
    const existing = await storeCall('join code lookup', () => client.get(this.key('hostcode', guid)));
    if (existing !== null) {
      const alive = await storeCall('join code lookup', () => client.exists(this.key('code', existing)));
      if (alive === 1) return existing;
    }
    const ttl = Math.min(this.joinCodeTtlMs, stored.expiresAt - this.now());
    if (ttl <= 0) throw new ApiError(404, 'Not Found', 'allocation not found');
    const value: StoredJoinCode = {
      host: guid,
      node: stored.node,
      region: stored.region,
      hostConnectionData: stored.connectionData,
    };
    for (let attempt = 0; attempt < 10; attempt++) {
      const code = newJoinCode();
      const set = await storeCall('join code', () =>
        client.set(this.key('code', code), JSON.stringify(value), 'PX', ttl, 'NX'),
      );
      if (set === null) continue; // taken: draw again
      await storeCall('join code', () => client.set(this.key('hostcode', guid), code, 'PX', ttl));
      return code;
    }
    throw new ApiError(503, 'Service Unavailable', 'could not draw a free join code; retry shortly');
  }

  async join(code: string, owner: string, admit: () => Promise<void>): Promise<AllocationJson> {
    const normalized = code.trim().toUpperCase();
    if (!/^[A-Z0-9]{1,32}$/.test(normalized))
      throw new ApiError(404, 'Not Found', 'join code not found or expired');
    const raw = await storeCall('join code lookup', () =>
      this.redis.client.get(this.key('code', normalized)),
    );
    if (raw === null) throw new ApiError(404, 'Not Found', 'join code not found or expired');
    const jc = JSON.parse(raw) as StoredJoinCode;
    // A joiner goes to its host's node, whatever its load: that is where the host is.
    const node = (await this.nodes()).find((n) => n.id === jc.node);
    if (node === undefined)
      throw new ApiError(404, 'Not Found', "join code's host is gone (its relay node is no longer live)");
    await admit();
    const id = newAllocationId();
    await this.placeOn(node, guidFromBytes(id));
    const hostId = bytesFromGuid(jc.host);
    return {
      ...(await this.create(id, 'client', 1, node, owner, hostId)),
      hostConnectionData: jc.hostConnectionData,
    };
  }

  async liveOf(owner: string): Promise<number> {
    const key = this.key('owner', owner);
    const now = this.now();
    const reply = await storeCall('address allocations', () =>
      this.redis.client.multi().zremrangebyscore(key, '-inf', now).zcard(key).exec(),
    );
    return Number(reply?.[1]?.[1] ?? 0);
  }

  private async record(guid: string): Promise<StoredAllocation | undefined> {
    const raw = await storeCall('allocation lookup', () => this.redis.client.get(this.key('alloc', guid)));
    return raw === null ? undefined : (JSON.parse(raw) as StoredAllocation);
  }

  private async place(candidates: NodeRecord[], guid: string): Promise<NodeRecord | undefined> {
    const args: string[] = [guid, String(this.bindTimeoutMs), String(randomBytes(2).readUInt16BE(0))];
    for (const n of candidates) args.push(String(n.load), String(n.capacity));
    const index = (await storeCall('placement', () =>
      this.redis.client.eval(
        PLACE_SCRIPT,
        candidates.length,
        ...candidates.map((n) => this.key('pending', n.id)),
        ...args,
      ),
    )) as number;
    return index < 0 ? undefined : candidates[index];
  }

  private async placeOn(node: NodeRecord, guid: string): Promise<void> {
    const key = this.key('pending', node.id);
    const deadline = this.now() + this.bindTimeoutMs;
    await storeCall('placement', () =>
      this.redis.client.multi().zadd(key, deadline, guid).pexpire(key, this.bindTimeoutMs).exec(),
    );
  }

  private async create(
    id: Buffer,
    role: 'host' | 'client',
    maxConnections: number,
    node: NodeRecord,
    owner: string,
    hostId: Buffer | undefined,
  ): Promise<AllocationJson> {
    const now = this.now();
    const guid = guidFromBytes(id);
    const connectionData = this.credentials
      .issue({
        id,
        createdAt: now,
        bindBy: now + this.bindTimeoutMs,
        role,
        maxConnections,
        hostId,
        nodeId: node.id,
      })
      .toString('base64');
    const expiresAt = now + this.recordTtlMs;
    const stored: StoredAllocation = {
      role,
      node: node.id,
      region: node.region,
      connectionData,
      maxConnections,
      createdAt: now,
      expiresAt,
    };
    const ownerKey = this.key('owner', owner);
    await storeCall('allocation', () =>
      this.redis.client
        .multi()
        .set(this.key('alloc', guid), JSON.stringify(stored), 'PX', this.recordTtlMs)
        .zadd(ownerKey, expiresAt, guid)
        .pexpire(ownerKey, this.recordTtlMs)
        .exec(),
    );
    const { serverEndpoints, relayServer } = nodeEndpoints(node);
    return {
      allocationId: guid,
      allocationIdBytes: id.toString('base64'),
      connectionData,
      key: this.credentials.keyFor(id).toString('base64'),
      region: node.region,
      relayServer,
      serverEndpoints,
    };
  }
}

function noRoom(region: string | undefined): ApiError {
  return new ApiError(
    503,
    'Service Unavailable',
    `no live relay node with room${region === undefined ? '' : ` in region "${region}"`}; retry shortly`,
    [{ key: 'retryAfterSeconds', value: String(STORE_RETRY_AFTER_SECONDS) }],
  );
}

function newJoinCode(): string {
  let code = '';
  for (const b of randomBytes(6)) code += JOIN_ALPHABET[b % JOIN_ALPHABET.length];
  return code;
}

/** Logs a Redis outage once (warn) and its end once (info). */
export function redisStatusLogger(log: Logger, role: string): (up: boolean) => void {
  return (up) => {
    if (up) log.info({ role }, 'Redis is back');
    else
      log.warn(
        { role },
        role === 'relay'
          ? 'Redis is unavailable: relaying continues, heartbeats retry quietly'
          : 'Redis is unavailable: the allocation API answers 503 until it returns',
      );
  };
}

/** Gauge names in `ProtocolMetrics.nodeGauges` (exported by src/core/prometheus.ts). */
export const NODE_GAUGES = {
  allocations: 'node_allocations',
  load: 'node_load',
  heartbeatAge: 'node_heartbeat_age_seconds',
} as const;

/** Writes the per-node gauges (allocations, load, heartbeat age) of `nodes` into `metrics`. */
export function setNodeGauges(metrics: ProtocolMetrics, nodes: readonly FleetNodeView[]): void {
  const allocations = new Map<string, number>();
  const load = new Map<string, number>();
  const age = new Map<string, number>();
  for (const n of nodes) {
    allocations.set(n.id, n.allocations);
    load.set(n.id, n.load);
    age.set(n.id, n.heartbeatAgeMs / 1000);
  }
  metrics.nodeGauges.set(NODE_GAUGES.allocations, allocations);
  metrics.nodeGauges.set(NODE_GAUGES.load, load);
  metrics.nodeGauges.set(NODE_GAUGES.heartbeatAge, age);
}

/**
 * A relay node's presence in the registry: refreshes its load and allocation count every
 * heartbeat, reports its own gauges, drains on request.
 */
export class RelayNodePresence {
  readonly announcement: NodeAnnouncement;
  private readonly timer: NodeJS.Timeout;
  private readonly sample: () => { load: number; allocations: number };
  private readonly metrics: ProtocolMetrics;

  constructor(
    announcement: NodeAnnouncement,
    heartbeatMs: number,
    sample: () => { load: number; allocations: number },
    metrics: ProtocolMetrics,
  ) {
    this.announcement = announcement;
    this.sample = sample;
    this.metrics = metrics;
    this.refresh();
    this.timer = setInterval(() => this.refresh(), Math.max(50, Math.floor(heartbeatMs / 2)));
    this.timer.unref();
  }

  get draining(): boolean {
    return this.announcement.info.draining;
  }

  /** This node as the fleet view shows it (its own heartbeat age). */
  view(): FleetNodeView {
    const info = this.announcement.info;
    const age = this.announcement.heartbeatAgeMs();
    return {
      id: info.id,
      region: info.region,
      endpoints: info.endpoints.map((e) => ({ ...e })),
      load: info.load,
      capacity: info.capacity,
      allocations: Number(info.meta?.allocations ?? info.load),
      draining: info.draining,
      heartbeatAgeMs: Number.isFinite(age) ? age : -1,
    };
  }

  private refresh(): void {
    const { load, allocations } = this.sample();
    this.announcement.update({ load });
    this.announcement.info.meta = { ...this.announcement.info.meta, allocations: String(allocations) };
    setNodeGauges(this.metrics, [this.view()]);
  }

  /** Takes no new allocations; publishes it now if Redis answers (else at the next heartbeat). */
  async drain(): Promise<void> {
    this.announcement.update({ draining: true });
    this.refresh();
    await this.announcement.flush().catch(() => {});
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    await this.announcement.stop();
  }
}
