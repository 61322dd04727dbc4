/**
 * The admin endpoint's guard, run before every route (and before "not found"): the probes pass;
 * on loopback a request naming another host is refused (DNS rebinding); another site's requests
 * reach nothing but the page itself (Fetch metadata); the token once in the page's URL becomes
 * an HttpOnly cookie; with a token, every request carries it (Bearer header or that cookie),
 * and a 401 carries nothing but an error. Actions also need the action token (`actionGuard`).
 */
import { timingSafeEqual } from 'node:crypto';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { hostName, isLoopbackName } from './hosts.js';
import { BASE_HEADERS, headerValue, parseUrl, safeDecode, sendError } from './http.js';

export const COOKIE = 'gamewire_admin';

export interface GuardOptions {
  /** The address the endpoint listens on. */
  host: string;
  /** The admin token, when one is configured. */
  token: string | undefined;
  /** The per-process action token. */
  actionToken: string;
}

export function sameSecret(got: string | undefined, expected: Buffer): boolean {
  if (got === undefined) return false;
  const g = Buffer.from(got);
  // Compare equal-length buffers only; the length check leaks only the length.
  return g.length === expected.length && timingSafeEqual(g, expected);
}

function cookieValue(header: string | undefined, name: string): string | undefined {
  if (header === undefined) return undefined;
  for (const part of header.split(';')) {
    const eq = part.indexOf('=');
    if (eq !== -1 && part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return undefined;
}

const isProbe = (method: string, pathname: string): boolean =>
  (method === 'GET' || method === 'HEAD') && (pathname === '/health' || pathname === '/ready');

const isPage = (pathname: string): boolean => pathname === '/' || pathname === '/index.html';

export function registerGuard(app: FastifyInstance, options: GuardOptions): void {
  const token = options.token === undefined || options.token === '' ? undefined : Buffer.from(options.token);
  const loopback = isLoopbackName(options.host);
  const unauthorized = (reply: FastifyReply) =>
    sendError(reply, 401, 'missing or wrong admin token', { 'www-authenticate': 'Bearer' });

  const authorized = (req: FastifyRequest): boolean => {
    if (token === undefined) return true;
    const auth = req.headers.authorization;
    if (auth?.startsWith('Bearer ') && sameSecret(auth.slice(7), token)) return true;
    const cookie = cookieValue(req.headers.cookie, COOKIE);
    return sameSecret(cookie === undefined ? undefined : safeDecode(cookie), token);
  };

  // Every answer carries the security headers (a hijacked event stream writes its own).
  app.addHook('onSend', async (_req, reply) => {
    reply.headers(BASE_HEADERS);
  });

  app.addHook('onRequest', async (req, reply) => {
    const method = req.method;
    const url = parseUrl(req.url);
    if (url === undefined) return sendError(reply, 400, 'bad request');
    const pathname = url.pathname;
    if (isProbe(method, pathname)) return;
    // DNS rebinding: on loopback, only requests naming this machine.
    if (loopback) {
      const name = hostName(req.headers.host ?? '');
      if (name !== options.host.toLowerCase() && !isLoopbackName(name)) {
        return sendError(reply, 403, 'forbidden host');
      }
    }
    // Fetch metadata: a page on another site firing requests at this port (fetch in no-cors
    // mode, an <img>) reaches nothing but the page itself by navigation. Reading the wire arms
    // the tap, which costs the game servers work, so even "harmless" GETs are refused.
    const site = headerValue(req.headers['sec-fetch-site']);
    if ((site === 'cross-site' || site === 'same-site') && !(method === 'GET' && isPage(pathname))) {
      return sendError(reply, 403, 'cross-site request refused');
    }
    // The token once in the page's URL: set the cookie and drop the token from the address bar.
    if (token !== undefined && method === 'GET' && pathname === '/' && url.searchParams.has('token')) {
      if (!sameSecret(url.searchParams.get('token') ?? '', token)) return unauthorized(reply);
      return reply
        .code(303)
        .headers({
          location: '/',
          'set-cookie': `${COOKIE}=${encodeURIComponent(options.token ?? '')}; HttpOnly; SameSite=Strict; Path=/`,
          'cache-control': 'no-store',
          'content-length': '0',
        })
        .send();
    }
    if (!authorized(req)) return unauthorized(reply);
  });
}

/** A route hook for actions: the action token in `x-gamewire-action`, checked before the body is read. */
export function actionGuard(actionToken: string) {
  const expected = Buffer.from(actionToken);
  return async (req: FastifyRequest, reply: FastifyReply) => {
    if (!sameSecret(headerValue(req.headers['x-gamewire-action']), expected)) {
      return sendError(
        reply,
        403,
        'missing or wrong x-gamewire-action header (GET /api/session gives the token)',
      );
    }
  };
}
