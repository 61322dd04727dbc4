/**
 * The allocation service of a Unity Relay fleet: stateless allocators in front of relay nodes.
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
import type { NodeRecord, NodeRegistry } from '../../../core/node-registry.js';
import { durableCall, type RedisConnection, storeCall } from '../../../core/redis.js';
import {
  bytesFromGuid,
  guidFromBytes,
  newAllocationId,
  type Region,
  type RelayCredentials,
} from '../allocations.js';
import {
  type AllocationJson,
  type AllocationService,
  liveCapError,
  ownerOf,
  type Requester,
  STORE_RETRY_AFTER_SECONDS,
} from '../api.js';
import { ApiError } from '../errors.js';
import { nodeEndpoints, RELAY_NODE_KIND } from './view.js';

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
    // Durable even when the code already existed: the wait covers every write before it.
    const reply = (await durableCall(this.redis, 'join code', () =>
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
    // Acknowledged once durable: the record, and the placement and owner entry written before it.
    await durableCall(this.redis, 'allocation', () =>
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
    [
      { key: 'retryAfterSeconds', value: String(STORE_RETRY_AFTER_SECONDS) },
      { key: 'cause', value: 'no_relay_node' },
    ],
  );
}

function newJoinCode(): string {
  let code = '';
  for (const b of randomBytes(6)) code += JOIN_ALPHABET[b % JOIN_ALPHABET.length];
  return code;
}
