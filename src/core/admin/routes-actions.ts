/**
 * Actions, generic: a protocol declares them (`AdminSource.actions`: a verb, on the server or on
 * one object of a collection) and they are reached at
 * `POST /api/servers/:protocol/:verb` and `POST /api/servers/:protocol/:collection/:id/:verb`,
 * with the action token. The body (JSON, optional) carries nothing the actions need; it is read
 * and bounded anyway (64 KiB).
 */
import type { FastifyInstance, FastifyReply } from 'fastify';
import { actionGuard } from './guard.js';
import { type AdminServerEntry, sendError, sendJson } from './http.js';
import type { AdminActionResult } from './source.js';

export interface ActionRouteOptions {
  servers: () => readonly AdminServerEntry[];
  actionToken: string;
}

export function registerActionRoutes(app: FastifyInstance, options: ActionRouteOptions): void {
  const run = async (
    reply: FastifyReply,
    protocol: string,
    collection: string | undefined,
    id: string | undefined,
    verb: string,
  ) => {
    const s = options.servers().find((x) => x.protocol === protocol);
    if (s === undefined) return sendError(reply, 404, `${protocol} is not running`);
    const found = Object.entries(s.admin?.actions ?? {}).find(
      ([, a]) => a.verb === verb && a.collection === collection,
    );
    if (found === undefined) {
      // A server-wide action the server does not offer means "not applicable here" (drain on a
      // lone process): 409; an unknown action on an object is simply not there: 404.
      const what = collection === undefined ? verb : `${collection}/${verb}`;
      return sendError(reply, collection === undefined ? 409 : 404, `${protocol} has no ${what} action`);
    }
    let result: AdminActionResult;
    try {
      result = await found[1].run(id);
    } catch (err) {
      return sendError(reply, 500, `action failed: ${(err as Error).message}`);
    }
    if ('ok' in result) return sendJson(reply, 200, { ok: true });
    return sendError(reply, result.status, result.error);
  };

  const onRequest = actionGuard(options.actionToken);
  app.post<{ Params: { protocol: string; verb: string } }>(
    '/api/servers/:protocol/:verb',
    { onRequest },
    async (req, reply) => run(reply, req.params.protocol, undefined, undefined, req.params.verb),
  );
  app.post<{ Params: { protocol: string; collection: string; id: string; verb: string } }>(
    '/api/servers/:protocol/:collection/:id/:verb',
    { onRequest },
    async (req, reply) =>
      run(reply, req.params.protocol, req.params.collection, req.params.id, req.params.verb),
  );
  // An action's path read with GET: it exists, but only as POST.
  const postOnly = async (_req: unknown, reply: FastifyReply) =>
    sendError(reply, 405, 'actions are POST only', { allow: 'POST' });
  app.get('/api/servers/:protocol/:verb', postOnly);
  app.get('/api/servers/:protocol/:collection/:id/:verb', postOnly);
}
