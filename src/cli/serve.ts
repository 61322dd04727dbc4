/**
 * `gamewire serve [protocol…]`: starts servers with defaults < config file < environment <
 * command-line flags, all checked against one schema (src/core/config.ts); prints where each
 * listens; stops cleanly on SIGINT/SIGTERM, at any moment, including during start-up.
 */
import diagnosticsChannel from 'node:diagnostics_channel';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { type Command, Option } from 'commander';
import { isLoopbackName } from '../core/admin/hosts.js';
import {
  type AdminServer,
  type AdminServerEntry,
  type ReadyState,
  startAdminServer,
} from '../core/admin/server.js';
import { packageRoot } from '../core/admin/static.js';
import { codecDecoder } from '../core/admin/wire-json.js';
import {
  checkConfigFile,
  checkValue,
  defaultsOf,
  flagName,
  flagParser,
  readConfigFile,
  resolveOptions,
  SERVE_OPTIONS,
  sectionOptions,
  valuesFromEnv,
} from '../core/config.js';
import { CommandError, ConfigError, UsageError } from '../core/errors.js';
import type { Logger } from '../core/logger.js';
import { createLogger, RateLimitedLog, releaseLogs } from '../core/logger.js';
import { ProtocolMetrics, summaryLine } from '../core/metrics.js';
import type { ProtocolModule } from '../core/protocol.js';
import type { CommonServerOptions, RunningServer, ServeOption } from '../core/server.js';
import { printError } from './errors.js';
import { addRecordOptions, startRecording } from './record.js';
import { keepRunningWithoutStdout, writeOut } from './stdio.js';

/**
 * Every protocol option, once per flag (several protocols share `--port`, `--cache`, `--role`, …).
 * Options that share a flag and each restrict its values (`--role`: allocator|relay|all for
 * unity-relay, auth|secure|all for rmc) accept the union of their choices here; each protocol
 * checks the value against its own choices when its options are resolved.
 */
export function protocolFlags(protocols: readonly ProtocolModule[]): ServeOption[] {
  const seen = new Map<string, ServeOption>();
  for (const p of protocols)
    for (const o of p.server?.options ?? []) {
      const name = flagName(o);
      if (name === '--host' || name === '--port') continue;
      const prev = seen.get(name);
      if (prev === undefined) {
        seen.set(name, o);
        continue;
      }
      // --help says what the flag does for each protocol that has it (`--redis`, `--drain`, …
      // drive rmc and unity-relay alike).
      const description = prev.description.includes(o.description)
        ? prev.description
        : `${prev.description}; ${o.description}`;
      if (prev.choices !== undefined && o.choices !== undefined) {
        const choices = [...prev.choices, ...o.choices.filter((c) => !prev.choices!.includes(c))];
        seen.set(name, { ...prev, choices, description });
      } else seen.set(name, { ...prev, description });
    }
  return [...seen.values()];
}

function addOption(cmd: Command, o: ServeOption, description = o.description): void {
  const parse = flagParser(o);
  // The option's own flag, then its former names (hidden from --help, same argument).
  const argument = o.flag.slice(flagName(o).length);
  const flags = [o.flag, ...(o.flagAliases ?? []).map((a) => `${a}${argument}`)];
  flags.forEach((flag, i) => {
    const option = new Option(flag, description);
    if (parse !== undefined) option.argParser(parse);
    if (o.choices !== undefined && o.type === 'string') option.choices(o.choices);
    if (i > 0) option.hideHelp();
    cmd.addOption(option);
  });
}

/** A flag's value: under its own name, or else under a former name (with a warning). */
function flagValue(o: ServeOption, flags: Record<string, unknown>, warnings: string[]): unknown {
  const value = flags[new Option(o.flag).attributeName()];
  if (value !== undefined) return value;
  for (const former of o.flagAliases ?? []) {
    const v = flags[new Option(former).attributeName()];
    if (v !== undefined) {
      warnings.push(`${former} is now called ${flagName(o)}`);
      return v;
    }
  }
  return undefined;
}

/** The config schema: the `serve` section and one section per protocol with a server. */
export function configSchema(protocols: readonly ProtocolModule[]): Map<string, readonly ServeOption[]> {
  const schema = new Map<string, readonly ServeOption[]>([['serve', SERVE_OPTIONS]]);
  for (const p of protocols)
    if (p.server !== undefined) schema.set(p.name, sectionOptions(p.server.defaultPort, p.server.options));
  return schema;
}

/**
 * A server's options: defaults, then its config-file section, then environment variables, then
 * command-line flags, then the defaults of what none of them set (`resolveOptions`: the options
 * its `start` receives, typed by its definition). Flags are looked up under commander's name for
 * each flag (`--unity-idle-timeout` → `unityIdleTimeout`), which may differ from the option's key.
 * The section's values were checked with the config file (`checkConfigFile`).
 */
export function resolveServeOptions(
  p: ProtocolModule,
  section: Record<string, unknown>,
  flags: Record<string, unknown>,
  serveHost: string,
  env: NodeJS.ProcessEnv = process.env,
  warnings: string[] = [],
): ServeOptionsView {
  const def = p.server!;
  const options = sectionOptions(def.defaultPort, def.options);
  const values: Record<string, unknown> = { ...section, ...valuesFromEnv(p.name, options, env) };
  if (flags.host !== undefined) values.host = flags.host;
  if (flags.port !== undefined) values.port = flags.port;
  for (const o of def.options) {
    const value = flagValue(o, flags, warnings);
    // A shared flag was parsed against every protocol's choices: check this protocol's own.
    if (value !== undefined)
      values[o.key] = checkValue(o, value, { kind: 'flag', flag: `${p.name} ${flagName(o)}` });
  }
  return resolveOptions(def, p.name, values, serveHost);
}

/**
 * The options `serve` resolved for a server, as `serve` itself reads them: `host`, `port`, and
 * any key by name (messages that name the option a port came from; tests). What the server's
 * `start` receives is the same object, typed by its definition.
 */
export type ServeOptionsView = CommonServerOptions & { readonly [key: string]: unknown };

export function addServeCommand(program: Command, protocols: readonly ProtocolModule[]): void {
  const servers = protocols.filter((p) => p.server !== undefined);
  const cmd = program
    .command('serve')
    .description('start servers (all of them when no protocol is named)')
    .argument('[protocols...]', `any of: ${servers.map((p) => p.name).join(', ')}`)
    .option('--config <file>', 'JSON config file: { "serve": {…}, "<protocol>": {…} } (see docs/config.md)');
  for (const o of SERVE_OPTIONS)
    addOption(
      cmd,
      o,
      o.default === undefined ? o.description : `${o.description} (default ${String(o.default)})`,
    );
  addOption(cmd, sectionOptions(0, [])[1]!, "the protocol's port (only when serving one protocol)");
  // The admin endpoint's former names, still accepted; and the switch that turns it off.
  cmd.addOption(new Option('--metrics-port <port>').hideHelp().argParser(flagParser(ADMIN_PORT)!));
  cmd.addOption(new Option('--metrics-host <address>').hideHelp());
  cmd.addOption(new Option('--no-admin', 'do not start the admin endpoint (dashboard, /api, /metrics)'));
  for (const o of protocolFlags(servers)) addOption(cmd, o);
  addRecordOptions(cmd);
  cmd.action(async (names: string[], flags: Record<string, unknown>) => {
    const selected: ProtocolModule[] = [];
    for (const name of names) {
      const p = protocols.find((x) => x.name === name);
      if (p === undefined || p.server === undefined) {
        const known = servers.map((x) => x.name).join(', ');
        throw new UsageError(
          p === undefined
            ? `unknown protocol "${name}" (servers: ${known})`
            : `${name} has no server (servers: ${known})`,
        );
      }
      if (!selected.includes(p)) selected.push(p);
    }
    if (selected.length === 0) selected.push(...servers);
    if (selected.length > 1 && flags.port !== undefined) {
      throw new UsageError(
        `--port is ambiguous with several protocols: name one protocol, or set "<protocol>": {"port": N} in --config`,
      );
    }
    await runServers(protocols, selected, flags);
  });
}

const ADMIN_PORT = SERVE_OPTIONS.find((o) => o.key === 'adminPort')!;

/**
 * Who set the admin port, if anyone: a flag, the environment or the config file. A port someone
 * chose that is taken stops `serve`; the default one that is taken moves to a free port.
 */
function adminPortSource(
  flags: Record<string, unknown>,
  fileValues: Record<string, unknown> | undefined,
  configPath: string | undefined,
): string | undefined {
  if (flags.adminPort !== undefined) return '--admin-port';
  if (flags.metricsPort !== undefined) return '--metrics-port';
  const env = ADMIN_PORT.env!;
  if (process.env[env] !== undefined && process.env[env] !== '') return env;
  if (fileValues?.adminPort !== undefined) return `serve.adminPort in ${configPath}`;
  return undefined;
}

/** The one line for an admin endpoint that cannot listen. */
function adminListenError(err: unknown, host: string, port: number, given: string | undefined): CommandError {
  const e = err as NodeJS.ErrnoException;
  const why =
    e.code === 'EADDRINUSE'
      ? `port ${String(port)} is already in use`
      : e.code === 'EADDRNOTAVAIL'
        ? `address ${host} is not available on this machine`
        : e.message;
  const from = given === undefined ? '' : ` (set by ${given})`;
  return new CommandError(
    'ERR_LISTEN',
    `admin endpoint ${host}:${String(port)}${from}: ${why}: choose another port with --admin-port (config serve.adminPort), or turn it off with --no-admin`,
    1,
    { cause: err },
  );
}

/** The package version, for `/api/session`. */
function packageVersion(): string {
  const root = packageRoot();
  if (root === undefined) return '0.0.0';
  try {
    return (
      (JSON.parse(readFileSync(path.join(root, 'package.json'), 'utf8')) as { version?: string }).version ??
      '0.0.0'
    );
  } catch {
    return '0.0.0';
  }
}

interface ConnectionEvent {
  protocol: string;
  transport: string;
  remote: string;
  reason?: string;
}

/**
 * The option-key prefixes that say which transport a protocol's option is for, where they are not
 * the transport kind itself (`tcpMaxConnections`, or `<kind>MaxConnections` for a protocol's own kind).
 */
const TRANSPORT_KEY_PREFIXES: Readonly<Record<string, readonly string[]>> = {
  websocket: ['ws', 'websocket'],
};

/**
 * The option that caps a protocol's connections over `transport`: among its integer
 * `max…Connections` / `max…Clients` options, the one named for that transport
 * (`<transport>MaxConnections`), else the one named for no transport (`maxConnections`: its key
 * starts with `max`).
 */
export function connectionCapOption(
  options: readonly ServeOption[],
  transport: string,
): ServeOption | undefined {
  const caps = options.filter((o) => o.type === 'int' && /max\w*(Connections|Clients)$/i.test(o.key));
  const namedFor = (o: ServeOption, t: string) =>
    (TRANSPORT_KEY_PREFIXES[t] ?? [t]).some((prefix) => o.key.toLowerCase().startsWith(prefix));
  return caps.find((o) => namedFor(o, transport)) ?? caps.find((o) => /^max/i.test(o.key));
}

/**
 * Logs connection lifecycle from the servers' `gamewire:connection:*` diagnostics events:
 * open and close at debug (subscribed only when debug is on, so the hot path publishes nothing
 * otherwise), and refusals at accept. A refusal because the server is full means it is
 * configured too small: that one is logged at info, rate-limited per protocol and transport,
 * naming the transport that refused and the option that caps it (`limitOf`). Returns the
 * unsubscriber.
 */
export function logConnections(
  log: Logger,
  limitOf: (protocol: string, transport: string) => string = () => 'its connection limit',
): () => void {
  const refusals = new RateLimitedLog(log);
  const subscriptions: [string, (message: unknown) => void][] = [
    [
      'gamewire:connection:drop',
      (m) => {
        const e = m as ConnectionEvent;
        const fields = { protocol: e.protocol, transport: e.transport, remote: e.remote, reason: e.reason };
        if (e.reason === 'over_capacity') {
          refusals.info(
            `${e.protocol}:${e.transport}:full`,
            fields,
            `connection refused: ${e.protocol} (${e.transport}) is full (raise ${limitOf(e.protocol, e.transport)})`,
          );
        } else log.debug(fields, 'connection refused');
      },
    ],
  ];
  if (log.isLevelEnabled('debug')) {
    subscriptions.push(
      ['gamewire:connection:open', (m) => log.debug(m as ConnectionEvent, 'connection open')],
      ['gamewire:connection:close', (m) => log.debug(m as ConnectionEvent, 'connection closed')],
    );
  }
  for (const [name, fn] of subscriptions) diagnosticsChannel.subscribe(name, fn);
  return () => {
    for (const [name, fn] of subscriptions) diagnosticsChannel.unsubscribe(name, fn);
  };
}

/** One line saying what failed and how to fix it, for an error thrown while starting `name`. */
export function startFailure(
  name: string,
  err: unknown,
  options: ServeOptionsView,
  def: ProtocolModule,
): CommandError {
  if (err instanceof CommandError) return err;
  const e = err as NodeJS.ErrnoException & { port?: number; address?: string };
  if (e.code === 'EADDRINUSE' || e.code === 'EACCES' || e.code === 'EADDRNOTAVAIL') {
    const port = e.port ?? options.port;
    const owner = sectionOptions(def.server!.defaultPort, def.server!.options).find(
      (o) => o.type === 'int' && (o.key === 'port' || /Port$/.test(o.key)) && options[o.key] === port,
    );
    const key = owner?.key ?? 'port';
    const flag = owner === undefined || owner.key === 'port' ? '--port' : flagName(owner);
    const where = `${e.address ?? options.host}:${port}`;
    const why =
      e.code === 'EADDRINUSE'
        ? `port ${port} is already in use (${where})`
        : e.code === 'EACCES'
          ? `no permission to listen on ${where} (ports below 1024 need privileges)`
          : `address ${e.address ?? options.host} is not available on this machine`;
    const fix =
      e.code === 'EADDRNOTAVAIL'
        ? 'choose another with --host (config serve.host or <protocol>.host)'
        : `stop what uses it or choose another port with ${flag} (config ${name}.${key})`;
    return new CommandError('ERR_LISTEN', `${name}: ${why}: ${fix}`, 1, { cause: err });
  }
  return new CommandError(
    'ERR_SERVE',
    `${name}: could not start: ${(err as Error).message ?? String(err)}`,
    1,
    {
      cause: err,
    },
  );
}

const SHUTDOWN_TIMEOUT_OPTION = SERVE_OPTIONS.find((o) => o.key === 'shutdownTimeoutMs')!;
const SHUTDOWN_TIMEOUT_DEFAULT_MS = SHUTDOWN_TIMEOUT_OPTION.default as number;

async function runServers(
  protocols: readonly ProtocolModule[],
  selected: readonly ProtocolModule[],
  flags: Record<string, unknown>,
): Promise<void> {
  // Signals first: from here on, SIGINT/SIGTERM always end the process, whatever state it is in.
  let state: ReadyState = 'starting';
  let wake: () => void = () => {};
  const stopRequested = new Promise<void>((resolve) => {
    wake = resolve;
  });
  let signalName: string | undefined;
  // The listen lines are information: a reader that went away (`serve | head -5`) does not stop
  // the servers; stdout lines are dropped from then on.
  keepRunningWithoutStdout();
  // The backstop after a signal (until the config is read, its default).
  let shutdownTimeoutMs = SHUTDOWN_TIMEOUT_DEFAULT_MS;
  const onSignal = (signal: string) => {
    if (signalName !== undefined) process.exit(130); // a second signal: stop waiting for a clean close
    signalName = signal;
    state = 'stopping';
    wake();
    // Whatever a close waits for (a peer that never closes, a stuck child), the process ends.
    setTimeout(() => {
      printError(
        'ERR_SHUTDOWN_TIMEOUT',
        `the servers did not stop within ${shutdownTimeoutMs} ms of ${signal}: exiting without waiting further (--shutdown-timeout-ms, config serve.shutdownTimeoutMs)`,
      );
      process.exit(1);
    }, shutdownTimeoutMs).unref();
  };
  const onInt = () => onSignal('SIGINT');
  const onTerm = () => onSignal('SIGTERM');
  process.on('SIGINT', onInt);
  process.on('SIGTERM', onTerm);
  // A supervisor's child (`unity-relay --workers`) stops when its supervisor goes, even on kill -9.
  const onDisconnect = () => onSignal('SIGTERM');
  process.once('disconnect', onDisconnect);

  const running: { name: string; server: RunningServer; startedAt: number; module: ProtocolModule }[] = [];
  const metrics: ProtocolMetrics[] = [];
  let admin: AdminServer | undefined;
  const recording = startRecording(flags);
  const stopAll = async () => {
    state = 'stopping';
    await admin?.close().catch(() => {});
    await Promise.allSettled(running.map((r) => r.server.close()));
    recording?.close();
  };

  // Configuration: file < environment < flags, every value checked against the schema.
  const schema = configSchema(protocols);
  const configPath = flags.config as string | undefined;
  const checked =
    configPath === undefined ? undefined : checkConfigFile(readConfigFile(configPath), configPath, schema);
  const serveValues: Record<string, unknown> = {
    ...defaultsOf(SERVE_OPTIONS),
    ...(checked?.values.get('serve') ?? {}),
    ...valuesFromEnv('serve', SERVE_OPTIONS),
  };
  // The admin token's former environment variable.
  const legacyToken = process.env.GAMEWIRE_SERVE_ADMIN_TOKEN;
  if (serveValues.adminToken === undefined && legacyToken !== undefined && legacyToken !== '')
    serveValues.adminToken = legacyToken;
  for (const o of SERVE_OPTIONS) {
    const v = flags[new Option(o.flag).attributeName()];
    if (v !== undefined) serveValues[o.key] = v;
  }
  if (flags.adminPort === undefined && flags.metricsPort !== undefined)
    serveValues.adminPort = flags.metricsPort;
  if (flags.adminHost === undefined && flags.metricsHost !== undefined)
    serveValues.adminHost = flags.metricsHost;
  const adminOn = flags.admin !== false;
  const adminHost = serveValues.adminHost as string;
  const adminToken = serveValues.adminToken as string | undefined;
  if (adminOn && adminToken !== undefined && adminToken !== '' && adminToken.length < 16) {
    throw new ConfigError(
      '--admin-token must be at least 16 characters (it guards the dashboard and its actions)',
      'serve.adminToken',
    );
  }
  if (
    adminOn &&
    !isLoopbackName(adminHost) &&
    (serveValues.adminToken === undefined || serveValues.adminToken === '')
  ) {
    throw new ConfigError(
      `--admin-host ${adminHost} would expose the admin endpoint beyond this machine: set --admin-token (or GAMEWIRE_ADMIN_TOKEN), bind 127.0.0.1, or pass --no-admin`,
      'serve.adminHost',
    );
  }
  // Values from flags were checked by their parsers; these re-checks cover config and environment.
  const logLevel = checkValue(SERVE_OPTIONS[2]!, serveValues.logLevel, {
    kind: 'flag',
    flag: '--log-level',
  }) as string;
  shutdownTimeoutMs = checkValue(SHUTDOWN_TIMEOUT_OPTION, serveValues.shutdownTimeoutMs, {
    kind: 'flag',
    flag: '--shutdown-timeout-ms',
  }) as number;
  // Start-up lines are held back for a moment: a start that fails at once (a port in use) ends
  // with its error line alone, not after lines about servers that it then stops. A slow start
  // (a demo cache being generated) shows its lines after a second, as they come.
  const log = createLogger(logLevel, { hold: true });
  const showLogs = setTimeout(() => releaseLogs(log), 1000);
  showLogs.unref();
  for (const w of checked?.warnings ?? []) log.warn(w);
  const dataDir = path.resolve(serveValues.dataDir as string);
  const unsubscribe = logConnections(log, (name, transport) => {
    const p = protocols.find((x) => x.name === name);
    const o = connectionCapOption(p?.server?.options ?? [], transport);
    return o === undefined ? 'its connection limit' : `${flagName(o)}, config ${name}.${o.key}`;
  });

  // Every protocol's options, checked before anything starts (a bad value or a fleet-only option
  // without Redis stops `serve` with nothing listening yet).
  const resolved: [ProtocolModule, ServeOptionsView][] = [];
  for (const p of selected) {
    const flagWarnings: string[] = [];
    const options = resolveServeOptions(
      p,
      checked?.values.get(p.name) ?? {},
      flags,
      serveValues.host as string,
      process.env,
      flagWarnings,
    );
    for (const w of flagWarnings) log.warn(w);
    resolved.push([p, options]);
  }
  // What the admin endpoint shows: each server as it starts.
  const entries: AdminServerEntry[] = [];
  // Fleet announcements the servers handed over (ServerContext.deferAnnouncement), run in order
  // once every server and the admin endpoint listen.
  const announcements: {
    name: string;
    options: ServeOptionsView;
    module: ProtocolModule;
    announce: () => Promise<void>;
  }[] = [];
  try {
    // The admin endpoint listens first: a port it cannot have stops `serve` before any server
    // has announced itself anywhere (a fleet node in Redis).
    let adminMoved: number | undefined;
    if (adminOn && signalName === undefined) {
      const given = adminPortSource(flags, checked?.values.get('serve'), configPath);
      const port = serveValues.adminPort as number;
      const start = (at: number) =>
        startAdminServer({
          host: adminHost,
          port: at,
          token: serveValues.adminToken as string | undefined,
          version: packageVersion(),
          metrics: () => metrics,
          servers: () => (state === 'stopping' ? [] : entries),
          state: () => state,
        });
      try {
        admin = await start(port);
      } catch (err) {
        const e = err as NodeJS.ErrnoException;
        if (e.code === 'EADDRINUSE' && given === undefined) {
          // Nobody asked for 9100: a second `serve` on this machine is normal (two services, a
          // fleet node next to an allocator); the dashboard moves and the start-up line says where.
          admin = await start(0).catch((again: unknown) => {
            throw adminListenError(again, adminHost, 0, undefined);
          });
          adminMoved = port;
          log.warn(
            { port, moved: admin.port },
            `admin endpoint: port ${port} is in use (another gamewire serve?); the dashboard is on ${adminHost}:${admin.port} instead (set --admin-port to choose)`,
          );
        } else throw adminListenError(err, adminHost, port, given);
      }
    }
    for (const [p, options] of resolved) {
      if (signalName !== undefined) break;
      const m = new ProtocolMetrics(p.name);
      metrics.push(m);
      const plog = log.child({ protocol: p.name });
      let server: RunningServer;
      try {
        server = await p.server!.start(options, {
          log: plog,
          metrics: m,
          dataDir,
          selfCommand: [process.execPath, ...process.execArgv, process.argv[1]!],
          deferAnnouncement: (announce) => announcements.push({ name: p.name, options, module: p, announce }),
        });
      } catch (err) {
        throw startFailure(p.name, err, options, p);
      }
      const startedAt = Date.now();
      running.push({ name: p.name, server, startedAt, module: p });
      const codec = p.codecs[0];
      entries.push({
        protocol: p.name,
        summary: p.summary,
        startedAt,
        endpoints: server.endpoints,
        metrics: m,
        admin: server.admin,
        decode: server.admin?.decode ?? (codec === undefined ? undefined : codecDecoder(codec)),
        page: p.dashboard,
      });
      plog.info({ endpoints: server.endpoints.map((e) => `${e.transport} ${e.host}:${e.port}`) }, 'started');
      for (const e of server.endpoints) {
        writeOut(`gamewire: ${p.name} ${e.transport} ${e.host}:${e.port} ${e.description}\n`);
      }
    }
    // Everything listens: only now does a fleet node tell Redis it is there.
    for (const a of announcements) {
      if (signalName !== undefined) break;
      try {
        await a.announce();
      } catch (err) {
        throw startFailure(a.name, err, a.options, a.module);
      }
    }
    if (admin !== undefined && signalName === undefined) {
      const shown = adminHost.includes(':') ? `[${adminHost}]` : adminHost;
      const moved = adminMoved === undefined ? '' : `; port ${adminMoved} was in use`;
      writeOut(
        `gamewire: dashboard http://${shown}:${admin.port}/ (admin endpoint: /api /metrics /health /ready${moved})\n`,
      );
    }
  } catch (err) {
    await stopAll();
    unsubscribe();
    process.off('SIGINT', onInt);
    process.off('SIGTERM', onTerm);
    process.off('disconnect', onDisconnect);
    clearTimeout(showLogs);
    // Only warnings (and worse) of a start that failed: the error line is what matters.
    releaseLogs(log, false);
    log.flush?.();
    throw err;
  }
  clearTimeout(showLogs);
  releaseLogs(log);

  if (signalName === undefined) {
    state = 'ready';
    // Started by a supervisor over IPC (`unity-relay --workers`): tell it where this process serves.
    process.send?.({ type: 'gamewire:ready', endpoints: running.flatMap((r) => r.server.endpoints) });
    await stopRequested;
  }
  log.info({ signal: signalName }, 'stopping');
  await stopAll();
  unsubscribe();
  process.off('SIGINT', onInt);
  process.off('SIGTERM', onTerm);
  process.off('disconnect', onDisconnect);
  log.info(`stopped; ${metrics.map(summaryLine).join('; ') || 'nothing ran'}`);
  writeOut('gamewire: stopped\n');
  // Everything is closed; if a stray handle still holds the event loop, do not hang on it.
  setTimeout(process.exit, 1000, 0).unref();
}
