/** Operations: Prometheus `/metrics` (its registry made on the first scrape) and the `/health` and `/ready` probes. */
import type { FastifyInstance } from 'fastify';
import type { Registry } from 'prom-client';
import type { ProtocolMetrics } from '../metrics.js';
import { sendJson } from './http.js';

export interface OpsRouteOptions {
  metrics: () => Iterable<ProtocolMetrics>;
  running: () => string[];
  state: () => 'starting' | 'ready' | 'stopping';
}

export function registerOpsRoutes(app: FastifyInstance, options: OpsRouteOptions): void {
  // Made on the first scrape: its runtime metrics (event-loop delay, GC) cost a little all the
  // time, which a dashboard-only user should not pay.
  let registry: Registry | undefined;
  const getRegistry = async (): Promise<Registry> => {
    if (registry === undefined) {
      const { createRegistry } = await import('../prometheus.js');
      registry ??= createRegistry(options.metrics, options.running);
    }
    return registry;
  };
  app.get('/metrics', async (_req, reply) => {
    const r = await getRegistry();
    return reply
      .code(200)
      .header('cache-control', 'no-store')
      .type(r.contentType)
      .send(await r.metrics());
  });
  app.get('/health', async (_req, reply) => sendJson(reply, 200, { status: 'ok' }));
  app.get('/ready', async (_req, reply) => {
    const state = options.state();
    return sendJson(reply, state === 'ready' ? 200 : 503, { status: state, servers: options.running() });
  });
}
