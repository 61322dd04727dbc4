/**
 * The composition of a Unity Relay process: one `RelayServer` on its UDP socket (or the native
 * data plane), the DTLS, WebSocket and secure WebSocket endpoints as links to it, one in-memory
 * `AllocationStore`, and the allocation API, or, on a relay node of a fleet (`fleet`), its
 * presence in Redis instead of the API. `startUnityRelay` is the library entry point; `gamewire
 * serve unity-relay` (server.ts) calls it with its options.
 */
import { randomBytes } from 'node:crypto';
import net from 'node:net';
import { ConfigError, UsageError } from '../../core/errors.js';
import type { Logger } from '../../core/logger.js';
import { silentLogger } from '../../core/logger.js';
import { ProtocolMetrics } from '../../core/metrics.js';
import { RedisNodeRegistry } from '../../core/node-registry.js';
import { trafficRecorder } from '../../core/recording.js';
import { connectRedis, type RedisConnection } from '../../core/redis.js';
import type { Endpoint, RunningServer, ServerContext } from '../../core/server.js';
import { bindUdp, closeUdp } from '../../core/udp.js';
import type { DtlsServerOptions } from '../../transports/dtls/index.js';
import { relayAdmin } from './admin.js';
import { AllocationStore, checkNodeId, RelayCredentials, type StoreOptions } from './allocations.js';
import {
  type ApiApp,
  type ApiLimitOptions,
  ApiLimits,
  buildApi,
  checkApiExposure,
  type ServerEndpointJson,
  serverEndpoint,
} from './api.js';
import { type DtlsEndpoint, startDtlsEndpoint } from './dtls.js';
import { HeldAllocationRecords, type NodeSample, RelayNodePresence } from './fleet/presence.js';
import {
  type FleetAdmin,
  type FleetNodeView,
  fleetView,
  RELAY_NODE_KIND,
  redisFailoverLogger,
  redisStatusLogger,
} from './fleet/view.js';
import type { RelayUdpSocket } from './links.js';
import { loadNativeDataplane, NativeDataplaneMirror, NativeRelaySocket } from './native-dataplane.js';
import { NativeDtlsRecords } from './native-dtls.js';
import { DEFAULT_API_PORT, DEFAULT_RELAY_PORT, type MovablePort } from './options.js';
import { RelayServer } from './relay.js';
import {
  ensureSelfSignedCert,
  LISTEN_BACKLOG,
  startWsEndpoint,
  type WsEndpoint,
  type WsEndpointOptions,
} from './websocket.js';

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
  /**
   * Native data plane only: while datagrams arrive at 40k/s or more, the worker waits up to this
   * many µs after a wake-up so the next ones are handled together (0: never). Default 400.
   */
  nativeCoalesceUs?: number;
  /** Largest relay message forwarded to a DTLS / WebSocket recipient. Defaults 1363 / 1386. */
  maxMessageToDtls?: number;
  maxMessageToWs?: number;
  /**
   * BIND/CONNECT_REQUEST that fail (forged, replayed, over an allocation's budget), per source IP
   * per second (a source without budget is dropped before any HMAC). Default 50, burst 100.
   */
  hmacRatePerSecond?: number;
  hmacBurst?: number;
  /** BIND/CONNECT_REQUEST per allocation per second. Default 10, burst 20. */
  allocationHmacRatePerSecond?: number;
  allocationHmacBurst?: number;
  /** WebSocket endpoint limits beyond the connection caps (deadlines, idle, send buffer). */
  ws?: Pick<
    WsEndpointOptions,
    'handshakeTimeoutMs' | 'idleTimeoutMs' | 'bindTimeoutMs' | 'maxBufferedBytes' | 'sweepIntervalMs'
  >;
  /** DTLS server limits (handshakes in all and per IP, timeouts, cookie rotation…; see docs/dtls.md). */
  dtls?: Omit<DtlsServerOptions, 'pskFor'> & {
    /** An association that has not bound an allocation after this long is closed. Default 15 s. */
    bindTimeoutMs?: number;
  };
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
  api: ApiApp | undefined;
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
        ...(options.nativeCoalesceUs !== undefined ? { coalesceUs: options.nativeCoalesceUs } : {}),
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
  // The native plane's kernel offloads (GSO, GRO, busy polling) are what this kernel accepted: say which.
  const offloads = nativeMirror?.socket.offloads();
  log.info(
    { dataplane: plane.use, reason: plane.reason, ...(offloads !== undefined ? { offloads } : {}) },
    `unity-relay data plane: ${plane.use}`,
  );
  const relay = new RelayServer(socket, store, metrics, log, {
    ...(nativeMirror !== undefined ? { nativeMirror } : {}),
    ...(options.maxDatagramBytes !== undefined ? { maxDatagramBytes: options.maxDatagramBytes } : {}),
    ...(options.errorRatePerSecond !== undefined ? { errorRatePerSecond: options.errorRatePerSecond } : {}),
    ...(options.errorBurst !== undefined ? { errorBurst: options.errorBurst } : {}),
    ...(options.errorSources !== undefined ? { errorSources: options.errorSources } : {}),
    ...(options.hmacRatePerSecond !== undefined ? { hmacRatePerSecond: options.hmacRatePerSecond } : {}),
    ...(options.hmacBurst !== undefined ? { hmacBurst: options.hmacBurst } : {}),
    ...(options.allocationHmacRatePerSecond !== undefined
      ? { allocationHmacRatePerSecond: options.allocationHmacRatePerSecond }
      : {}),
    ...(options.allocationHmacBurst !== undefined
      ? { allocationHmacBurst: options.allocationHmacBurst }
      : {}),
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
  let api: ApiApp | undefined;
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
        description: `Unity Relay over DTLS 1.2 (PSK; ${nativeDtls !== undefined ? 'native record layer' : `JavaScript record layer${plane.dtlsReason === undefined ? '' : `: ${plane.dtlsReason}`}`})`,
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
      await api.listen({ host: apiHost, port: options.apiPort ?? DEFAULT_API_PORT, backlog: LISTEN_BACKLOG });
    } else {
      // A relay node: Redis must answer at start (afterwards an outage only delays heartbeats);
      // it is announced once everything listens.
      redis = await connectRedis(fleet.redisUrl, {
        ...(fleet.redisPrefix !== undefined ? { prefix: fleet.redisPrefix } : {}),
        onStatus: redisStatusLogger(log, 'relay'),
        onPrimaryChange: redisFailoverLogger(log, 'relay'),
      });
      const r = redis;
      metrics.store = () => r.state!();
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

function dataplaneFromEnv(): DataplaneChoice {
  const v = process.env.GAMEWIRE_DATAPLANE;
  return v === 'native' || v === 'js' ? v : 'auto';
}

/** Decides the data plane: `native` fails loudly where it cannot run, `auto` falls back to JS. */
function chooseDataplane(
  asked: DataplaneChoice,
  host: string,
): { use: 'native' | 'js'; reason: string; dtls: 'native' | 'js'; dtlsReason?: string } {
  const choice = asked === 'auto' ? dataplaneFromEnv() : asked;
  if (choice === 'js')
    return { use: 'js', reason: asked === 'auto' ? 'GAMEWIRE_DATAPLANE=js' : 'asked for', dtls: 'js' };
  // `--record` sees the sockets of the JavaScript helpers only: native forwards would be missing.
  if (asked === 'auto' && trafficRecorder() !== undefined)
    return { use: 'js', reason: 'recording (--record) sees only the JavaScript data plane', dtls: 'js' };
  const { addon, reason } = loadNativeDataplane();
  const problem =
    addon === undefined ? reason : net.isIPv4(host) ? undefined : `it binds IPv4 only (host ${host})`;
  if (problem === undefined) {
    // The DTLS record layer needs OpenSSL from the running Node; without it, DTLS stays in JavaScript.
    const dtlsNative = typeof addon?.dtlsAvailable === 'function' && addon.dtlsAvailable();
    const missing = dtlsNative ? null : (addon?.dtlsMissing?.() ?? null);
    return {
      use: 'native',
      reason: choice === 'native' ? 'asked for' : 'available',
      dtls: dtlsNative ? 'native' : 'js',
      ...(missing === null ? {} : { dtlsReason: `this Node's OpenSSL lacks ${missing}` }),
    };
  }
  if (choice === 'native') {
    throw new UsageError(`--dataplane native cannot run: ${problem}; use --dataplane js or auto`);
  }
  return { use: 'js', reason: `native unavailable: ${problem}`, dtls: 'js' };
}
