/**
 * A relay node's presence in a fleet: its record in the node registry (load, allocations,
 * draining), refreshed at every heartbeat, and the Redis records of the allocations it holds,
 * kept alive from that heartbeat only (the datapath never waits on Redis). The Redis layout is in
 * allocation-service.ts.
 */
import type { ProtocolMetrics } from '../../../core/metrics.js';
import type { NodeAnnouncement } from '../../../core/node-registry.js';
import { type RedisConnection, storeCall } from '../../../core/redis.js';
import { type FleetNodeView, setNodeGauges } from './view.js';

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
