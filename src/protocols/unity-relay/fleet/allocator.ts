/**
 * An allocator of a Unity Relay fleet (`--role allocator`): the allocation API only, stateless,
 * on Redis (`RedisAllocationService`). Any number of them can run behind a load balancer.
 */
import type { Logger } from '../../../core/logger.js';
import { silentLogger } from '../../../core/logger.js';
import { ProtocolMetrics } from '../../../core/metrics.js';
import { RedisNodeRegistry } from '../../../core/node-registry.js';
import { connectRedis } from '../../../core/redis.js';
import type { RunningServer } from '../../../core/server.js';
import { allocatorAdmin } from '../admin.js';
import { RelayCredentials } from '../allocations.js';
import { type ApiApp, type ApiLimitOptions, ApiLimits, buildApi, checkApiExposure } from '../api.js';
import type { FleetCommonOptions } from '../composition.js';
import { DEFAULT_API_PORT } from '../options.js';
import { LISTEN_BACKLOG } from '../websocket.js';
import { RedisAllocationService } from './allocation-service.js';
import {
  type FleetAdmin,
  fleetView,
  RELAY_NODE_KIND,
  redisFailoverLogger,
  redisStatusLogger,
  setNodeGauges,
} from './view.js';

export interface UnityRelayAllocatorOptions extends FleetCommonOptions {
  /** HTTP port; 0 picks a free one. Default 37080. */
  apiPort?: number;
  /** HTTP bind address. Default 127.0.0.1; anything else needs `apiKey`. */
  apiHost?: string;
  apiKey?: string | undefined;
  apiLimits?: Omit<ApiLimitOptions, 'rateLimitPerMinute'>;
  apiRateLimitPerMinute?: number;
  maxConnectionsLimit?: number;
  /** Time a new allocation has to bind on its node. Default 60 s. */
  bindTimeoutMs?: number;
  /** Join code lifetime. Default 15 min. */
  joinCodeTtlMs?: number;
  /** How long an allocation's record outlives its node's last refresh. Default 30 s (`RedisAllocationServiceOptions`). */
  recordTtlMs?: number;
  /** Start draining (answer 503 to new allocations, e.g. before taking it out of a load balancer). */
  drain?: boolean;
  metrics?: ProtocolMetrics;
  log?: Logger;
}

export interface UnityRelayAllocatorInstance extends RunningServer, FleetAdmin {
  api: ApiApp;
  service: RedisAllocationService;
  apiLimits: ApiLimits;
  metrics: ProtocolMetrics;
  apiPort: number;
  apiUrl: string;
}

/**
 * An allocator of a fleet (`--role allocator`): the allocation API only, stateless, on Redis.
 * Any number of them can run behind a load balancer.
 */
export async function startUnityRelayAllocator(
  options: UnityRelayAllocatorOptions,
): Promise<UnityRelayAllocatorInstance> {
  const log = options.log ?? silentLogger();
  const metrics = options.metrics ?? new ProtocolMetrics('unity-relay');
  const apiHost = options.apiHost ?? '127.0.0.1';
  checkApiExposure(apiHost, options.apiKey);
  const redis = await connectRedis(options.redisUrl, {
    ...(options.redisPrefix !== undefined ? { prefix: options.redisPrefix } : {}),
    onStatus: redisStatusLogger(log, 'allocator'),
    onPrimaryChange: redisFailoverLogger(log, 'allocator'),
  });
  metrics.store = () => redis.state!();
  const registry = new RedisNodeRegistry(redis, { ttlMs: options.heartbeatTtlMs ?? 10_000 });
  const service = new RedisAllocationService({
    redis,
    registry,
    credentials: new RelayCredentials(options.secret),
    ...(options.bindTimeoutMs !== undefined ? { bindTimeoutMs: options.bindTimeoutMs } : {}),
    ...(options.joinCodeTtlMs !== undefined ? { joinCodeTtlMs: options.joinCodeTtlMs } : {}),
    ...(options.recordTtlMs !== undefined ? { recordTtlMs: options.recordTtlMs } : {}),
  });
  const apiLimits = new ApiLimits({
    ...options.apiLimits,
    ...(options.apiRateLimitPerMinute !== undefined
      ? { rateLimitPerMinute: options.apiRateLimitPerMinute }
      : {}),
  });
  let draining = options.drain ?? false;
  const api = buildApi(service, {
    publicHost: '',
    relayPort: 0,
    limits: apiLimits,
    apiKey: options.apiKey,
    log,
    draining: () => draining,
    ...(options.maxConnectionsLimit !== undefined
      ? { maxConnectionsLimit: options.maxConnectionsLimit }
      : {}),
  });
  // The per-node gauges, from the registry every heartbeat period (quietly skipped while Redis is down).
  const gaugeTimer = setInterval(() => {
    registry
      .live(RELAY_NODE_KIND)
      .then((nodes) => setNodeGauges(metrics, nodes.map(fleetView)))
      .catch(() => {});
  }, registry.heartbeatMs);
  gaugeTimer.unref();
  try {
    await api.listen({ host: apiHost, port: options.apiPort ?? DEFAULT_API_PORT, backlog: LISTEN_BACKLOG });
  } catch (err) {
    clearInterval(gaugeTimer);
    await api.close().catch(() => {});
    await redis.close();
    throw err;
  }
  const address = api.server.address();
  const apiPort = typeof address === 'object' && address !== null ? address.port : 0;
  let closing: Promise<void> | undefined;
  const instance: UnityRelayAllocatorInstance = {
    role: 'allocator',
    nodeId: undefined,
    get draining() {
      return draining;
    },
    async drain() {
      if (!draining) log.info('draining: the allocation API answers 503 to new allocations');
      draining = true;
    },
    fleet: async () => (await registry.live(RELAY_NODE_KIND)).map(fleetView),
    api,
    service,
    apiLimits,
    metrics,
    apiPort,
    apiUrl: `http://${apiHost.includes(':') ? `[${apiHost}]` : apiHost}:${apiPort}`,
    endpoints: [
      {
        transport: 'http',
        host: apiHost,
        port: apiPort,
        description:
          'allocation API of a relay fleet (Redis; /v1/allocate, /v1/joincode, /v1/join, /v1/regions)',
      },
    ],
    close() {
      closing ??= (async () => {
        clearInterval(gaugeTimer);
        await api.close().catch(() => {});
        await redis.close();
      })();
      return closing;
    },
  };
  instance.admin = allocatorAdmin(instance);
  return instance;
}
