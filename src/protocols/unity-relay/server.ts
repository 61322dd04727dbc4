/**
 * `gamewire serve unity-relay`: the relay on every transport a Unity client can pick (UDP, DTLS,
 * WebSocket, secure WebSocket) and, in the same process, the allocation API. All share one
 * in-memory `AllocationStore` and one `RelayServer` (the transports are links, see links.ts).
 */
import { readFile } from 'node:fs/promises';
import net from 'node:net';
import type { FastifyInstance } from 'fastify';
import type { Logger } from 'pino';
import { ConfigError, UsageError } from '../../core/errors.js';
import { silentLogger } from '../../core/logger.js';
import { ProtocolMetrics } from '../../core/metrics.js';
import { trafficRecorder } from '../../core/recording.js';
import type { Endpoint, RunningServer, ServerContext, ServerDefinition } from '../../core/server.js';
import { bindUdp, closeUdp } from '../../core/udp.js';
import type { DtlsServerOptions } from '../../transports/dtls/index.js';
import { AllocationStore, type StoreOptions } from './allocations.js';
import { type ApiLimitOptions, ApiLimits, buildApi, type ServerEndpointJson, serverEndpoint } from './api.js';
import { type DtlsEndpoint, startDtlsEndpoint } from './dtls.js';
import type { RelayUdpSocket } from './links.js';
import { loadNativeDataplane, NativeDataplaneMirror, NativeRelaySocket } from './native-dataplane.js';
import { RelayServer } from './relay.js';
import {
  ensureSelfSignedCert,
  startWsEndpoint,
  type WsEndpoint,
  type WsEndpointOptions,
} from './websocket.js';

export const DEFAULT_RELAY_PORT = 37000;
export const DEFAULT_DTLS_PORT = 37001;
export const DEFAULT_WS_PORT = 37002;
export const DEFAULT_WSS_PORT = 37003;
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
  /** Extra store settings (clock, secret, regions…), mostly for tests. */
  store?: StoreOptions;
  metrics?: ProtocolMetrics;
  log?: Logger;
}

export type DataplaneChoice = 'auto' | 'native' | 'js';

export interface UnityRelayInstance extends RunningServer {
  relay: RelayServer;
  /** The data plane that runs, and why (for `auto`). */
  dataplane: 'native' | 'js';
  dataplaneReason: string;
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
    throw new ConfigError(
      `the allocation API listens on ${apiHost} only with an API key (--api-key); without one it stays on 127.0.0.1`,
      'unity-relay.apiHost',
    );
  }
  if (options.apiKey !== undefined && options.apiKey.length < 16) {
    throw new ConfigError('the API key must be at least 16 characters', 'unity-relay.apiKey');
  }
  const store = new AllocationStore({
    ...options.store,
    ...(options.idleTimeoutMs !== undefined ? { idleTimeoutMs: options.idleTimeoutMs } : {}),
    ...(options.hostAloneTimeoutMs !== undefined ? { hostAloneTimeoutMs: options.hostAloneTimeoutMs } : {}),
    ...(options.bindTimeoutMs !== undefined ? { bindTimeoutMs: options.bindTimeoutMs } : {}),
    ...(options.joinCodeTtlMs !== undefined ? { joinCodeTtlMs: options.joinCodeTtlMs } : {}),
  });
  const plane = chooseDataplane(options.dataplane ?? 'auto', host);
  let socket: RelayUdpSocket & { close(): void };
  let udpPort: number;
  let nativeMirror: NativeDataplaneMirror | undefined;
  let closeSocket: () => Promise<void>;
  if (plane.use === 'native') {
    const native = NativeRelaySocket.open({
      host,
      port: options.port ?? DEFAULT_RELAY_PORT,
      ...(options.maxDatagramBytes !== undefined ? { maxDatagramBytes: options.maxDatagramBytes } : {}),
    });
    nativeMirror = new NativeDataplaneMirror(native);
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
  const closers: (() => Promise<void>)[] = [
    async () => {
      relay.stop();
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
  let dtls: DtlsEndpoint | undefined;
  let ws: WsEndpoint | undefined;
  let wss: WsEndpoint | undefined;
  let wssCertPath: string | undefined;
  const apiLimits = new ApiLimits({
    ...options.apiLimits,
    ...(options.apiRateLimitPerMinute !== undefined
      ? { rateLimitPerMinute: options.apiRateLimitPerMinute }
      : {}),
  });
  let api: FastifyInstance;
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
    if (options.dtlsPort !== undefined) {
      dtls = await startDtlsEndpoint(relay, store, metrics, log, {
        host,
        port: options.dtlsPort,
        // The association outlives no binding (it is closed with it), and never dies before it.
        associationIdleTimeoutMs: 2 * Math.max(store.idleTimeoutMs, store.hostAloneTimeoutMs),
        ...(options.maxDatagramBytes !== undefined
          ? { maxRecordPlaintext: options.maxDatagramBytes + 64 }
          : {}),
        ...options.dtls,
      });
      const d = dtls;
      closers.push(() => d.close());
      endpoints.push({
        transport: 'udp',
        host,
        port: d.port,
        description: 'Unity Relay over DTLS 1.2 (PSK)',
      });
      serverEndpoints.push(serverEndpoint('dtls', publicHost, d.port));
    }
    if (options.wsPort !== undefined) {
      ws = await startWsEndpoint(relay, metrics, log, { ...wsCommon, port: options.wsPort, secure: false });
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
      wss = await startWsEndpoint(relay, metrics, log, {
        ...wsCommon,
        port: options.wssPort,
        secure: true,
        cert,
        key,
      });
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
    api = buildApi(store, {
      publicHost,
      relayPort: udpPort,
      endpoints: serverEndpoints,
      limits: apiLimits,
      apiKey: options.apiKey,
      log,
      ...(options.maxConnectionsLimit !== undefined
        ? { maxConnectionsLimit: options.maxConnectionsLimit }
        : {}),
    });
    const a = api;
    closers.push(() => a.close());
    await api.listen({ host: apiHost, port: options.apiPort ?? DEFAULT_API_PORT });
  } catch (err) {
    await closeAll();
    throw err;
  }
  const address = api.server.address();
  const apiPort = typeof address === 'object' && address !== null ? address.port : 0;
  let closing: Promise<void> | undefined;
  endpoints.push({
    transport: 'http',
    host: apiHost,
    port: apiPort,
    description: 'allocation API (/v1/allocate, /v1/joincode, /v1/join, /v1/regions)',
  });
  return {
    relay,
    dataplane: plane.use,
    dataplaneReason: plane.reason,
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
    apiUrl: `http://${apiHost.includes(':') ? `[${apiHost}]` : apiHost}:${apiPort}`,
    endpoints,
    close() {
      closing ??= closeAll();
      return closing;
    },
  };
}

function dataplaneFromEnv(): DataplaneChoice {
  const v = process.env.GAMEWIRE_DATAPLANE;
  return v === 'native' || v === 'js' ? v : 'auto';
}

/** Decides the data plane: `native` fails loudly where it cannot run, `auto` falls back to JS. */
function chooseDataplane(asked: DataplaneChoice, host: string): { use: 'native' | 'js'; reason: string } {
  const choice = asked === 'auto' ? dataplaneFromEnv() : asked;
  if (choice === 'js') return { use: 'js', reason: asked === 'auto' ? 'GAMEWIRE_DATAPLANE=js' : 'asked for' };
  // `--record` sees the sockets of the JavaScript helpers only: native forwards would be missing.
  if (asked === 'auto' && trafficRecorder() !== undefined)
    return { use: 'js', reason: 'recording (--record) sees only the JavaScript data plane' };
  const { addon, reason } = loadNativeDataplane();
  const problem =
    addon === undefined ? reason : net.isIPv4(host) ? undefined : `it binds IPv4 only (host ${host})`;
  if (problem === undefined)
    return { use: 'native', reason: choice === 'native' ? 'asked for' : 'available' };
  if (choice === 'native') {
    throw new UsageError(`--dataplane native cannot run: ${problem}; use --dataplane js or auto`);
  }
  return { use: 'js', reason: `native unavailable: ${problem}` };
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
      key: 'dtlsPort',
      flag: '--dtls-port <port>',
      description: 'unity-relay: DTLS port (UDP); 0 disables',
      type: 'int',
      default: DEFAULT_DTLS_PORT,
      min: 0,
      max: 65535,
      unit: 'port',
    },
    {
      key: 'wsPort',
      flag: '--ws-port <port>',
      description: 'unity-relay: WebSocket port (TCP); 0 disables',
      type: 'int',
      default: DEFAULT_WS_PORT,
      min: 0,
      max: 65535,
      unit: 'port',
    },
    {
      key: 'wssPort',
      flag: '--wss-port <port>',
      description: 'unity-relay: secure WebSocket port (TCP, TLS); 0 disables',
      type: 'int',
      default: DEFAULT_WSS_PORT,
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
      description: 'unity-relay: API requests per client address and route per minute (0: off)',
      type: 'int',
      default: 120,
      min: 0,
    },
    {
      key: 'maxAllocationsPerAddress',
      flag: '--unity-max-allocations-per-address <n>',
      description: 'unity-relay: live allocations one API client address may hold',
      type: 'int',
      default: 100,
      min: 1,
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
    const dataplane = optionalString(options.dataplane);
    if (dataplane === 'auto' || dataplane === 'native' || dataplane === 'js') set('dataplane', dataplane);
    set('wssPublicHost', optionalString(options.wssPublicHost));
    set('maxMessageToDtls', optionalInt(options.maxDtlsMessageBytes));
    set('maxMessageToWs', optionalInt(options.maxWsMessageBytes));
    set('wsMaxConnectionsPerIp', optionalInt(options.maxWsConnectionsPerIp));
    set('apiRateLimitPerMinute', optionalInt(options.apiRequestsPerMinute));
    const perAddress = optionalInt(options.maxAllocationsPerAddress);
    if (perAddress !== undefined) o.apiLimits = { maxAllocationsPerAddress: perAddress };
    // On the command line 0 disables a transport.
    const port = (v: unknown) => {
      const n = optionalInt(v);
      return n === undefined || n === 0 ? undefined : n;
    };
    set('wsPort', port(options.wsPort));
    set('wssPort', port(options.wssPort));
    set('dtlsPort', port(options.dtlsPort));
    const certFile = optionalString(options.wssCert);
    const keyFile = optionalString(options.wssKey);
    if ((certFile === undefined) !== (keyFile === undefined))
      throw new ConfigError('--wss-cert and --wss-key go together', 'unity-relay.wssCert');
    if (certFile !== undefined && keyFile !== undefined) {
      o.wssCert = await readFile(certFile);
      o.wssKey = await readFile(keyFile);
    }
    o.dataDir = ctx.dataDir;
    return startUnityRelay(o);
  },
};
