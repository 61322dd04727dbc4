/**
 * `gamewire nox-relay …` subcommands: the bot swarm. Loaded by the CLI through the protocol
 * module's `registerCommands`.
 */
import type { Command } from 'commander';
import {
  CommandError,
  connectFailure,
  parseIntOption,
  parsePortOption,
  UsageError,
} from '../../core/errors.js';
import { isGamewireError } from '../../wire/errors.js';
import { runBots } from './bots.js';
import { DEFAULT_PORT } from './constants.js';

/** A bot's failure as the CLI's error object: a stable code, a message naming the relay. */
function botError(err: Error, target: string): { code: string; message: string } {
  const hint = connectFailure(err, target);
  if (hint instanceof CommandError) return { code: hint.code, message: hint.message };
  if (isGamewireError(err)) return { code: String(err.code), message: err.message };
  return { code: 'ERR_NOX_BOT', message: `${target}: ${err.message}` };
}

export function registerCommands(program: Command): void {
  const nox = program.command('nox-relay').description('NoxVR Relay tools');
  nox
    .command('bots')
    .description('a swarm of bots that enter an instance and stream transforms (load and watch a server)')
    .option('--host <host>', 'relay address', '127.0.0.1')
    .option('--port <port>', 'relay port', parsePortOption, DEFAULT_PORT)
    .option('--count <n>', 'number of bots', parseIntOption, 10)
    .option('--instance <id>', 'instance to enter', parseIntOption, 0)
    .option('--transport <tcp|udp>', 'transport', 'udp')
    .option('--rate <hz>', 'transforms per second per bot', parseIntOption, 20)
    // Until Ctrl-C by default: the swarm is what a person watches a server (or its dashboard) with.
    .option(
      '--duration <s>',
      'stop after this many seconds, even if bots are still connecting (0: until Ctrl-C)',
      parseIntOption,
      0,
    )
    .option('--timeout-ms <ms>', "each bot's connect and request timeout", parseIntOption, 5000)
    .option('--token-prefix <text>', 'offline token prefix (token = prefix + index)', 'bot-')
    .option('--no-as-bot', 'enter as ordinary players instead of bots')
    .action(async (opts: Record<string, unknown>) => {
      const transport = opts.transport as string;
      if (transport !== 'tcp' && transport !== 'udp') throw new UsageError('--transport takes tcp or udp');
      if ((opts.count as number) < 1) throw new UsageError('--count must be at least 1');
      if ((opts.instance as number) > 255) throw new UsageError('--instance must be 0..255');
      if ((opts.timeoutMs as number) < 1) throw new UsageError('--timeout-ms must be at least 1');
      const host = opts.host as string;
      if (host === '') throw new UsageError('--host must name the relay');
      const target = `${host.includes(':') ? `[${host}]` : host}:${opts.port as number}`;
      const abort = new AbortController();
      const onSignal = () => abort.abort();
      // `on`, not `once`: a second signal during the goodbye must not kill the process midway.
      process.on('SIGINT', onSignal);
      process.on('SIGTERM', onSignal);
      // Each kind of failure is said once on stderr, as it happens; the summary counts them all.
      const failures = new Map<string, { count: number; first: { code: string; message: string } }>();
      try {
        const stats = await runBots({
          host,
          port: opts.port as number,
          count: opts.count as number,
          instance: opts.instance as number,
          transport,
          rate: opts.rate as number,
          durationS: opts.duration as number,
          tokenPrefix: opts.tokenPrefix as string,
          asBot: opts.asBot !== false,
          requestTimeoutMs: opts.timeoutMs as number,
          out: (line) => process.stdout.write(`${line}\n`),
          onBotError: (bot, err) => {
            const e = botError(err, target);
            const seen = failures.get(e.code);
            if (seen !== undefined) {
              seen.count++;
              return;
            }
            const first = {
              code: e.code,
              message: e.message.startsWith('bot ') ? e.message : `bot ${bot}: ${e.message}`,
            };
            failures.set(e.code, { count: 1, first });
            process.stderr.write(`${JSON.stringify({ error: first })}\n`);
          },
          signal: abort.signal,
        });
        const failedByCode = Object.fromEntries([...failures].map(([code, f]) => [code, f.count]));
        process.stdout.write(
          `${JSON.stringify({ summary: { target, transport, ...stats, failedByCode } })}\n`,
        );
        const cause = [...failures.values()][0]?.first.message;
        // Ctrl-C before any bot got in, with nothing failed, is the user's choice, not a failure.
        const interruptedCleanly = stats.ended === 'signal' && failures.size === 0;
        if (stats.entered === 0 && !interruptedCleanly) {
          const run = stats.ended === 'duration' ? (opts.duration as number) : Math.round(stats.seconds);
          const why =
            stats.ended === 'all_failed'
              ? `all ${stats.failed} failed: ${cause}`
              : cause === undefined
                ? `nothing answered within the ${run} s run`
                : `none within the ${run} s run: ${cause}`;
          throw new CommandError('ERR_BOTS', `no bot connected to ${target} over ${transport} (${why})`);
        }
        if (stats.ended === 'all_lost')
          throw new CommandError(
            'ERR_BOTS_LOST',
            `every bot lost its connection to ${target} after ${stats.seconds.toFixed(1)} s: is the relay still running?`,
          );
      } finally {
        process.off('SIGINT', onSignal);
        process.off('SIGTERM', onSignal);
      }
    });
}
