/**
 * `gamewire nox-relay …` subcommands: the bot swarm. Loaded by the CLI through the protocol
 * module's `registerCommands`.
 */
import type { Command } from 'commander';
import { CommandError, parseIntOption, UsageError } from '../../core/errors.js';
import { runBots } from './bots.js';
import { DEFAULT_PORT } from './constants.js';

export function registerCommands(program: Command): void {
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
    // Until Ctrl-C by default: the swarm is what a person watches a server (or its dashboard) with.
    .option('--duration <s>', 'stop after this many seconds (0: run until Ctrl-C)', parseIntOption, 0)
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
        if (stats.entered === 0) throw new CommandError('ERR_BOTS', 'no bot could enter the instance');
      } finally {
        process.off('SIGINT', onSignal);
        process.off('SIGTERM', onSignal);
      }
    });
}
