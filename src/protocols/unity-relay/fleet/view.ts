/**
 * What a Unity Relay fleet looks like from outside: the registry kind of relay nodes, a node as
 * the dashboard and the per-node gauges show it, the endpoints its allocations carry, and the
 * one log line per Redis outage. See deploy.md ("Unity Relay as a fleet").
 */
import type { Logger } from '../../../core/logger.js';
import type { ProtocolMetrics } from '../../../core/metrics.js';
import type { NodeRecord } from '../../../core/node-registry.js';
import { type ServerEndpointJson, serverEndpoint } from '../api.js';

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

/** Logs a Redis failover this process went through (the new primary, the time without one). */
export function redisFailoverLogger(
  log: Logger,
  role: string,
): (from: string, to: string, downMs: number) => void {
  return (from, to, downMs) =>
    log.warn({ role, from, to, downMs }, 'Redis failed over: now on the new primary');
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
