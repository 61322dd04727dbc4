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
 * | `ur:alloc:<guid>` | string | JSON `StoredAllocation` | `bindTimeoutMs + recordTtlMs` after creation; each heartbeat of the node holding it pushes that to `recordTtlMs` from then |
 * | `ur:code:<CODE>` | string | JSON `StoredJoinCode` | `joinCodeTtlMs` after it was made, earlier when its host's record goes |
 * | `ur:hostcode:<guid>` | string | the host's current join code | with the code |
 * | `ur:pending:<node>` | sorted set | allocation ids placed on a node and not adopted yet, scored by bind deadline | entries at their deadline, or when the node reports it adopted them |
 * | `ur:owner:<address>` | sorted set | allocation ids per API client address (callers without the API key), scored by their record's expiry | entries with their record |
 *
 * Every time in these keys is Redis's own clock (`TIME` in the scripts), never an allocator's or
 * a node's. A relay node writes to Redis only from its heartbeat (`RelayNodePresence`):
 * its node record, then `REFRESH_SCRIPT` over the allocations it holds.
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
  liveCapError,
  ownerOf,
  type Requester,
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
  /** ms, the allocator's clock (informational). */
  createdAt: number;
  /** The API client address it counts against (`ur:owner:<owner>`); '' for a caller with the API key. */
  owner: string;
  /** How long a node's refresh keeps it (`recordTtlMs` of the allocator that made it). */
  ttlMs: number;
}

interface StoredJoinCode {
  host: string;
  node: string;
  region: string;
  hostConnectionData: string;
  /** ms, Redis's clock: the latest it lives, however long its host does. */
  expiresAt: number;
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
   * How long an allocation's record outlives the last refresh from the node holding it (each
   * node refreshes the records of its allocations at every heartbeat, never for less than its
   * own heartbeat TTL). The record is where join codes are made from, and it counts against its
   * address's live cap while it lives. A new record lives `bindTimeoutMs` + this. Default 30 s.
   */
  recordTtlMs?: number;
  /** Clock written into connection data (creation time, bind deadline). Default `Date.now`. */
  now?: () => number;
}

/** Join code alphabet: no 0/O, 1/I/L (as in Unity's 6-character codes). */
const JOIN_ALPHABET = 'ABCDEFGHJKMNPQRSTUVWXYZ23456789';

// Admits and places one allocation, atomically, in Redis's clock:
// 1. the per-address cap: drops the owner's expired entries, refuses (-2) if it holds `max`
//    (max -1: a caller with the API key, neither capped nor counted per address);
// 2. placement: the candidate with the lowest (reported load + placements not yet bound) /
//    capacity, refusing (-1) when none has room, unless `force` (a joiner goes to its host's node
//    whatever its load); allocators that place at the same time see each other's placements, so a
//    burst spreads although the nodes' reported load lags;
// 3. records the placement (pending set) and the owner's entry, which lives as long as the new
//    record will unless its node refreshes it.
// KEYS: the owner's set, then each candidate's pending set. ARGV: allocation id, bind window ms,
// first index to look at (random, so ties spread), most live allocations for the owner (-1: no cap), the
// owner entry's lifetime ms, '1' to force, then load and capacity of each candidate.
// Returns the chosen candidate's index (from 0), -1 (no room) or -2 (the owner is at its cap).
const PLACE_SCRIPT = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local owner = KEYS[1]
local maxLive = tonumber(ARGV[4])
if maxLive >= 0 then
  redis.call('ZREMRANGEBYSCORE', owner, '-inf', now)
  if redis.call('ZCARD', owner) >= maxLive then return -2 end
end
local n = #KEYS - 1
local window = tonumber(ARGV[2])
local start = tonumber(ARGV[3])
local force = ARGV[6] == '1'
local best = -1
local bestScore = math.huge
for j = 0, n - 1 do
  local i = (start + j) % n + 1
  local key = KEYS[i + 1]
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  local pending = redis.call('ZCARD', key)
  local load = tonumber(ARGV[5 + 2 * i])
  local cap = tonumber(ARGV[6 + 2 * i])
  if force or load + pending < cap then
    local score = (load + pending) / math.max(cap, 1)
    if score < bestScore then
      best = i
      bestScore = score
    end
  end
end
if best < 0 then return -1 end
local pendingKey = KEYS[best + 1]
redis.call('ZADD', pendingKey, now + window, ARGV[1])
if redis.call('PTTL', pendingKey) < window then redis.call('PEXPIRE', pendingKey, window) end
if maxLive >= 0 then
  local life = tonumber(ARGV[5])
  redis.call('ZADD', owner, now + life, ARGV[1])
  if redis.call('PTTL', owner) < life then redis.call('PEXPIRE', owner, life) end
end
return best - 1`;

// Live allocations of one owner, in Redis's clock. KEYS: the owner's set.
const LIVE_SCRIPT = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')`;

// A host's join code: its current one if it still lives, else the first free candidate, made
// and recorded as the host's in the same step (so concurrent requests agree on one code).
// KEYS: the host's record, its hostcode key. ARGV: the code key prefix, join code lifetime ms,
// the host's guid, then candidate codes. Returns {'ok', code}, {'missing'}, {'not_host'} or
// {'taken'} (every candidate in use).
const JOIN_CODE_SCRIPT = `
local raw = redis.call('GET', KEYS[1])
if not raw then return {'missing'} end
local a = cjson.decode(raw)
if a.role ~= 'host' then return {'not_host'} end
local existing = redis.call('GET', KEYS[2])
if existing then
  local jc = redis.call('GET', ARGV[1] .. existing)
  if jc and cjson.decode(jc).host == ARGV[3] then return {'ok', existing} end
end
local left = redis.call('PTTL', KEYS[1])
if left == -2 then return {'missing'} end
local life = tonumber(ARGV[2])
local ttl = life
if left >= 0 and left < ttl then ttl = left end
if ttl <= 0 then return {'missing'} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local value = cjson.encode({ host = ARGV[3], node = a.node, region = a.region,
  hostConnectionData = a.connectionData, expiresAt = now + life })
for i = 4, #ARGV do
  if redis.call('SET', ARGV[1] .. ARGV[i], value, 'PX', ttl, 'NX') then
    redis.call('SET', KEYS[2], ARGV[i], 'PX', ttl)
    return {'ok', ARGV[i]}
  end
end
return {'taken'}`;

/** Candidate join codes drawn per request (a collision with a live code draws the next). */
const JOIN_CODE_CANDIDATES = 8;

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
    this.recordTtlMs = o.recordTtlMs ?? 30_000;
    this.now = o.now ?? Date.now;
  }

  private key(...parts: string[]): string {
    return `${this.redis.prefix}ur:${parts.join(':')}`;
  }

  private nodes(): Promise<NodeRecord[]> {
    return this.registry.live(RELAY_NODE_KIND);
  }

  /** How long a new record lives (and its owner entry counts) before its node refreshes it. */
  private get firstLifeMs(): number {
    return this.bindTimeoutMs + this.recordTtlMs;
  }

  async regions(): Promise<readonly Region[]> {
    const ids = [...new Set((await this.nodes()).map((n) => n.region))].sort();
    return ids.map((id) => ({ id, description: `gamewire relay nodes in ${id}` }));
  }

  async allocate(
    maxConnections: number,
    asked: string | undefined,
    requester: Requester,
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
    const node = await this.place(candidates, guidFromBytes(id), requester, false);
    if (node === undefined) throw noRoom(region);
    return this.create(id, 'host', maxConnections, node, ownerOf(requester), undefined);
  }

  async joinCode(guid: string): Promise<string> {
    const candidates: string[] = [];
    for (let i = 0; i < JOIN_CODE_CANDIDATES; i++) candidates.push(newJoinCode());
    const reply = (await storeCall('join code', () =>
      this.redis.client.eval(
        JOIN_CODE_SCRIPT,
        2,
        this.key('alloc', guid),
        this.key('hostcode', guid),
        this.key('code', ''),
        String(this.joinCodeTtlMs),
        guid,
        ...candidates,
      ),
    )) as string[];
    switch (reply[0]) {
      case 'ok':
        return reply[1]!;
      case 'not_host':
        throw new ApiError(400, 'Bad Request', 'join codes are for host allocations');
      case 'taken':
        throw new ApiError(503, 'Service Unavailable', 'could not draw a free join code; retry shortly');
      default:
        throw new ApiError(404, 'Not Found', 'allocation not found');
    }
  }

  async join(code: string, requester: Requester, admit: () => Promise<void>): Promise<AllocationJson> {
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
    await this.place([node], guidFromBytes(id), requester, true);
    const hostId = bytesFromGuid(jc.host);
    return {
      ...(await this.create(id, 'client', 1, node, ownerOf(requester), hostId)),
      hostConnectionData: jc.hostConnectionData,
    };
  }

  async liveOf(owner: string): Promise<number> {
    return Number(
      await storeCall('address allocations', () =>
        this.redis.client.eval(LIVE_SCRIPT, 1, this.key('owner', owner)),
      ),
    );
  }

  /**
   * Admits (the requester's live cap) and places (on the best candidate, or on the only one with
   * `force`) in one script. Returns the node, or undefined when none has room.
   */
  private async place(
    candidates: NodeRecord[],
    guid: string,
    requester: Requester,
    force: boolean,
  ): Promise<NodeRecord | undefined> {
    const args: string[] = [
      guid,
      String(this.bindTimeoutMs),
      String(randomBytes(2).readUInt16BE(0)),
      String(requester.keyed ? -1 : requester.maxLive),
      String(this.firstLifeMs),
      force ? '1' : '0',
    ];
    for (const n of candidates) args.push(String(n.load), String(n.capacity));
    const index = (await storeCall('placement', () =>
      this.redis.client.eval(
        PLACE_SCRIPT,
        1 + candidates.length,
        this.key('owner', ownerOf(requester)),
        ...candidates.map((n) => this.key('pending', n.id)),
        ...args,
      ),
    )) as number;
    if (index === -2) throw liveCapError(requester.keyed ? 0 : requester.maxLive);
    return index < 0 ? undefined : candidates[index];
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
    const stored: StoredAllocation = {
      role,
      node: node.id,
      region: node.region,
      connectionData,
      maxConnections,
      createdAt: now,
      owner,
      ttlMs: this.recordTtlMs,
    };
    // The owner's entry was added with the placement (PLACE_SCRIPT), with the same lifetime.
    await storeCall('allocation', () =>
      this.redis.client.set(this.key('alloc', guid), JSON.stringify(stored), 'PX', this.firstLifeMs),
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

// A relay node's heartbeat over the allocations it holds (ids in ARGV from 4): each one is no
// longer pending on this node, and its record, its owner entry and (for a host) its join code
// live `max(record ttlMs, floor)` from now (never shortened; a code never past its own
// `expiresAt`). Records gone or placed elsewhere are left alone. ARGV: key prefix, node id,
// floor ms, ids. Returns how many records it refreshed.
const REFRESH_SCRIPT = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local p = ARGV[1] .. 'ur:'
local node = ARGV[2]
local floor = tonumber(ARGV[3])
local pending = p .. 'pending:' .. node
local refreshed = 0
local function extend(key, ttl)
  local left = redis.call('PTTL', key)
  -- -1: no expiry yet (an owner set the ZADD above just made): every key here must expire.
  if left == -1 or (left >= 0 and left < ttl) then redis.call('PEXPIRE', key, ttl) end
end
for i = 4, #ARGV do
  local id = ARGV[i]
  redis.call('ZREM', pending, id)
  local key = p .. 'alloc:' .. id
  local raw = redis.call('GET', key)
  if raw then
    local ok, a = pcall(cjson.decode, raw)
    if ok and type(a) == 'table' and a.node == node then
      local ttl = math.max(tonumber(a.ttlMs) or 0, floor)
      extend(key, ttl)
      if type(a.owner) == 'string' and a.owner ~= '' then
        local ownerKey = p .. 'owner:' .. a.owner
        local score = tonumber(redis.call('ZSCORE', ownerKey, id))
        if not score or score < now + ttl then redis.call('ZADD', ownerKey, now + ttl, id) end
        extend(ownerKey, ttl)
      end
      if a.role == 'host' then
        local hostcode = p .. 'hostcode:' .. id
        local code = redis.call('GET', hostcode)
        if code then
          local codeKey = p .. 'code:' .. code
          local jc = redis.call('GET', codeKey)
          if jc then
            local ok2, c = pcall(cjson.decode, jc)
            if ok2 and type(c) == 'table' and c.host == id then
              local codeTtl = math.min(ttl, (tonumber(c.expiresAt) or 0) - now)
              if codeTtl > 0 then
                extend(codeKey, codeTtl)
                extend(hostcode, codeTtl)
              end
            end
          end
        end
      end
      refreshed = refreshed + 1
    end
  end
end
return refreshed`;

/** Ids per `REFRESH_SCRIPT` call, so one call never holds Redis long. */
const REFRESH_BATCH = 500;

/**
 * What a relay node keeps alive in Redis for the allocations it holds (control plane, from its
 * heartbeat only): their records, owner entries and hosts' join codes, and their removal from
 * its pending set once adopted.
 */
export class HeldAllocationRecords {
  private readonly redis: RedisConnection;
  private readonly nodeId: string;
  private readonly floorMs: number;

  /** `floorMs`: the shortest life a refresh gives (the node's heartbeat TTL). */
  constructor(redis: RedisConnection, nodeId: string, floorMs: number) {
    this.redis = redis;
    this.nodeId = nodeId;
    this.floorMs = floorMs;
  }

  /** Refreshes the records of `ids` (GUIDs); returns how many it found. */
  async refresh(ids: readonly string[]): Promise<number> {
    let refreshed = 0;
    for (let i = 0; i < ids.length; i += REFRESH_BATCH) {
      const batch = ids.slice(i, i + REFRESH_BATCH);
      refreshed += Number(
        await storeCall('allocation refresh', () =>
          this.redis.client.eval(
            REFRESH_SCRIPT,
            0,
            this.redis.prefix,
            this.nodeId,
            String(this.floorMs),
            ...batch,
          ),
        ),
      );
    }
    return refreshed;
  }
}

/** What a relay node reports at each heartbeat. */
export interface NodeSample {
  /** Bound allocations. */
  load: number;
  /** Allocations it holds (bound or waiting to bind). */
  allocations: number;
  /** The GUIDs of those allocations (empty unless asked for). */
  held: string[];
}

/**
 * A relay node's presence in the registry: refreshes its load and allocation count every
 * heartbeat, reports its own gauges, drains on request. With `records`, every heartbeat period
 * it also publishes its record and then refreshes the allocations it holds in Redis, in that
 * order: an adopted allocation leaves the pending set only once the published load counts it.
 */
export class RelayNodePresence {
  readonly announcement: NodeAnnouncement;
  private readonly timer: NodeJS.Timeout;
  private readonly beatTimer: NodeJS.Timeout | undefined;
  private readonly sample: (withHeld: boolean) => NodeSample;
  private readonly metrics: ProtocolMetrics;
  private readonly records: HeldAllocationRecords | undefined;
  private beating: Promise<void> | undefined;

  constructor(
    announcement: NodeAnnouncement,
    heartbeatMs: number,
    sample: (withHeld: boolean) => NodeSample,
    metrics: ProtocolMetrics,
    records?: HeldAllocationRecords,
  ) {
    this.announcement = announcement;
    this.sample = sample;
    this.metrics = metrics;
    this.records = records;
    this.refresh();
    this.timer = setInterval(() => this.refresh(), Math.max(50, Math.floor(heartbeatMs / 2)));
    this.timer.unref();
    if (records !== undefined) {
      this.beatTimer = setInterval(() => {
        this.beating ??= this.beat().finally(() => {
          this.beating = undefined;
        });
      }, heartbeatMs);
      this.beatTimer.unref();
    }
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

  private refresh(withHeld = false): NodeSample {
    const sample = this.sample(withHeld);
    this.announcement.update({ load: sample.load });
    this.announcement.info.meta = {
      ...this.announcement.info.meta,
      allocations: String(sample.allocations),
    };
    setNodeGauges(this.metrics, [this.view()]);
    return sample;
  }

  /** Publishes the node's load, then refreshes what it holds; quietly skipped while Redis is down. */
  private async beat(): Promise<void> {
    try {
      const { held } = this.refresh(true);
      await this.announcement.flush();
      await this.records?.refresh(held);
    } catch {
      // Redis is down: the next heartbeat tries again (redisStatusLogger says so once).
    }
  }

  /** Takes no new allocations; publishes it now if Redis answers (else at the next heartbeat). */
  async drain(): Promise<void> {
    this.announcement.update({ draining: true });
    this.refresh();
    await this.announcement.flush().catch(() => {});
  }

  async stop(): Promise<void> {
    clearInterval(this.timer);
    if (this.beatTimer !== undefined) clearInterval(this.beatTimer);
    await this.beating;
    await this.announcement.stop();
  }
}
