/**
 * The operations endpoint of `gamewire serve`, kept for embedders that only want Prometheus
 * metrics and the probes: it is the admin endpoint (src/core/admin/server.ts) without any
 * server's state. `gamewire serve` starts the full admin endpoint (dashboard, /api) instead.
 *
 * - `GET /metrics`: every counter (docs/config.md lists them) and the process/runtime metrics;
 * - `GET /health`: 200 while the process runs its event loop (liveness);
 * - `GET /ready`: 200 once every server listens, 503 while starting or stopping (readiness:
 *   a load balancer stops sending new players before the sockets close).
 */
import { type AdminServerEntry, type ReadyState, startAdminServer } from './admin/server.js';
import { ProtocolMetrics } from './metrics.js';

export type { ReadyState };

export interface OpsServerOptions {
  host: string;
  port: number;
  metrics: () => Iterable<ProtocolMetrics>;
  /** Names of the protocols whose servers are running. */
  running: () => Iterable<string>;
  state: () => ReadyState;
  /** When set, every request but `/health` and `/ready` requires `Authorization: Bearer <token>`. */
  token?: string;
}

export interface OpsServer {
  port: number;
  close(): Promise<void>;
}

export async function startOpsServer(options: OpsServerOptions): Promise<OpsServer> {
  const servers = (): AdminServerEntry[] => {
    const all = [...options.metrics()];
    return [...options.running()].map((protocol) => ({
      protocol,
      summary: '',
      startedAt: 0,
      endpoints: [],
      metrics: all.find((m) => m.protocol === protocol) ?? new ProtocolMetrics(protocol),
    }));
  };
  const admin = await startAdminServer({
    host: options.host,
    port: options.port,
    metrics: options.metrics,
    servers,
    state: options.state,
    token: options.token,
  });
  return { port: admin.port, close: () => admin.close() };
}
