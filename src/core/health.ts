/**
 * The operations endpoint of `gamewire serve`: Prometheus metrics, liveness and readiness over
 * HTTP on one port (`--metrics-port`, bound to `--metrics-host`, loopback by default).
 *
 * - `GET /metrics`: every counter (docs/config.md lists them) and the process/runtime metrics;
 * - `GET /health`: 200 while the process runs its event loop (liveness);
 * - `GET /ready`: 200 once every server listens, 503 while starting or stopping (readiness:
 *   a load balancer stops sending new players before the sockets close).
 */
import { timingSafeEqual } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import type { ProtocolMetrics } from './metrics.js';

export type ReadyState = 'starting' | 'ready' | 'stopping';

export interface OpsServerOptions {
  host: string;
  port: number;
  metrics: () => Iterable<ProtocolMetrics>;
  /** Names of the protocols whose servers are running. */
  running: () => Iterable<string>;
  state: () => ReadyState;
  /** When set, `/metrics` requires `Authorization: Bearer <token>`; probes stay open. */
  token?: string;
}

export interface OpsServer {
  port: number;
  close(): Promise<void>;
}

export async function startOpsServer(options: OpsServerOptions): Promise<OpsServer> {
  const [{ fastify }, { createRegistry }] = await Promise.all([import('fastify'), import('./prometheus.js')]);
  const registry = createRegistry(options.metrics, options.running);
  const app: FastifyInstance = fastify();
  const expected = options.token === undefined ? undefined : Buffer.from(`Bearer ${options.token}`);
  app.get('/metrics', async (req, reply) => {
    if (expected !== undefined) {
      const got = Buffer.from(req.headers.authorization ?? '');
      if (got.length !== expected.length || !timingSafeEqual(got, expected)) {
        reply.code(401).header('www-authenticate', 'Bearer');
        return { error: 'missing or wrong admin token' };
      }
    }
    reply.header('content-type', registry.contentType);
    return registry.metrics();
  });
  app.get('/health', async () => ({ status: 'ok' }));
  app.get('/ready', async (_req, reply) => {
    const state = options.state();
    reply.code(state === 'ready' ? 200 : 503);
    return { status: state, servers: [...options.running()] };
  });
  try {
    await app.listen({ host: options.host, port: options.port });
  } catch (err) {
    await app.close().catch(() => {});
    throw err;
  }
  const address = app.server.address();
  const port = typeof address === 'object' && address !== null ? address.port : options.port;
  return { port, close: () => app.close() };
}
