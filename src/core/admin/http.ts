/**
 * What the admin endpoint's route modules share: the answers (JSON with the security headers,
 * errors as `{ "error" }`), the servers as the API shows them, and the paths' parsing. Each
 * concern registers its own routes on the fastify instance (guard.ts, routes-*.ts, stream.ts).
 */
import type { FastifyReply } from 'fastify';
import type { ProtocolMetrics } from '../metrics.js';
import type { Endpoint } from '../server.js';
import type { ActionJson, CountersJson, ServerDetailJson, ServerJson, WireMessageJson } from './api-types.js';
import type { AdminSource } from './source.js';
import { type WireDecoder, wireMessageJson } from './wire-json.js';

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
  /** The protocol's own dashboard page (its module's `dashboard`): folder and entry module. */
  page?: { dir: string; entry?: string | undefined } | undefined;
}

/** Headers on every answer. */
export const BASE_HEADERS = {
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY',
  'referrer-policy': 'no-referrer',
} as const;

export function sendJson(
  reply: FastifyReply,
  status: number,
  body: unknown,
  extra: Record<string, string> = {},
): FastifyReply {
  return reply
    .code(status)
    .headers({ 'cache-control': 'no-store', ...extra })
    .type('application/json; charset=utf-8')
    .send(JSON.stringify(body));
}

export function sendError(
  reply: FastifyReply,
  status: number,
  message: string,
  extra: Record<string, string> = {},
): FastifyReply {
  return sendJson(reply, status, { error: message }, extra);
}

export function countersOf(m: ProtocolMetrics): CountersJson {
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

/** The path of a protocol's page files. */
export function pageBase(protocol: string): string {
  return `/assets/protocols/${encodeURIComponent(protocol)}/`;
}

export function serverJson(s: AdminServerEntry): ServerJson {
  const actions = Object.entries(s.admin?.actions ?? {});
  return {
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
    actions: actions.map(([name]) => name),
    actionRoutes: actions.map(([name, a]): ActionJson => {
      const route: ActionJson = { name, verb: a.verb };
      if (a.collection !== undefined) route.collection = a.collection;
      return route;
    }),
    page: s.page === undefined ? null : `${pageBase(s.protocol)}${s.page.entry ?? 'page.js'}`,
  };
}

export async function detailJson(s: AdminServerEntry): Promise<ServerDetailJson> {
  return {
    protocol: s.protocol,
    counters: countersOf(s.metrics),
    state: ((await s.admin?.state()) ?? null) as ServerDetailJson['state'],
  };
}

/** The wire messages after `after` (at most `limit`); reading arms the tap. */
export function wireMessages(s: AdminServerEntry, after: number, limit: number): WireMessageJson[] {
  const tap = s.admin?.wire;
  if (tap === undefined) return [];
  tap.arm();
  return tap.since(after, limit).map((m) => wireMessageJson(m, s.decode, s.admin?.hideUndecoded === true));
}

export function safeDecode(s: string): string | undefined {
  try {
    return decodeURIComponent(s);
  } catch {
    return undefined;
  }
}

/** A request path's segments, each URL-decoded (undefined when one does not decode). */
export function pathSegments(pathname: string): string[] | undefined {
  const parts = pathname
    .split('/')
    .filter((p) => p !== '')
    .map(safeDecode);
  return parts.some((p) => p === undefined) ? undefined : (parts as string[]);
}

/** The path and query of a request URL (`request.url` is the raw target). */
export function parseUrl(raw: string): URL | undefined {
  try {
    return new URL(raw, 'http://admin.invalid');
  } catch {
    return undefined;
  }
}

export function headerValue(v: string | string[] | undefined): string | undefined {
  return Array.isArray(v) ? v[0] : v;
}
