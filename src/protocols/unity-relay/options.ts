/**
 * `gamewire serve unity-relay`'s options, declared once (src/core/options.ts): flags, config
 * keys, checks, defaults and the type `start()` receives. The ports the relay derives from
 * `--port` are resolved here too (`servePorts`).
 */
import { ConfigError } from '../../core/errors.js';
import { option, type ServerOptions } from '../../core/options.js';
import { STORE_DEFAULTS } from './allocations.js';
import { API_LIMIT_DEFAULTS } from './api.js';
import { DEFAULT_MAX_TO_DTLS, DEFAULT_MAX_TO_WS } from './links.js';
import { COALESCE_MIN_PPS, DEFAULT_NATIVE_COALESCE_US } from './native-dataplane.js';
import { DEFAULT_MAX_DATAGRAM_BYTES } from './relay.js';
import { DEFAULT_WS_MAX_CONNECTIONS_PER_IP } from './websocket.js';

export const DEFAULT_RELAY_PORT = 37000;
export const DEFAULT_DTLS_PORT = 37001;
export const DEFAULT_WS_PORT = 37002;
export const DEFAULT_WSS_PORT = 37003;
export const DEFAULT_API_PORT = 37080;

/**
 * Ports derived from `--port` when they are not set: each transport's, and the allocation API's
 * (37001–37003 and 37080 with the default 37000), so two relays with different `--port`s on one
 * machine need no other flag. A derived transport port that is taken moves to a free one; the
 * API's does not (backends are configured with it): it stops `serve`, naming `--api-port`.
 */
export const PORT_OFFSETS = { dtlsPort: 1, wsPort: 2, wssPort: 3, apiPort: 80 } as const;

/** Roles of a unity-relay process (docs/deploy.md, "Unity Relay as a fleet"). */
export const UNITY_RELAY_ROLES = ['allocator', 'relay', 'all'] as const;

/** Who forwards UDP↔UDP RELAYs. */
export const DATAPLANES = ['auto', 'native', 'js'] as const;

export const UNITY_RELAY_OPTIONS = {
  apiPort: option.int({
    flag: '--api-port <port>',
    description: `unity-relay: allocation API port (HTTP); default --port + ${PORT_OFFSETS.apiPort} (${DEFAULT_API_PORT})`,
    unit: 'port',
  }),
  apiHost: option.string({
    flag: '--api-host <address>',
    description: 'unity-relay: allocation API bind address (beyond 127.0.0.1 only with --api-key)',
    default: '127.0.0.1',
  }),
  publicHost: option.string({
    flag: '--public-host <host>',
    description: 'unity-relay: address written into allocations',
    default: '127.0.0.1',
  }),
  dtlsPort: option.int({
    flag: '--dtls-port <port>',
    description: `unity-relay: DTLS port (UDP); 0 disables; default --port + ${PORT_OFFSETS.dtlsPort} (${DEFAULT_DTLS_PORT}), a free one if that is taken`,
    min: 0,
    max: 65535,
    unit: 'port',
  }),
  wsPort: option.int({
    flag: '--ws-port <port>',
    description: `unity-relay: WebSocket port (TCP); 0 disables; default --port + ${PORT_OFFSETS.wsPort} (${DEFAULT_WS_PORT}), a free one if that is taken`,
    min: 0,
    max: 65535,
    unit: 'port',
  }),
  wssPort: option.int({
    flag: '--wss-port <port>',
    description: `unity-relay: secure WebSocket port (TCP, TLS); 0 disables; default --port + ${PORT_OFFSETS.wssPort} (${DEFAULT_WSS_PORT}), a free one if that is taken`,
    min: 0,
    max: 65535,
    unit: 'port',
  }),
  wssCert: option.string({
    flag: '--wss-cert <file>',
    description:
      'unity-relay: PEM certificate chain for wss (default: self-signed, generated into the data folder)',
    requires: 'wssKey',
    requiresWhy: 'a certificate and its key go together',
  }),
  wssKey: option.string({
    flag: '--wss-key <file>',
    description: 'unity-relay: PEM private key for wss',
    requires: 'wssCert',
    requiresWhy: 'a certificate and its key go together',
  }),
  wssPublicHost: option.string({
    flag: '--wss-public-host <host>',
    description:
      'unity-relay: host written into the wss endpoint (the name its certificate carries); default --public-host',
  }),
  apiKey: option.string({
    flag: '--api-key <key>',
    description: 'unity-relay: require "Authorization: Bearer <key>" on the API',
    secret: true,
  }),
  idleTimeoutMs: option.int({
    flag: '--unity-idle-timeout-ms <ms>',
    flagAliases: ['--unity-idle-timeout'],
    description: 'unity-relay: idle time before a binding expires',
    default: STORE_DEFAULTS.idleTimeoutMs,
  }),
  hostAloneTimeoutMs: option.int({
    flag: '--unity-host-alone-timeout-ms <ms>',
    flagAliases: ['--unity-host-alone-timeout'],
    description: 'unity-relay: idle time for a host with no client yet',
    default: STORE_DEFAULTS.hostAloneTimeoutMs,
  }),
  dataplane: option.string({
    flag: '--dataplane <mode>',
    description:
      'unity-relay: who forwards UDP↔UDP RELAYs: native (C, recvmmsg/sendmmsg), js, or auto (native where built)',
    choices: DATAPLANES,
    default: 'auto',
  }),
  nativeCoalesceUs: option.int({
    flag: '--native-coalesce-us <µs>',
    description: `unity-relay: native data plane: while datagrams arrive at ${COALESCE_MIN_PPS / 1000}k/s or more, wait up to this long after a wake-up so the next ones are handled together (less CPU per datagram, that much more latency); 0: never`,
    default: DEFAULT_NATIVE_COALESCE_US,
    min: 0,
    max: 1000,
    unit: 'µs',
  }),
  maxDatagramBytes: option.int({
    flag: '--unity-max-datagram-bytes <bytes>',
    flagAliases: ['--unity-max-datagram'],
    description: 'unity-relay: largest datagram accepted',
    default: DEFAULT_MAX_DATAGRAM_BYTES,
  }),
  maxDtlsMessageBytes: option.int({
    flag: '--unity-max-dtls-message-bytes <bytes>',
    description: 'unity-relay: largest relay message forwarded to a DTLS client (UTP: 1400 - 37)',
    default: DEFAULT_MAX_TO_DTLS,
    min: 1,
    unit: 'bytes',
  }),
  maxWsMessageBytes: option.int({
    flag: '--unity-max-ws-message-bytes <bytes>',
    description: 'unity-relay: largest relay message forwarded to a WebSocket client (UTP: 1400 - 14)',
    default: DEFAULT_MAX_TO_WS,
    min: 1,
    unit: 'bytes',
  }),
  maxWsConnectionsPerIp: option.int({
    flag: '--unity-max-ws-connections-per-ip <n>',
    description: 'unity-relay: WebSocket connections per client IP (each of ws and wss)',
    default: DEFAULT_WS_MAX_CONNECTIONS_PER_IP,
    min: 1,
  }),
  apiRequestsPerMinute: option.int({
    flag: '--unity-api-requests-per-minute <n>',
    description:
      'unity-relay: API requests per client address and route per minute (0: off); not for callers with the API key',
    default: API_LIMIT_DEFAULTS.rateLimitPerMinute,
    min: 0,
  }),
  maxAllocationsPerAddress: option.int({
    flag: '--unity-max-allocations-per-address <n>',
    description:
      'unity-relay: live allocations one API client address may hold; not for callers with the API key',
    default: API_LIMIT_DEFAULTS.maxAllocationsPerAddress,
    min: 1,
  }),
  allocationsPerMinutePerAddress: option.int({
    flag: '--unity-allocations-per-minute-per-address <n>',
    description:
      'unity-relay: allocations (allocate + join) per API client address per minute, burst 20 (0: off); not for callers with the API key',
    default: API_LIMIT_DEFAULTS.allocationsPerMinutePerAddress,
    min: 0,
  }),
  allocationsPerSecond: option.int({
    flag: '--unity-allocations-per-second <n>',
    description:
      'unity-relay: allocations per second from every caller without the API key together, burst twice that (0: off); per allocator in a fleet',
    default: API_LIMIT_DEFAULTS.globalAllocationsPerSecond,
    min: 0,
  }),
  keyedAllocationsPerSecond: option.int({
    flag: '--unity-keyed-allocations-per-second <n>',
    description:
      'unity-relay: allocations per second from callers with the API key (backends) together, burst twice that (0: off); per allocator in a fleet',
    default: API_LIMIT_DEFAULTS.keyedAllocationsPerSecond,
    min: 0,
  }),
  maxAllocations: option.int({
    flag: '--unity-max-allocations <n>',
    description: 'unity-relay: most allocations held at once (a relay node announces it as its capacity)',
    default: STORE_DEFAULTS.maxAllocations,
    min: 1,
  }),
  role: option.string({
    flag: '--role <role>',
    description:
      'unity-relay: allocator (allocation API on Redis), relay (a relay node), or all (one process, no Redis)',
    choices: UNITY_RELAY_ROLES,
    default: 'all',
    requires: 'redis',
    requiresWhy: "an allocator or a relay node keeps the fleet's state in Redis",
  }),
  redis: option.string({
    flag: '--redis <url>',
    description:
      'unity-relay: redis://host:port or redis+sentinel://host:26379,…/name of the fleet (needed by --role allocator|relay and --workers)',
    secret: true,
  }),
  redisPrefix: option.string({
    flag: '--unity-redis-prefix <prefix>',
    description:
      'unity-relay: prefix of every Redis key of this fleet (several fleets can share one Redis); every allocator and relay node of a fleet needs the same',
    default: 'gamewire:',
    requires: 'redis',
  }),
  relaySecret: option.string({
    flag: '--relay-secret <secret>',
    description:
      'unity-relay: the secret every allocator and relay node of a fleet shares (≥ 32 characters); signs connection data and derives allocation keys',
    secret: true,
  }),
  relaySecretFile: option.string({
    flag: '--relay-secret-file <file>',
    description: 'unity-relay: read the relay secret from this file (one line)',
    secret: true,
  }),
  nodeId: option.string({
    flag: '--node-id <id>',
    description: "unity-relay: this relay node's id in the fleet (default: relay- and 8 random hex digits)",
    requires: 'redis',
  }),
  region: option.string({
    flag: '--region <id>',
    description: 'unity-relay: the region this relay node serves',
    default: 'local-1',
    requires: 'redis',
  }),
  heartbeatTtlMs: option.int({
    flag: '--heartbeat-ttl-ms <ms>',
    description:
      'unity-relay: a relay node without a heartbeat for this long gets no new allocations (heartbeat: a third of it)',
    default: 10_000,
    min: 300,
    max: 600_000,
    unit: 'ms',
    requires: 'redis',
  }),
  drain: option.bool({
    flag: '--drain',
    description: 'unity-relay: start draining: no new allocations, current ones finish',
  }),
  workers: option.int({
    flag: '--workers <n>',
    description: 'unity-relay: start one allocator and N relay processes (one per core) on consecutive ports',
    default: 0,
    min: 0,
    max: 256,
    requires: 'redis',
  }),
};

/** What `start()` of `gamewire serve unity-relay` receives. */
export type UnityRelayServeOptions = ServerOptions<typeof UNITY_RELAY_OPTIONS>;

/** The transports whose port can be derived from `--port` (and so may move). */
export type MovablePort = 'dtls' | 'ws' | 'wss';

/** The ports `serve unity-relay` uses, from its options (the CLI's meaning: 0 turns a transport off). */
export interface ServePorts {
  port: number;
  apiPort: number;
  /** Undefined: off; 0: a free one. */
  dtlsPort: number | undefined;
  wsPort: number | undefined;
  wssPort: number | undefined;
  /** Transports whose port was derived (not set), so may move when taken. */
  movable: MovablePort[];
  /** The API port was derived from `--port`. */
  apiDerived: boolean;
}

/**
 * Resolves `serve`'s ports: set ones as given, the rest derived from `--port` (`PORT_OFFSETS`).
 * `api: false` (a relay node, which serves no API) leaves the API port 0 and never refuses it.
 */
export function servePorts(
  options: Pick<UnityRelayServeOptions, 'port' | 'apiPort' | 'dtlsPort' | 'wsPort' | 'wssPort'>,
  use: { api: boolean } = { api: true },
): ServePorts {
  const port = options.port;
  const derived = (key: keyof typeof PORT_OFFSETS, flag: string): number => {
    if (port === 0) return 0;
    const p = port + PORT_OFFSETS[key];
    if (p > 65_535)
      throw new ConfigError(
        `--port ${port} leaves no room for the default ${flag} (--port + ${PORT_OFFSETS[key]}): set ${flag}`,
        `unity-relay.${key}`,
      );
    return p;
  };
  const movable: MovablePort[] = [];
  const transport = (key: 'dtlsPort' | 'wsPort' | 'wssPort', kind: MovablePort): number | undefined => {
    const set = options[key];
    if (set !== undefined) return set === 0 ? undefined : set;
    const p = derived(key, `--${kind}-port`);
    if (p !== 0) movable.push(kind);
    return p;
  };
  return {
    port,
    apiPort: options.apiPort ?? (use.api ? derived('apiPort', '--api-port') : 0),
    dtlsPort: transport('dtlsPort', 'dtls'),
    wsPort: transport('wsPort', 'ws'),
    wssPort: transport('wssPort', 'wss'),
    movable,
    apiDerived: options.apiPort === undefined,
  };
}
