/**
 * Which nodes of a fleet are alive, where they listen and how busy they are: the relay nodes
 * behind a Unity Relay allocator, the secure servers behind an RMC auth server.
 *
 * A node announces itself and then heartbeats (every `heartbeatMs`); each heartbeat renews its
 * record for `ttlMs`. A node that stops heartbeating (killed, partitioned) disappears from
 * `live()` when its TTL runs out, with no one having to notice it died. `pick()` chooses the
 * least-loaded live node that is not draining and has room.
 *
 * Two implementations: `MemoryNodeRegistry` (one process: the embedded default and tests) and
 * `RedisNodeRegistry` (a fleet). In Redis, a node is one string key holding its JSON, with a
 * TTL, plus its id in a sorted set per kind scored by its expiry in Redis's own clock (so clock
 * skew between machines does not matter). Listing reads the set by score, then the records.
 *
 * A node heartbeats at once when its Redis connection comes back (before the connection reports
 * itself up), not only at its next tick. Every heartbeat also keeps two keys per fleet and node
 * kind (per prefix; kinds are kept apart because their TTLs may differ: a relay node's long TTL
 * must not hide an outage from RMC nodes with a short one), so that code that treats "node
 * record missing" as "node dead" can tell an outage from a death (`fleetLivenessKeys`):
 * - `<prefix>fleet:beat-due:<kind>` (ms, Redis's clock): by when the kind's next heartbeat is overdue.
 *   Each heartbeat pushes it to its node's next heartbeat plus a quarter of the time from there
 *   to its record's expiry (the latest over all nodes; with the default heartbeat, half a TTL
 *   after the beat): a record expires only well after it has passed. Redis's clock past it means no node has heartbeated for
 *   that long: an outage (or a fleet all stopped), during which records expire although their
 *   nodes are alive, as when a Redis that kept its data comes back;
 * - `<prefix>fleet:recovering:<kind>`: set by the first heartbeat after such a gap, for two TTLs
 *   (at least the TTL plus 8 s: a reconnection's backoff and its hooks), the time every live
 *   node has to reconnect and heartbeat again.
 * Nodes of one kind should share one TTL: while a rolling change of `--heartbeat-ttl-ms` runs,
 * the longer TTL sets `beat-due`.
 * While either says so, a missing record means "not heard from yet", not "dead".
 */
import { ConfigError } from './errors.js';
import type { RedisConnection } from './redis.js';
import { storeCall } from './redis.js';

export interface NodeEndpoint {
  /** `udp`, `dtls`, `ws`, `wss`, `tcp`, `prudp`, `http` … */
  transport: string;
  host: string;
  port: number;
}

/** What a node says about itself. */
export interface NodeInfo {
  id: string;
  /** The kind of node: `unity-relay`, `rmc-secure`, … (one set per kind). */
  kind: string;
  region: string;
  endpoints: NodeEndpoint[];
  /** Most units of load it accepts (allocations, players). */
  capacity: number;
  /** Current units of load. */
  load: number;
  /** Takes no new work; finishes what it has. */
  draining: boolean;
  /** ms since the epoch (the node's clock; informational). */
  startedAt: number;
  /** Anything else the kind needs (e.g. a StationURL template). */
  meta?: Record<string, string>;
}

/** A live node as listed: its info and how old its last heartbeat is. */
export interface NodeRecord extends NodeInfo {
  heartbeatAgeMs: number;
}

export interface NodeRegistryOptions {
  /** How long a record lives without a heartbeat. Default 10 000 ms. */
  ttlMs?: number;
  /** Heartbeat period. Default a third of `ttlMs`. */
  heartbeatMs?: number;
  /**
   * `fleet:recovering` lasts at least the TTL plus this (a reconnection's backoff and its hooks;
   * see the module comment). Default 8 000 ms; tests whose connections back off for at most a
   * fraction of a second set less.
   */
  reconnectAllowanceMs?: number;
}

/** Returned by `announce`: keeps the node's record fresh until `stop()`. */
export interface NodeAnnouncement {
  readonly info: NodeInfo;
  /** Age of the last successful heartbeat in ms (Infinity before the first). */
  heartbeatAgeMs(): number;
  /** Changes load/draining/capacity; published at the next heartbeat (or now with `flush`). */
  update(change: Partial<Pick<NodeInfo, 'load' | 'draining' | 'capacity'>>): void;
  /** Publishes now. Rejects with StoreUnavailableError when the store is down. */
  flush(): Promise<void>;
  /** Stops heartbeating and removes the record (best effort). */
  stop(): Promise<void>;
}

export interface NodeRegistry {
  /** Announces a node and heartbeats it. Resolves after the first successful publish. */
  announce(info: NodeInfo): Promise<NodeAnnouncement>;
  /** Live nodes of `kind` (in `region` when given), newest heartbeat first. */
  live(kind: string, region?: string): Promise<NodeRecord[]>;
  /** The least-loaded live node with room that is not draining, or undefined. */
  pick(kind: string, region?: string): Promise<NodeRecord | undefined>;
  close(): Promise<void>;
}

/** Least load relative to capacity; among equals, a random one (so allocators spread). */
export function pickLeastLoaded(nodes: readonly NodeRecord[]): NodeRecord | undefined {
  let best: NodeRecord[] = [];
  let bestRatio = Number.POSITIVE_INFINITY;
  for (const n of nodes) {
    if (n.draining || n.capacity <= 0 || n.load >= n.capacity) continue;
    const ratio = n.load / n.capacity;
    if (ratio < bestRatio) {
      bestRatio = ratio;
      best = [n];
    } else if (ratio === bestRatio) best.push(n);
  }
  return best.length === 0 ? undefined : best[Math.floor(Math.random() * best.length)];
}

abstract class HeartbeatingRegistry implements NodeRegistry {
  readonly ttlMs: number;
  readonly heartbeatMs: number;
  private readonly announcements = new Set<NodeAnnouncement>();

  constructor(options: NodeRegistryOptions) {
    this.ttlMs = options.ttlMs ?? 10_000;
    this.heartbeatMs = options.heartbeatMs ?? Math.max(50, Math.floor(this.ttlMs / 3));
    if (this.heartbeatMs >= this.ttlMs)
      throw new ConfigError(
        `node heartbeat (${this.heartbeatMs} ms) must be shorter than its TTL (${this.ttlMs} ms)`,
      );
  }

  protected abstract publish(info: NodeInfo): Promise<void>;
  protected abstract remove(info: NodeInfo): Promise<void>;
  /** Calls `beat` when the store's connection is back after an outage; returns how to stop. */
  protected watchReconnect(_beat: () => Promise<void>): () => void {
    return () => {};
  }
  abstract live(kind: string, region?: string): Promise<NodeRecord[]>;

  async pick(kind: string, region?: string): Promise<NodeRecord | undefined> {
    return pickLeastLoaded(await this.live(kind, region));
  }

  async announce(initial: NodeInfo): Promise<NodeAnnouncement> {
    const info: NodeInfo = { ...initial, endpoints: [...initial.endpoints] };
    let lastBeat = Number.NEGATIVE_INFINITY;
    let stopped = false;
    let inFlight: Promise<void> | undefined;
    const beat = async () => {
      await this.publish(info);
      lastBeat = Date.now();
    };
    await beat();
    const timer = setInterval(() => {
      if (inFlight !== undefined) return;
      // A failed heartbeat is retried at the next tick; the record lapses only if they all fail.
      inFlight = beat()
        .catch(() => {})
        .finally(() => {
          inFlight = undefined;
        });
    }, this.heartbeatMs);
    timer.unref();
    // Back from an outage: heartbeat now, before the connection reports itself up (a record that
    // expired meanwhile is back before this process's own store calls resume).
    const unwatch = this.watchReconnect(async () => {
      if (stopped) return;
      await inFlight;
      if (!stopped) await beat().catch(() => {});
    });
    const announcement: NodeAnnouncement = {
      info,
      heartbeatAgeMs: () => Date.now() - lastBeat,
      update: (change) => {
        Object.assign(info, change);
      },
      flush: () => (stopped ? Promise.resolve() : beat()),
      stop: async () => {
        if (stopped) return;
        stopped = true;
        clearInterval(timer);
        unwatch();
        this.announcements.delete(announcement);
        await inFlight;
        await this.remove(info).catch(() => {});
      },
    };
    this.announcements.add(announcement);
    return announcement;
  }

  async close(): Promise<void> {
    await Promise.all([...this.announcements].map((a) => a.stop()));
  }
}

/** One process: records in a Map, expiring by the local clock. */
export class MemoryNodeRegistry extends HeartbeatingRegistry {
  private readonly records = new Map<string, { info: NodeInfo; beatAt: number }>();

  constructor(options: NodeRegistryOptions = {}) {
    super(options);
  }

  protected async publish(info: NodeInfo): Promise<void> {
    this.records.set(`${info.kind}\n${info.id}`, { info: structuredClone(info), beatAt: Date.now() });
  }

  protected async remove(info: NodeInfo): Promise<void> {
    this.records.delete(`${info.kind}\n${info.id}`);
  }

  async live(kind: string, region?: string): Promise<NodeRecord[]> {
    const now = Date.now();
    const out: NodeRecord[] = [];
    for (const [key, r] of this.records) {
      if (now - r.beatAt >= this.ttlMs) {
        this.records.delete(key);
        continue;
      }
      if (r.info.kind !== kind || (region !== undefined && r.info.region !== region)) continue;
      out.push({ ...structuredClone(r.info), heartbeatAgeMs: now - r.beatAt });
    }
    return out.sort((a, b) => a.heartbeatAgeMs - b.heartbeatAgeMs);
  }
}

/** The fleet-wide keys every heartbeat of `kind` keeps (see the module comment), under `prefix`. */
export function fleetLivenessKeys(prefix: string, kind: string): { beatDue: string; recovering: string } {
  return { beatDue: `${prefix}fleet:beat-due:${kind}`, recovering: `${prefix}fleet:recovering:${kind}` };
}

// KEYS[1] record key, KEYS[2] the kind's set, KEYS[3] fleet:beat-due, KEYS[4] fleet:recovering;
// ARGV: id, json, ttl ms, heartbeat ms, reconnect allowance ms. Scores and stored beat times come
// from Redis's clock.
const PUBLISH_SCRIPT = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[3])
local due = tonumber(redis.call('GET', KEYS[3]))
if due and now > due then redis.call('SET', KEYS[4], tostring(due), 'PX', math.max(2 * ttl, ttl + tonumber(ARGV[5]))) end
local hb = tonumber(ARGV[4])
local nextDue = now + hb + math.floor((ttl - hb) / 4)
if not due or nextDue > due then redis.call('SET', KEYS[3], tostring(nextDue)) end
redis.call('SET', KEYS[1], now .. '|' .. ARGV[2], 'PX', ttl)
redis.call('ZADD', KEYS[2], now + ttl, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
return now`;

// KEYS[1] the kind's set; ARGV[1] the record key prefix. Returns {now, v1, v2, …}.
const LIST_SCRIPT = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], now, '+inf')
local out = { tostring(now) }
for i, id in ipairs(ids) do
  local v = redis.call('GET', ARGV[1] .. id)
  if v then out[#out + 1] = v end
end
return out`;

/** A fleet: records in Redis (see the module comment for the layout). */
export class RedisNodeRegistry extends HeartbeatingRegistry {
  private readonly redis: RedisConnection;
  private readonly reconnectAllowanceMs: number;

  constructor(redis: RedisConnection, options: NodeRegistryOptions = {}) {
    super(options);
    this.redis = redis;
    this.reconnectAllowanceMs = options.reconnectAllowanceMs ?? 8000;
  }

  private setKey(kind: string): string {
    return `${this.redis.prefix}nodes:${kind}`;
  }

  private recordPrefix(kind: string): string {
    return `${this.redis.prefix}node:${kind}:`;
  }

  protected override watchReconnect(beat: () => Promise<void>): () => void {
    return this.redis.onReconnect?.(beat) ?? (() => {});
  }

  protected async publish(info: NodeInfo): Promise<void> {
    const fleet = fleetLivenessKeys(this.redis.prefix, info.kind);
    await storeCall('node heartbeat', () =>
      this.redis.client.eval(
        PUBLISH_SCRIPT,
        4,
        this.recordPrefix(info.kind) + info.id,
        this.setKey(info.kind),
        fleet.beatDue,
        fleet.recovering,
        info.id,
        JSON.stringify(info),
        String(this.ttlMs),
        String(this.heartbeatMs),
        String(this.reconnectAllowanceMs),
      ),
    );
  }

  protected async remove(info: NodeInfo): Promise<void> {
    await storeCall('node removal', () =>
      this.redis.client.eval(
        "redis.call('DEL', KEYS[1]); return redis.call('ZREM', KEYS[2], ARGV[1])",
        2,
        this.recordPrefix(info.kind) + info.id,
        this.setKey(info.kind),
        info.id,
      ),
    );
  }

  async live(kind: string, region?: string): Promise<NodeRecord[]> {
    const reply = (await storeCall('node list', () =>
      this.redis.client.eval(LIST_SCRIPT, 1, this.setKey(kind), this.recordPrefix(kind)),
    )) as string[];
    const now = Number(reply[0]);
    const out: NodeRecord[] = [];
    for (let i = 1; i < reply.length; i++) {
      const raw = reply[i]!;
      const bar = raw.indexOf('|');
      try {
        const info = JSON.parse(raw.slice(bar + 1)) as NodeInfo;
        if (region !== undefined && info.region !== region) continue;
        out.push({ ...info, heartbeatAgeMs: Math.max(0, now - Number(raw.slice(0, bar))) });
      } catch {
        // A record not written by this code: ignore it rather than fail the listing.
      }
    }
    return out.sort((a, b) => a.heartbeatAgeMs - b.heartbeatAgeMs);
  }
}
