/**
 * Rendez-Vous RMC (Ubisoft/Quazal remote method calls): HyperScape's string-named variant by
 * default, the classic packed variant for decoding, a server framework with typed handlers,
 * the built-in HyperScape protocols, and a client. See docs/rmc.md.
 */

import { protocolPageDir } from '../../core/admin/static.js';
import { UsageError } from '../../core/errors.js';
import { FRAMED_TCP_DEFAULTS } from '../../core/framed-tcp.js';
import {
  defineOptions,
  defineServer,
  type OptionDeclaration,
  option,
  serveOptions,
} from '../../core/options.js';
import type { ProtocolModule } from '../../core/protocol.js';
import type { ServeOption } from '../../core/server.js';
import { rmcAdmin } from './admin.js';
import { registerCommands } from './cli.js';
import { rmcCodec } from './codec.js';
import { DEFAULT_STORE_TIMEOUT_MS } from './fleet/control-plane.js';
import { RMC_ROLES, type RmcFleetServer, startRmcFleet } from './fleet/start.js';
import { DEFAULT_MAX_FRAME_BYTES } from './messages.js';
import {
  type DatacenterConfig,
  DEFAULT_MAX_SESSIONS_PER_ACCOUNT,
  DEFAULT_MAX_SESSIONS_PER_IP,
  DEFAULT_REGISTRATIONS_PER_HOUR,
  DEFAULT_REGISTRATIONS_PER_IP_PER_HOUR,
  parseDatacenters,
  registerBuiltins,
  SessionRegistry,
} from './protocols/index.js';
import { prudpCodec } from './prudp/codec.js';
import { PRUDP_OPTIONS, startRmcTransports } from './prudp/serve.js';
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

/** A count or duration, flag `--rmc-<key in kebab-case>`. */
const int = (
  key: string,
  description: string,
  def: number,
  unit: string,
  min = 0,
  aliases?: readonly string[],
  requires?: string,
): OptionDeclaration<number, true> =>
  option.int({
    flag: `--rmc-${key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)} <${unit === 'ms' ? 'ms' : 'n'}>`,
    description: `rmc: ${description}`,
    default: def,
    min,
    unit,
    ...(aliases === undefined ? {} : { aliases }),
    ...(requires === undefined ? {} : { requires }),
  });

/**
 * Every rmc serve option but the transport's (prudp/serve.ts), declared once: keys follow
 * docs/decisions.md ("Config keys and flags").
 */
export const RMC_OPTIONS = {
  role: option.string({
    flag: '--role <role>',
    description:
      'rmc: auth (logins, hands out secure servers), secure (players and sessions) or all (one process); auth and secure need --redis',
    default: 'all',
    choices: RMC_ROLES,
    requires: 'redis',
    requiresWhy: "the fleet's accounts, sessions and nodes are in Redis",
  }),
  redis: option.string({
    flag: '--redis <url>',
    description:
      'rmc: Redis URL of the fleet (accounts, sessions, nodes); without it everything stays in this process',
    secret: true,
  }),
  redisPrefix: option.string({
    flag: '--rmc-redis-prefix <prefix>',
    description: 'rmc: prefix of every Redis key of this fleet (several fleets can share one Redis)',
    default: 'gamewire:',
    requires: 'redis',
  }),
  nodeId: option.string({
    flag: '--node-id <id>',
    description: 'rmc: this process in the fleet (default <hostname>-<pid>)',
    flagAliases: ['--rmc-node-id'],
    requires: 'redis',
  }),
  region: option.string({
    flag: '--region <id>',
    description: 'rmc: region of this node; auth servers prefer secure servers of their own region',
    default: 'local-1',
    flagAliases: ['--rmc-region'],
    requires: 'redis',
  }),
  heartbeatTtlMs: option.int({
    flag: '--heartbeat-ttl-ms <ms>',
    description: 'rmc: a fleet node not heard from this long is taken for dead (heartbeat every third of it)',
    default: 10_000,
    min: 300,
    unit: 'ms',
    aliases: ['nodeTtlMs'],
    flagAliases: ['--rmc-node-ttl-ms'],
    requires: 'redis',
  }),
  storeTimeoutMs: int(
    'storeTimeoutMs',
    'longest wait on Redis for one login or session call before it fails',
    DEFAULT_STORE_TIMEOUT_MS,
    'ms',
    10,
    undefined,
    'redis',
  ),
  connectionIdBlock: int(
    'connectionIdBlock',
    'fleet connection ids reserved from Redis at a time',
    1024,
    'ids',
    1,
    undefined,
    'redis',
  ),
  drain: option.bool({
    flag: '--drain',
    description: 'rmc: start draining (a secure server the auth servers send no new logins to)',
    flagAliases: ['--rmc-drain'],
    requires: 'redis',
  }),
  datacenters: option.list({
    flag: '--datacenters <list>',
    description:
      'rmc: CloudServersProtocol datacenters, id=host:port,… (config: objects {id,name,region,host,port})',
    // Its own message (`datacenters[0]: …`); the schema says where the value came from.
    parse: (items): DatacenterConfig[] => parseDatacenters(items),
  }),
  store: option.string({
    flag: '--rmc-store <file>',
    description: 'rmc: persist accounts to this append-only account log (default: in memory only)',
    aliases: ['rmcStore'],
  }),
  secureUrl: option.string({
    flag: '--rmc-secure-url <url>',
    description:
      'rmc: StationURL LoginWithToken_V1 sends clients to (default prudp:/); in a fleet, the URL a secure server announces (default: its own prudps:/ URL)',
    aliases: ['rmcSecureUrl'],
  }),
  maxAccounts: int(
    'maxAccounts',
    'most accounts in the store; logins that would create more are refused',
    DEFAULT_MAX_ACCOUNTS,
    'accounts',
    1,
    ['rmcMaxAccounts'],
  ),
  registrationsPerIpPerHour: int(
    'registrationsPerIpPerHour',
    'new accounts one address may create per hour (0 = no limit)',
    DEFAULT_REGISTRATIONS_PER_IP_PER_HOUR,
    'accounts',
  ),
  registrationsPerHour: int(
    'registrationsPerHour',
    'new accounts the server creates per hour (0 = no limit)',
    DEFAULT_REGISTRATIONS_PER_HOUR,
    'accounts',
  ),
  maxLoginsPerAccount: int(
    'maxLoginsPerAccount',
    'login sessions one account may hold at once (0 = no limit)',
    DEFAULT_MAX_LOGIN_SESSIONS_PER_ACCOUNT,
    'sessions',
  ),
  maxSessionsPerIp: int(
    'maxSessionsPerIp',
    'game-session memberships per address (0 = no limit)',
    DEFAULT_MAX_SESSIONS_PER_IP,
    'sessions',
  ),
  maxSessionsPerAccount: int(
    'maxSessionsPerAccount',
    'game-session memberships per account (0 = no limit)',
    DEFAULT_MAX_SESSIONS_PER_ACCOUNT,
    'sessions',
  ),
  idleTimeoutMs: int(
    'idleTimeoutMs',
    'close connections silent this long (0 disables)',
    FRAMED_TCP_DEFAULTS.idleTimeoutMs,
    'ms',
    0,
    ['rmcIdleTimeout'],
  ),
  frameTimeoutMs: int(
    'frameTimeoutMs',
    'a frame (and the first one after connecting) must complete within this (0 disables)',
    FRAMED_TCP_DEFAULTS.frameTimeoutMs,
    'ms',
  ),
  maxConnections: int(
    'maxConnections',
    'most simultaneous connections',
    FRAMED_TCP_DEFAULTS.maxConnections,
    'connections',
    1,
    ['rmcMaxConnections'],
  ),
  // Derived default (rmcOptions): max(64, maxConnections / 4), so a venue's NAT of players fits (issue 24).
  maxConnectionsPerIp: option.int({
    flag: '--rmc-max-connections-per-ip <n>',
    description:
      'rmc: most connections from one address, IPv4 or IPv6 /64 (0 = no limit; default max(64, max-connections / 4))',
    min: 0,
    unit: 'connections',
  }),
  maxFrameBytes: int('maxFrameBytes', 'largest RMC frame accepted', DEFAULT_MAX_FRAME_BYTES, 'bytes', 16, [
    'rmcMaxFrameBytes',
  ]),
  maxBufferedBytes: int(
    'maxBufferedBytes',
    'input bytes held across all connections',
    FRAMED_TCP_DEFAULTS.maxBufferedBytes,
    'bytes',
    65_536,
  ),
  maxBufferedBytesPerIp: int(
    'maxBufferedBytesPerIp',
    'input bytes held for one address (0 = only the global budget)',
    FRAMED_TCP_DEFAULTS.maxBufferedBytesPerIp,
    'bytes',
  ),
  maxQueuedBytes: int(
    'maxQueuedBytes',
    'answer bytes waiting for one peer to read before its calls wait',
    FRAMED_TCP_DEFAULTS.maxQueuedBytes,
    'bytes',
    4096,
  ),
  maxInFlight: int(
    'maxInFlight',
    'calls in flight per connection before its next calls wait',
    DEFAULT_MAX_IN_FLIGHT,
    'calls',
    1,
  ),
  framesPerTurn: int(
    'framesPerTurn',
    'calls one connection is served per turn before the next connection',
    FRAMED_TCP_DEFAULTS.framesPerTurn,
    'calls',
    1,
  ),
};

/** Every rmc serve option but the transport's, as the config schema reads them. */
export const RMC_SERVE_OPTIONS: readonly ServeOption[] = serveOptions(RMC_OPTIONS);

/** `gamewire serve rmc`'s options (these and the transport's), declared once with their derived defaults. */
export const rmcOptions = defineOptions({
  section: 'rmc',
  defaultPort: 9103,
  options: { ...RMC_OPTIONS, ...PRUDP_OPTIONS },
  derive: {
    maxConnectionsPerIp: (o) => Math.max(64, Math.floor(o.maxConnections / 4)),
  },
});

/** `gamewire serve rmc`: its options typed once, every default filled. */
export const rmcServer = defineServer({
  summary: 'RMC server with LoginProtocol, CloudServersProtocol, SessionProtocol, ApexAntitoxicityProtocol',
  options: rmcOptions,
  async start(options, ctx) {
    const datacenters = options.datacenters ?? parseDatacenters(undefined);
    const variant = options.prudpProfile === 'classic' ? 'classic' : 'hyperscape';
    const server = new RmcServer({
      log: ctx.log,
      metrics: ctx.metrics,
      variant,
      maxFrameBytes: options.maxFrameBytes,
      idleTimeoutMs: options.idleTimeoutMs,
      frameTimeoutMs: options.frameTimeoutMs,
      maxConnections: options.maxConnections,
      maxConnectionsPerIp: options.maxConnectionsPerIp,
      maxBufferedBytes: options.maxBufferedBytes,
      maxBufferedBytesPerIp: options.maxBufferedBytesPerIp,
      maxQueuedBytes: options.maxQueuedBytes,
      maxInFlight: options.maxInFlight,
      framesPerTurn: options.framesPerTurn,
    });
    const { role } = options;
    // A fleet role without --redis was refused with the options (`requires`).
    const redisUrl = options.redis === '' ? undefined : options.redis;
    if (redisUrl !== undefined) {
      if (options.store !== undefined)
        throw new UsageError(
          'rmc: --rmc-store (the embedded account log) cannot be used with --redis: the fleet keeps its accounts in Redis',
        );
      const fleet = await startRmcFleet(server, options, ctx, {
        role,
        redisUrl,
        redisPrefix: options.redisPrefix,
        ...(options.nodeId === undefined ? {} : { nodeId: options.nodeId }),
        region: options.region,
        nodeTtlMs: options.heartbeatTtlMs,
        storeTimeoutMs: options.storeTimeoutMs,
        connectionIdBlock: options.connectionIdBlock,
        drain: options.drain,
        capacity: options.maxConnections,
        accounts: {
          maxAccounts: options.maxAccounts,
          maxLoginsPerAccount: options.maxLoginsPerAccount,
          registrationsPerIpPerHour: options.registrationsPerIpPerHour,
          registrationsPerHour: options.registrationsPerHour,
        },
        sessions: {
          maxSessionsPerIp: options.maxSessionsPerIp,
          maxSessionsPerAccount: options.maxSessionsPerAccount,
        },
        datacenters,
        ...(options.secureUrl === undefined ? {} : { secureUrl: options.secureUrl }),
      });
      return Object.assign(fleet, {
        admin: rmcAdmin({
          dispatcher: server.dispatcher,
          variant,
          listSessions: () => fleet.listSessions(),
          ...(role === 'auth' ? {} : { drain: () => fleet.drain() }),
        }),
      });
    }
    let draining = false;
    const store = new MemoryStore(options.store, {
      maxAccounts: options.maxAccounts,
      maxLoginsPerAccount: options.maxLoginsPerAccount,
    });
    const sessions = new SessionRegistry({
      maxSessionsPerIp: options.maxSessionsPerIp,
      maxSessionsPerAccount: options.maxSessionsPerAccount,
    });
    const registration = {
      perIpPerHour: options.registrationsPerIpPerHour,
      perHour: options.registrationsPerHour,
    };
    const { secureUrl } = options;
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
      variant,
      listSessions: () => sessions.listSessions(),
    });
    return Object.assign(alone, { admin });
  },
});

export const rmc: ProtocolModule = {
  name: 'rmc',
  summary: 'Rendez-Vous RMC (HyperScape string-named variant by default; nex-verbose and classic packed)',
  codecs: [rmcCodec, prudpCodec],
  inspection: async () => (await import('./inspect.js')).inspection,
  dashboard: { dir: protocolPageDir(import.meta.url) },
  server: rmcServer,
  registerCommands,
  conform: async () => (await import('./conform/index.js')).rmcConform,
  load: async () => (await import('./load.js')).rmcLoad,
};
