/**
 * `gamewire serve unity-relay`: the UDP relay and, in the same process, the allocation API.
 * Both share one in-memory `AllocationStore`.
 */
import net from 'node:net';
import type { FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import { silentLogger } from '../../core/logger.js';
import { ProtocolMetrics } from '../../core/metrics.js';
import type { Endpoint, RunningServer, ServerContext, ServerDefinition } from '../../core/server.js';
import { bindUdp, closeUdp } from '../../core/udp.js';
import { AllocationStore, type StoreOptions } from './allocations.js';
import { buildApi } from './api.js';
import { RelayServer } from './relay.js';

export const DEFAULT_RELAY_PORT = 37000;
export const DEFAULT_API_PORT = 37080;

export interface UnityRelayOptions {
  /** UDP bind address. Default 0.0.0.0. */
  host?: string;
  /** UDP port; 0 picks a free one. Default 37000. */
  port?: number;
  /** HTTP allocation API port; 0 picks a free one. Default 37080. */
  apiPort?: number;
  /** HTTP bind address. Default 127.0.0.1; anything else needs `apiKey`. */
  apiHost?: string;
  /** Address or host name written into allocations. Default 127.0.0.1. */
  publicHost?: string;
  /** Bearer key for the API. */
  apiKey?: string | undefined;
  idleTimeoutMs?: number;
  hostAloneTimeoutMs?: number;
  bindTimeoutMs?: number;
  joinCodeTtlMs?: number;
  maxDatagramBytes?: number;
  errorRatePerSecond?: number;
  errorBurst?: number;
  /** Most sources the ERROR rate limiter remembers (least recently used evicted). Default 100 000. */
  errorSources?: number;
  maxConnectionsLimit?: number;
  apiRateLimitPerMinute?: number;
  /** Extra store settings (clock, secret, regions…), mostly for tests. */
  store?: StoreOptions;
  metrics?: ProtocolMetrics;
  log?: Logger;
}

export interface UnityRelayInstance extends RunningServer {
  relay: RelayServer;
  store: AllocationStore;
  api: FastifyInstance;
  metrics: ProtocolMetrics;
  udpPort: number;
  apiPort: number;
  /** `http://host:port` of the API, for clients. */
  apiUrl: string;
}

function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || (net.isIPv4(host) && host.startsWith('127.'));
}

/** Starts the relay and its API. Resolves once both listen; `close()` releases everything. */
export async function startUnityRelay(options: UnityRelayOptions = {}): Promise<UnityRelayInstance> {
  const log = options.log ?? silentLogger();
  const metrics = options.metrics ?? new ProtocolMetrics('unity-relay');
  const host = options.host ?? '0.0.0.0';
  const apiHost = options.apiHost ?? '127.0.0.1';
  if (options.apiKey === undefined && !isLoopback(apiHost)) {
    throw new Error(
      `the allocation API listens on ${apiHost} only with an API key (--api-key); without one it stays on 127.0.0.1`,
    );
  }
  if (options.apiKey !== undefined && options.apiKey.length < 16) {
    throw new Error('the API key must be at least 16 characters');
  }
  const store = new AllocationStore({
    ...options.store,
    ...(options.idleTimeoutMs !== undefined ? { idleTimeoutMs: options.idleTimeoutMs } : {}),
    ...(options.hostAloneTimeoutMs !== undefined ? { hostAloneTimeoutMs: options.hostAloneTimeoutMs } : {}),
    ...(options.bindTimeoutMs !== undefined ? { bindTimeoutMs: options.bindTimeoutMs } : {}),
    ...(options.joinCodeTtlMs !== undefined ? { joinCodeTtlMs: options.joinCodeTtlMs } : {}),
  });
  const socket = await bindUdp({
    host,
    port: options.port ?? DEFAULT_RELAY_PORT,
    recvBufferSize: 4 * 1024 * 1024,
    sendBufferSize: 4 * 1024 * 1024,
  });
  const relay = new RelayServer(socket, store, metrics, log, {
    ...(options.maxDatagramBytes !== undefined ? { maxDatagramBytes: options.maxDatagramBytes } : {}),
    ...(options.errorRatePerSecond !== undefined ? { errorRatePerSecond: options.errorRatePerSecond } : {}),
    ...(options.errorBurst !== undefined ? { errorBurst: options.errorBurst } : {}),
    ...(options.errorSources !== undefined ? { errorSources: options.errorSources } : {}),
  });
  const udpPort = socket.address().port;
  const api = buildApi(store, {
    publicHost: options.publicHost ?? '127.0.0.1',
    relayPort: udpPort,
    apiKey: options.apiKey,
    log,
    ...(options.maxConnectionsLimit !== undefined
      ? { maxConnectionsLimit: options.maxConnectionsLimit }
      : {}),
    ...(options.apiRateLimitPerMinute !== undefined
      ? { rateLimitPerMinute: options.apiRateLimitPerMinute }
      : {}),
  });
  try {
    await api.listen({ host: apiHost, port: options.apiPort ?? DEFAULT_API_PORT });
  } catch (err) {
    relay.stop();
    await closeUdp(socket);
    throw err;
  }
  const address = api.server.address();
  const apiPort = typeof address === 'object' && address !== null ? address.port : 0;
  let closing: Promise<void> | undefined;
  const endpoints: Endpoint[] = [
    { transport: 'udp', host, port: udpPort, description: 'Unity Relay (Unity Transport clients bind here)' },
    {
      transport: 'http',
      host: apiHost,
      port: apiPort,
      description: 'allocation API (/v1/allocate, /v1/joincode, /v1/join, /v1/regions)',
    },
  ];
  return {
    relay,
    store,
    api,
    metrics,
    udpPort,
    apiPort,
    apiUrl: `http://${apiHost.includes(':') ? `[${apiHost}]` : apiHost}:${apiPort}`,
    endpoints,
    close() {
      closing ??= (async () => {
        relay.stop();
        await Promise.allSettled([api.close(), closeUdp(socket)]);
      })();
      return closing;
    },
  };
}

function optionalString(v: unknown): string | undefined {
  return typeof v === 'string' && v !== '' ? v : undefined;
}

function optionalInt(v: unknown): number | undefined {
  return typeof v === 'number' && Number.isInteger(v) ? v : undefined;
}

export const unityRelayServer: ServerDefinition = {
  summary: 'Unity Relay: UDP relay for stock Unity Transport clients, with its allocation API',
  defaultPort: DEFAULT_RELAY_PORT,
  options: [
    {
      key: 'apiPort',
      flag: '--api-port <port>',
      description: 'unity-relay: allocation API port (HTTP)',
      type: 'int',
      default: DEFAULT_API_PORT,
    },
    {
      key: 'apiHost',
      flag: '--api-host <address>',
      description: 'unity-relay: allocation API bind address (beyond 127.0.0.1 only with --api-key)',
      type: 'string',
      default: '127.0.0.1',
    },
    {
      key: 'publicHost',
      flag: '--public-host <host>',
      description: 'unity-relay: address written into allocations',
      type: 'string',
      default: '127.0.0.1',
    },
    {
      key: 'apiKey',
      flag: '--api-key <key>',
      description: 'unity-relay: require "Authorization: Bearer <key>" on the API',
      type: 'string',
    },
    {
      key: 'idleTimeoutMs',
      flag: '--unity-idle-timeout <ms>',
      description: 'unity-relay: idle time before a binding expires',
      type: 'int',
      default: 10_000,
    },
    {
      key: 'hostAloneTimeoutMs',
      flag: '--unity-host-alone-timeout <ms>',
      description: 'unity-relay: idle time for a host with no client yet',
      type: 'int',
      default: 60_000,
    },
    {
      key: 'maxDatagramBytes',
      flag: '--unity-max-datagram <bytes>',
      description: 'unity-relay: largest datagram accepted',
      type: 'int',
      default: 1472,
    },
  ],
  async start(options: Record<string, unknown>, ctx: ServerContext): Promise<RunningServer> {
    const o: UnityRelayOptions = { log: ctx.log, metrics: ctx.metrics };
    const set = <K extends keyof UnityRelayOptions>(k: K, v: UnityRelayOptions[K] | undefined) => {
      if (v !== undefined) o[k] = v;
    };
    set('host', optionalString(options.host));
    set('port', optionalInt(options.port));
    set('apiPort', optionalInt(options.apiPort));
    set('apiHost', optionalString(options.apiHost));
    set('publicHost', optionalString(options.publicHost));
    set('apiKey', optionalString(options.apiKey));
    set('idleTimeoutMs', optionalInt(options.idleTimeoutMs));
    set('hostAloneTimeoutMs', optionalInt(options.hostAloneTimeoutMs));
    set('maxDatagramBytes', optionalInt(options.maxDatagramBytes));
    return startUnityRelay(o);
  },
};
