/**
 * NoxVR Relay v1 (`nox-relay`): codec, server (TCP+UDP on one port), client and bot swarm.
 * See docs/nox-relay.md.
 */

import { readFileSync } from 'node:fs';
import { protocolPageDir } from '../../core/admin/static.js';
import type { ProtocolModule } from '../../core/protocol.js';
import type { ServeOption, ServerDefinition } from '../../core/server.js';
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

/**
 * Limits settable from `gamewire serve` and the config file: key = the NoxRelayOptions name,
 * flag = `--nox-` + the key in kebab-case. Unset: the server's own default (docs/nox-relay.md).
 */
const limitOptions: [key: keyof NoxRelayOptions, what: string][] = [
  ['maxUdpPerIp', 'most UDP sessions from one address (default max(64, max-clients/4))'],
  ['maxTcpPerIp', 'most TCP connections from one address (default max(64, max-clients/4))'],
  ['maxHalfOpenUdp', 'most half-open UDP sessions; the oldest is evicted (default min(4096, max-clients))'],
  [
    'maxHalfOpenUdpPerIp',
    'most half-open UDP sessions from one address (default max(1, min(128, max-half-open-udp/8)))',
  ],
  ['udpReplyFactor', 'an unproven UDP source is sent at most this many times what it sent (default 3)'],
  ['maxRequestsPerSecond', 'packets one client may send per second (default 2000, burst twice that)'],
  ['maxRequestsPerSecondPerIp', 'packets all clients of one address may send per second (default 20000)'],
  ['udpSendBytesPerSecond', "each UDP client's send budget, bytes per second (default 1048576)"],
  ['slowConsumerTimeoutMs', 'close a TCP client whose queue stays over 64 KiB this long (default 5000)'],
  ['maxReassemblyBytesPerIp', 'segment reassembly memory per source address (default 4194304)'],
  [
    'frameTimeoutMs',
    'TCP: a packet begun must complete within this, the first one this long after connecting (default twice the connection timeout)',
  ],
  ['maxBufferedBytes', 'TCP: input bytes held across all connections (default 4194304)'],
  ['maxBufferedBytesPerIp', 'TCP: input bytes held for the connections of one address (default 1048576)'],
  ['framesPerTurn', 'TCP: packets one connection is given per turn before the next one (default 16)'],
];

const kebab = (key: string) => key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);

const limitServeOptions: ServeOption[] = limitOptions.map(([key, what]) => ({
  key,
  flag: `--nox-${kebab(key)} <n>`,
  description: `nox-relay: ${what}`,
  type: 'int',
  min: 1,
}));

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

const server: ServerDefinition = {
  summary: 'NoxVR Relay v1: instances, membership and transform fan-out over TCP and UDP on one port',
  defaultPort: DEFAULT_PORT,
  options: [
    {
      key: 'instances',
      flag: '--instances <file>',
      description: 'nox-relay: JSON instance file (default: one public instance, id 0)',
      type: 'string',
    },
    {
      key: 'master',
      flag: '--master <url>',
      description: 'nox-relay: master server URL for token checks (default: offline mode)',
      type: 'string',
    },
    {
      key: 'serverAddress',
      flag: '--server-address <name>',
      description: 'nox-relay: home server named in offline authentications',
      type: 'string',
      default: 'localhost',
    },
    {
      key: 'maxPacketBytes',
      aliases: ['maxPacketSize'],
      flag: '--nox-max-packet-bytes <bytes>',
      flagAliases: ['--nox-max-packet-size'],
      description: 'nox-relay: largest packet (default 1024)',
      type: 'int',
      unit: 'bytes',
      default: 1024,
    },
    {
      // Seconds, as the Handshake reply carries it on the wire.
      key: 'connectionTimeoutSeconds',
      aliases: ['connectionTimeout'],
      flag: '--nox-connection-timeout-seconds <s>',
      flagAliases: ['--nox-connection-timeout'],
      description: 'nox-relay: keep-alive timeout in seconds (default 15)',
      type: 'int',
      unit: 's',
      default: 15,
    },
    {
      key: 'maxClients',
      flag: '--nox-max-clients <n>',
      description: 'nox-relay: most clients, TCP and UDP together (default 4096)',
      type: 'int',
      default: 4096,
    },
    ...limitServeOptions,
  ],
  async start(options, ctx) {
    // Instance files and option values are checked here and in the server: NoxRelayConfigError.
    const instances = loadInstances(options.instances);
    const relay = new NoxRelayServer({
      host: options.host as string,
      port: options.port as number,
      instances,
      master: (options.master as string | undefined) || undefined,
      serverAddress: options.serverAddress as string,
      maxPacketSize: options.maxPacketBytes as number,
      connectionTimeoutMs: (options.connectionTimeoutSeconds as number) * 1000,
      maxClients: options.maxClients as number,
      ...Object.fromEntries(
        limitOptions.filter(([key]) => options[key] !== undefined).map(([key]) => [key, options[key]]),
      ),
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
};

export const noxRelay: ProtocolModule = {
  name: 'nox-relay',
  summary: 'NoxVR Relay v1 (social VR instances; TCP+UDP)',
  codecs: [noxRelayCodec],
  server,
  registerCommands,
  conform: async () => (await import('./conform/index.js')).noxRelayConform,
  inspection: async () => (await import('./inspect.js')).inspection,
  dashboard: { dir: protocolPageDir(import.meta.url) },
  load: async () => (await import('./load.js')).noxRelayLoad,
};
