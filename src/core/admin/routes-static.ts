/**
 * The dashboard's files: the shell (`/`, `/assets/*` from web/dashboard), uPlot
 * (`/assets/vendor/uplot/*`) and each protocol's own page (`/assets/protocols/<name>/*`, from the
 * folder its module declares). Paths are cut and decoded segment by segment from the raw URL, and
 * `readStatic` refuses anything outside those folders.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { type AdminServerEntry, parseUrl, pathSegments, sendError } from './http.js';
import { readStatic, type StaticFile } from './static.js';

export interface StaticRouteOptions {
  webDir: string | undefined;
  uplotDir: string | undefined;
  servers: () => readonly AdminServerEntry[];
}

const CSP =
  "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'";

export function registerStaticRoutes(app: FastifyInstance, options: StaticRouteOptions): void {
  const serve = (reply: FastifyReply, file: StaticFile | undefined, cache: string) => {
    if (file === undefined) return sendError(reply, 404, 'not found');
    return reply
      .code(200)
      .headers({ 'cache-control': cache, 'content-security-policy': CSP })
      .type(file.type)
      .send(file.body);
  };

  const page = async (_req: FastifyRequest, reply: FastifyReply) =>
    serve(
      reply,
      options.webDir === undefined ? undefined : await readStatic(options.webDir, 'index.html'),
      'no-cache',
    );
  app.get('/', page);
  app.get('/index.html', page);

  app.get('/assets/*', async (req, reply) => {
    const url = parseUrl(req.url);
    const p = url === undefined ? undefined : pathSegments(url.pathname);
    if (p === undefined) return sendError(reply, 400, 'bad path');
    // p[0] is 'assets'.
    if (p[1] === 'vendor' && p[2] === 'uplot') {
      const dir = options.uplotDir;
      return serve(
        reply,
        dir === undefined ? undefined : await readStatic(dir, p.slice(3).join('/')),
        'public, max-age=86400',
      );
    }
    if (p[1] === 'protocols' && p[2] !== undefined) {
      // A protocol's page, from the folder its module declares (only for a running server).
      const dir = options.servers().find((s) => s.protocol === p[2])?.page?.dir;
      return serve(
        reply,
        dir === undefined ? undefined : await readStatic(dir, p.slice(3).join('/')),
        'no-cache',
      );
    }
    const dir = options.webDir;
    return serve(
      reply,
      dir === undefined ? undefined : await readStatic(dir, p.slice(1).join('/')),
      'no-cache',
    );
  });
}
