/**
 * `gamewire serve unity-relay`: the relay on every transport a Unity client can pick (UDP, DTLS,
 * WebSocket, secure WebSocket) and, in the same process, the allocation API. All share one
 * in-memory `AllocationStore` and one `RelayServer` (the transports are links, see links.ts).
 *
 * Scaled out on Redis (`--role`, fleet.ts): `relay` runs the transports without the API and
 * announces itself as a node; `allocator` runs only the API, on Redis; `all` (the default) is
 * the single process above. `--workers N` runs one allocator and N relays as child processes
 * (workers.ts).
 */
import { randomBytes } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import net from 'node:net';
import type { FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import { CommandError, ConfigError, UsageError } from '../../core/errors.js';
import { silentLogger } from '../../core/logger.js';
import { ProtocolMetrics } from '../../core/metrics.js';
import { RedisNodeRegistry } from '../../core/node-registry.js';
import { trafficRecorder } from '../../core/recording.js';
import { connectRedis, type RedisConnection } from '../../core/redis.js';
import type { Endpoint, RunningServer, ServerContext, ServerDefinition } from '../../core/server.js';
import { bindUdp, closeUdp } from '../../core/udp.js';
import type { DtlsServerOptions } from '../../transports/dtls/index.js';
import { allocatorAdmin, relayAdmin } from './admin.js';
import { AllocationStore, checkNodeId, RelayCredentials, type StoreOptions } from './allocations.js';
import {
  type ApiLimitOptions,
  ApiLimits,
  buildApi,
  DEFAULT_KEYED_ALLOCATIONS_PER_SECOND,
  type ServerEndpointJson,
  serverEndpoint,
} from './api.js';
import { type DtlsEndpoint, startDtlsEndpoint } from './dtls.js';
import {
  type FleetAdmin,
  type FleetNodeView,
  fleetView,
  HeldAllocationRecords,
  type NodeSample,
  RELAY_NODE_KIND,
  RedisAllocationService,
  RelayNodePresence,
  redisStatusLogger,
  setNodeGauges,
} from './fleet.js';
import type { RelayUdpSocket } from './links.js';
import { loadNativeDataplane, NativeDataplaneMirror, NativeRelaySocket } from './native-dataplane.js';
import { NativeDtlsRecords } from './native-dtls.js';
import { RelayServer } from './relay.js';
import {
  ensureSelfSignedCert,
  startWsEndpoint,
  type WsEndpoint,
  type WsEndpointOptions,
} from './websocket.js';
import { startWorkers } from './workers.js';

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
  options: Record<string, unknown>,
  use: { api: boolean } = { api: true },
): ServePorts {
  const port = optionalInt(options.port) ?? DEFAULT_RELAY_PORT;
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
    const set = optionalInt(options[key]);
    if (set !== undefined) return set === 0 ? undefined : set;
    const p = derived(key, `--${kind}-port`);
    if (p !== 0) movable.push(kind);
    return p;
  };
  const apiSet = optionalInt(options.apiPort);
  return {
    port,
    apiPort: apiSet ?? (use.api ? derived('apiPort', '--api-port') : 0),
    dtlsPort: transport('dtlsPort', 'dtls'),
    wsPort: transport('wsPort', 'ws'),
    wssPort: transport('wssPort', 'wss'),
    movable,
    apiDerived: apiSet === undefined,
  };
}

/** A derived API port that is taken: the one line says where it came from and which flag sets it. */
function apiPortTaken(err: unknown, ports: ServePorts, host: string): unknown {
  const e = err as NodeJS.ErrnoException & { port?: number };
  if (!ports.apiDerived || e.code !== 'EADDRINUSE' || (e.port !== undefined && e.port !== ports.apiPort))
    return err;
  return new CommandError(
    'ERR_LISTEN',
    `unity-relay: port ${ports.apiPort} is already in use (${host}:${ports.apiPort}): it is the allocation API's default (--port + ${PORT_OFFSETS.apiPort}); choose one with --api-port (config unity-relay.apiPort)`,
    1,
    { cause: err },
  );
}

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
  /**
   * Host written into the `wss` endpoint (a DNS name its certificate names, for browsers).
   * Default `publicHost`.
   */
  wssPublicHost?: string;
  /** DTLS port (UDP); 0 picks a free one. Default: off (the CLI's default is 37001). */
  dtlsPort?: number | undefined;
  /** WebSocket (`ws`) port; 0 picks a free one. Default: off (the CLI's default is 37002). */
  wsPort?: number | undefined;
  /** Secure WebSocket (`wss`) port; 0 picks a free one. Default: off (the CLI's default is 37003). */
  wssPort?: number | undefined;
  /** PEM certificate (chain) and key for `wss`. Default: a self-signed pair generated into `dataDir`. */
  wssCert?: Buffer | string;
  wssKey?: Buffer | string;
  /** Where generated state lives (the self-signed certificate). Default `./.gamewire`. */
  dataDir?: string;
  /** WebSocket connections in all / per client IP (each of ws and wss). Defaults 10 000 / 256. */
  wsMaxConnections?: number;
  wsMaxConnectionsPerIp?: number;
  /** Largest relay message forwarded to a DTLS / WebSocket recipient. Defaults 1363 / 1386. */
  maxMessageToDtls?: number;
  maxMessageToWs?: number;
  /** BIND/CONNECT_REQUEST per source IP per second (checked before any HMAC). Default 50, burst 100. */
  hmacRatePerSecond?: number;
  hmacBurst?: number;
  /** WebSocket endpoint limits beyond the connection caps (deadlines, idle, send buffer). */
  ws?: Pick<
    WsEndpointOptions,
    'handshakeTimeoutMs' | 'idleTimeoutMs' | 'bindTimeoutMs' | 'maxBufferedBytes' | 'sweepIntervalMs'
  >;
  /** DTLS server limits (handshakes in all and per IP, timeouts, cookie rotation…; see docs/dtls.md). */
  dtls?: Omit<DtlsServerOptions, 'pskFor'>;
  /** API limits beyond `apiRateLimitPerMinute`. */
  apiLimits?: Omit<ApiLimitOptions, 'rateLimitPerMinute'>;
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
  /**
   * Who forwards UDP↔UDP RELAYs: `native` (the C data plane: recvmmsg/sendmmsg, no JavaScript per
   * datagram), `js`, or `auto` (default: native where it is built and the host is IPv4). The
   * GAMEWIRE_DATAPLANE environment variable (`native` or `js`) decides what `auto` means.
   */
  dataplane?: DataplaneChoice;
  /** Most allocations held at once (live and remembered expired ones). Default 10 000. */
  maxAllocations?: number;
  /** Start draining: no new allocations, current ones finish. Default false. */
  drain?: boolean;
  /**
   * Run as a relay node of a fleet (`--role relay`): no allocation API; the node announces itself
   * in Redis and accepts BINDs for allocations placed on it by the fleet's allocators.
   */
  fleet?: RelayNodeOptions;
  /**
   * Transports whose port may move to a free one when it is taken (logged at warn): the CLI
   * passes the ones it derived from `--port` rather than ones the user set. Default: none.
   */
  movablePorts?: readonly MovablePort[];
  /** A relay node's announcement is handed to this instead of run at once (`ServerContext.deferAnnouncement`). */
  deferAnnouncement?: ServerContext['deferAnnouncement'];
  /** Extra store settings (clock, secret, regions…), mostly for tests. */
  store?: StoreOptions;
  metrics?: ProtocolMetrics;
  log?: Logger;
}

export type DataplaneChoice = 'auto' | 'native' | 'js';

/** The transports whose port can be derived from `--port` (and so may move). */
export type MovablePort = 'dtls' | 'ws' | 'wss';

/** What a fleet member needs: Redis, the shared secret, and how often it heartbeats. */
export interface FleetCommonOptions {
  /** `redis://…` of the fleet's control plane. */
  redisUrl: string;
  /** The fleet's shared relay secret (at least 32 bytes). */
  secret: Buffer;
  /** How long a node's record lives without a heartbeat. Default 10 000 ms (heartbeat: a third). */
  heartbeatTtlMs?: number;
  /** Key prefix in Redis. Default `gamewire:`. */
  redisPrefix?: string;
}

export interface RelayNodeOptions extends FleetCommonOptions {
  /** This node's id (in connection data and Redis). Default `relay-` and 8 random hex digits. */
  nodeId?: string;
  /** The region it serves. Default `local-1`. */
  region?: string;
}
export interface UnityRelayInstance extends RunningServer, FleetAdmin {
  relay: RelayServer;
  /** The data plane that runs, and why (for `auto`). */
  dataplane: 'native' | 'js';
  dataplaneReason: string;
  /** Who runs the record layer of established DTLS associations (native only with the native plane). */
  dtlsDataplane: 'native' | 'js' | undefined;
  /** The DTLS endpoint, when it runs. */
  dtls: DtlsEndpoint | undefined;
  /** The WebSocket endpoints that run (`ws`, `wss`). */
  ws: WsEndpoint | undefined;
  wss: WsEndpoint | undefined;
  /** The generated self-signed wss certificate (PEM file), when one was generated or reused. */
  wssCertPath: string | undefined;
  /** `serverEndpoints` written into every allocation. */
  serverEndpoints: ServerEndpointJson[];
  apiLimits: ApiLimits;
  store: AllocationStore;
  /** The allocation API (undefined on a relay node: its allocators serve it). */
  api: FastifyInstance | undefined;
  metrics: ProtocolMetrics;
  udpPort: number;
  /** 0 on a relay node. */
  apiPort: number;
  /** `http://host:port` of the API, for clients ('' on a relay node). */
  apiUrl: string;
}

/** Public hosts a node must not advertise: nobody can reach "any address". */
function checkAdvertised(host: string, key: string): void {
  if (host === '0.0.0.0' || host === '::' || host === '' || host === '[::]')
    throw new ConfigError(
      `a relay node cannot advertise ${host || 'an empty host'}: set --public-host to an address or name clients can reach (it goes into every allocation placed on this node)`,
      key,
    );
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
  if (options.fleet === undefined) checkApiExposure(apiHost, options.apiKey);
  const fleet = options.fleet;
  if (fleet !== undefined) {
    if (fleet.nodeId !== undefined) checkNodeId(fleet.nodeId);
    checkAdvertised(options.publicHost ?? '127.0.0.1', 'unity-relay.publicHost');
    if (options.wssPublicHost !== undefined)
      checkAdvertised(options.wssPublicHost, 'unity-relay.wssPublicHost');
  }
  const nodeId =
    fleet === undefined ? undefined : (fleet.nodeId ?? `relay-${randomBytes(4).toString('hex')}`);
  const region = fleet?.region ?? 'local-1';
  const store = new AllocationStore({
    ...options.store,
    ...(fleet !== undefined
      ? {
          credentials: new RelayCredentials(fleet.secret),
          nodeId,
          adoptFromConnectionData: true,
          regions: [{ id: region, description: `gamewire relay node ${nodeId}` }],
        }
      : {}),
    ...(options.maxAllocations !== undefined ? { maxAllocations: options.maxAllocations } : {}),
    ...(options.idleTimeoutMs !== undefined ? { idleTimeoutMs: options.idleTimeoutMs } : {}),
    ...(options.hostAloneTimeoutMs !== undefined ? { hostAloneTimeoutMs: options.hostAloneTimeoutMs } : {}),
    ...(options.bindTimeoutMs !== undefined ? { bindTimeoutMs: options.bindTimeoutMs } : {}),
    ...(options.joinCodeTtlMs !== undefined ? { joinCodeTtlMs: options.joinCodeTtlMs } : {}),
  });
  const plane = chooseDataplane(options.dataplane ?? 'auto', host);
  let socket: RelayUdpSocket & { close(): void };
  let udpPort: number;
  let nativeMirror: NativeDataplaneMirror | undefined;
  let nativeDtls: NativeDtlsRecords | undefined;
  let closeSocket: () => Promise<void>;
  if (plane.use === 'native') {
    // The DTLS port goes native too, unless a recording must see it (it sees only JavaScript's sockets).
    const dtlsNative =
      options.dtlsPort !== undefined && trafficRecorder() === undefined && plane.dtls === 'native';
    const open = (dtlsPort: number | undefined) =>
      NativeRelaySocket.open({
        host,
        port: options.port ?? DEFAULT_RELAY_PORT,
        ...(dtlsNative ? { dtlsPort } : {}),
        ...(options.maxDatagramBytes !== undefined ? { maxDatagramBytes: options.maxDatagramBytes } : {}),
        ...(options.maxMessageToDtls !== undefined ? { maxMessageToDtls: options.maxMessageToDtls } : {}),
      });
    let native: NativeRelaySocket;
    try {
      native = open(options.dtlsPort);
    } catch (err) {
      // A DTLS port derived from --port that is taken moves, as on the JavaScript plane.
      const e = err as NodeJS.ErrnoException & { port?: number };
      const dtlsTaken = dtlsNative && e.code === 'EADDRINUSE' && e.port === options.dtlsPort;
      if (!dtlsTaken || !options.movablePorts?.includes('dtls') || options.dtlsPort === 0) throw err;
      native = open(0);
      log.warn(
        { transport: 'dtls', port: options.dtlsPort },
        `unity-relay dtls: port ${options.dtlsPort} (derived from --port) is in use; listening on a free port instead (set --dtls-port to choose)`,
      );
    }
    nativeMirror = new NativeDataplaneMirror(native);
    if (dtlsNative) {
      nativeDtls = new NativeDtlsRecords(native);
      nativeMirror.dtls = nativeDtls;
    }
    store.observer = nativeMirror;
    socket = native;
    udpPort = native.port;
    closeSocket = async () => native.close();
  } else {
    const udp = await bindUdp({
      host,
      port: options.port ?? DEFAULT_RELAY_PORT,
      recvBufferSize: 4 * 1024 * 1024,
      sendBufferSize: 4 * 1024 * 1024,
    });
    socket = udp;
    udpPort = udp.address().port;
    closeSocket = () => closeUdp(udp);
  }
  log.info({ dataplane: plane.use, reason: plane.reason }, `unity-relay data plane: ${plane.use}`);
  const relay = new RelayServer(socket, store, metrics, log, {
    ...(nativeMirror !== undefined ? { nativeMirror } : {}),
    ...(options.maxDatagramBytes !== undefined ? { maxDatagramBytes: options.maxDatagramBytes } : {}),
    ...(options.errorRatePerSecond !== undefined ? { errorRatePerSecond: options.errorRatePerSecond } : {}),
    ...(options.errorBurst !== undefined ? { errorBurst: options.errorBurst } : {}),
    ...(options.errorSources !== undefined ? { errorSources: options.errorSources } : {}),
    ...(options.hmacRatePerSecond !== undefined ? { hmacRatePerSecond: options.hmacRatePerSecond } : {}),
    ...(options.hmacBurst !== undefined ? { hmacBurst: options.hmacBurst } : {}),
    ...(options.maxMessageToDtls !== undefined ? { maxMessageToDtls: options.maxMessageToDtls } : {}),
    ...(options.maxMessageToWs !== undefined ? { maxMessageToWs: options.maxMessageToWs } : {}),
  });
  const publicHost = options.publicHost ?? '127.0.0.1';
  let dtls: DtlsEndpoint | undefined;
  const closers: (() => Promise<void>)[] = [
    async () => {
      relay.stop();
      // A DTLS endpoint on the native socket says close_notify before the socket goes.
      if (nativeDtls !== undefined) await dtls?.close();
      await closeSocket();
    },
  ];
  const closeAll = async () => {
    await Promise.allSettled(closers.map((c) => c()));
  };
  const endpoints: Endpoint[] = [
    {
      transport: 'udp',
      host,
      port: udpPort,
      description: `Unity Relay (Unity Transport clients bind here; ${plane.use === 'native' ? 'native' : 'JavaScript'} data plane)`,
    },
  ];
  const serverEndpoints: ServerEndpointJson[] = [serverEndpoint('udp', publicHost, udpPort)];
  let ws: WsEndpoint | undefined;
  let wss: WsEndpoint | undefined;
  let wssCertPath: string | undefined;
  const apiLimits = new ApiLimits({
    ...options.apiLimits,
    ...(options.apiRateLimitPerMinute !== undefined
      ? { rateLimitPerMinute: options.apiRateLimitPerMinute }
      : {}),
  });
  let api: FastifyInstance | undefined;
  let redis: RedisConnection | undefined;
  let presence: RelayNodePresence | undefined;
  let announceNode: (() => Promise<void>) | undefined;
  let fleetNodes: (() => Promise<FleetNodeView[]>) | undefined;
  let draining = options.drain ?? false;
  try {
    const wsCommon = {
      host,
      ...(options.wsMaxConnections !== undefined ? { maxConnections: options.wsMaxConnections } : {}),
      ...(options.wsMaxConnectionsPerIp !== undefined
        ? { maxConnectionsPerIp: options.wsMaxConnectionsPerIp }
        : {}),
      idleTimeoutMs: Math.max(store.idleTimeoutMs, store.hostAloneTimeoutMs),
      ...options.ws,
    };
    const movable = new Set(options.movablePorts ?? []);
    /** Listens on `port`, or, for a movable transport whose port is taken, on a free one. */
    const listenMovable = async <T>(kind: MovablePort, port: number, listen: (p: number) => Promise<T>) => {
      try {
        return await listen(port);
      } catch (err) {
        if (!movable.has(kind) || port === 0 || (err as NodeJS.ErrnoException).code !== 'EADDRINUSE')
          throw err;
        const flag = `--${kind}-port`;
        const moved = await listen(0);
        log.warn(
          { transport: kind, port },
          `unity-relay ${kind}: port ${port} (derived from --port) is in use; listening on a free port instead (set ${flag} to choose)`,
        );
        return moved;
      }
    };
    if (options.dtlsPort !== undefined) {
      dtls = await listenMovable('dtls', options.dtlsPort, (port) =>
        startDtlsEndpoint(relay, store, metrics, log, {
          host,
          port,
          // The association outlives no binding (it is closed with it), and never dies before it.
          associationIdleTimeoutMs: 2 * Math.max(store.idleTimeoutMs, store.hostAloneTimeoutMs),
          ...(options.maxDatagramBytes !== undefined
            ? { maxRecordPlaintext: options.maxDatagramBytes + 64 }
            : {}),
          ...options.dtls,
          native: nativeDtls,
        }),
      );
      const d = dtls;
      closers.push(() => d.close());
      endpoints.push({
        transport: 'udp',
        host,
        port: d.port,
        description: `Unity Relay over DTLS 1.2 (PSK; ${nativeDtls !== undefined ? 'native' : 'JavaScript'} record layer)`,
      });
      serverEndpoints.push(serverEndpoint('dtls', publicHost, d.port));
    }
    if (options.wsPort !== undefined) {
      ws = await listenMovable('ws', options.wsPort, (port) =>
        startWsEndpoint(relay, metrics, log, { ...wsCommon, port, secure: false }),
      );
      const w = ws;
      closers.push(() => w.close());
      endpoints.push({
        transport: 'tcp',
        host,
        port: w.port,
        description: 'Unity Relay over WebSocket (ws)',
      });
      serverEndpoints.push(serverEndpoint('ws', publicHost, w.port));
    }
    let cert = options.wssCert;
    let key = options.wssKey;
    if (options.wssPort !== undefined) {
      if (cert === undefined || key === undefined) {
        try {
          const pair = await ensureSelfSignedCert(
            options.dataDir ?? '.gamewire',
            options.wssPublicHost ?? publicHost,
          );
          if (pair.generated)
            log.info({ cert: pair.certPath }, 'generated a self-signed certificate for wss');
          cert = pair.cert;
          key = pair.key;
          wssCertPath = pair.certPath;
        } catch (err) {
          // No openssl: every other transport still serves; wss needs --wss-cert/--wss-key then.
          log.warn({ err }, 'wss disabled: no certificate (pass --wss-cert and --wss-key)');
        }
      }
    }
    if (options.wssPort !== undefined && cert !== undefined && key !== undefined) {
      const [c, k] = [cert, key];
      wss = await listenMovable('wss', options.wssPort, (port) =>
        startWsEndpoint(relay, metrics, log, { ...wsCommon, port, secure: true, cert: c, key: k }),
      );
      const w = wss;
      closers.push(() => w.close());
      endpoints.push({
        transport: 'tcp',
        host,
        port: w.port,
        description: 'Unity Relay over secure WebSocket (wss)',
      });
      serverEndpoints.push(serverEndpoint('wss', options.wssPublicHost ?? publicHost, w.port));
    }
    if (fleet === undefined) {
      api = buildApi(store, {
        publicHost,
        relayPort: udpPort,
        endpoints: serverEndpoints,
        limits: apiLimits,
        apiKey: options.apiKey,
        log,
        draining: () => draining,
        ...(options.maxConnectionsLimit !== undefined
          ? { maxConnectionsLimit: options.maxConnectionsLimit }
          : {}),
      });
      const a = api;
      closers.push(() => a.close());
      await api.listen({ host: apiHost, port: options.apiPort ?? DEFAULT_API_PORT });
    } else {
      // A relay node: Redis must answer at start (afterwards an outage only delays heartbeats);
      // it is announced once everything listens.
      redis = await connectRedis(fleet.redisUrl, {
        ...(fleet.redisPrefix !== undefined ? { prefix: fleet.redisPrefix } : {}),
        onStatus: redisStatusLogger(log, 'relay'),
      });
      const r = redis;
      const registry = new RedisNodeRegistry(r, { ttlMs: fleet.heartbeatTtlMs ?? 10_000 });
      closers.push(async () => {
        await presence?.stop();
        await r.close();
      });
      fleetNodes = async () => (await registry.live(RELAY_NODE_KIND)).map(fleetView);
      announceNode = async () => {
        const announcement = await registry.announce({
          id: nodeId!,
          kind: RELAY_NODE_KIND,
          region,
          endpoints: serverEndpoints.map((e) => ({
            transport: e.connectionType,
            host: e.host,
            port: e.port,
          })),
          capacity: store.maxAllocations,
          load: 0,
          draining,
          startedAt: Date.now(),
          meta: { allocations: '0' },
        });
        presence = new RelayNodePresence(
          announcement,
          registry.heartbeatMs,
          (withHeld) => sampleLoad(store, withHeld),
          metrics,
          new HeldAllocationRecords(r, nodeId!, registry.ttlMs),
        );
        log.info({ node: nodeId, region, ttlMs: registry.ttlMs }, 'relay node announced in Redis');
      };
      if (options.deferAnnouncement === undefined) await announceNode();
    }
  } catch (err) {
    await closeAll();
    await redis?.close().catch(() => {});
    throw err;
  }
  const address = api?.server.address();
  const apiPort = typeof address === 'object' && address !== null ? address.port : 0;
  let closing: Promise<void> | undefined;
  if (api !== undefined)
    endpoints.push({
      transport: 'http',
      host: apiHost,
      port: apiPort,
      description: 'allocation API (/v1/allocate, /v1/joincode, /v1/join, /v1/regions)',
    });
  if (announceNode !== undefined && options.deferAnnouncement !== undefined)
    options.deferAnnouncement(announceNode);
  const fleetAdmin: FleetAdmin = {
    role: fleet === undefined ? 'all' : 'relay',
    nodeId,
    get draining() {
      return draining;
    },
    async drain() {
      if (!draining) log.info({ node: nodeId }, 'draining: no new allocations, current ones finish');
      draining = true;
      await presence?.drain();
    },
    fleet: async () => (fleetNodes === undefined ? undefined : fleetNodes()),
  };
  const admin = relayAdmin({ relay, store, dataplane: plane.use, nativeMirror, fleet: fleetAdmin });
  closers.push(async () => admin.wire?.close());
  return {
    admin,
    role: fleetAdmin.role,
    nodeId,
    get draining() {
      return draining;
    },
    drain: fleetAdmin.drain,
    fleet: fleetAdmin.fleet,
    relay,
    dataplane: plane.use,
    dataplaneReason: plane.reason,
    dtlsDataplane: dtls === undefined ? undefined : nativeDtls !== undefined ? 'native' : 'js',
    dtls,
    ws,
    wss,
    wssCertPath,
    serverEndpoints,
    apiLimits,
    store,
    api,
    metrics,
    udpPort,
    apiPort,
    apiUrl: api === undefined ? '' : `http://${apiHost.includes(':') ? `[${apiHost}]` : apiHost}:${apiPort}`,
    endpoints,
    close() {
      closing ??= closeAll();
      return closing;
    },
  };
}

/**
 * A node's load (bound allocations) and the allocations it holds (bound or waiting to bind),
 * with their ids when `withHeld` (its heartbeat refreshes their records in Redis).
 */
function sampleLoad(store: AllocationStore, withHeld: boolean): NodeSample {
  let load = 0;
  let allocations = 0;
  const held: string[] = [];
  for (const a of store.live()) {
    allocations++;
    if (a.state === 'bound') load++;
    if (withHeld) held.push(a.guid);
  }
  return { load, allocations, held };
}

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
  api: FastifyInstance;
  service: RedisAllocationService;
  apiLimits: ApiLimits;
  metrics: ProtocolMetrics;
  apiPort: number;
  apiUrl: string;
}

function checkApiExposure(apiHost: string, apiKey: string | undefined): void {
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
  });
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
    await api.listen({ host: apiHost, port: options.apiPort ?? DEFAULT_API_PORT });
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

/** The API limits set by `serve` options. */
function apiLimitsOf(options: Record<string, unknown>): Omit<ApiLimitOptions, 'rateLimitPerMinute'> {
  const out: Omit<ApiLimitOptions, 'rateLimitPerMinute'> = {};
  const perAddress = optionalInt(options.maxAllocationsPerAddress);
  if (perAddress !== undefined) out.maxAllocationsPerAddress = perAddress;
  const rate = optionalInt(options.allocationsPerMinutePerAddress);
  if (rate !== undefined) out.allocationsPerMinutePerAddress = rate;
  const global = optionalInt(options.allocationsPerSecond);
  if (global !== undefined) out.globalAllocationsPerSecond = global;
  const keyed = optionalInt(options.keyedAllocationsPerSecond);
  if (keyed !== undefined) out.keyedAllocationsPerSecond = keyed;
  return out;
}

/** The relay secret from `--relay-secret` or `--relay-secret-file` (at least 32 characters). */
async function relaySecret(options: Record<string, unknown>): Promise<Buffer | undefined> {
  const inline = optionalString(options.relaySecret);
  const file = optionalString(options.relaySecretFile);
  if (inline !== undefined && file !== undefined)
    throw new ConfigError('give --relay-secret or --relay-secret-file, not both', 'unity-relay.relaySecret');
  let secret: string | undefined = inline;
  if (file !== undefined) {
    try {
      secret = (await readFile(file, 'utf8')).replace(/\r?\n$/, '');
    } catch (err) {
      throw new ConfigError(
        `cannot read the relay secret file ${file}: ${(err as Error).message}`,
        'unity-relay.relaySecretFile',
      );
    }
  }
  if (secret === undefined) return undefined;
  if (secret.length < 32)
    throw new ConfigError(
      'the relay secret must be at least 32 characters (e.g. openssl rand -hex 32)',
      'unity-relay.relaySecret',
    );
  return Buffer.from(secret, 'utf8');
}

function dataplaneFromEnv(): DataplaneChoice {
  const v = process.env.GAMEWIRE_DATAPLANE;
  return v === 'native' || v === 'js' ? v : 'auto';
}

/** Decides the data plane: `native` fails loudly where it cannot run, `auto` falls back to JS. */
function chooseDataplane(
  asked: DataplaneChoice,
  host: string,
): { use: 'native' | 'js'; reason: string; dtls: 'native' | 'js' } {
  const choice = asked === 'auto' ? dataplaneFromEnv() : asked;
  if (choice === 'js')
    return { use: 'js', reason: asked === 'auto' ? 'GAMEWIRE_DATAPLANE=js' : 'asked for', dtls: 'js' };
  // `--record` sees the sockets of the JavaScript helpers only: native forwards would be missing.
  if (asked === 'auto' && trafficRecorder() !== undefined)
    return { use: 'js', reason: 'recording (--record) sees only the JavaScript data plane', dtls: 'js' };
  const { addon, reason } = loadNativeDataplane();
  const problem =
    addon === undefined ? reason : net.isIPv4(host) ? undefined : `it binds IPv4 only (host ${host})`;
  if (problem === undefined)
    return {
      use: 'native',
      reason: choice === 'native' ? 'asked for' : 'available',
      // The DTLS record layer needs OpenSSL from the running Node; without it, DTLS stays in JavaScript.
      dtls: typeof addon?.dtlsAvailable === 'function' && addon.dtlsAvailable() ? 'native' : 'js',
    };
  if (choice === 'native') {
    throw new UsageError(`--dataplane native cannot run: ${problem}; use --dataplane js or auto`);
  }
  return { use: 'js', reason: `native unavailable: ${problem}`, dtls: 'js' };
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
      description: `unity-relay: allocation API port (HTTP); default --port + ${PORT_OFFSETS.apiPort} (${DEFAULT_API_PORT})`,
      type: 'int',
      unit: 'port',
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
      key: 'dtlsPort',
      flag: '--dtls-port <port>',
      description: `unity-relay: DTLS port (UDP); 0 disables; default --port + ${PORT_OFFSETS.dtlsPort} (${DEFAULT_DTLS_PORT}), a free one if that is taken`,
      type: 'int',
      min: 0,
      max: 65535,
      unit: 'port',
    },
    {
      key: 'wsPort',
      flag: '--ws-port <port>',
      description: `unity-relay: WebSocket port (TCP); 0 disables; default --port + ${PORT_OFFSETS.wsPort} (${DEFAULT_WS_PORT}), a free one if that is taken`,
      type: 'int',
      min: 0,
      max: 65535,
      unit: 'port',
    },
    {
      key: 'wssPort',
      flag: '--wss-port <port>',
      description: `unity-relay: secure WebSocket port (TCP, TLS); 0 disables; default --port + ${PORT_OFFSETS.wssPort} (${DEFAULT_WSS_PORT}), a free one if that is taken`,
      type: 'int',
      min: 0,
      max: 65535,
      unit: 'port',
    },
    {
      key: 'wssCert',
      flag: '--wss-cert <file>',
      description:
        'unity-relay: PEM certificate chain for wss (default: self-signed, generated into the data folder)',
      type: 'string',
    },
    {
      key: 'wssKey',
      flag: '--wss-key <file>',
      description: 'unity-relay: PEM private key for wss',
      type: 'string',
    },
    {
      key: 'wssPublicHost',
      flag: '--wss-public-host <host>',
      description:
        'unity-relay: host written into the wss endpoint (the name its certificate carries); default --public-host',
      type: 'string',
    },
    {
      key: 'apiKey',
      flag: '--api-key <key>',
      description: 'unity-relay: require "Authorization: Bearer <key>" on the API',
      type: 'string',
      secret: true,
    },
    {
      key: 'idleTimeoutMs',
      flag: '--unity-idle-timeout-ms <ms>',
      flagAliases: ['--unity-idle-timeout'],
      description: 'unity-relay: idle time before a binding expires',
      type: 'int',
      default: 10_000,
    },
    {
      key: 'hostAloneTimeoutMs',
      flag: '--unity-host-alone-timeout-ms <ms>',
      flagAliases: ['--unity-host-alone-timeout'],
      description: 'unity-relay: idle time for a host with no client yet',
      type: 'int',
      default: 60_000,
    },
    {
      key: 'dataplane',
      flag: '--dataplane <mode>',
      description:
        'unity-relay: who forwards UDP↔UDP RELAYs: native (C, recvmmsg/sendmmsg), js, or auto (native where built)',
      type: 'string',
      choices: ['auto', 'native', 'js'],
      default: 'auto',
    },
    {
      key: 'maxDatagramBytes',
      flag: '--unity-max-datagram-bytes <bytes>',
      flagAliases: ['--unity-max-datagram'],
      description: 'unity-relay: largest datagram accepted',
      type: 'int',
      default: 1472,
    },
    {
      key: 'maxDtlsMessageBytes',
      flag: '--unity-max-dtls-message-bytes <bytes>',
      description: 'unity-relay: largest relay message forwarded to a DTLS client (UTP: 1400 - 37)',
      type: 'int',
      default: 1363,
      min: 1,
      unit: 'bytes',
    },
    {
      key: 'maxWsMessageBytes',
      flag: '--unity-max-ws-message-bytes <bytes>',
      description: 'unity-relay: largest relay message forwarded to a WebSocket client (UTP: 1400 - 14)',
      type: 'int',
      default: 1386,
      min: 1,
      unit: 'bytes',
    },
    {
      key: 'maxWsConnectionsPerIp',
      flag: '--unity-max-ws-connections-per-ip <n>',
      description: 'unity-relay: WebSocket connections per client IP (each of ws and wss)',
      type: 'int',
      default: 256,
      min: 1,
    },
    {
      key: 'apiRequestsPerMinute',
      flag: '--unity-api-requests-per-minute <n>',
      description:
        'unity-relay: API requests per client address and route per minute (0: off); not for callers with the API key',
      type: 'int',
      default: 120,
      min: 0,
    },
    {
      key: 'maxAllocationsPerAddress',
      flag: '--unity-max-allocations-per-address <n>',
      description:
        'unity-relay: live allocations one API client address may hold; not for callers with the API key',
      type: 'int',
      default: 100,
      min: 1,
    },
    {
      key: 'allocationsPerMinutePerAddress',
      flag: '--unity-allocations-per-minute-per-address <n>',
      description:
        'unity-relay: allocations (allocate + join) per API client address per minute, burst 20 (0: off); not for callers with the API key',
      type: 'int',
      default: 120,
      min: 0,
    },
    {
      key: 'allocationsPerSecond',
      flag: '--unity-allocations-per-second <n>',
      description:
        'unity-relay: allocations per second from every caller without the API key together, burst twice that (0: off); per allocator in a fleet',
      type: 'int',
      default: 50,
      min: 0,
    },
    {
      key: 'keyedAllocationsPerSecond',
      flag: '--unity-keyed-allocations-per-second <n>',
      description:
        'unity-relay: allocations per second from callers with the API key (backends) together, burst twice that (0: off); per allocator in a fleet',
      type: 'int',
      default: DEFAULT_KEYED_ALLOCATIONS_PER_SECOND,
      min: 0,
    },
    {
      key: 'maxAllocations',
      flag: '--unity-max-allocations <n>',
      description: 'unity-relay: most allocations held at once (a relay node announces it as its capacity)',
      type: 'int',
      default: 10_000,
      min: 1,
    },
    {
      key: 'role',
      flag: '--role <role>',
      description:
        'unity-relay: allocator (allocation API on Redis), relay (a relay node), or all (one process, no Redis)',
      type: 'string',
      choices: ['allocator', 'relay', 'all'],
      default: 'all',
    },
    {
      key: 'redis',
      flag: '--redis <url>',
      description:
        'unity-relay: redis://host:port of the fleet (needed by --role allocator|relay and --workers)',
      type: 'string',
      secret: true,
    },
    {
      key: 'redisPrefix',
      flag: '--unity-redis-prefix <prefix>',
      description:
        'unity-relay: prefix of every Redis key of this fleet (several fleets can share one Redis); every allocator and relay node of a fleet needs the same',
      type: 'string',
      default: 'gamewire:',
      requires: 'redis',
    },
    {
      key: 'relaySecret',
      flag: '--relay-secret <secret>',
      description:
        'unity-relay: the secret every allocator and relay node of a fleet shares (≥ 32 characters); signs connection data and derives allocation keys',
      type: 'string',
      secret: true,
    },
    {
      key: 'relaySecretFile',
      flag: '--relay-secret-file <file>',
      description: 'unity-relay: read the relay secret from this file (one line)',
      type: 'string',
      secret: true,
    },
    {
      key: 'nodeId',
      flag: '--node-id <id>',
      description: "unity-relay: this relay node's id in the fleet (default: relay- and 8 random hex digits)",
      type: 'string',
      requires: 'redis',
    },
    {
      key: 'region',
      flag: '--region <id>',
      description: 'unity-relay: the region this relay node serves',
      type: 'string',
      default: 'local-1',
      requires: 'redis',
    },
    {
      key: 'heartbeatTtlMs',
      flag: '--heartbeat-ttl-ms <ms>',
      description:
        'unity-relay: a relay node without a heartbeat for this long gets no new allocations (heartbeat: a third of it)',
      type: 'int',
      default: 10_000,
      min: 300,
      max: 600_000,
      unit: 'ms',
      requires: 'redis',
    },
    {
      key: 'drain',
      flag: '--drain',
      description: 'unity-relay: start draining: no new allocations, current ones finish',
      type: 'bool',
      default: false,
    },
    {
      key: 'workers',
      flag: '--workers <n>',
      description:
        'unity-relay: start one allocator and N relay processes (one per core) on consecutive ports',
      type: 'int',
      default: 0,
      min: 0,
      max: 256,
      requires: 'redis',
    },
  ],
  async start(options: Record<string, unknown>, ctx: ServerContext): Promise<RunningServer> {
    const role = optionalString(options.role) ?? 'all';
    const redisUrl = optionalString(options.redis);
    const workers = optionalInt(options.workers) ?? 0;
    const secret = await relaySecret(options);
    const heartbeatTtlMs = optionalInt(options.heartbeatTtlMs);
    const redisPrefix = optionalString(options.redisPrefix);
    if (workers > 0) {
      if (role !== 'all')
        throw new ConfigError(
          '--workers starts one allocator and N relays itself: use it with --role all',
          'unity-relay.workers',
        );
      if (redisUrl === undefined)
        throw new ConfigError('--workers needs --redis redis://host:port', 'unity-relay.redis');
      if (ctx.selfCommand === undefined)
        throw new ConfigError('--workers runs only from the gamewire command', 'unity-relay.workers');
      const ports = servePorts(options);
      return startWorkers({
        count: workers,
        command: ctx.selfCommand,
        ports,
        // The children share one secret: a random one when none was given.
        options:
          secret === undefined ? { ...options, relaySecret: randomBytes(32).toString('hex') } : options,
        definitions: unityRelayServer.options,
        log: ctx.log,
        metrics: ctx.metrics,
        dataDir: ctx.dataDir,
      });
    }
    // `gamewire serve --redis URL` also reaches rmc, whose `all` uses Redis; unity-relay's `all`
    // is one process with its state in memory, so it says so instead of refusing to start.
    if (role === 'all' && redisUrl !== undefined)
      ctx.log.warn(
        'unity-relay --role all keeps its state in this process and does not use --redis; use --workers N, or --role allocator and --role relay processes, for a fleet',
      );
    if (role !== 'all') {
      if (redisUrl === undefined)
        throw new ConfigError(`--role ${role} needs --redis redis://host:port`, 'unity-relay.redis');
      if (secret === undefined)
        throw new ConfigError(
          `--role ${role} needs the fleet's relay secret: --relay-secret-file FILE, --relay-secret, or GAMEWIRE_UNITY_RELAY_RELAY_SECRET`,
          'unity-relay.relaySecret',
        );
    }
    if (role === 'allocator') {
      const a: UnityRelayAllocatorOptions = {
        redisUrl: redisUrl!,
        secret: secret!,
        log: ctx.log,
        metrics: ctx.metrics,
        drain: options.drain === true,
        ...(heartbeatTtlMs !== undefined ? { heartbeatTtlMs } : {}),
        ...(redisPrefix !== undefined ? { redisPrefix } : {}),
      };
      const ports = servePorts(options);
      a.apiPort = ports.apiPort;
      const apiHost = optionalString(options.apiHost);
      if (apiHost !== undefined) a.apiHost = apiHost;
      const apiKey = optionalString(options.apiKey);
      if (apiKey !== undefined) a.apiKey = apiKey;
      const perMinute = optionalInt(options.apiRequestsPerMinute);
      if (perMinute !== undefined) a.apiRateLimitPerMinute = perMinute;
      a.apiLimits = apiLimitsOf(options);
      return startUnityRelayAllocator(a).catch((err: unknown) => {
        throw apiPortTaken(err, ports, apiHost ?? '127.0.0.1');
      });
    }
    const o: UnityRelayOptions = { log: ctx.log, metrics: ctx.metrics };
    if (role === 'relay') {
      o.fleet = {
        redisUrl: redisUrl!,
        secret: secret!,
        ...(heartbeatTtlMs !== undefined ? { heartbeatTtlMs } : {}),
        ...(redisPrefix !== undefined ? { redisPrefix } : {}),
      };
      const nodeId = optionalString(options.nodeId);
      if (nodeId !== undefined) o.fleet.nodeId = nodeId;
      const region = optionalString(options.region);
      if (region !== undefined) o.fleet.region = region;
    } else if (secret !== undefined) {
      o.store = { secret };
    }
    o.drain = options.drain === true;
    const maxAllocations = optionalInt(options.maxAllocations);
    if (maxAllocations !== undefined) o.maxAllocations = maxAllocations;
    const set = <K extends keyof UnityRelayOptions>(k: K, v: UnityRelayOptions[K] | undefined) => {
      if (v !== undefined) o[k] = v;
    };
    const ports = servePorts(options, { api: role !== 'relay' });
    set('host', optionalString(options.host));
    o.port = ports.port;
    o.apiPort = ports.apiPort;
    set('apiHost', optionalString(options.apiHost));
    set('publicHost', optionalString(options.publicHost));
    set('apiKey', optionalString(options.apiKey));
    set('idleTimeoutMs', optionalInt(options.idleTimeoutMs));
    set('hostAloneTimeoutMs', optionalInt(options.hostAloneTimeoutMs));
    set('maxDatagramBytes', optionalInt(options.maxDatagramBytes));
    const dataplane = optionalString(options.dataplane);
    if (dataplane === 'auto' || dataplane === 'native' || dataplane === 'js') set('dataplane', dataplane);
    set('wssPublicHost', optionalString(options.wssPublicHost));
    set('maxMessageToDtls', optionalInt(options.maxDtlsMessageBytes));
    set('maxMessageToWs', optionalInt(options.maxWsMessageBytes));
    set('wsMaxConnectionsPerIp', optionalInt(options.maxWsConnectionsPerIp));
    set('apiRateLimitPerMinute', optionalInt(options.apiRequestsPerMinute));
    o.apiLimits = apiLimitsOf(options);
    // On the command line 0 disables a transport; one not set is derived from --port (servePorts).
    set('wsPort', ports.wsPort);
    set('wssPort', ports.wssPort);
    set('dtlsPort', ports.dtlsPort);
    o.movablePorts = ports.movable;
    o.deferAnnouncement = ctx.deferAnnouncement;
    const certFile = optionalString(options.wssCert);
    const keyFile = optionalString(options.wssKey);
    if ((certFile === undefined) !== (keyFile === undefined))
      throw new ConfigError('--wss-cert and --wss-key go together', 'unity-relay.wssCert');
    if (certFile !== undefined && keyFile !== undefined) {
      o.wssCert = await readFile(certFile);
      o.wssKey = await readFile(keyFile);
    }
    o.dataDir = ctx.dataDir;
    return startUnityRelay(o).catch((err: unknown) => {
      throw apiPortTaken(err, ports, o.apiHost ?? '127.0.0.1');
    });
  },
};
