/**
 * `gamewire serve [protocol…]`: starts servers with defaults < config file < command-line flags,
 * prints where each listens, and stops cleanly on SIGINT/SIGTERM.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { type Command, Option } from 'commander';
import { type FastifyInstance, fastify } from 'fastify';
import { createLogger } from '../core/logger.js';
import { createRegistry, ProtocolMetrics } from '../core/metrics.js';
import type { ProtocolModule } from '../core/protocol.js';
import type { RunningServer, ServeOption, ServerDefinition } from '../core/server.js';
import { protocols } from '../protocols/registry.js';
import { CliError, parseIntOption, UsageError } from './errors.js';

const COMMON_KEYS = new Set(['host', 'port', 'config', 'dataDir', 'logLevel', 'metricsPort']);

function parserFor(option: ServeOption): ((v: string) => unknown) | undefined {
  if (option.type === 'int') return parseIntOption;
  if (option.type === 'list')
    return (v: string) =>
      v
        .split(',')
        .map((s) => s.trim())
        .filter((s) => s !== '');
  return undefined;
}

function readConfig(file: string | undefined): Record<string, Record<string, unknown>> {
  if (file === undefined) return {};
  let parsed: unknown;
  try {
    parsed = JSON.parse(readFileSync(file, 'utf8'));
  } catch (err) {
    throw new CliError('ERR_CONFIG', `cannot read config ${file}: ${(err as Error).message}`);
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    throw new CliError('ERR_CONFIG', `config ${file} must be a JSON object keyed by protocol name`);
  }
  return parsed as Record<string, Record<string, unknown>>;
}

/** Every protocol option, once per flag (several protocols share `--port`). */
function collectOptions(): ServeOption[] {
  const seen = new Map<string, ServeOption>();
  for (const p of protocols)
    for (const o of p.server?.options ?? []) if (!seen.has(o.flag)) seen.set(o.flag, o);
  return [...seen.values()];
}

/**
 * A server's options: its defaults, then its config-file section, then command-line flags.
 * Flags are looked up under commander's name for each flag (`--unity-idle-timeout` →
 * `unityIdleTimeout`), which may differ from the option's config key (`idleTimeoutMs`).
 */
export function resolveServeOptions(
  def: ServerDefinition,
  section: Record<string, unknown>,
  flags: Record<string, unknown>,
): Record<string, unknown> {
  const options: Record<string, unknown> = { host: '0.0.0.0', port: def.defaultPort };
  for (const o of def.options) if (o.default !== undefined) options[o.key] = o.default;
  Object.assign(options, section);
  if (flags.host !== undefined) options.host = flags.host;
  if (flags.port !== undefined) options.port = flags.port;
  for (const o of def.options) {
    const value = flags[new Option(o.flag).attributeName()];
    if (value !== undefined) options[o.key] = value;
  }
  return options;
}

export function addServeCommand(program: Command): void {
  const cmd = program
    .command('serve')
    .description('start servers (all of them when no protocol is named)')
    .argument(
      '[protocols...]',
      `any of: ${protocols
        .filter((p) => p.server)
        .map((p) => p.name)
        .join(', ')}`,
    )
    .option('--host <address>', 'bind address for game traffic (default 0.0.0.0)')
    .option('--port <port>', "the protocol's port (only when serving one protocol)", parseIntOption)
    .option('--config <file>', 'JSON config: { "<protocol>": { "<option>": value } }')
    .option('--data-dir <dir>', 'folder for generated state such as the js5 demo cache', 'data')
    .option('--log-level <level>', 'pino log level: trace, debug, info, warn, error, silent')
    .option('--metrics-port <port>', 'serve Prometheus metrics on 127.0.0.1:<port>/metrics', parseIntOption);
  for (const o of collectOptions()) {
    if (COMMON_KEYS.has(o.key)) continue;
    const option = new Option(o.flag, o.description);
    const parse = parserFor(o);
    if (parse !== undefined) option.argParser(parse);
    cmd.addOption(option);
  }
  cmd.action(async (names: string[], flags: Record<string, unknown>) => {
    const selected: ProtocolModule[] = [];
    for (const name of names) {
      const p = protocols.find((x) => x.name === name);
      if (p === undefined) throw new UsageError(`unknown protocol "${name}"`);
      if (p.server === undefined) throw new UsageError(`${name} has no server`);
      selected.push(p);
    }
    if (selected.length === 0) selected.push(...protocols.filter((p) => p.server !== undefined));
    if (selected.length > 1 && flags.port !== undefined) {
      throw new UsageError('--port is ambiguous with several protocols: name one protocol, or use --config');
    }
    if (selected.length === 0) {
      process.stdout.write('gamewire: no protocol has a server yet; nothing to serve\n');
      return;
    }
    await runServers(selected, flags);
  });
}

async function runServers(selected: ProtocolModule[], flags: Record<string, unknown>): Promise<void> {
  const config = readConfig(flags.config as string | undefined);
  const log = createLogger(flags.logLevel as string | undefined);
  const dataDir = path.resolve(flags.dataDir as string);
  const metrics: ProtocolMetrics[] = [];
  const running: { name: string; server: RunningServer }[] = [];

  const stopAll = async () => {
    await Promise.allSettled(running.map((r) => r.server.close()));
  };

  // Listen for signals before anything starts, so a signal during start-up still stops cleanly.
  let onSignal: (signal: string) => void = () => {};
  const stopRequested = new Promise<string>((resolve) => {
    onSignal = resolve;
  });
  const onInt = () => onSignal('SIGINT');
  const onTerm = () => onSignal('SIGTERM');
  process.on('SIGINT', onInt);
  process.on('SIGTERM', onTerm);

  try {
    for (const p of selected) {
      const def = p.server!;
      const options = resolveServeOptions(def, config[p.name] ?? {}, flags);
      const m = new ProtocolMetrics(p.name);
      metrics.push(m);
      const server = await def.start(options, { log: log.child({ protocol: p.name }), metrics: m, dataDir });
      running.push({ name: p.name, server });
      for (const e of server.endpoints) {
        process.stdout.write(`gamewire: ${p.name} ${e.transport} ${e.host}:${e.port} ${e.description}\n`);
      }
    }
  } catch (err) {
    process.off('SIGINT', onInt);
    process.off('SIGTERM', onTerm);
    await stopAll();
    if (err instanceof CliError) throw err;
    throw new CliError('ERR_SERVE', `could not start: ${(err as Error).message}`);
  }

  let metricsServer: FastifyInstance | undefined;
  if (flags.metricsPort !== undefined) {
    const registry = createRegistry(() => metrics);
    metricsServer = fastify();
    metricsServer.get('/metrics', async (_req, reply) => {
      reply.header('content-type', registry.contentType);
      return registry.metrics();
    });
    await metricsServer.listen({ host: '127.0.0.1', port: flags.metricsPort as number });
    process.stdout.write(`gamewire: metrics http 127.0.0.1:${flags.metricsPort as number} /metrics\n`);
  }

  const signal = await stopRequested;
  log.info({ signal }, 'stopping');
  process.off('SIGINT', onInt);
  process.off('SIGTERM', onTerm);
  await stopAll();
  await metricsServer?.close();
  for (const m of metrics) log.info({ protocol: m.protocol, ...m.snapshot() }, 'final counters');
  process.stdout.write('gamewire: stopped\n');
  // Everything is closed; if a stray handle still holds the event loop, do not hang on it.
  setTimeout(process.exit, 1000, 0).unref();
}
