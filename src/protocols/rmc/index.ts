/**
 * Rendez-Vous RMC (Ubisoft/Quazal remote method calls): HyperScape's string-named variant by
 * default, the classic packed variant for decoding, a server framework with typed handlers,
 * the built-in HyperScape protocols, and a client. See docs/rmc.md.
 */

import { protocolPageDir } from '../../core/admin/static.js';
import { ConfigError, UsageError } from '../../core/errors.js';
import { FRAMED_TCP_DEFAULTS } from '../../core/framed-tcp.js';
import type { ProtocolModule } from '../../core/protocol.js';
import type { ServeOption } from '../../core/server.js';
import { rmcAdmin } from './admin.js';
import { registerCommands } from './cli.js';
import { rmcCodec } from './codec.js';
import { DEFAULT_STORE_TIMEOUT_MS } from './fleet/control-plane.js';
import { RMC_ROLES, type RmcFleetServer, roleOf, startRmcFleet } from './fleet/start.js';
import { DEFAULT_MAX_FRAME_BYTES } from './messages.js';
import {
  DEFAULT_MAX_SESSIONS_PER_ACCOUNT,
  DEFAULT_MAX_SESSIONS_PER_IP,
  DEFAULT_REGISTRATIONS_PER_HOUR,
  DEFAULT_REGISTRATIONS_PER_IP_PER_HOUR,
  parseDatacenters,
  registerBuiltins,
  SessionRegistry,
} from './protocols/index.js';
import { prudpCodec } from './prudp/codec.js';
import { PRUDP_SERVE_OPTIONS, profileOf, startRmcTransports } from './prudp/serve.js';
import { DEFAULT_MAX_IN_FLIGHT, RmcServer } from './server.js';
import { DEFAULT_MAX_ACCOUNTS, DEFAULT_MAX_LOGIN_SESSIONS_PER_ACCOUNT, MemoryStore } from './store.js';

export * from './client.js';
export * from './codec.js';
export * from './describe.js';
export * from './dispatcher.js';
export * from './errors.js';
export * from './messages.js';
export * from './protocols/index.js';
export * from './prudp/index.js';
export * from './server.js';
export * from './signature.js';
export * from './store.js';
export * from './types.js';

/**
 * A whole-number option (from a flag or the config file), at least `min`. Reads the key, or the
 * name it had before the config naming rule (still accepted).
 */
function intOption(options: Record<string, unknown>, key: string, min: number): number {
  const alias = RMC_SERVE_OPTIONS.find((o) => o.key === key)?.aliases?.[0];
  const v = options[key] ?? (alias === undefined ? undefined : options[alias]);
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < min) {
    throw new ConfigError(
      `rmc: ${key} must be a whole number ≥ ${min}, got ${JSON.stringify(v)}`,
      `rmc.${key}`,
    );
  }
  return v;
}

function stringOption(options: Record<string, unknown>, key: string, alias: string): string | undefined {
  const v = options[key] ?? options[alias];
  return typeof v === 'string' ? v : undefined;
}

const int = (
  key: string,
  description: string,
  def: number,
  unit: string,
  min = 0,
  aliases?: readonly string[],
): ServeOption => ({
  key,
  flag: `--rmc-${key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)} <${unit === 'ms' ? 'ms' : 'n'}>`,
  description: `rmc: ${description}`,
  type: 'int',
  default: def,
  min,
  unit,
  ...(aliases === undefined ? {} : { aliases }),
});

/** Every rmc serve option; keys follow docs/decisions.md ("Config keys and flags"). */
export const RMC_SERVE_OPTIONS: readonly ServeOption[] = [
  {
    key: 'role',
    flag: '--role <role>',
    description:
      'rmc: auth (logins, hands out secure servers), secure (players and sessions) or all (one process); auth and secure need --redis',
    type: 'string',
    default: 'all',
    choices: RMC_ROLES,
  },
  {
    key: 'redis',
    flag: '--redis <url>',
    description:
      'rmc: Redis URL of the fleet (accounts, sessions, nodes); without it everything stays in this process',
    type: 'string',
    secret: true,
  },
  {
    key: 'redisPrefix',
    flag: '--rmc-redis-prefix <prefix>',
    description: 'rmc: prefix of every Redis key of this fleet (several fleets can share one Redis)',
    type: 'string',
    default: 'gamewire:',
    requires: 'redis',
  },
  {
    key: 'nodeId',
    flag: '--node-id <id>',
    description: 'rmc: this process in the fleet (default <hostname>-<pid>)',
    type: 'string',
    flagAliases: ['--rmc-node-id'],
    requires: 'redis',
  },
  {
    key: 'region',
    flag: '--region <id>',
    description: 'rmc: region of this node; auth servers prefer secure servers of their own region',
    type: 'string',
    default: 'local-1',
    flagAliases: ['--rmc-region'],
    requires: 'redis',
  },
  {
    key: 'heartbeatTtlMs',
    flag: '--heartbeat-ttl-ms <ms>',
    description: 'rmc: a fleet node not heard from this long is taken for dead (heartbeat every third of it)',
    type: 'int',
    default: 10_000,
    min: 300,
    unit: 'ms',
    aliases: ['nodeTtlMs'],
    flagAliases: ['--rmc-node-ttl-ms'],
    requires: 'redis',
  },
  {
    ...int(
      'storeTimeoutMs',
      'longest wait on Redis for one login or session call before it fails',
      DEFAULT_STORE_TIMEOUT_MS,
      'ms',
      10,
    ),
    requires: 'redis',
  },
  {
    ...int('connectionIdBlock', 'fleet connection ids reserved from Redis at a time', 1024, 'ids', 1),
    requires: 'redis',
  },
  {
    key: 'drain',
    flag: '--drain',
    description: 'rmc: start draining (a secure server the auth servers send no new logins to)',
    type: 'bool',
    default: false,
    flagAliases: ['--rmc-drain'],
    requires: 'redis',
  },
  {
    key: 'datacenters',
    flag: '--datacenters <list>',
    description:
      'rmc: CloudServersProtocol datacenters, id=host:port,… (config: objects {id,name,region,host,port})',
    type: 'list',
  },
  {
    key: 'store',
    flag: '--rmc-store <file>',
    description: 'rmc: persist accounts to this append-only account log (default: in memory only)',
    type: 'string',
    aliases: ['rmcStore'],
  },
  {
    key: 'secureUrl',
    flag: '--rmc-secure-url <url>',
    description:
      'rmc: StationURL LoginWithToken_V1 sends clients to (default prudp:/); in a fleet, the URL a secure server announces (default: its own prudps:/ URL)',
    type: 'string',
    aliases: ['rmcSecureUrl'],
  },
  int(
    'maxAccounts',
    'most accounts in the store; logins that would create more are refused',
    DEFAULT_MAX_ACCOUNTS,
    'accounts',
    1,
    ['rmcMaxAccounts'],
  ),
  int(
    'registrationsPerIpPerHour',
    'new accounts one address may create per hour (0 = no limit)',
    DEFAULT_REGISTRATIONS_PER_IP_PER_HOUR,
    'accounts',
  ),
  int(
    'registrationsPerHour',
    'new accounts the server creates per hour (0 = no limit)',
    DEFAULT_REGISTRATIONS_PER_HOUR,
    'accounts',
  ),
  int(
    'maxLoginsPerAccount',
    'login sessions one account may hold at once (0 = no limit)',
    DEFAULT_MAX_LOGIN_SESSIONS_PER_ACCOUNT,
    'sessions',
  ),
  int(
    'maxSessionsPerIp',
    'game-session memberships per address (0 = no limit)',
    DEFAULT_MAX_SESSIONS_PER_IP,
    'sessions',
  ),
  int(
    'maxSessionsPerAccount',
    'game-session memberships per account (0 = no limit)',
    DEFAULT_MAX_SESSIONS_PER_ACCOUNT,
    'sessions',
  ),
  int(
    'idleTimeoutMs',
    'close connections silent this long (0 disables)',
    FRAMED_TCP_DEFAULTS.idleTimeoutMs,
    'ms',
    0,
    ['rmcIdleTimeout'],
  ),
  int(
    'frameTimeoutMs',
    'a frame (and the first one after connecting) must complete within this (0 disables)',
    FRAMED_TCP_DEFAULTS.frameTimeoutMs,
    'ms',
  ),
  int(
    'maxConnections',
    'most simultaneous connections',
    FRAMED_TCP_DEFAULTS.maxConnections,
    'connections',
    1,
    ['rmcMaxConnections'],
  ),
  {
    // No fixed default: max(64, maxConnections / 4), so a venue's NAT of players fits (issue 24).
    ...int(
      'maxConnectionsPerIp',
      'most connections from one address, IPv4 or IPv6 /64 (0 = no limit; default max(64, max-connections / 4))',
      0,
      'connections',
    ),
    default: undefined,
  },
  int('maxFrameBytes', 'largest RMC frame accepted', DEFAULT_MAX_FRAME_BYTES, 'bytes', 16, [
    'rmcMaxFrameBytes',
  ]),
  int(
    'maxBufferedBytes',
    'input bytes held across all connections',
    FRAMED_TCP_DEFAULTS.maxBufferedBytes,
    'bytes',
    65_536,
  ),
  int(
    'maxBufferedBytesPerIp',
    'input bytes held for one address (0 = only the global budget)',
    FRAMED_TCP_DEFAULTS.maxBufferedBytesPerIp,
    'bytes',
  ),
  int(
    'maxQueuedBytes',
    'answer bytes waiting for one peer to read before its calls wait',
    FRAMED_TCP_DEFAULTS.maxQueuedBytes,
    'bytes',
    4096,
  ),
  int(
    'maxInFlight',
    'calls in flight per connection before its next calls wait',
    DEFAULT_MAX_IN_FLIGHT,
    'calls',
    1,
  ),
  int(
    'framesPerTurn',
    'calls one connection is served per turn before the next connection',
    FRAMED_TCP_DEFAULTS.framesPerTurn,
    'calls',
    1,
  ),
];

export const rmc: ProtocolModule = {
  name: 'rmc',
  summary: 'Rendez-Vous RMC (HyperScape string-named variant by default; nex-verbose and classic packed)',
  codecs: [rmcCodec, prudpCodec],
  inspection: async () => (await import('./inspect.js')).inspection,
  dashboard: { dir: protocolPageDir(import.meta.url) },
  server: {
    summary: 'RMC server with LoginProtocol, CloudServersProtocol, SessionProtocol, ApexAntitoxicityProtocol',
    defaultPort: 9103,
    options: [...RMC_SERVE_OPTIONS, ...PRUDP_SERVE_OPTIONS],
    async start(options, ctx) {
      let datacenters: ReturnType<typeof parseDatacenters>;
      try {
        datacenters = parseDatacenters(options.datacenters);
      } catch (err) {
        throw new ConfigError(`rmc: ${(err as Error).message}`, 'rmc.datacenters');
      }
      const server = new RmcServer({
        log: ctx.log,
        metrics: ctx.metrics,
        variant: profileOf(options) === 'classic' ? 'classic' : 'hyperscape',
        maxFrameBytes: intOption(options, 'maxFrameBytes', 16),
        idleTimeoutMs: intOption(options, 'idleTimeoutMs', 0),
        frameTimeoutMs: intOption(options, 'frameTimeoutMs', 0),
        maxConnections: intOption(options, 'maxConnections', 1),
        maxConnectionsPerIp:
          options.maxConnectionsPerIp === undefined
            ? Math.max(64, Math.floor(intOption(options, 'maxConnections', 1) / 4))
            : intOption(options, 'maxConnectionsPerIp', 0),
        maxBufferedBytes: intOption(options, 'maxBufferedBytes', 65_536),
        maxBufferedBytesPerIp: intOption(options, 'maxBufferedBytesPerIp', 0),
        maxQueuedBytes: intOption(options, 'maxQueuedBytes', 4096),
        maxInFlight: intOption(options, 'maxInFlight', 1),
        framesPerTurn: intOption(options, 'framesPerTurn', 1),
      });
      const role = roleOf(options);
      const redisUrl = typeof options.redis === 'string' && options.redis !== '' ? options.redis : undefined;
      if (redisUrl === undefined && role !== 'all')
        throw new UsageError(`rmc: --role ${role} needs --redis <url> (config rmc.redis): the fleet's store`);
      if (redisUrl !== undefined) {
        if (stringOption(options, 'store', 'rmcStore') !== undefined)
          throw new UsageError(
            'rmc: --rmc-store (the embedded account log) cannot be used with --redis: the fleet keeps its accounts in Redis',
          );
        const registrationsPerIpPerHour = intOption(options, 'registrationsPerIpPerHour', 0);
        const registrationsPerHour = intOption(options, 'registrationsPerHour', 0);
        const fleet = await startRmcFleet(server, options, ctx, {
          role,
          redisUrl,
          redisPrefix: typeof options.redisPrefix === 'string' ? options.redisPrefix : 'gamewire:',
          ...(typeof options.nodeId === 'string' ? { nodeId: options.nodeId } : {}),
          region: typeof options.region === 'string' ? options.region : 'local-1',
          nodeTtlMs: intOption(options, 'heartbeatTtlMs', 300),
          storeTimeoutMs: intOption(options, 'storeTimeoutMs', 10),
          connectionIdBlock: intOption(options, 'connectionIdBlock', 1),
          drain: options.drain === true,
          capacity: intOption(options, 'maxConnections', 1),
          accounts: {
            maxAccounts: intOption(options, 'maxAccounts', 1),
            maxSessionsPerAccount: intOption(options, 'maxLoginsPerAccount', 0),
            registrationsPerIpPerHour,
            registrationsPerHour,
          },
          sessions: {
            maxSessionsPerIp: intOption(options, 'maxSessionsPerIp', 0),
            maxSessionsPerAccount: intOption(options, 'maxSessionsPerAccount', 0),
          },
          datacenters,
          ...(stringOption(options, 'secureUrl', 'rmcSecureUrl') === undefined
            ? {}
            : { secureUrl: stringOption(options, 'secureUrl', 'rmcSecureUrl')! }),
        });
        return Object.assign(fleet, {
          admin: rmcAdmin({
            dispatcher: server.dispatcher,
            variant: profileOf(options) === 'classic' ? 'classic' : 'hyperscape',
            listSessions: () => fleet.listSessions(),
            ...(role === 'auth' ? {} : { drain: () => fleet.drain() }),
          }),
        });
      }
      let draining = false;
      const store = new MemoryStore(stringOption(options, 'store', 'rmcStore'), {
        maxAccounts: intOption(options, 'maxAccounts', 1),
        maxSessionsPerAccount: intOption(options, 'maxLoginsPerAccount', 0),
      });
      const sessions = new SessionRegistry({
        maxSessionsPerIp: intOption(options, 'maxSessionsPerIp', 0),
        maxSessionsPerAccount: intOption(options, 'maxSessionsPerAccount', 0),
      });
      const registration = {
        perIpPerHour: intOption(options, 'registrationsPerIpPerHour', 0),
        perHour: intOption(options, 'registrationsPerHour', 0),
      };
      const secureUrl = stringOption(options, 'secureUrl', 'rmcSecureUrl');
      // PRUDP and/or TCP per --rmc-transport; the profile picks the built-ins (see prudp/serve.ts).
      const listening = await startRmcTransports(server, options, ctx, store, (url) =>
        registerBuiltins(server, {
          store,
          datacenters,
          sessions,
          registration,
          secureUrl: secureUrl ?? url,
        }),
      );
      const alone: RmcFleetServer = {
        endpoints: listening.endpoints,
        role,
        node: 'local',
        // Alone there is no auth server to steer logins away; draining is only recorded.
        drain: async () => {
          draining = true;
          ctx.log.info({ draining }, 'rmc: draining (no fleet: logins still come here)');
        },
        listSessions: async () => sessions.listSessions(),
        loginSessions: async () => store.sessions(),
        players: () => store.sessions().length,
        close: async (graceMs?: number) => {
          await listening.close(graceMs);
          await store.close();
          admin.wire?.close();
        },
      };
      // Alone, draining steers nothing away: the dashboard's drain answers 409.
      const admin = rmcAdmin({
        dispatcher: server.dispatcher,
        variant: profileOf(options) === 'classic' ? 'classic' : 'hyperscape',
        listSessions: () => sessions.listSessions(),
      });
      return Object.assign(alone, { admin });
    },
  },
  registerCommands,
  conform: async () => (await import('./conform/index.js')).rmcConform,
  load: async () => (await import('./load.js')).rmcLoad,
};
