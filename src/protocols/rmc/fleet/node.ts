/**
 * A fleet process as a node: the secure servers announce themselves (kind `rmc-secure`) with
 * their endpoints, StationURL, capacity and player count; auth servers announce themselves too
 * (kind `rmc-auth`), so records written for their connections are known to belong to a live
 * process. The auth server picks a secure server per login.
 */
import type { NodeRecord, NodeRegistry } from '../../../core/node-registry.js';
import { RmcError } from '../errors.js';
import { controlPlane, type FleetStoreContext, STORE_UNAVAILABLE_ERROR } from './control-plane.js';

export const SECURE_NODE_KIND = 'rmc-secure';
export const AUTH_NODE_KIND = 'rmc-auth';

/** A node id: letters, digits, `.`, `_`, `-` (it is part of Redis keys and member refs). */
export const NODE_ID_PATTERN = /^[A-Za-z0-9._-]{1,64}$/;

/**
 * Chooses the secure server for each login: a live one in the auth server's region (any region
 * when none there has room), not draining, with room, least loaded relative to its capacity.
 * Load is the players it last published, plus the logins this auth server sent it since (so a
 * burst between two heartbeats spreads instead of piling onto the node that looked emptiest);
 * ties go round-robin.
 */
export class SecureServerPicker {
  private readonly registry: NodeRegistry;
  private readonly ctx: FleetStoreContext;
  private readonly region: string;
  /** How long a hand-out counts on top of the published load (about two heartbeats). */
  private readonly recentMs: number;
  private readonly recent = new Map<string, number[]>();
  private turn = 0;

  constructor(registry: NodeRegistry, ctx: FleetStoreContext, region: string, recentMs: number) {
    this.registry = registry;
    this.ctx = ctx;
    this.region = region;
    this.recentMs = recentMs;
  }

  /** The chosen secure server, or RendezVous::ConnectionFailure when there is none. */
  async pick(now = Date.now()): Promise<NodeRecord> {
    const nodes = await controlPlane(this.ctx, 'secure servers', () => this.registry.live(SECURE_NODE_KIND));
    // Forget hand-outs to nodes that are gone.
    for (const id of this.recent.keys()) if (!nodes.some((n) => n.id === id)) this.recent.delete(id);
    const usable = (n: NodeRecord) =>
      !n.draining && n.capacity > 0 && n.load + this.handedOut(n.id, now) < n.capacity;
    let pool = nodes.filter((n) => n.region === this.region && usable(n));
    if (pool.length === 0) pool = nodes.filter(usable);
    if (pool.length === 0)
      throw RmcError.of(STORE_UNAVAILABLE_ERROR, 'no secure server has room now; try again later');
    let best: NodeRecord[] = [];
    let bestRatio = Number.POSITIVE_INFINITY;
    for (const n of pool.sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0))) {
      const ratio = (n.load + this.handedOut(n.id, now)) / n.capacity;
      if (ratio < bestRatio) {
        bestRatio = ratio;
        best = [n];
      } else if (ratio === bestRatio) best.push(n);
    }
    const chosen = best[this.turn++ % best.length]!;
    const list = this.recent.get(chosen.id) ?? [];
    list.push(now);
    this.recent.set(chosen.id, list);
    return chosen;
  }

  private handedOut(id: string, now: number): number {
    const list = this.recent.get(id);
    if (list === undefined) return 0;
    let drop = 0;
    while (drop < list.length && now - list[drop]! > this.recentMs) drop++;
    if (drop > 0) list.splice(0, drop);
    if (list.length === 0) this.recent.delete(id);
    return list.length;
  }
}
