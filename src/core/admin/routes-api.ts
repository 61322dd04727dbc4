/** The JSON API: the session, the servers, one server's state, and the wire view (docs/dashboard-api.md). */
import type { FastifyInstance } from 'fastify';
import type { ServersJson, SessionJson, WirePageJson } from './api-types.js';
import { type AdminServerEntry, detailJson, sendError, sendJson, serverJson, wireMessages } from './http.js';

export interface ApiRouteOptions {
  session: SessionJson;
  servers: () => readonly AdminServerEntry[];
  /** Largest `limit` of `/api/wire`. */
  maxWireLimit: number;
}

function intParam(raw: unknown, fallback: number, min: number, max: number): number | undefined {
  if (raw === undefined || raw === '') return fallback;
  if (typeof raw !== 'string' || !/^\d+$/.test(raw)) return undefined;
  const n = Number(raw);
  if (n < min) return undefined;
  return Math.min(n, max);
}

export function registerApiRoutes(app: FastifyInstance, options: ApiRouteOptions): void {
  const find = (protocol: string) => options.servers().find((s) => s.protocol === protocol);

  app.get('/api/session', async (_req, reply) => sendJson(reply, 200, options.session));

  app.get('/api/servers', async (_req, reply) =>
    sendJson(reply, 200, { servers: options.servers().map(serverJson) } satisfies ServersJson),
  );

  app.get<{ Params: { protocol: string } }>('/api/servers/:protocol', async (req, reply) => {
    const s = find(req.params.protocol);
    if (s === undefined) return sendError(reply, 404, `${req.params.protocol} is not running`);
    return sendJson(reply, 200, await detailJson(s));
  });

  app.get<{ Params: { protocol: string }; Querystring: Record<string, unknown> }>(
    '/api/wire/:protocol',
    async (req, reply) => {
      const s = find(req.params.protocol);
      if (s === undefined) return sendError(reply, 404, `${req.params.protocol} is not running`);
      const after = intParam(req.query.after, 0, 0, Number.MAX_SAFE_INTEGER);
      const limit = intParam(req.query.limit, 100, 1, options.maxWireLimit);
      if (after === undefined || limit === undefined) {
        return sendError(reply, 400, `after must be a whole number ≥ 0 and limit 1..${options.maxWireLimit}`);
      }
      const tap = s.admin?.wire;
      const messages = wireMessages(s, after, limit);
      const body: WirePageJson = {
        messages,
        next:
          messages.length > 0 ? messages[messages.length - 1]!.seq : Math.max(after, (tap?.next ?? 1) - 1),
        sampled: tap?.sampled ?? 0,
        seen: tap?.seen ?? 0,
        available: tap !== undefined,
      };
      return sendJson(reply, 200, body);
    },
  );
}
