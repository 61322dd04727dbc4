/**
 * NoxVR Relay v1 (`nox-relay`): codec, server (TCP+UDP on one port), client and bot swarm.
 * See docs/nox-relay.md and ../shared/specs/nox-relay.md.
 */
import { readFileSync } from 'node:fs';
import type { Command } from 'commander';
import { CliError, parseIntOption, UsageError } from '../../cli/errors.js';
import type { ProtocolModule } from '../../core/protocol.js';
import type { ServerDefinition } from '../../core/server.js';
import { runBots } from './bots.js';
import { noxRelayCodec } from './codec.js';
import { DEFAULT_PORT } from './constants.js';
import { type InstanceConfig, parseInstances } from './instances.js';
import { NoxRelayServer } from './server.js';

export { NoxRelayClient } from './client.js';
export type { NoxRelayOptions } from './server.js';
export { NoxRelayServer } from './server.js';

/** `instances` from the config file (an array) or `--instances FILE` (a path to JSON). */
export function loadInstances(value: unknown): InstanceConfig[] | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value === 'string') {
    let json: unknown;
    try {
      json = JSON.parse(readFileSync(value, 'utf8'));
    } catch (err) {
      throw new CliError('ERR_CONFIG', `cannot read instance file ${value}: ${(err as Error).message}`);
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
      key: 'maxPacketSize',
      flag: '--nox-max-packet-size <bytes>',
      description: 'nox-relay: largest packet (default 1024)',
      type: 'int',
      default: 1024,
    },
    {
      key: 'connectionTimeout',
      flag: '--nox-connection-timeout <s>',
      description: 'nox-relay: keep-alive timeout in seconds (default 15)',
      type: 'int',
      default: 15,
    },
    {
      key: 'maxClients',
      flag: '--nox-max-clients <n>',
      description: 'nox-relay: most clients, TCP and UDP together (default 4096)',
      type: 'int',
      default: 4096,
    },
  ],
  async start(options, ctx) {
    let instances: InstanceConfig[] | undefined;
    try {
      instances = loadInstances(options.instances);
    } catch (err) {
      if (err instanceof CliError) throw err;
      throw new CliError('ERR_CONFIG', (err as Error).message);
    }
    const relay = new NoxRelayServer({
      host: options.host as string,
      port: options.port as number,
      instances,
      master: (options.master as string | undefined) || undefined,
      serverAddress: options.serverAddress as string,
      maxPacketSize: options.maxPacketSize as number,
      connectionTimeoutMs: (options.connectionTimeout as number) * 1000,
      maxClients: options.maxClients as number,
      log: ctx.log,
      metrics: ctx.metrics,
    });
    const endpoints = await relay.start();
    ctx.log.info(
      { port: relay.port, instances: relay.instances.size, offline: relay.offline },
      'nox-relay listening',
    );
    return { endpoints, close: () => relay.close() };
  },
};

function registerCommands(program: Command): void {
  const nox = program.command('nox-relay').description('NoxVR Relay tools');
  nox
    .command('bots')
    .description('a swarm of bots that enter an instance and stream transforms (load and watch a server)')
    .option('--host <host>', 'relay address', '127.0.0.1')
    .option('--port <port>', 'relay port', parseIntOption, DEFAULT_PORT)
    .option('--count <n>', 'number of bots', parseIntOption, 10)
    .option('--instance <id>', 'instance to enter', parseIntOption, 0)
    .option('--transport <tcp|udp>', 'transport', 'udp')
    .option('--rate <hz>', 'transforms per second per bot', parseIntOption, 20)
    .option('--duration <s>', 'stop after this many seconds', parseIntOption, 10)
    .option('--token-prefix <text>', 'offline token prefix (token = prefix + index)', 'bot-')
    .option('--no-as-bot', 'enter as ordinary players instead of bots')
    .action(async (opts: Record<string, unknown>) => {
      const transport = opts.transport as string;
      if (transport !== 'tcp' && transport !== 'udp') throw new UsageError('--transport takes tcp or udp');
      if ((opts.count as number) < 1) throw new UsageError('--count must be at least 1');
      if ((opts.instance as number) > 255) throw new UsageError('--instance must be 0..255');
      const abort = new AbortController();
      const onSignal = () => abort.abort();
      // `on`, not `once`: a second signal during the goodbye must not kill the process midway.
      process.on('SIGINT', onSignal);
      process.on('SIGTERM', onSignal);
      try {
        const stats = await runBots({
          host: opts.host as string,
          port: opts.port as number,
          count: opts.count as number,
          instance: opts.instance as number,
          transport,
          rate: opts.rate as number,
          durationS: opts.duration as number,
          tokenPrefix: opts.tokenPrefix as string,
          asBot: opts.asBot !== false,
          out: (line) => process.stdout.write(`${line}\n`),
          signal: abort.signal,
        });
        process.stdout.write(`${JSON.stringify({ summary: stats })}\n`);
        if (stats.entered === 0) throw new CliError('ERR_BOTS', 'no bot could enter the instance');
      } finally {
        process.off('SIGINT', onSignal);
        process.off('SIGTERM', onSignal);
      }
    });
}

export const noxRelay: ProtocolModule = {
  name: 'nox-relay',
  summary: 'NoxVR Relay v1 (social VR instances; TCP+UDP)',
  codecs: [noxRelayCodec],
  server,
  registerCommands,
};
