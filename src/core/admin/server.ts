/**
 * The admin endpoint of `gamewire serve` (docs/dashboard-api.md): the dashboard page, its JSON
 * API and event stream, Prometheus `/metrics`, and the `/health` and `/ready` probes, on one
 * HTTP port (`--admin-port`, 127.0.0.1:9100 by default).
 *
 * Security: loopback by default (anything else needs a token, checked by `serve`); with a token,
 * every request but the probes carries it (Bearer header, or the cookie `/?token=` sets); actions
 * are POST with the action token in `x-gamewire-action`; on loopback, a request naming another
 * host is refused (DNS rebinding); no CORS headers anywhere; a 401 carries nothing but an error.
 */
import { randomBytes, timingSafeEqual } from 'node:crypto';
import http from 'node:http';
import type { Registry } from 'prom-client';
import type { ProtocolMetrics } from '../metrics.js';
import type { Endpoint } from '../server.js';
import { hostName, isLoopbackName } from './hosts.js';
import type { AdminActionResult, AdminActions, AdminSource } from './source.js';
import { dashboardDir, readStatic, uplotDir } from './static.js';
import { type WireDecoder, type WireMessageJson, wireMessageJson } from './wire-json.js';

export type ReadyState = 'starting' | 'ready' | 'stopping';

/** One running server as the admin endpoint sees it. */
export interface AdminServerEntry {
  protocol: string;
  summary: string;
  startedAt: number;
  endpoints: readonly Endpoint[];
  metrics: ProtocolMetrics;
  admin?: AdminSource | undefined;
  /** Decodes its wire messages (the protocol's codec, as `gamewire decode`). */
  decode?: WireDecoder | undefined;
}

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

const COOKIE = 'gamewire_admin';

export interface Counters {
  received: number;
  sent: number;
  bytesReceived: number;
  bytesSent: number;
  open: number;
  dropped: Record<string, number>;
  closed: Record<string, number>;
  events: Record<string, number>;
}

export function countersOf(m: ProtocolMetrics): Counters {
  return {
    received: m.received,
    sent: m.sent,
    bytesReceived: m.bytesReceived,
    bytesSent: m.bytesSent,
    open: m.open,
    dropped: Object.fromEntries(m.dropped),
    closed: Object.fromEntries(m.closed),
    events: Object.fromEntries(m.counters),
  };
}

function sameSecret(got: string | undefined, expected: Buffer): boolean {
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

interface Stream {
  res: http.ServerResponse;
  protocol: string | undefined;
  wire: string | undefined;
  wireAfter: number;
  /** Still writing the last event: skip this tick (at most one event of each kind per tick). */
  busy: boolean;
  /** When it became busy (a client that never reads is closed after `stalledStreamMs`). */
  busySince: number;
}

export async function startAdminServer(options: AdminServerOptions): Promise<AdminServer> {
  // Made now, not at the first scrape: its GC and event-loop-delay histograms count from when it
  // is made, and a process scraped late would report only what happened since (its CPU
  // counters read the process's totals whenever). Their cost is a 10 ms libuv timer and one
  // callback per GC.
  const { createRegistry } = await import('../prometheus.js');
  const registry: Registry = createRegistry(options.metrics, () => options.servers().map((s) => s.protocol));
  const token = options.token === undefined || options.token === '' ? undefined : Buffer.from(options.token);
  // Always its own random value, never the admin token: the page's scripts hold the action
  // token, and the admin token stays in the HttpOnly cookie where no script can read it.
  const actionToken = randomBytes(24).toString('base64url');
  const actionTokenBytes = Buffer.from(actionToken);
  const loopback = isLoopbackName(options.host);
  const startedAt = Date.now();
  const version = options.version ?? '0.0.0';
  const webDir = options.webDir ?? dashboardDir();
  const vendorUplot = uplotDir();
  const tickMs = options.tickMs ?? 1000;
  const pingMs = options.pingMs ?? 15_000;
  const maxStreams = options.maxStreams ?? 32;
  const maxWireLimit = options.maxWireLimit ?? 500;
  const maxWirePerEvent = options.maxWirePerEvent ?? 500;
  const stalledStreamMs = options.stalledStreamMs ?? 30_000;
  const streams = new Set<Stream>();
  let tickTimer: NodeJS.Timeout | undefined;
  let pingTimer: NodeJS.Timeout | undefined;
  let boundPort = options.port;

  const findServer = (protocol: string) => options.servers().find((s) => s.protocol === protocol);

  const serverJson = (s: AdminServerEntry) => ({
    protocol: s.protocol,
    summary: s.summary,
    startedAt: s.startedAt,
    endpoints: s.endpoints.map((e) => ({
      transport: e.transport,
      host: e.host,
      port: e.port,
      description: e.description,
    })),
    counters: countersOf(s.metrics),
    hasWire: s.admin?.wire !== undefined,
    actions: Object.keys(s.admin?.actions ?? {}),
  });

  const detailJson = async (s: AdminServerEntry) => ({
    protocol: s.protocol,
    counters: countersOf(s.metrics),
    state: (await s.admin?.state()) ?? null,
  });

  const wireMessages = (s: AdminServerEntry, after: number, limit: number): WireMessageJson[] => {
    const tap = s.admin?.wire;
    if (tap === undefined) return [];
    tap.arm();
    return tap.since(after, limit).map((m) => wireMessageJson(m, s.decode, s.admin?.hideUndecoded === true));
  };

  // ---- responses ---------------------------------------------------------------------------

  const baseHeaders = {
    'x-content-type-options': 'nosniff',
    'x-frame-options': 'DENY',
    'referrer-policy': 'no-referrer',
  };

  const send = (
    res: http.ServerResponse,
    status: number,
    body: string | Buffer,
    type: string,
    extra: Record<string, string> = {},
  ) => {
    res.writeHead(status, {
      ...baseHeaders,
      'content-type': type,
      'content-length': Buffer.byteLength(body),
      ...extra,
    });
    res.end(body);
  };

  const json = (
    res: http.ServerResponse,
    status: number,
    body: unknown,
    extra: Record<string, string> = {},
  ) =>
    send(res, status, JSON.stringify(body), 'application/json; charset=utf-8', {
      'cache-control': 'no-store',
      ...extra,
    });

  const error = (
    res: http.ServerResponse,
    status: number,
    message: string,
    extra: Record<string, string> = {},
  ) => json(res, status, { error: message }, extra);

  // ---- auth --------------------------------------------------------------------------------

  const authorized = (req: http.IncomingMessage): boolean => {
    if (token === undefined) return true;
    const auth = req.headers.authorization;
    if (auth?.startsWith('Bearer ') && sameSecret(auth.slice(7), token)) return true;
    return sameSecret(decodeCookie(cookieValue(req.headers.cookie, COOKIE)), token);
  };

  // ---- event stream --------------------------------------------------------------------------

  const writeEvent = (st: Stream, event: string, data: unknown): void => {
    if (st.res.writableEnded) return;
    const ok = st.res.write(`event: ${event}\ndata: ${JSON.stringify(data)}\n\n`);
    if (!ok && !st.busy) {
      st.busy = true;
      st.busySince = Date.now();
      st.res.once('drain', () => {
        st.busy = false;
      });
    }
  };

  let ticking = false;
  const tick = () => {
    // A state may come from a store (a fleet's Redis): never two ticks at once.
    if (streams.size === 0 || ticking) return;
    ticking = true;
    runTick()
      .catch(() => {})
      .finally(() => {
        ticking = false;
      });
  };

  const runTick = async () => {
    const servers = options.servers();
    const t = Date.now();
    const overview = {
      t,
      servers: servers.map((s) => ({ protocol: s.protocol, counters: countersOf(s.metrics) })),
    };
    // State is built once per tick and protocol, whatever the number of clients watching it.
    const states = new Map<string, Promise<unknown>>();
    for (const st of [...streams]) {
      if (st.busy) {
        if (t - st.busySince > stalledStreamMs) {
          st.res.destroy();
          removeStream(st);
        }
        continue;
      }
      writeEvent(st, 'tick', overview);
      if (st.protocol !== undefined) {
        const s = servers.find((x) => x.protocol === st.protocol);
        if (s !== undefined) {
          let body = states.get(s.protocol);
          if (body === undefined) {
            body = detailJson(s);
            states.set(s.protocol, body);
          }
          try {
            writeEvent(st, 'state', await body);
          } catch {
            // the store did not answer this tick; the next one tries again
          }
        }
      }
      if (st.wire !== undefined) {
        const s = servers.find((x) => x.protocol === st.wire);
        if (s !== undefined) {
          const messages = wireMessages(s, st.wireAfter, maxWirePerEvent);
          if (messages.length > 0) st.wireAfter = messages[messages.length - 1]!.seq;
          writeEvent(st, 'wire', { messages });
        }
      }
    }
  };

  const ping = () => {
    for (const st of streams) if (!st.busy && !st.res.writableEnded) st.res.write(': ping\n\n');
  };

  const removeStream = (st: Stream) => {
    streams.delete(st);
    if (streams.size === 0) {
      clearInterval(tickTimer);
      clearInterval(pingTimer);
      tickTimer = undefined;
      pingTimer = undefined;
    }
  };

  const openStream = (req: http.IncomingMessage, res: http.ServerResponse, url: URL) => {
    if (streams.size >= maxStreams) {
      error(res, 503, `too many event streams open (${maxStreams})`);
      return;
    }
    const protocol = url.searchParams.get('protocol') ?? undefined;
    const wire = url.searchParams.get('wire') ?? undefined;
    res.writeHead(200, {
      ...baseHeaders,
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-store',
      connection: 'keep-alive',
      'x-accel-buffering': 'no',
    });
    res.write(`retry: 2000\n\n`);
    const wireServer = wire === undefined ? undefined : findServer(wire);
    const st: Stream = {
      res,
      protocol,
      wire,
      // A new wire client starts from now, not from the whole ring.
      wireAfter: wireServer?.admin?.wire !== undefined ? wireServer.admin.wire.next - 1 : 0,
      busy: false,
      busySince: 0,
    };
    wireServer?.admin?.wire?.arm();
    streams.add(st);
    const done = () => removeStream(st);
    req.on('close', done);
    res.on('close', done);
    res.on('error', done);
    if (tickTimer === undefined) {
      tickTimer = setInterval(tick, tickMs);
      pingTimer = setInterval(ping, pingMs);
    }
    // The first tick at once, so a page has data without waiting a second.
    setImmediate(tick);
  };

  // ---- actions -------------------------------------------------------------------------------

  const runAction = async (
    res: http.ServerResponse,
    protocol: string,
    kind: keyof AdminActions,
    id: string | undefined,
  ) => {
    const s = findServer(protocol);
    if (s === undefined) {
      error(res, 404, `${protocol} is not running`);
      return;
    }
    const action = s.admin?.actions[kind];
    if (action === undefined) {
      error(res, kind === 'drain' ? 409 : 404, `${protocol} has no ${kind} action`);
      return;
    }
    let result: AdminActionResult;
    try {
      result = await action(id);
    } catch (err) {
      error(res, 500, `action failed: ${(err as Error).message}`);
      return;
    }
    if ('ok' in result) json(res, 200, { ok: true });
    else error(res, result.status, result.error);
  };

  const actionRoute = (
    parts: string[],
  ): { protocol: string; kind: keyof AdminActions; id: string | undefined } | undefined => {
    // parts: ['api', 'servers', protocol, ...]
    const protocol = parts[2];
    if (protocol === undefined) return undefined;
    if (parts.length === 4 && parts[3] === 'drain') return { protocol, kind: 'drain', id: undefined };
    if (parts.length === 6 && parts[3] === 'connections' && parts[5] === 'disconnect')
      return { protocol, kind: 'disconnect', id: parts[4] };
    if (parts.length === 6 && parts[3] === 'allocations' && parts[5] === 'end')
      return { protocol, kind: 'endAllocation', id: parts[4] };
    if (parts.length === 6 && parts[3] === 'instances' && parts[5] === 'end')
      return { protocol, kind: 'endInstance', id: parts[4] };
    return undefined;
  };

  // ---- routing -------------------------------------------------------------------------------

  const handle = async (req: http.IncomingMessage, res: http.ServerResponse): Promise<void> => {
    const method = req.method ?? 'GET';
    let url: URL;
    try {
      url = new URL(req.url ?? '/', 'http://admin.invalid');
    } catch {
      error(res, 400, 'bad request');
      return;
    }
    const pathname = url.pathname;
    if ((method === 'GET' || method === 'HEAD') && (pathname === '/health' || pathname === '/ready')) {
      if (pathname === '/health') json(res, 200, { status: 'ok' });
      else {
        const state = options.state();
        json(res, state === 'ready' ? 200 : 503, {
          status: state,
          servers: options.servers().map((s) => s.protocol),
        });
      }
      return;
    }
    // DNS rebinding: on loopback, only requests naming this machine.
    if (loopback) {
      const name = hostName(req.headers.host ?? '');
      if (name !== options.host.toLowerCase() && !isLoopbackName(name)) {
        error(res, 403, 'forbidden host');
        return;
      }
    }
    // Fetch metadata: a page on another site firing requests at this port (fetch in no-cors
    // mode, an <img>) reaches nothing but the page itself by navigation. Reading the wire arms
    // the tap, which costs the game servers work, so even "harmless" GETs are refused.
    const site = headerValue(req.headers['sec-fetch-site']);
    if (
      (site === 'cross-site' || site === 'same-site') &&
      !(method === 'GET' && (pathname === '/' || pathname === '/index.html'))
    ) {
      error(res, 403, 'cross-site request refused');
      return;
    }
    // The token once in the page's URL: set the cookie and drop the token from the address bar.
    if (token !== undefined && method === 'GET' && pathname === '/' && url.searchParams.has('token')) {
      if (!sameSecret(url.searchParams.get('token') ?? '', token)) {
        error(res, 401, 'missing or wrong admin token', { 'www-authenticate': 'Bearer' });
        return;
      }
      res.writeHead(303, {
        ...baseHeaders,
        location: '/',
        'set-cookie': `${COOKIE}=${encodeURIComponent(options.token ?? '')}; HttpOnly; SameSite=Strict; Path=/`,
        'cache-control': 'no-store',
        'content-length': 0,
      });
      res.end();
      return;
    }
    if (!authorized(req)) {
      error(res, 401, 'missing or wrong admin token', { 'www-authenticate': 'Bearer' });
      return;
    }
    const parts = pathname
      .split('/')
      .filter((p) => p !== '')
      .map(safeDecode);
    if (parts.some((p) => p === undefined)) {
      error(res, 400, 'bad path');
      return;
    }
    const p = parts as string[];

    if (method === 'POST') {
      const route = p[0] === 'api' && p[1] === 'servers' ? actionRoute(p) : undefined;
      if (route === undefined) {
        error(res, 404, 'no such action');
        return;
      }
      if (!sameSecret(headerValue(req.headers['x-gamewire-action']), actionTokenBytes)) {
        error(res, 403, 'missing or wrong x-gamewire-action header (GET /api/session gives the token)');
        return;
      }
      // The body (JSON, optional) carries nothing the actions need; read and bound it anyway.
      if (!(await drainBody(req, 64 * 1024))) {
        error(res, 413, 'body too large');
        return;
      }
      await runAction(res, route.protocol, route.kind, route.id);
      return;
    }
    if (method !== 'GET' && method !== 'HEAD') {
      error(res, 405, 'method not allowed', { allow: 'GET, HEAD, POST' });
      return;
    }

    if (pathname === '/metrics') {
      const r = registry;
      send(res, 200, await r.metrics(), r.contentType, { 'cache-control': 'no-store' });
      return;
    }
    if (p[0] === 'api') {
      if (p.length === 2 && p[1] === 'session') {
        json(res, 200, { actionToken, version, startedAt });
        return;
      }
      if (p.length === 2 && p[1] === 'servers') {
        json(res, 200, { servers: options.servers().map(serverJson) });
        return;
      }
      if (p.length === 3 && p[1] === 'servers') {
        const s = findServer(p[2]!);
        if (s === undefined) error(res, 404, `${p[2]} is not running`);
        else json(res, 200, await detailJson(s));
        return;
      }
      if (p.length >= 4 && p[1] === 'servers' && actionRoute(p) !== undefined) {
        error(res, 405, 'actions are POST only', { allow: 'POST' });
        return;
      }
      if (p.length === 2 && p[1] === 'stream') {
        openStream(req, res, url);
        return;
      }
      if (p.length === 3 && p[1] === 'wire') {
        const s = findServer(p[2]!);
        if (s === undefined) {
          error(res, 404, `${p[2]} is not running`);
          return;
        }
        const after = intParam(url, 'after', 0, 0, Number.MAX_SAFE_INTEGER);
        const limit = intParam(url, 'limit', 100, 1, maxWireLimit);
        if (after === undefined || limit === undefined) {
          error(res, 400, `after must be a whole number ≥ 0 and limit 1..${maxWireLimit}`);
          return;
        }
        const tap = s.admin?.wire;
        const messages = wireMessages(s, after, limit);
        json(res, 200, {
          messages,
          next:
            messages.length > 0 ? messages[messages.length - 1]!.seq : Math.max(after, (tap?.next ?? 1) - 1),
          sampled: tap?.sampled ?? 0,
          seen: tap?.seen ?? 0,
          available: tap !== undefined,
        });
        return;
      }
      error(res, 404, 'no such endpoint');
      return;
    }
    // Static files: the page and its assets.
    let file: { body: Buffer; type: string } | undefined;
    let cache = 'no-cache';
    if (pathname === '/' || pathname === '/index.html') {
      file = webDir === undefined ? undefined : await readStatic(webDir, 'index.html');
    } else if (p[0] === 'assets' && p[1] === 'vendor' && p[2] === 'uplot') {
      file = vendorUplot === undefined ? undefined : await readStatic(vendorUplot, p.slice(3).join('/'));
      cache = 'public, max-age=86400';
    } else if (p[0] === 'assets') {
      file = webDir === undefined ? undefined : await readStatic(webDir, p.slice(1).join('/'));
    }
    if (file === undefined) {
      error(res, 404, 'not found');
      return;
    }
    send(res, 200, method === 'HEAD' ? Buffer.alloc(0) : file.body, file.type, {
      'cache-control': cache,
      'content-security-policy':
        "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'",
    });
  };

  const server = http.createServer((req, res) => {
    handle(req, res).catch((err: unknown) => {
      if (!res.headersSent) error(res, 500, `internal error: ${(err as Error).message}`);
      else res.destroy();
    });
  });
  server.keepAliveTimeout = 5000;
  server.headersTimeout = 10_000;
  server.requestTimeout = 30_000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port, options.host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const address = server.address();
  if (typeof address === 'object' && address !== null) boundPort = address.port;
  let closing: Promise<void> | undefined;
  return {
    port: boundPort,
    actionToken,
    get streams() {
      return streams.size;
    },
    close() {
      closing ??= new Promise<void>((resolve) => {
        for (const st of [...streams]) {
          st.res.end();
          removeStream(st);
        }
        server.close(() => resolve());
        server.closeAllConnections();
      });
      return closing;
    },
  };
}

/** A cookie value as set (URI-encoded, so any token survives `;` and spaces). */
function decodeCookie(v: string | undefined): string | undefined {
  return v === undefined ? undefined : safeDecode(v);
}

function safeDecode(s: string): string | undefined {
  try {
    return decodeURIComponent(s);
  } catch {
    return undefined;
  }
}

function headerValue(v: string | string[] | undefined): string | undefined {
  return Array.isArray(v) ? v[0] : v;
}

function intParam(url: URL, name: string, fallback: number, min: number, max: number): number | undefined {
  const raw = url.searchParams.get(name);
  if (raw === null || raw === '') return fallback;
  if (!/^\d+$/.test(raw)) return undefined;
  const n = Number(raw);
  if (n < min) return undefined;
  return Math.min(n, max);
}

/** Reads and discards a request body of at most `max` bytes; false when it is longer. */
function drainBody(req: http.IncomingMessage, max: number): Promise<boolean> {
  return new Promise((resolve) => {
    let n = 0;
    let over = false;
    req.on('data', (chunk: Buffer) => {
      n += chunk.length;
      if (n > max && !over) {
        over = true;
        resolve(false);
      }
    });
    req.on('end', () => resolve(!over));
    req.on('error', () => resolve(false));
  });
}
