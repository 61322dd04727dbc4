/**
 * The admin endpoint of `gamewire serve` (docs/dashboard-api.md): the dashboard page, its JSON
 * API and event stream, Prometheus `/metrics`, and the `/health` and `/ready` probes, on one
 * HTTP port (`--admin-port`, 127.0.0.1:9100 by default), served by fastify (loaded when the
 * endpoint starts). Routes are split by concern: guard.ts (hosts, fetch metadata, tokens),
 * routes-static.ts (the page and its assets, each protocol's page), routes-api.ts (state and wire),
 * routes-actions.ts (generic actions), stream.ts (the event stream), routes-ops.ts (metrics, probes).
 *
 * Security: loopback by default (anything else needs a token, checked by `serve`); with a token,
 * every request but the probes carries it (Bearer header, or the cookie `/?token=` sets); actions
 * are POST with the action token in `x-gamewire-action`; on loopback, a request naming another
 * host is refused (DNS rebinding); no CORS headers anywhere; a 401 carries nothing but an error.
 */
import { randomBytes } from 'node:crypto';
import type { FastifyError, FastifyReply, FastifyRequest } from 'fastify';
import type { ProtocolMetrics } from '../metrics.js';
import { registerGuard } from './guard.js';
import { type AdminServerEntry, parseUrl, pathSegments, type ReadyState, sendError } from './http.js';
import { registerActionRoutes } from './routes-actions.js';
import { registerApiRoutes } from './routes-api.js';
import { registerOpsRoutes } from './routes-ops.js';
import { registerStaticRoutes } from './routes-static.js';
import { dashboardDir, uplotDir } from './static.js';
import { registerStream } from './stream.js';

export type { CountersJson as Counters } from './api-types.js';
export type { AdminServerEntry, ReadyState } from './http.js';
export { countersOf } from './http.js';

export interface AdminServerOptions {
  host: string;
  port: number;
  /** Every protocol's counters, for /metrics (also those of servers that failed to start). */
  metrics: () => Iterable<ProtocolMetrics>;
  /** The servers running now. */
  servers: () => readonly AdminServerEntry[];
  state: () => ReadyState;
  /** When set, every request but GET /health and GET /ready needs it. */
  token?: string | undefined;
  version?: string;
  /** Folder of the dashboard page. Default: `web/dashboard` of the package. */
  webDir?: string | undefined;
  /** Tick of `/api/stream`. Default 1000 ms. */
  tickMs?: number;
  /** Comment line on idle streams. Default 15 000 ms. */
  pingMs?: number;
  /** Streams open at once; more get 503. Default 32. */
  maxStreams?: number;
  /** Largest `limit` of `/api/wire`. Default 500. */
  maxWireLimit?: number;
  /** Wire messages per stream event, at most. Default 500. */
  maxWirePerEvent?: number;
  /** A stream whose client has read nothing for this long is closed (it holds a slot). Default 30 000 ms. */
  stalledStreamMs?: number;
}

export interface AdminServer {
  port: number;
  /** The per-process action token (the admin token when one is configured). */
  actionToken: string;
  /** Event streams open now (tests check that closed clients leave none behind). */
  readonly streams: number;
  close(): Promise<void>;
}

/** Request bodies (actions take none they need) are read and bounded to this. */
const MAX_BODY_BYTES = 64 * 1024;

export async function startAdminServer(options: AdminServerOptions): Promise<AdminServer> {
  const { default: Fastify } = await import('fastify');
  // Always its own random value, never the admin token: the page's scripts hold the action
  // token, and the admin token stays in the HttpOnly cookie where no script can read it.
  const actionToken = randomBytes(24).toString('base64url');
  const startedAt = Date.now();
  const app = Fastify({
    logger: false,
    bodyLimit: MAX_BODY_BYTES,
    keepAliveTimeout: 5000,
    requestTimeout: 30_000,
    // `close()` ends keep-alive sockets at once rather than waiting for their timeout.
    forceCloseConnections: true,
    routerOptions: { ignoreTrailingSlash: true, ignoreDuplicateSlashes: true },
    // A path that does not decode.
    frameworkErrors: (_err: FastifyError, _req: FastifyRequest, reply: FastifyReply) => {
      sendError(reply, 400, 'bad path');
    },
  });
  app.server.headersTimeout = 10_000;
  // Bodies are read (to their bound) and ignored, whatever their type.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'buffer' }, (_req, _body, done) => done(null, undefined));

  const running = () => options.servers().map((s) => s.protocol);
  // Made now, not at the first scrape: its GC and event-loop-delay histograms count from when it
  // is made, and a process scraped late would report only what happened since (its CPU
  // counters read the process's totals whenever). Their cost is a 10 ms libuv timer and one
  // callback per GC.
  const { createRegistry } = await import('../prometheus.js');
  const registry = createRegistry(options.metrics, running);
  registerGuard(app, { host: options.host, token: options.token, actionToken });
  registerOpsRoutes(app, { registry, running, state: options.state });
  registerStaticRoutes(app, {
    webDir: options.webDir ?? dashboardDir(),
    uplotDir: uplotDir(),
    servers: options.servers,
  });
  registerApiRoutes(app, {
    session: { actionToken, version: options.version ?? '0.0.0', startedAt },
    servers: options.servers,
    maxWireLimit: options.maxWireLimit ?? 500,
  });
  registerActionRoutes(app, { servers: options.servers, actionToken });
  const streams = registerStream(app, {
    servers: options.servers,
    tickMs: options.tickMs ?? 1000,
    pingMs: options.pingMs ?? 15_000,
    maxStreams: options.maxStreams ?? 32,
    maxWirePerEvent: options.maxWirePerEvent ?? 500,
    stalledStreamMs: options.stalledStreamMs ?? 30_000,
  });

  app.setNotFoundHandler(async (req, reply) => {
    const method = req.method;
    if (method === 'POST') return sendError(reply, 404, 'no such action');
    if (method !== 'GET' && method !== 'HEAD') {
      return sendError(reply, 405, 'method not allowed', { allow: 'GET, HEAD, POST' });
    }
    const url = parseUrl(req.url);
    const p = url === undefined ? undefined : pathSegments(url.pathname);
    if (p === undefined) return sendError(reply, 400, 'bad path');
    return sendError(reply, 404, p[0] === 'api' ? 'no such endpoint' : 'not found');
  });
  app.setErrorHandler(async (err: FastifyError, _req, reply) => {
    if (reply.sent) return;
    const status = err.statusCode ?? 500;
    if (status === 413) return sendError(reply, 413, 'body too large');
    if (status >= 500) return sendError(reply, 500, `internal error: ${err.message}`);
    return sendError(reply, status, err.message);
  });

  await app.listen({ host: options.host, port: options.port });
  const address = app.server.address();
  const port = typeof address === 'object' && address !== null ? address.port : options.port;
  let closing: Promise<void> | undefined;
  return {
    port,
    actionToken,
    get streams() {
      return streams.size;
    },
    close() {
      closing ??= (async () => {
        streams.closeAll();
        await app.close();
      })();
      return closing;
    },
  };
}
