/**
 * The allocation service (spec §4), on fastify: `POST /v1/allocate`, `POST /v1/joincode`,
 * `POST /v1/join`, `GET /v1/regions`, shaped the way the Relay SDK parses them, so the SDK can
 * use it through `SetAllocationsServiceBasePath`. Errors use the SDK's `ErrorResponseBody`.
 */
import { randomUUID, timingSafeEqual } from 'node:crypto';
import { type FastifyInstance, type FastifyReply, type FastifyRequest, fastify } from 'fastify';
import type { Logger } from 'pino';
import { type Allocation, type AllocationStore, StoreFullError } from './allocations.js';

export interface ApiOptions {
  /** Host name or address written into allocations (`relayServer`, `serverEndpoints`). */
  publicHost: string;
  /** The relay's UDP port, as written into allocations. */
  relayPort: number;
  /** When set, every request needs `Authorization: Bearer <apiKey>`. */
  apiKey?: string | undefined;
  /** Most players per host allocation (`maxConnections`). Default 150. */
  maxConnectionsLimit?: number;
  /** Requests per minute per client address, per endpoint; 0 turns it off. Default 120. */
  rateLimitPerMinute?: number;
  log?: Logger;
}

/** The JSON an allocation travels as (Relay SDK `Allocation`; `JoinAllocation` adds `hostConnectionData`). */
export interface AllocationJson {
  allocationId: string;
  allocationIdBytes: string;
  connectionData: string;
  key: string;
  region: string;
  relayServer: { ipV4: string; port: number };
  serverEndpoints: {
    connectionType: string;
    network: string;
    reliable: boolean;
    secure: boolean;
    host: string;
    port: number;
  }[];
  hostConnectionData?: string;
}

export function allocationJson(a: Allocation, publicHost: string, relayPort: number): AllocationJson {
  const out: AllocationJson = {
    allocationId: a.guid,
    allocationIdBytes: a.id.toString('base64'),
    connectionData: a.connectionData.toString('base64'),
    key: a.key.toString('base64'),
    region: a.region,
    relayServer: { ipV4: publicHost, port: relayPort },
    serverEndpoints: [
      {
        connectionType: 'udp',
        network: 'udp',
        reliable: false,
        secure: false,
        host: publicHost,
        port: relayPort,
      },
    ],
  };
  if (a.host !== undefined) out.hostConnectionData = a.host.connectionData.toString('base64');
  return out;
}

/** An error that becomes the SDK's `ErrorResponseBody`. */
export class ApiError extends Error {
  readonly status: number;
  readonly title: string;
  readonly details: { key: string; value: string }[] | undefined;

  constructor(status: number, title: string, detail: string, details?: { key: string; value: string }[]) {
    super(detail);
    this.status = status;
    this.title = title;
    this.details = details;
  }
}

const TITLES: Record<number, string> = {
  400: 'Bad Request',
  401: 'Unauthorized',
  404: 'Not Found',
  405: 'Method Not Allowed',
  413: 'Payload Too Large',
  415: 'Unsupported Media Type',
  429: 'Too Many Requests',
  500: 'Internal Server Error',
  503: 'Service Unavailable',
};

function sendError(
  reply: FastifyReply,
  status: number,
  detail: string,
  details?: { key: string; value: string }[],
) {
  const title = TITLES[status] ?? 'Error';
  const body: Record<string, unknown> = {
    status,
    title,
    detail,
    type: `https://httpstatuses.io/${status}`,
    code: status,
  };
  if (details !== undefined) body.details = details;
  return reply.code(status).header('content-type', 'application/problem+json; charset=utf-8').send(body);
}

function meta(reply: FastifyReply, status: number) {
  reply.code(status);
  return { requestId: randomUUID(), status };
}

const GUID = '^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$';

/** Builds the fastify app (not listening). */
export function buildApi(store: AllocationStore, options: ApiOptions): FastifyInstance {
  // Requests are not logged one by one; failures go to `options.log` from the error handler.
  const app = fastify({ logger: false, bodyLimit: 16 * 1024 });
  const maxPlayers = options.maxConnectionsLimit ?? 150;
  const perMinute = options.rateLimitPerMinute ?? 120;
  const windows = new Map<string, { start: number; count: number }>();
  const expectedAuth = options.apiKey === undefined ? undefined : Buffer.from(`Bearer ${options.apiKey}`);

  app.addHook('onRequest', async (req: FastifyRequest, reply: FastifyReply) => {
    if (expectedAuth !== undefined) {
      const got = Buffer.from(req.headers.authorization ?? '');
      if (got.length !== expectedAuth.length || !timingSafeEqual(got, expectedAuth)) {
        return sendError(reply, 401, 'a valid "Authorization: Bearer <api key>" header is required');
      }
    }
    if (perMinute > 0) {
      const now = Date.now();
      const key = `${req.ip}|${req.routeOptions.url ?? req.url}`;
      let w = windows.get(key);
      if (w === undefined || now - w.start >= 60_000) {
        if (windows.size > 50_000) windows.clear();
        w = { start: now, count: 0 };
        windows.set(key, w);
      }
      if (++w.count > perMinute) {
        reply.header('retry-after', String(Math.ceil((w.start + 60_000 - now) / 1000)));
        return sendError(reply, 429, `more than ${perMinute} requests per minute`);
      }
    }
    return undefined;
  });

  app.setErrorHandler((err: Error & { validation?: unknown; statusCode?: number }, _req, reply) => {
    if (err instanceof ApiError) return sendError(reply, err.status, err.message, err.details);
    if (err instanceof StoreFullError)
      return sendError(reply, 503, 'the relay has no room for more allocations');
    const status =
      err.statusCode !== undefined && err.statusCode >= 400 && err.statusCode < 500 ? err.statusCode : 500;
    if (status === 500) options.log?.error({ err }, 'allocation API failed');
    return sendError(reply, status, status === 500 ? 'internal error' : err.message);
  });
  app.setNotFoundHandler((req, reply) => sendError(reply, 404, `no route ${req.method} ${req.url}`));

  const respond = (a: Allocation) => allocationJson(a, options.publicHost, options.relayPort);

  app.post<{ Body: { maxConnections: number; region?: string } }>(
    '/v1/allocate',
    {
      schema: {
        body: {
          type: 'object',
          required: ['maxConnections'],
          properties: {
            maxConnections: { type: 'integer', minimum: 1, maximum: maxPlayers },
            region: { type: 'string', maxLength: 64 },
          },
        },
      },
    },
    async (req, reply) => {
      // The SDK sends "default" when its QoS region lookup fails: that is our first region.
      const asked = req.body.region;
      const region = asked === undefined || asked === 'default' ? store.regions[0]!.id : asked;
      if (!store.regions.some((r) => r.id === region)) {
        throw new ApiError(400, 'Bad Request', `unknown region "${region}"`, [
          { key: 'region', value: region },
        ]);
      }
      const a = store.allocateHost(req.body.maxConnections, region);
      return { meta: meta(reply, 201), links: {}, data: { allocation: respond(a) } };
    },
  );

  app.post<{ Body: { allocationId: string } }>(
    '/v1/joincode',
    {
      schema: {
        body: {
          type: 'object',
          required: ['allocationId'],
          properties: { allocationId: { type: 'string', pattern: GUID } },
        },
      },
    },
    async (req, reply) => {
      const a = store.byGuid(req.body.allocationId);
      if (a === undefined || a.state === 'expired') {
        throw new ApiError(404, 'Not Found', 'allocation not found');
      }
      if (a.role !== 'host') throw new ApiError(400, 'Bad Request', 'join codes are for host allocations');
      return { meta: meta(reply, 201), links: {}, data: { joinCode: store.joinCodeFor(a).code } };
    },
  );

  app.post<{ Body: { joinCode: string } }>(
    '/v1/join',
    {
      schema: {
        body: {
          type: 'object',
          required: ['joinCode'],
          properties: { joinCode: { type: 'string', minLength: 1, maxLength: 32 } },
        },
      },
    },
    async (req, reply) => {
      const a = store.join(req.body.joinCode);
      if (a === undefined) throw new ApiError(404, 'Not Found', 'join code not found or expired');
      return { meta: meta(reply, 200), data: { allocation: respond(a) } };
    },
  );

  app.get('/v1/regions', async (_req, reply) => ({
    meta: meta(reply, 200),
    data: { regions: store.regions.map((r) => ({ id: r.id, description: r.description })) },
  }));

  return app;
}
