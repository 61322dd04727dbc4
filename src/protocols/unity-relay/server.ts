/**
 * `gamewire serve unity-relay`: the relay on every transport a Unity client can pick (UDP, DTLS,
 * WebSocket, secure WebSocket) and, in the same process, the allocation API (composition.ts).
 *
 * Scaled out on Redis (`--role`, fleet/): `relay` runs the transports without the API and
 * announces itself as a node; `allocator` runs only the API, on Redis (fleet/allocator.ts); `all`
 * (the default) is the single process above. `--workers N` runs one allocator and N relays as
 * child processes (workers.ts). The options are declared in options.ts.
 */
import { randomBytes } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { CommandError, ConfigError } from '../../core/errors.js';
import { defineServer, serveOptions } from '../../core/options.js';
import type { ApiLimitOptions } from './api.js';
import { startUnityRelay } from './composition.js';
import { startUnityRelayAllocator } from './fleet/allocator.js';
import {
  DEFAULT_RELAY_PORT,
  PORT_OFFSETS,
  type ServePorts,
  servePorts,
  UNITY_RELAY_OPTIONS,
  type UnityRelayServeOptions,
} from './options.js';
import { startWorkers } from './workers.js';

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

/** The API limits set by `serve` options. */
function apiLimitsOf(options: UnityRelayServeOptions): Omit<ApiLimitOptions, 'rateLimitPerMinute'> {
  return {
    maxAllocationsPerAddress: options.maxAllocationsPerAddress,
    allocationsPerMinutePerAddress: options.allocationsPerMinutePerAddress,
    globalAllocationsPerSecond: options.allocationsPerSecond,
    keyedAllocationsPerSecond: options.keyedAllocationsPerSecond,
  };
}

/** The relay secret from `--relay-secret` or `--relay-secret-file` (at least 32 characters). */
async function relaySecret(options: UnityRelayServeOptions): Promise<Buffer | undefined> {
  const inline = options.relaySecret;
  const file = options.relaySecretFile;
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

export const unityRelayServer = defineServer({
  summary: 'Unity Relay: UDP relay for stock Unity Transport clients, with its allocation API',
  defaultPort: DEFAULT_RELAY_PORT,
  options: UNITY_RELAY_OPTIONS,
  async start(options, ctx) {
    const { role, workers } = options;
    const secret = await relaySecret(options);
    // The schema refuses a fleet role or --workers without --redis (`requires`); a hand-built
    // options object meets the same refusal here.
    const redisUrl = (): string => {
      if (options.redis === undefined)
        throw new ConfigError(
          `${workers > 0 ? '--workers' : `--role ${role}`} needs --redis redis://host:port`,
          'unity-relay.redis',
        );
      return options.redis;
    };
    if (workers > 0) {
      if (role !== 'all')
        throw new ConfigError(
          '--workers starts one allocator and N relays itself: use it with --role all',
          'unity-relay.workers',
        );
      redisUrl();
      if (ctx.selfCommand === undefined)
        throw new ConfigError('--workers runs only from the gamewire command', 'unity-relay.workers');
      return startWorkers({
        count: workers,
        command: ctx.selfCommand,
        ports: servePorts(options),
        // The children share one secret: a random one when none was given.
        options:
          secret === undefined ? { ...options, relaySecret: randomBytes(32).toString('hex') } : options,
        definitions: serveOptions(UNITY_RELAY_OPTIONS),
        log: ctx.log,
        metrics: ctx.metrics,
        dataDir: ctx.dataDir,
      });
    }
    // `gamewire serve --redis URL` also reaches rmc, whose `all` uses Redis; unity-relay's `all`
    // is one process with its state in memory, so it says so instead of refusing to start.
    if (role === 'all' && options.redis !== undefined)
      ctx.log.warn(
        'unity-relay --role all keeps its state in this process and does not use --redis; use --workers N, or --role allocator and --role relay processes, for a fleet',
      );
    if (role !== 'all' && secret === undefined) {
      redisUrl();
      throw new ConfigError(
        `--role ${role} needs the fleet's relay secret: --relay-secret-file FILE, --relay-secret, or GAMEWIRE_UNITY_RELAY_RELAY_SECRET`,
        'unity-relay.relaySecret',
      );
    }
    const fleet =
      role === 'all' || secret === undefined
        ? undefined
        : {
            redisUrl: redisUrl(),
            secret,
            heartbeatTtlMs: options.heartbeatTtlMs,
            redisPrefix: options.redisPrefix,
          };
    if (role === 'allocator') {
      const ports = servePorts(options);
      return startUnityRelayAllocator({
        ...fleet!,
        log: ctx.log,
        metrics: ctx.metrics,
        drain: options.drain,
        apiPort: ports.apiPort,
        apiHost: options.apiHost,
        apiKey: options.apiKey,
        apiRateLimitPerMinute: options.apiRequestsPerMinute,
        apiLimits: apiLimitsOf(options),
      }).catch((err: unknown) => {
        throw apiPortTaken(err, ports, options.apiHost);
      });
    }
    // On the command line 0 disables a transport; one not set is derived from --port (servePorts).
    const ports = servePorts(options, { api: role !== 'relay' });
    const cert = options.wssCert;
    const key = options.wssKey;
    return startUnityRelay({
      log: ctx.log,
      metrics: ctx.metrics,
      ...(role === 'relay'
        ? { fleet: { ...fleet!, nodeId: options.nodeId, region: options.region } }
        : secret !== undefined
          ? { store: { secret } }
          : {}),
      drain: options.drain,
      maxAllocations: options.maxAllocations,
      host: options.host,
      port: ports.port,
      apiPort: ports.apiPort,
      apiHost: options.apiHost,
      publicHost: options.publicHost,
      apiKey: options.apiKey,
      idleTimeoutMs: options.idleTimeoutMs,
      hostAloneTimeoutMs: options.hostAloneTimeoutMs,
      maxDatagramBytes: options.maxDatagramBytes,
      dataplane: options.dataplane,
      nativeCoalesceUs: options.nativeCoalesceUs,
      wssPublicHost: options.wssPublicHost,
      maxMessageToDtls: options.maxDtlsMessageBytes,
      maxMessageToWs: options.maxWsMessageBytes,
      wsMaxConnectionsPerIp: options.maxWsConnectionsPerIp,
      apiRateLimitPerMinute: options.apiRequestsPerMinute,
      apiLimits: apiLimitsOf(options),
      wsPort: ports.wsPort,
      wssPort: ports.wssPort,
      dtlsPort: ports.dtlsPort,
      movablePorts: ports.movable,
      deferAnnouncement: ctx.deferAnnouncement,
      // A certificate and its key go together (the schema refuses one without the other).
      ...(cert !== undefined && key !== undefined
        ? { wssCert: await readFile(cert), wssKey: await readFile(key) }
        : {}),
      dataDir: ctx.dataDir,
    }).catch((err: unknown) => {
      throw apiPortTaken(err, ports, options.apiHost);
    });
  },
});
