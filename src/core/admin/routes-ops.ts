/** Operations: Prometheus `/metrics` and the `/health` and `/ready` probes. */
import type { FastifyInstance } from 'fastify';
import type { Registry } from 'prom-client';
import { sendJson } from './http.js';

export interface OpsRouteOptions {
  /** The Prometheus registry (made when the endpoint starts: see server.ts). */
  registry: Registry;
  running: () => string[];
  state: () => 'starting' | 'ready' | 'stopping';
}

export function registerOpsRoutes(app: FastifyInstance, options: OpsRouteOptions): void {
  app.get('/metrics', async (_req, reply) => {
    const r = options.registry;
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
