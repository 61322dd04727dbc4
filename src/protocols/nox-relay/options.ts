/**
 * nox-relay server options, declared once (src/core/options.ts): `gamewire serve nox-relay`, the
 * config file's `nox-relay` section, `completeOptions` and the `NoxRelayServer` class all take
 * them from here, defaults, derived defaults and checks included. The options only an embedder
 * gives (keep-alive, aliases, congestion, …) are declared here too, `cli: false`: no flag or
 * config key. docs/nox-relay.md ("Limits") lists every default.
 */

import { readFileSync } from 'node:fs';
import { FRAMED_TCP_DEFAULTS } from '../../core/framed-tcp.js';
import type { Logger } from '../../core/logger.js';
import type { ProtocolMetrics } from '../../core/metrics.js';
import { defineOptions, type OptionValues, option, type ServerOptions } from '../../core/options.js';
import type { Authenticator } from './auth.js';
import {
  DEFAULT_CONNECTION_TIMEOUT_S,
  DEFAULT_KEEP_ALIVE_S,
  DEFAULT_MAX_PACKET,
  DEFAULT_PORT,
  DEFAULT_SEGMENTATION_TIMEOUT_S,
} from './constants.js';
import { NoxRelayConfigError } from './errors.js';
import { DEFAULT_INSTANCE, type InstanceConfig, parseInstances } from './instances.js';

/** Queued-bytes thresholds of one client's send path (see docs/nox-relay.md, Priorities). */
export interface CongestionLimits {
  /** Queued bytes above which Low and Normal messages are dropped. */
  softBytes: number;
  /** Queued bytes above which High messages are dropped too (Critical always goes). */
  hardBytes: number;
  /** Queued bytes at which a TCP connection is closed as a slow consumer, whatever is being sent. */
  closeBytes: number;
}

/** Default soft congestion threshold; hard is 4 times it, close 16 times, unless given. */
const DEFAULT_SOFT_BYTES = 64 * 1024;

/**
 * `congestion` as an embedder gives it (any of its three thresholds), complete and checked:
 * hard at least soft, close at least hard.
 */
export function congestionLimits(value: unknown): CongestionLimits {
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    throw new NoxRelayConfigError('expected { softBytes, hardBytes, closeBytes }');
  const given = value as Record<string, unknown>;
  for (const k of Object.keys(given))
    if (k !== 'softBytes' && k !== 'hardBytes' && k !== 'closeBytes')
      throw new NoxRelayConfigError(`unknown threshold "${k}" (softBytes, hardBytes, closeBytes)`);
  const bytes = (name: string, v: unknown, min: number): number => {
    if (typeof v !== 'number' || !Number.isInteger(v) || v < min || v > Number.MAX_SAFE_INTEGER)
      throw new NoxRelayConfigError(
        `${name} must be a whole number of bytes, at least ${min} (got ${String(v)})`,
      );
    return v;
  };
  const soft = bytes('softBytes', given.softBytes ?? DEFAULT_SOFT_BYTES, 1);
  const hard = bytes('hardBytes', given.hardBytes ?? soft * 4, soft);
  return {
    softBytes: soft,
    hardBytes: hard,
    closeBytes: bytes('closeBytes', given.closeBytes ?? soft * 16, hard),
  };
}

/** `instances` from the config file (an array), `--instances FILE` (a path to JSON) or an embedder (configs). */
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

/** A library-only option: no flag, config key or environment variable (its `flag` is its key). */
const library = <K extends string>(key: K, description: string) =>
  ({ cli: false, flag: key, description: `nox-relay (library): ${description}` }) as const;

/**
 * Every nox-relay option, declared once: config key = library key, flag `--nox-<key in
 * kebab-case>` for the limits, checks and default. Defaults that follow from other options are
 * derived in `noxRelayOptions`, which run in declaration order.
 */
export const NOX_RELAY_OPTIONS = {
  instances: option.json({
    flag: '--instances <file>',
    description:
      'nox-relay: instances, a JSON instance file (config: an array or a file name; default one public instance, id 0)',
    // None given, or an empty list: the derived default.
    parse: (value): InstanceConfig[] | undefined => {
      const list = loadInstances(value);
      return list === undefined || list.length === 0 ? undefined : list;
    },
  }),
  master: option.string({
    flag: '--master <url>',
    description: 'nox-relay: master server URL for token checks (default, or empty: offline mode)',
    // Empty: offline, as when not given.
    parse: (url): string | undefined => (url === '' ? undefined : url),
  }),
  serverAddress: option.string({
    flag: '--server-address <name>',
    description: 'nox-relay: home server named in offline authentications',
    default: 'localhost',
  }),
  maxPacketBytes: option.int({
    // The library's former name (docs/nox-relay.md, a test) and the config file's former key.
    aliases: ['maxPacketSize'],
    flag: '--nox-max-packet-bytes <bytes>',
    flagAliases: ['--nox-max-packet-size'],
    description: 'nox-relay: largest packet',
    unit: 'bytes',
    min: 16,
    max: 0xffff,
    default: DEFAULT_MAX_PACKET,
  }),
  // Seconds, as the Handshake reply carries it on the wire.
  connectionTimeoutSeconds: option.int({
    aliases: ['connectionTimeout'],
    flag: '--nox-connection-timeout-seconds <s>',
    flagAliases: ['--nox-connection-timeout'],
    description: 'nox-relay: keep-alive timeout: silence before a client is disconnected',
    unit: 's',
    min: 1,
    default: DEFAULT_CONNECTION_TIMEOUT_S,
  }),
  // The same timeout to the millisecond (tests shorten it below a second); derived from the seconds.
  connectionTimeoutMs: option.int({
    ...library(
      'connectionTimeoutMs',
      'connectionTimeoutSeconds in milliseconds, which it overrides (default connectionTimeoutSeconds × 1000)',
    ),
    unit: 'ms',
    min: 1,
  }),
  keepAliveIntervalMs: option.int({
    ...library('keepAliveIntervalMs', 'the keep-alive interval told to clients (seconds on the wire)'),
    unit: 'ms',
    min: 1,
    default: DEFAULT_KEEP_ALIVE_S * 1000,
  }),
  segmentationTimeoutMs: option.int({
    ...library('segmentationTimeoutMs', 'time to finish a segmented message'),
    unit: 'ms',
    min: 1,
    default: DEFAULT_SEGMENTATION_TIMEOUT_S * 1000,
  }),
  maxClients: option.int({
    flag: '--nox-max-clients <n>',
    description: 'nox-relay: most clients, TCP and UDP together (half-open UDP sessions not counted)',
    min: 1,
    default: 4096,
  }),
  maxUdpPerIp: option.int({
    flag: '--nox-max-udp-per-ip <n>',
    description: 'nox-relay: most UDP sessions from one address (default max(64, max-clients/4))',
    min: 1,
  }),
  maxTcpPerIp: option.int({
    flag: '--nox-max-tcp-per-ip <n>',
    description: 'nox-relay: most TCP connections from one address (default max(64, max-clients/4))',
    min: 1,
  }),
  maxHalfOpenUdp: option.int({
    flag: '--nox-max-half-open-udp <n>',
    description:
      'nox-relay: most half-open UDP sessions; the oldest is evicted (default min(4096, max-clients))',
    min: 1,
  }),
  maxHalfOpenUdpPerIp: option.int({
    flag: '--nox-max-half-open-udp-per-ip <n>',
    description:
      'nox-relay: most half-open UDP sessions from one address (default max(1, min(128, max-half-open-udp/8)))',
    min: 1,
  }),
  halfOpenTimeoutMs: option.int({
    ...library(
      'halfOpenTimeoutMs',
      'a half-open UDP session is forgotten silently after this long (default min(5000, the connection timeout))',
    ),
    unit: 'ms',
    min: 1,
  }),
  udpReplyFactor: option.int({
    flag: '--nox-udp-reply-factor <n>',
    description: 'nox-relay: an unproven UDP source is sent at most this many times what it sent',
    min: 1,
    default: 3,
  }),
  addressCookies: option.bool({
    ...library('addressCookies', 'append the address cookie to UDP Handshake replies and accept it as proof'),
    default: true,
  }),
  addressCookieLifetimeMs: option.int({
    ...library('addressCookieLifetimeMs', 'a cookie verifies for between one and two of these periods'),
    unit: 'ms',
    min: 1000,
    default: 120_000,
  }),
  aliasMaxInstances: option.int({
    ...library(
      'aliasMaxInstances',
      'instance aliases are offered while the relay has at most this many public instances (0 = off)',
    ),
    min: 0,
    max: 128,
    default: 4,
  }),
  aliasGuessesPerIp: option.int({
    ...library('aliasGuessesPerIp', 'wrong alias guesses one address may make per aliasGuessWindowMs'),
    min: 1,
    default: 2,
  }),
  aliasGuessWindowMs: option.int({
    ...library('aliasGuessWindowMs', 'the refill period of aliasGuessesPerIp'),
    unit: 'ms',
    min: 1,
    default: 600_000,
  }),
  maxRequestsPerSecond: option.int({
    flag: '--nox-max-requests-per-second <n>',
    description: 'nox-relay: packets one client may send per second (burst twice that)',
    min: 1,
    default: 2000,
  }),
  maxRequestBurst: option.int({
    ...library('maxRequestBurst', 'burst of maxRequestsPerSecond, packets (default twice it)'),
    min: 1,
  }),
  maxRequestsPerSecondPerIp: option.int({
    flag: '--nox-max-requests-per-second-per-ip <n>',
    description: 'nox-relay: packets all clients of one address may send per second (burst 2 s worth)',
    min: 1,
    default: 20_000,
  }),
  udpSendBytesPerSecond: option.int({
    flag: '--nox-udp-send-bytes-per-second <n>',
    description: "nox-relay: each UDP client's send budget, bytes per second",
    unit: 'bytes',
    min: 1,
    default: 1024 * 1024,
  }),
  slowConsumerTimeoutMs: option.int({
    flag: '--nox-slow-consumer-timeout-ms <n>',
    description: 'nox-relay: close a TCP client whose queue stays over the soft congestion limit this long',
    unit: 'ms',
    min: 1,
    default: 5000,
  }),
  maxSegments: option.int({
    ...library('maxSegments', 'segments of one segmented message'),
    min: 1,
    max: 0xffff,
    default: 256,
  }),
  maxSegmentSessions: option.int({
    ...library('maxSegmentSessions', 'segmented messages one client may have under way'),
    min: 1,
    default: 8,
  }),
  maxReassembledBytes: option.int({
    ...library('maxReassembledBytes', 'bytes of one reassembled message'),
    unit: 'bytes',
    min: 5,
    default: 0xffff,
  }),
  maxReassemblyBudget: option.int({
    ...library(
      'maxReassemblyBudget',
      'bytes held for reassembly by all clients; new segments beyond it are dropped',
    ),
    unit: 'bytes',
    min: 0,
    default: 64 * 1024 * 1024,
  }),
  maxReassemblyBytesPerIp: option.int({
    flag: '--nox-max-reassembly-bytes-per-ip <n>',
    description:
      'nox-relay: segment reassembly memory per source address (default min(4 MiB, the server-wide budget))',
    unit: 'bytes',
    min: 0,
  }),
  maxAvatarParamBytes: option.int({
    ...library('maxAvatarParamBytes', 'largest stored AvatarParams value'),
    unit: 'bytes',
    min: 0,
    max: 0xffff,
    default: 256,
  }),
  maxAvatarParamsTotal: option.int({
    ...library('maxAvatarParamsTotal', 'AvatarParams bytes (values) stored per player'),
    unit: 'bytes',
    min: 0,
    default: 16 * 1024,
  }),
  congestion: option.json({
    ...library(
      'congestion',
      'queued bytes { softBytes, hardBytes, closeBytes } above which Low and Normal, then High messages are dropped, and a TCP client is closed (default 64 KiB, 4 and 16 times soft)',
    ),
    parse: congestionLimits,
  }),
  frameTimeoutMs: option.int({
    flag: '--nox-frame-timeout-ms <n>',
    description:
      'nox-relay: TCP: a packet begun must complete within this, the first one this long after connecting (default twice the connection timeout)',
    unit: 'ms',
    min: 1,
  }),
  maxBufferedBytes: option.int({
    flag: '--nox-max-buffered-bytes <n>',
    description: 'nox-relay: TCP: input bytes held across all connections',
    unit: 'bytes',
    min: 1024,
    default: FRAMED_TCP_DEFAULTS.maxBufferedBytes,
  }),
  maxBufferedBytesPerIp: option.int({
    flag: '--nox-max-buffered-bytes-per-ip <n>',
    description:
      'nox-relay: TCP: input bytes held for the connections of one address (0 = only the global budget)',
    unit: 'bytes',
    min: 0,
    default: FRAMED_TCP_DEFAULTS.maxBufferedBytesPerIp,
  }),
  framesPerTurn: option.int({
    flag: '--nox-frames-per-turn <n>',
    description: 'nox-relay: TCP: packets one connection is given per turn before the next one',
    min: 1,
    default: FRAMED_TCP_DEFAULTS.framesPerTurn,
  }),
};

/** Options derived from others, each from those declared before it. */
type Derived =
  | 'instances'
  | 'connectionTimeoutMs'
  | 'maxUdpPerIp'
  | 'maxTcpPerIp'
  | 'maxHalfOpenUdp'
  | 'maxHalfOpenUdpPerIp'
  | 'halfOpenTimeoutMs'
  | 'maxRequestBurst'
  | 'maxReassemblyBytesPerIp'
  | 'congestion'
  | 'frameTimeoutMs';

/** A quarter of the relay per address: a campus or carrier NAT fits, one host cannot take it all. */
const perAddress = (o: { maxClients: number }) => Math.max(64, Math.floor(o.maxClients / 4));

/** The nox-relay options with their derived defaults: what `start()` and `NoxRelayServer` run with. */
export const noxRelayOptions = defineOptions<typeof NOX_RELAY_OPTIONS, Derived>({
  section: 'nox-relay',
  defaultPort: DEFAULT_PORT,
  options: NOX_RELAY_OPTIONS,
  derive: {
    // None (or an empty list): one public default instance.
    instances: () => [DEFAULT_INSTANCE],
    connectionTimeoutMs: (o) => o.connectionTimeoutSeconds * 1000,
    maxUdpPerIp: perAddress,
    maxTcpPerIp: perAddress,
    maxHalfOpenUdp: (o) => Math.min(4096, o.maxClients),
    maxHalfOpenUdpPerIp: (o) => Math.max(1, Math.min(128, Math.floor(o.maxHalfOpenUdp / 8))),
    halfOpenTimeoutMs: (o) => Math.min(5000, o.connectionTimeoutMs),
    maxRequestBurst: (o) => o.maxRequestsPerSecond * 2,
    maxReassemblyBytesPerIp: (o) => Math.min(4 * 1024 * 1024, o.maxReassemblyBudget),
    congestion: () => congestionLimits({}),
    frameTimeoutMs: (o) => 2 * o.connectionTimeoutMs,
  },
});

/** The complete nox-relay options (`noxRelayOptions.resolve`): every default filled, every value checked. */
export type ResolvedOptions = ServerOptions<typeof NOX_RELAY_OPTIONS, Derived>;

/**
 * What an embedder passes `NoxRelayServer`: any declared option (see `NOX_RELAY_OPTIONS`; the
 * rest takes its default), plus what only a library caller has.
 */
export type NoxRelayOptions = Omit<OptionValues<typeof NOX_RELAY_OPTIONS>, 'congestion'> & {
  /** Any of the thresholds; the others follow from `softBytes`. */
  congestion?: Partial<CongestionLimits>;
  /** Former name of `maxPacketBytes`, still read. */
  maxPacketSize?: number;
  /** Replaces the built-in token check (offline or master). */
  authenticate?: Authenticator;
  log?: Logger;
  metrics?: ProtocolMetrics;
};
