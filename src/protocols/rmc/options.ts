/**
 * rmc server options, declared once (src/core/options.ts): `gamewire serve rmc`, the config
 * file's `rmc` section, `completeOptions`, the `RmcServer` class, the account stores and the
 * session registries all take their defaults and checks from here. It imports no server, store
 * or registry, so each of them can import it.
 */

import { FRAMED_TCP_DEFAULTS } from '../../core/framed-tcp.js';
import {
  defineOptions,
  type OptionDeclaration,
  option,
  type ServerOptions,
  serveOptions,
} from '../../core/options.js';
import type { ServeOption } from '../../core/server.js';
import { DEFAULT_MAX_FRAME_BYTES } from './messages.js';
import { type DatacenterConfig, parseDatacenters } from './protocols/cloud-servers.js';
import { defaultMaxConnectionsPerIp, PRUDP_DEFAULTS, PRUDP_PROFILES } from './prudp/constants.js';

/** The rmc port (TCP and PRUDP). */
export const RMC_PORT = 9103;

/** What one `gamewire serve rmc` process is in a fleet (`--role`). */
export const RMC_ROLES = ['auth', 'secure', 'all'] as const;

/** Option defaults other modules read too (the stores, the session registries, the fleet's store calls). */
export const DEFAULT_MAX_ACCOUNTS = 100_000;
export const DEFAULT_MAX_LOGIN_SESSIONS_PER_ACCOUNT = 8;
export const DEFAULT_MAX_SESSIONS_PER_IP = 64;
export const DEFAULT_MAX_SESSIONS_PER_ACCOUNT = 16;
/** A venue or campus NAT of new players registers at once (issue 24): 20 refused the 21st. */
export const DEFAULT_REGISTRATIONS_PER_IP_PER_HOUR = 256;
export const DEFAULT_REGISTRATIONS_PER_HOUR = 10_000;
export const DEFAULT_STORE_TIMEOUT_MS = 2000;
/** Default `maxInFlight`. */
export const DEFAULT_MAX_IN_FLIGHT = 64;

/** Where `gamewire serve rmc` listens (`--rmc-transport`), both on `--port`. */
export const RMC_TRANSPORTS = ['both', 'prudp', 'tcp'] as const;

/** The transport and PRUDP options of `gamewire serve rmc`, declared once (src/core/options.ts). */
export const PRUDP_OPTIONS = {
  transport: option.string({
    flag: '--rmc-transport <t>',
    description: 'rmc: prudp (UDP), tcp (u32-framed) or both, on the same port',
    default: 'both',
    choices: RMC_TRANSPORTS,
  }),
  prudpProfile: option.string({
    flag: '--prudp-profile <p>',
    description:
      'rmc: PRUDP profile, hyperscape (string-named RMC, ECDH+AES) or classic (packed RMC, RC4, Kerberos)',
    default: 'hyperscape',
    choices: PRUDP_PROFILES,
  }),
  prudpAccessKey: option.string({
    flag: '--prudp-access-key <key>',
    description: "rmc: PRUDP sandbox access key, or auto (learn each client's from its SYN)",
    default: 'auto',
    secret: true,
  }),
  prudpChecksum: option.string({
    flag: '--prudp-checksum <w>',
    description: 'rmc: PRUDP checksum width 1 or 4, or auto (from the SYN length)',
    default: 'auto',
    choices: ['auto', '1', '4'],
    parse: (w): 'auto' | 1 | 4 => (w === 'auto' ? 'auto' : w === '1' ? 1 : 4),
  }),
  prudpPublicHost: option.string({
    flag: '--prudp-public-host <host>',
    description: 'rmc: address written into StationURLs (default: the bind address, 127.0.0.1 for 0.0.0.0)',
  }),
  prudpPassword: option.string({
    flag: '--prudp-password <pass>',
    description: "rmc (classic): the password every account's Kerberos key derives from",
    default: 'gamewire',
    secret: true,
  }),
  prudpKeyWorkers: option.int({
    flag: '--prudp-key-workers <n>',
    description: 'rmc (classic): worker threads that derive Kerberos user keys (0: CPUs - 1, at least 1)',
    default: 0,
    min: 0,
  }),
  prudpKeyQueue: option.int({
    flag: '--prudp-key-queue <n>',
    description:
      'rmc (classic): key derivations waiting for a worker before further logins are refused (RendezVous::ConnectionFailure)',
    default: 1024,
    min: 0,
  }),
  prudpMaxConnections: option.int({
    flag: '--prudp-max-connections <n>',
    description: 'rmc: most PRUDP connections (open and half-open)',
    default: PRUDP_DEFAULTS.maxConnections,
    min: 1,
  }),
  prudpMaxConnectionsPerIp: option.int({
    flag: '--prudp-max-connections-per-ip <n>',
    description:
      'rmc: most PRUDP connections from one IP address (default max(64, prudp-max-connections / 4): a NAT of players fits)',
    min: 1,
  }),
  prudpMaxHalfOpen: option.int({
    flag: '--prudp-max-half-open <n>',
    description: 'rmc: most PRUDP connections between SYN and CONNECT; when full, a SYN evicts the oldest',
    default: PRUDP_DEFAULTS.maxHalfOpen,
    min: 1,
  }),
  prudpMaxHalfOpenPerIp: option.int({
    flag: '--prudp-max-half-open-per-ip <n>',
    description: 'rmc: most PRUDP connections between SYN and CONNECT from one IP address',
    default: PRUDP_DEFAULTS.maxHalfOpenPerIp,
    min: 1,
  }),
  prudpIdleTimeoutMs: option.int({
    flag: '--prudp-idle-timeout-ms <ms>',
    description: 'rmc: drop PRUDP connections silent this long',
    default: PRUDP_DEFAULTS.idleTimeoutMs,
    min: 0,
    unit: 'ms',
  }),
  prudpMaxReassemblyBytes: option.int({
    flag: '--prudp-max-reassembly-bytes <n>',
    description: 'rmc: bytes held per PRUDP connection for reassembly and early packets',
    default: PRUDP_DEFAULTS.maxReassemblyBytes,
    min: 1024,
    unit: 'bytes',
  }),
  prudpRetransmitMs: option.int({
    flag: '--prudp-retransmit-ms <ms>',
    description: 'rmc: first PRUDP retransmission after this long (then x1.5 each time)',
    default: PRUDP_DEFAULTS.retransmitMs,
    min: 10,
    unit: 'ms',
  }),
  prudpMaxRetransmits: option.int({
    flag: '--prudp-max-retransmits <n>',
    description: 'rmc: PRUDP retransmissions of one packet before the connection is given up',
    default: PRUDP_DEFAULTS.maxRetransmits,
    min: 1,
  }),
};

export const PRUDP_SERVE_OPTIONS: readonly ServeOption[] = serveOptions(PRUDP_OPTIONS);

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
  protocols: option.list({
    flag: '--protocols <files>',
    description:
      'rmc: protocol packs (gamewire rmc ddl import) to serve beside the built-ins; their methods answer NotImplemented until they have handlers',
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
  defaultPort: RMC_PORT,
  options: { ...RMC_OPTIONS, ...PRUDP_OPTIONS },
  derive: {
    maxConnectionsPerIp: (o) => defaultMaxConnectionsPerIp(o.maxConnections),
    prudpMaxConnectionsPerIp: (o) => defaultMaxConnectionsPerIp(o.prudpMaxConnections),
  },
});

/** The complete rmc options (`rmcOptions.resolve`): every default filled, every value checked. */
export type RmcOptions = ServerOptions<
  typeof RMC_OPTIONS & typeof PRUDP_OPTIONS,
  'maxConnectionsPerIp' | 'prudpMaxConnectionsPerIp'
>;
