/**
 * The allocation service (spec §4), on fastify: `POST /v1/allocate`, `POST /v1/joincode`,
 * `POST /v1/join`, `GET /v1/regions`, shaped the way the Relay SDK parses them, so the SDK can
 * use it through `SetAllocationsServiceBasePath`. Errors use the SDK's `ErrorResponseBody`.
 */
import { randomUUID, timingSafeEqual } from 'node:crypto';
import type { Server } from 'node:http';
import net from 'node:net';
import { type FastifyReply, type FastifyRequest, fastify } from 'fastify';
import { ConfigError } from '../../core/errors.js';
import type { Logger } from '../../core/logger.js';
import { StoreUnavailableError } from '../../core/redis.js';
import { type Allocation, AllocationStore, type Region } from './allocations.js';
import { ApiError, StoreFullError } from './errors.js';
import { DEFAULT_LIMITER_KEYS, TokenBuckets } from './limits.js';

/** One `serverEndpoints` entry, as the Relay SDK parses it. */
export interface ServerEndpointJson {
  connectionType: string;
  network: string;
  reliable: boolean;
  secure: boolean;
  host: string;
  port: number;
}

/**
 * The endpoint entry of each transport. UTP switches (D)TLS on from `secure`, not from the type
 * string, so `dtls` and `wss` must say `secure: true`, `udp` and `ws` `secure: false`.
 */
export function serverEndpoint(
  connectionType: 'udp' | 'dtls' | 'ws' | 'wss',
  host: string,
  port: number,
): ServerEndpointJson {
  const tcp = connectionType === 'ws' || connectionType === 'wss';
  return {
    connectionType,
    network: tcp ? 'tcp' : 'udp',
    reliable: tcp,
    secure: connectionType === 'dtls' || connectionType === 'wss',
    host,
    port,
  };
}

/**
 * The API's limits. A request with the valid API key (`ApiOptions.apiKey`) comes from a trusted
 * backend that allocates for many players: the per-address limits (request rate, allocation rate,
 * live cap) do not apply to it, and its allocations count against `keyedAllocationsPerSecond`
 * instead of `globalAllocationsPerSecond`. The store's capacity applies to everyone.
 */
export interface ApiLimitOptions {
  /** Requests per minute per client address and route template; 0 turns it off. Default 120 (burst the same). Not for keyed callers. */
  rateLimitPerMinute?: number;
  /** Allocations (allocate + join) per minute per client address; 0 turns it off. Default 120 (burst 20). Not for keyed callers. */
  allocationsPerMinutePerAddress?: number;
  /** Live allocations one client address may hold. Default 100. Not for keyed callers. */
  maxAllocationsPerAddress?: number;
  /** Allocations per second from every caller without the API key together; 0 turns it off. Default 50 (burst 100). */
  globalAllocationsPerSecond?: number;
  /** Allocations per second from every caller with the API key together; 0 turns it off. Default 1000 (burst 2000). */
  keyedAllocationsPerSecond?: number;
  /** Requests with a wrong API key per minute per address before the address is refused outright; 0 turns it off. Default 10. */
  authFailuresPerMinute?: number;
  /** Longest request URL (bytes); longer gets 414 before anything else runs. Default 1024. */
  maxUrlLength?: number;
  /** Most keys each limiter table remembers (least recently used evicted, never a global clear). Default 100 000. */
  limiterKeys?: number;
}

/**
 * The API's default limits (`gamewire serve unity-relay` declares its options with the same
 * values). `keyedAllocationsPerSecond`: a game backend can open a thousand lobbies in a burst.
 */
export const API_LIMIT_DEFAULTS = {
  rateLimitPerMinute: 120,
  allocationsPerMinutePerAddress: 120,
  maxAllocationsPerAddress: 100,
  globalAllocationsPerSecond: 50,
  keyedAllocationsPerSecond: 1000,
  authFailuresPerMinute: 10,
  maxUrlLength: 1024,
} as const;

/** Default `keyedAllocationsPerSecond`. */
export const DEFAULT_KEYED_ALLOCATIONS_PER_SECOND = API_LIMIT_DEFAULTS.keyedAllocationsPerSecond;

/** The API's limiter tables, exposed for tests and metrics. */
export class ApiLimits {
  readonly perMinute: number;
  readonly maxAllocationsPerAddress: number;
  /** Allocations one address may make per minute, and at once (the bucket's size); 0: no limit. */
  readonly allocationsPerMinute: number;
  readonly allocationsBurst: number;
  readonly maxUrlLength: number;
  /** Requests, keyed by address and route template (never the raw URL). */
  readonly requests: TokenBuckets;
  /** Allocations per address (undefined: off). */
  readonly allocations: TokenBuckets | undefined;
  /** Allocations from every caller without the API key, one key (undefined: off). */
  readonly global: TokenBuckets | undefined;
  /** Allocations from every caller with the API key, one key (undefined: off). */
  readonly keyed: TokenBuckets | undefined;
  /** Wrong API keys per address (undefined: off). */
  readonly authFailures: TokenBuckets | undefined;

  constructor(o: ApiLimitOptions = {}) {
    const keys = o.limiterKeys ?? DEFAULT_LIMITER_KEYS;
    const d = API_LIMIT_DEFAULTS;
    this.perMinute = o.rateLimitPerMinute ?? d.rateLimitPerMinute;
    this.maxAllocationsPerAddress = o.maxAllocationsPerAddress ?? d.maxAllocationsPerAddress;
    this.maxUrlLength = o.maxUrlLength ?? d.maxUrlLength;
    this.requests = new TokenBuckets(this.perMinute / 60, Math.max(1, this.perMinute), keys);
    const allocs = o.allocationsPerMinutePerAddress ?? d.allocationsPerMinutePerAddress;
    this.allocationsPerMinute = allocs;
    this.allocationsBurst = Math.min(20, allocs);
    this.allocations = allocs > 0 ? new TokenBuckets(allocs / 60, this.allocationsBurst, keys) : undefined;
    const global = o.globalAllocationsPerSecond ?? d.globalAllocationsPerSecond;
    this.global = global > 0 ? new TokenBuckets(global, global * 2, 1) : undefined;
    const keyed = o.keyedAllocationsPerSecond ?? d.keyedAllocationsPerSecond;
    this.keyed = keyed > 0 ? new TokenBuckets(keyed, keyed * 2, 1) : undefined;
    const auth = o.authFailuresPerMinute ?? d.authFailuresPerMinute;
    this.authFailures = auth > 0 ? new TokenBuckets(auth / 60, auth, keys) : undefined;
  }

  prune(now: number): void {
    this.requests.prune(now);
    this.allocations?.prune(now);
    this.authFailures?.prune(now);
  }
}

function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || (net.isIPv4(host) && host.startsWith('127.'));
}

/** The API leaves loopback only with a key, and a key is long enough to guess at no rate. */
export function checkApiExposure(apiHost: string, apiKey: string | undefined): void {
  if (apiKey === undefined && !isLoopback(apiHost)) {
    throw new ConfigError(
      `the allocation API listens on ${apiHost} only with an API key (--api-key); without one it stays on 127.0.0.1`,
      'unity-relay.apiHost',
    );
  }
  if (apiKey !== undefined && apiKey.length < 16) {
    throw new ConfigError('the API key must be at least 16 characters', 'unity-relay.apiKey');
  }
}

export interface ApiOptions {
  /** Host name or address written into allocations (`relayServer`). */
  publicHost: string;
  /** The relay's UDP port, as written into allocations. */
  relayPort: number;
  /** `serverEndpoints` of every allocation. Default: the UDP one only. */
  endpoints?: ServerEndpointJson[];
  /** Limiter tables (shared with the caller for metrics and tests). Default: `new ApiLimits()`. */
  limits?: ApiLimits;
  /** When set, every request needs `Authorization: Bearer <apiKey>`. */
  apiKey?: string | undefined;
  /** Most players per host allocation (`maxConnections`). Default 150. */
  maxConnectionsLimit?: number;
  log?: Logger;
  /** Clock for the limiters. Default `store.now` (`Date.now` for a service). */
  now?: () => number;
  /** True while the server drains: new allocations and joins get 503. */
  draining?: () => boolean;
}

/**
 * Who asks for an allocation: the API client's address and how many live ones it may hold, or a
 * caller with the API key (a backend), whose allocations are neither capped nor counted per address.
 */
export type Requester = { keyed: false; address: string; maxLive: number } | { keyed: true };

/** The address an allocation counts against ('' for a keyed caller: not counted). */
export function ownerOf(requester: Requester): string {
  return requester.keyed ? '' : requester.address;
}

/** The answer to a requester at its live-allocation cap. */
export function liveCapError(maxLive: number): ApiError {
  return new ApiError(
    429,
    'Too Many Requests',
    `at most ${maxLive} live allocations per client address: close this address's games (or wait for ` +
      'their allocations to time out) before allocating more, or allocate with the API key (no per-address limits)',
  );
}

/**
 * Where the API's allocations come from: the in-memory store of one process
 * (`LocalAllocationService`), or Redis and the fleet's relay nodes (fleet.ts). Each method may
 * throw `ApiError` (answered as is), `StoreFullError` or `StoreUnavailableError` (503).
 * `admit` runs the caller's admission checks (draining, rates) once the request is known to be
 * valid and before anything is created. The requester's live cap is the service's to enforce,
 * in the same step that creates the allocation (so concurrent requests cannot exceed it).
 */
export interface AllocationService {
  regions(): Promise<readonly Region[]>;
  allocate(
    maxConnections: number,
    region: string | undefined,
    requester: Requester,
    admit: () => Promise<void>,
  ): Promise<AllocationJson>;
  joinCode(allocationGuid: string): Promise<string>;
  join(code: string, requester: Requester, admit: () => Promise<void>): Promise<AllocationJson>;
  /** Live allocations `owner` (an API client address) holds. */
  liveOf(owner: string): Promise<number>;
}

/** The API of one process: allocations in its own `AllocationStore`, served by its own relay. */
export class LocalAllocationService implements AllocationService {
  readonly store: AllocationStore;
  private readonly respond: (a: Allocation) => AllocationJson;

  constructor(store: AllocationStore, respond: (a: Allocation) => AllocationJson) {
    this.store = store;
    this.respond = respond;
  }

  async regions(): Promise<readonly Region[]> {
    return this.store.regions;
  }

  async allocate(
    maxConnections: number,
    asked: string | undefined,
    requester: Requester,
    admit: () => Promise<void>,
  ): Promise<AllocationJson> {
    // The SDK sends "default" when its QoS region lookup fails: that is our first region.
    const region = asked === undefined || asked === 'default' ? this.store.regions[0]!.id : asked;
    if (!this.store.regions.some((r) => r.id === region)) {
      throw new ApiError(400, 'Bad Request', `unknown region "${region}"`, [
        { key: 'region', value: region },
      ]);
    }
    await admit();
    // Checked and created with no await in between: one process, so nothing interleaves.
    this.checkLive(requester);
    return this.respond(this.store.allocateHost(maxConnections, region, ownerOf(requester)));
  }

  async joinCode(guid: string): Promise<string> {
    const a = this.store.byGuid(guid);
    if (a === undefined || a.state === 'expired')
      throw new ApiError(404, 'Not Found', 'allocation not found');
    if (a.role !== 'host') throw new ApiError(400, 'Bad Request', 'join codes are for host allocations');
    return this.store.joinCodeFor(a).code;
  }

  async join(code: string, requester: Requester, admit: () => Promise<void>): Promise<AllocationJson> {
    if (this.store.lookupJoinCode(code) === undefined)
      throw new ApiError(404, 'Not Found', 'join code not found or expired');
    await admit();
    this.checkLive(requester);
    const a = this.store.join(code, ownerOf(requester));
    if (a === undefined) throw new ApiError(404, 'Not Found', 'join code not found or expired');
    return this.respond(a);
  }

  async liveOf(owner: string): Promise<number> {
    return this.store.liveOf(owner);
  }

  private checkLive(requester: Requester): void {
    if (!requester.keyed && this.store.liveOf(requester.address) >= requester.maxLive)
      throw liveCapError(requester.maxLive);
  }
}

/** The JSON an allocation travels as (Relay SDK `Allocation`; `JoinAllocation` adds `hostConnectionData`). */
export interface AllocationJson {
  allocationId: string;
  allocationIdBytes: string;
  connectionData: string;
  key: string;
  region: string;
  relayServer: { ipV4: string; port: number };
  serverEndpoints: ServerEndpointJson[];
  hostConnectionData?: string;
}

export function allocationJson(
  a: Allocation,
  publicHost: string,
  relayPort: number,
  endpoints: ServerEndpointJson[] = [serverEndpoint('udp', publicHost, relayPort)],
): AllocationJson {
  const out: AllocationJson = {
    allocationId: a.guid,
    allocationIdBytes: a.id.toString('base64'),
    connectionData: a.connectionData.toString('base64'),
    key: a.key.toString('base64'),
    region: a.region,
    relayServer: { ipV4: publicHost, port: relayPort },
    serverEndpoints: endpoints.map((e) => ({ ...e })),
  };
  if (a.host !== undefined) out.hostConnectionData = a.host.connectionData.toString('base64');
  return out;
}

const TITLES: Record<number, string> = {
  400: 'Bad Request',
  401: 'Unauthorized',
  404: 'Not Found',
  405: 'Method Not Allowed',
  414: 'URI Too Long',
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

/** Seconds a client should wait before retrying while the store (Redis) is unavailable. */
export const STORE_RETRY_AFTER_SECONDS = 2;

/**
 * The allocation API's HTTP app, as its callers use it (fastify's instance is one; the package's
 * types name no dependency).
 */
export interface ApiApp {
  listen(options: { host: string; port: number; backlog?: number }): Promise<string>;
  close(): Promise<void>;
  /** The Node HTTP server under it (its address once listening). */
  readonly server: Server;
}

/**
 * Builds the fastify app (not listening), on one process's `AllocationStore` or on any
 * `AllocationService` (a fleet's allocator).
 */
export function buildApi(source: AllocationStore | AllocationService, options: ApiOptions): ApiApp {
  // Requests are not logged one by one; failures go to `options.log` from the error handler.
  const app = fastify({ logger: false, bodyLimit: 16 * 1024 });
  const maxPlayers = options.maxConnectionsLimit ?? 150;
  const limits = options.limits ?? new ApiLimits();
  const now = options.now ?? (source instanceof AllocationStore ? source.now : Date.now);
  const expectedAuth = options.apiKey === undefined ? undefined : Buffer.from(`Bearer ${options.apiKey}`);
  const pruneTimer = setInterval(() => limits.prune(now()), 10_000);
  pruneTimer.unref();
  app.addHook('onClose', async () => clearInterval(pruneTimer));
  const endpoints = options.endpoints ?? [serverEndpoint('udp', options.publicHost, options.relayPort)];
  const service =
    source instanceof AllocationStore
      ? new LocalAllocationService(source, (a) =>
          allocationJson(a, options.publicHost, options.relayPort, endpoints),
        )
      : source;

  // Requests that presented the valid API key (the hook below adds them).
  const keyed = new WeakSet<FastifyRequest>();
  const requester = (req: FastifyRequest): Requester =>
    keyed.has(req)
      ? { keyed: true }
      : { keyed: false, address: req.ip, maxLive: limits.maxAllocationsPerAddress };

  app.addHook('onRequest', async (req: FastifyRequest, reply: FastifyReply) => {
    // Cheap refusals first: nothing below looks at a long URL.
    if (req.url.length > limits.maxUrlLength) {
      reply.header('connection', 'close');
      return sendError(reply, 414, `request URLs are limited to ${limits.maxUrlLength} bytes`);
    }
    const ip = req.ip;
    if (expectedAuth !== undefined) {
      const t = now();
      // An address that keeps presenting wrong keys is refused without comparing anything.
      const wait = limits.authFailures?.waitSeconds(ip, t) ?? 0;
      if (wait > 0) {
        reply.header('retry-after', String(wait));
        return sendError(
          reply,
          429,
          `too many requests with a wrong API key: retry in ${wait} s, with the key the relay was given`,
        );
      }
      const got = Buffer.from(req.headers.authorization ?? '');
      if (got.length !== expectedAuth.length || !timingSafeEqual(got, expectedAuth)) {
        limits.authFailures?.take(ip, t);
        return sendError(reply, 401, 'a valid "Authorization: Bearer <api key>" header is required');
      }
      // The key holder is a backend allocating for many players: no per-address limits.
      keyed.add(req);
      return undefined;
    }
    if (limits.perMinute > 0) {
      // Keyed by route template: every unknown URL of one address shares one bucket.
      const key = `${ip}|${req.method} ${req.routeOptions.url ?? '(no route)'}`;
      const t = now();
      if (!limits.requests.take(key, t)) {
        const wait = Math.max(1, limits.requests.waitSeconds(key, t));
        reply.header('retry-after', String(wait));
        return sendError(
          reply,
          429,
          `more than ${limits.perMinute} requests per minute from this address: retry in ${wait} s, ` +
            'or call with the API key (no per-address limits)',
        );
      }
    }
    return undefined;
  });

  /**
   * Allocation admission: draining, per-address live cap, per-address rate, global rate. The cap
   * is looked at first so that an address at its cap spends no rate tokens; the service checks
   * it again, atomically, as it creates the allocation (concurrent requests pass this together).
   * A keyed caller passes draining and its own global rate only.
   */
  const admitAllocation = async (req: FastifyRequest, reply: FastifyReply): Promise<void> => {
    if (options.draining?.() === true) {
      reply.header('retry-after', String(STORE_RETRY_AFTER_SECONDS));
      throw new ApiError(503, 'Service Unavailable', 'this relay is draining: it takes no new allocations');
    }
    if (keyed.has(req)) {
      const t = now();
      if (limits.keyed !== undefined && !limits.keyed.take('all', t)) {
        reply.header('retry-after', String(Math.max(1, limits.keyed.waitSeconds('all', t))));
        throw new ApiError(
          503,
          'Service Unavailable',
          'API key holders are allocating at their limit; retry shortly',
        );
      }
      return;
    }
    const ip = req.ip;
    if ((await service.liveOf(ip)) >= limits.maxAllocationsPerAddress)
      throw liveCapError(limits.maxAllocationsPerAddress);
    const t = now();
    if (limits.allocations !== undefined && !limits.allocations.take(ip, t)) {
      const wait = Math.max(1, limits.allocations.waitSeconds(ip, t));
      reply.header('retry-after', String(wait));
      throw new ApiError(
        429,
        'Too Many Requests',
        `too many allocations from this address (at most ${limits.allocationsPerMinute} a minute, ` +
          `${limits.allocationsBurst} at once): retry in ${wait} s, or allocate with the API key (no per-address limits)`,
      );
    }
    if (limits.global !== undefined && !limits.global.take('all', t)) {
      reply.header('retry-after', String(Math.max(1, limits.global.waitSeconds('all', t))));
      throw new ApiError(503, 'Service Unavailable', 'the relay is allocating at its limit; retry shortly');
    }
  };

  app.setErrorHandler((err: Error & { validation?: unknown; statusCode?: number }, _req, reply) => {
    if (err instanceof ApiError) return sendError(reply, err.status, err.message, err.details);
    if (err instanceof StoreFullError)
      return sendError(reply, 503, 'the relay has no room for more allocations');
    if (err instanceof StoreUnavailableError) {
      // Redis is down: say so, and when to retry; the allocator recovers by itself.
      reply.header('retry-after', String(STORE_RETRY_AFTER_SECONDS));
      // not_durable: Redis answered but too few replicas held the write in time (deploy.md).
      return sendError(
        reply,
        503,
        err.reason === 'not_durable'
          ? `the allocation store (Redis) could not make this durable; retry shortly (${err.message})`
          : 'the allocation store (Redis) is unavailable; retry shortly',
        [{ key: 'cause', value: err.reason }],
      );
    }
    const status =
      err.statusCode !== undefined && err.statusCode >= 400 && err.statusCode < 500 ? err.statusCode : 500;
    if (status === 500) options.log?.error({ err }, 'allocation API failed');
    return sendError(reply, status, status === 500 ? 'internal error' : err.message);
  });
  app.setNotFoundHandler((req, reply) => sendError(reply, 404, `no route ${req.method} ${req.url}`));

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
      const allocation = await service.allocate(
        req.body.maxConnections,
        req.body.region,
        requester(req),
        () => admitAllocation(req, reply),
      );
      return { meta: meta(reply, 201), links: {}, data: { allocation } };
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
      const joinCode = await service.joinCode(req.body.allocationId);
      return { meta: meta(reply, 201), links: {}, data: { joinCode } };
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
      const allocation = await service.join(req.body.joinCode, requester(req), () =>
        admitAllocation(req, reply),
      );
      return { meta: meta(reply, 200), data: { allocation } };
    },
  );

  app.get('/v1/regions', async (_req, reply) => {
    const regions = await service.regions();
    return {
      meta: meta(reply, 200),
      data: { regions: regions.map((r) => ({ id: r.id, description: r.description })) },
    };
  });

  return app;
}
