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
import { type RedisConnection, StoreUnavailableError, storeCall } from '../../../core/redis.js';
import { RmcError } from '../errors.js';

/** The RMC error a control-plane call answers while Redis is down or slow (docs/rmc.md, "Fleet"). */
export const STORE_UNAVAILABLE_ERROR = 'RendezVous::ConnectionFailure';

/** Default longest wait for one control-plane call to Redis, in ms. */
export const DEFAULT_STORE_TIMEOUT_MS = 2000;

export interface FleetStoreContext {
  redis: RedisConnection;
  /**
   * This process as a node: `<kind>:<id>` (`rmc-secure:eu-1`), the suffix of its node record key.
   * Records a store writes for this process's connections carry it, so other processes can tell
   * when they belong to a dead node (its record expired) and drop them.
   */
  nodeRef: string;
  /** Longest wait per call (default 2000 ms). */
  timeoutMs?: number;
  /** Counts `store_unavailable` answers. */
  metrics?: ProtocolMetrics;
}

/** Key prefixes: `<prefix>rmc:` for RMC state, `<prefix>node:` for node records (node-registry.ts). */
export function keysOf(ctx: FleetStoreContext): { rmc: string; node: string } {
  return { rmc: `${ctx.redis.prefix}rmc:`, node: `${ctx.redis.prefix}node:` };
}

/**
 * Runs one control-plane Redis call with a bounded wait. "Redis cannot answer now" (down, a
 * timeout, a reconnect in progress) becomes `RendezVous::ConnectionFailure` with a message
 * saying to try again; other errors pass through.
 */
export async function controlPlane<T>(
  ctx: FleetStoreContext,
  what: string,
  fn: () => Promise<T>,
): Promise<T> {
  const timeoutMs = ctx.timeoutMs ?? DEFAULT_STORE_TIMEOUT_MS;
  let timer: NodeJS.Timeout | undefined;
  try {
    if (!ctx.redis.up) throw new StoreUnavailableError(`the store is unavailable (${what}): Redis is down`);
    return await Promise.race([
      storeCall(what, fn),
      new Promise<never>((_, reject) => {
        timer = setTimeout(
          () =>
            reject(new StoreUnavailableError(`the store did not answer within ${timeoutMs} ms (${what})`)),
          timeoutMs,
        );
      }),
    ]);
  } catch (err) {
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

/** A Lua helper every script starts with: is the node that owns `ref` (`<nodeRef>#<conn>`) alive? */
export const LUA_ALIVE = `
local function alive(nodePrefix, ref)
  local node = string.match(ref, '^(.*)#')
  return node ~= nil and redis.call('EXISTS', nodePrefix .. node) == 1
end
`;
