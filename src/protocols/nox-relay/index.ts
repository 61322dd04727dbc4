/**
 * NoxVR Relay v1 (`nox-relay`): codec, server (TCP+UDP on one port), client and bot swarm.
 * See docs/nox-relay.md.
 */

import { readFileSync } from 'node:fs';
import { protocolPageDir } from '../../core/admin/static.js';
import { defineServer, option } from '../../core/options.js';
import type { ProtocolModule } from '../../core/protocol.js';
import { noxRelayAdmin } from './admin.js';
import { registerCommands } from './cli.js';
import { noxRelayCodec } from './codec.js';
import { DEFAULT_PORT } from './constants.js';
import { NoxRelayConfigError } from './errors.js';
import { type InstanceConfig, parseInstances } from './instances.js';
import type { NoxRelayOptions } from './options.js';
import { NoxRelayServer } from './server.js';

export { NoxRelayClient } from './client.js';
export { NoxRelayClientError, NoxRelayConfigError } from './errors.js';
export type { NoxRelayOptions } from './options.js';
export { CloseReason, DropReason } from './reasons.js';
export { NoxRelayServer } from './server.js';

const kebab = (key: string) => key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);

/**
 * A limit settable from `gamewire serve` and the config file: key = the NoxRelayOptions name,
 * flag = `--nox-` + the key in kebab-case. Unset: the server's own default, which may derive from
 * other limits (docs/nox-relay.md), so the declaration has none.
 */
const limit = (key: keyof NoxRelayOptions, what: string) =>
  option.int({ flag: `--nox-${kebab(key)} <n>`, description: `nox-relay: ${what}`, min: 1 });

const LIMIT_OPTIONS = {
  maxUdpPerIp: limit('maxUdpPerIp', 'most UDP sessions from one address (default max(64, max-clients/4))'),
  maxTcpPerIp: limit('maxTcpPerIp', 'most TCP connections from one address (default max(64, max-clients/4))'),
  maxHalfOpenUdp: limit(
    'maxHalfOpenUdp',
    'most half-open UDP sessions; the oldest is evicted (default min(4096, max-clients))',
  ),
  maxHalfOpenUdpPerIp: limit(
    'maxHalfOpenUdpPerIp',
    'most half-open UDP sessions from one address (default max(1, min(128, max-half-open-udp/8)))',
  ),
  udpReplyFactor: limit(
    'udpReplyFactor',
    'an unproven UDP source is sent at most this many times what it sent (default 3)',
  ),
  maxRequestsPerSecond: limit(
    'maxRequestsPerSecond',
    'packets one client may send per second (default 2000, burst twice that)',
  ),
  maxRequestsPerSecondPerIp: limit(
    'maxRequestsPerSecondPerIp',
    'packets all clients of one address may send per second (default 20000)',
  ),
  udpSendBytesPerSecond: limit(
    'udpSendBytesPerSecond',
    "each UDP client's send budget, bytes per second (default 1048576)",
  ),
  slowConsumerTimeoutMs: limit(
    'slowConsumerTimeoutMs',
    'close a TCP client whose queue stays over 64 KiB this long (default 5000)',
  ),
  maxReassemblyBytesPerIp: limit(
    'maxReassemblyBytesPerIp',
    'segment reassembly memory per source address (default 4194304)',
  ),
  frameTimeoutMs: limit(
    'frameTimeoutMs',
    'TCP: a packet begun must complete within this, the first one this long after connecting (default twice the connection timeout)',
  ),
  maxBufferedBytes: limit(
    'maxBufferedBytes',
    'TCP: input bytes held across all connections (default 4194304)',
  ),
  maxBufferedBytesPerIp: limit(
    'maxBufferedBytesPerIp',
    'TCP: input bytes held for the connections of one address (default 1048576)',
  ),
  framesPerTurn: limit(
    'framesPerTurn',
    'TCP: packets one connection is given per turn before the next one (default 16)',
  ),
};

/** `gamewire serve nox-relay`'s options, declared once (src/core/options.ts). */
const NOX_RELAY_OPTIONS = {
  instances: option.string({
    flag: '--instances <file>',
    description: 'nox-relay: JSON instance file (default: one public instance, id 0)',
  }),
  master: option.string({
    flag: '--master <url>',
    description: 'nox-relay: master server URL for token checks (default: offline mode)',
  }),
  serverAddress: option.string({
    flag: '--server-address <name>',
    description: 'nox-relay: home server named in offline authentications',
    default: 'localhost',
  }),
  maxPacketBytes: option.int({
    aliases: ['maxPacketSize'],
    flag: '--nox-max-packet-bytes <bytes>',
    flagAliases: ['--nox-max-packet-size'],
    description: 'nox-relay: largest packet (default 1024)',
    unit: 'bytes',
    default: 1024,
  }),
  // Seconds, as the Handshake reply carries it on the wire.
  connectionTimeoutSeconds: option.int({
    aliases: ['connectionTimeout'],
    flag: '--nox-connection-timeout-seconds <s>',
    flagAliases: ['--nox-connection-timeout'],
    description: 'nox-relay: keep-alive timeout in seconds (default 15)',
    unit: 's',
    default: 15,
  }),
  maxClients: option.int({
    flag: '--nox-max-clients <n>',
    description: 'nox-relay: most clients, TCP and UDP together (default 4096)',
    default: 4096,
  }),
  ...LIMIT_OPTIONS,
};

/** `instances` from the config file (an array) or `--instances FILE` (a path to JSON). */
export function loadInstances(value: unknown): InstanceConfig[] | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value === 'string') {
    let json: unknown;
    try {
      json = JSON.parse(readFileSync(value, 'utf8'));
    } catch (err) {
      throw new NoxRelayConfigError(
        `cannot read instance file ${value}: ${(err as Error).message}`,
        'nox-relay.instances',
        value,
      );
    }
    return parseInstances(json, value);
  }
  return parseInstances(value, 'nox-relay.instances');
}

/** `gamewire serve nox-relay`: its options typed once, every default filled. */
export const noxRelayServer = defineServer({
  summary: 'NoxVR Relay v1: instances, membership and transform fan-out over TCP and UDP on one port',
  defaultPort: DEFAULT_PORT,
  options: NOX_RELAY_OPTIONS,
  async start(options, ctx) {
    // Instance files and option values are checked here and in the server: NoxRelayConfigError.
    const instances = loadInstances(options.instances);
    const limits: Partial<NoxRelayOptions> = {};
    for (const key of Object.keys(LIMIT_OPTIONS) as (keyof typeof LIMIT_OPTIONS)[]) {
      const value = options[key];
      if (value !== undefined) limits[key] = value;
    }
    const relay = new NoxRelayServer({
      host: options.host,
      port: options.port,
      instances,
      master: options.master || undefined,
      serverAddress: options.serverAddress,
      maxPacketSize: options.maxPacketBytes,
      connectionTimeoutMs: options.connectionTimeoutSeconds * 1000,
      maxClients: options.maxClients,
      ...limits,
      log: ctx.log,
      metrics: ctx.metrics,
    });
    const endpoints = await relay.start();
    ctx.log.info(
      { port: relay.port, instances: relay.instances.size, offline: relay.offline },
      'nox-relay listening',
    );
    const admin = noxRelayAdmin(relay);
    return { endpoints, admin, close: () => relay.close().finally(() => admin.wire?.close()) };
  },
});

export const noxRelay: ProtocolModule = {
  name: 'nox-relay',
  summary: 'NoxVR Relay v1 (social VR instances; TCP+UDP)',
  codecs: [noxRelayCodec],
  server: noxRelayServer,
  registerCommands,
  conform: async () => (await import('./conform/index.js')).noxRelayConform,
  inspection: async () => (await import('./inspect.js')).inspection,
  dashboard: { dir: protocolPageDir(import.meta.url) },
  load: async () => (await import('./load.js')).noxRelayLoad,
};
