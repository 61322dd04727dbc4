/**
 * What every Redis-backed RMC store shares: where its keys live, which node it speaks for, and
 * how a control-plane call waits on Redis (bounded) and fails when Redis cannot answer.
 *
 * Only control-plane methods come here (login, registration, session create/join/leave). The
 * transport and dispatch path (framing, PRUDP acks, the envelope, routing, every other method)
 * never does: a call here is an awaited promise inside one handler, so other calls on the same
 * connection keep being dispatched and answered while it waits.
 */
import type { ProtocolMetrics } from '../../../core/metrics.js';
import {
  durableCall,
  type RedisConnection,
  StoreNotDurableError,
  StoreUnavailableError,
  storeCall,
} from '../../../core/redis.js';
import { RmcError } from '../errors.js';
import { DEFAULT_STORE_TIMEOUT_MS } from '../options.js';

/** The RMC error a control-plane call answers while Redis is down or slow (docs/rmc.md, "Fleet"). */
export const STORE_UNAVAILABLE_ERROR = 'RendezVous::ConnectionFailure';

/** Default longest wait for one control-plane call to Redis, in ms (`rmc.storeTimeoutMs`: the declaration's, options.ts). */
export { DEFAULT_STORE_TIMEOUT_MS };

export interface FleetStoreContext {
  redis: RedisConnection;
  /**
   * This process as a node: `<kind>:<id>` (`rmc-secure:eu-1`), the suffix of its node record key.
   * Records a store writes for this process's connections carry it, so other processes can tell
   * when they belong to a dead node (its record expired, outside an outage's recovery window;
   * see `LUA_ALIVE`) and drop them.
   */
  nodeRef: string;
  /**
   * This process's incarnation (random, per start), announced in its node record's
   * `meta.incarnation`. Records carry it too, so a node restarted under the same id within its
   * TTL does not inherit (or collide with) the records of its previous life.
   */
  incarnation: string;
  /** Longest wait per call (default 2000 ms). */
  timeoutMs?: number;
  /** Counts `store_unavailable` answers. */
  metrics?: ProtocolMetrics;
}

/**
 * Key prefixes: `<prefix>rmc:` for RMC state, `<prefix>node:` for node records (node-registry.ts),
 * and the fleet's own `<prefix>` (what scripts get to find node records and the fleet's
 * liveness keys, `fleet:beat-due` and `fleet:recovering`).
 */
export function keysOf(ctx: FleetStoreContext): { rmc: string; node: string; fleet: string } {
  return { rmc: `${ctx.redis.prefix}rmc:`, node: `${ctx.redis.prefix}node:`, fleet: ctx.redis.prefix };
}

/**
 * Runs one control-plane Redis call with a bounded wait; with `durable`, it is acknowledged only
 * once the connection's replicas hold it (`durableCall`: a Sentinel set's replica), else it fails
 * the same way as an outage (`store_not_durable` counted). "Redis cannot answer now" (down, a
 * timeout, a reconnect in progress) becomes `RendezVous::ConnectionFailure` with a message
 * saying to try again; other errors pass through.
 */
export async function controlPlane<T>(
  ctx: FleetStoreContext,
  what: string,
  fn: () => Promise<T>,
  durable = false,
): Promise<T> {
  const timeoutMs = ctx.timeoutMs ?? DEFAULT_STORE_TIMEOUT_MS;
  let timer: NodeJS.Timeout | undefined;
  try {
    if (!ctx.redis.up) throw new StoreUnavailableError(`the store is unavailable (${what}): Redis is down`);
    return await Promise.race([
      durable ? durableCall(ctx.redis, what, fn) : storeCall(what, fn),
      new Promise<never>((_, reject) => {
        timer = setTimeout(
          () =>
            reject(new StoreUnavailableError(`the store did not answer within ${timeoutMs} ms (${what})`)),
          timeoutMs,
        );
      }),
    ]);
  } catch (err) {
    if (err instanceof StoreNotDurableError) {
      ctx.metrics?.count('store_not_durable');
      throw RmcError.of(
        STORE_UNAVAILABLE_ERROR,
        `the server could not make this durable in its store; try again later (${what})`,
      );
    }
    if (err instanceof StoreUnavailableError) {
      ctx.metrics?.count('store_unavailable');
      throw RmcError.of(
        STORE_UNAVAILABLE_ERROR,
        `the server cannot reach its store; try again later (${what})`,
      );
    }
    throw err;
  } finally {
    if (timer !== undefined) clearTimeout(timer);
  }
}

/** `controlPlane` for a write whose acknowledgement must survive the loss of the primary. */
export function durablePlane<T>(ctx: FleetStoreContext, what: string, fn: () => Promise<T>): Promise<T> {
  return controlPlane(ctx, what, fn, true);
}

/** `<node>#<incarnation>#<connection>`: what records of one connection are keyed by. */
export function memberRef(ctx: FleetStoreContext, connectionId: number): string {
  return `${ctx.nodeRef}#${ctx.incarnation}#${connectionId}`;
}

/** Splits a member ref into its node (`<kind>:<id>`) and connection id. */
export function parseMemberRef(ref: string): { node: string; connectionId: number } {
  return { node: ref.slice(0, ref.indexOf('#')), connectionId: Number(ref.slice(ref.lastIndexOf('#') + 1)) };
}

/**
 * A Lua helper every script starts with: is the process that owns `ref` alive? `fleet` is the
 * fleet's key prefix (`keysOf(ctx).fleet`).
 *
 * - Its node record names another incarnation: dead (that process was replaced).
 * - Its node record names its incarnation: alive.
 * - Its node record is missing: dead, unless the fleet is recovering from an outage: no node has
 *   heartbeated for a while (Redis's clock is past `fleet:beat-due`, as when Redis comes back
 *   with its data after records expired and nobody has heartbeated yet), or `fleet:recovering`
 *   is set (the first heartbeat after such a gap sets it for two TTLs, the time every live node
 *   has to reconnect and heartbeat). Then the member is kept: a node that is really dead loses
 *   its records once the window is over (docs/rmc.md, "Dead nodes"; node-registry.ts).
 *
 * Answers are cached per node and incarnation for the length of one script.
 */
export const LUA_ALIVE = `
local aliveCache = {}
local recoveringNow = {}
local function recovering(fleet, kind)
  if recoveringNow[kind] == nil then
    local t = redis.call('TIME')
    local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
    local due = tonumber(redis.call('GET', fleet .. 'fleet:beat-due:' .. kind))
    recoveringNow[kind] = (due ~= nil and now > due) or redis.call('EXISTS', fleet .. 'fleet:recovering:' .. kind) == 1
  end
  return recoveringNow[kind]
end
local function alive(fleet, ref)
  local node, inc = string.match(ref, '^([^#]*)#([^#]*)#')
  if node == nil then return false end
  local id = node .. '#' .. inc
  local known = aliveCache[id]
  if known ~= nil then return known end
  local v = redis.call('GET', fleet .. 'node:' .. node)
  local ok
  if v then
    ok = string.find(v, '"incarnation":"' .. inc .. '"', 1, true) ~= nil
  else
    ok = recovering(fleet, string.match(node, '^([^:]*):') or '')
  end
  aliveCache[id] = ok
  return ok
end
`;

/**
 * Clean-ups that must happen eventually (a disconnect's logout and session leave): tried at
 * once, and while Redis cannot answer, kept (at most `max`, oldest dropped first) and retried
 * every `retryMs` until they succeed, so an outage leaves no login session or membership behind
 * for a connection that is gone.
 */
export class CleanupQueue {
  private readonly pending: { what: string; fn: () => Promise<unknown> }[] = [];
  private timer: NodeJS.Timeout | undefined = undefined;
  private running = false;
  private readonly ctx: FleetStoreContext;
  private readonly max: number;
  private readonly retryMs: number;

  constructor(ctx: FleetStoreContext, max = 100_000, retryMs = 1000) {
    this.ctx = ctx;
    this.max = max;
    this.retryMs = retryMs;
  }

  get size(): number {
    return this.pending.length;
  }

  async run(what: string, fn: () => Promise<unknown>): Promise<void> {
    try {
      await controlPlane(this.ctx, what, fn, true);
    } catch (err) {
      if (!(err instanceof RmcError) || err.namespace !== 'RendezVous' || err.code !== 0x01) throw err;
      if (this.pending.length >= this.max) {
        this.pending.shift();
        this.ctx.metrics?.count('store_cleanups_dropped');
      }
      this.pending.push({ what, fn });
      this.schedule();
    }
  }

  /** Stops retrying (what is still pending is dropped). */
  close(): void {
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
    this.pending.length = 0;
  }

  private schedule(): void {
    if (this.timer !== undefined) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.retry();
    }, this.retryMs);
    this.timer.unref();
  }

  private async retry(): Promise<void> {
    if (this.running) return;
    this.running = true;
    try {
      while (this.pending.length > 0 && this.ctx.redis.up) {
        const next = this.pending[0]!;
        try {
          await controlPlane(this.ctx, next.what, next.fn, true);
        } catch {
          break;
        }
        this.pending.shift();
      }
    } finally {
      this.running = false;
      if (this.pending.length > 0) this.schedule();
    }
  }
}
