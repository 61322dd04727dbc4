/**
 * The server's options: what an embedder may pass (`NoxRelayOptions`), the defaults, and the
 * checked, complete set the server runs with (`ResolvedOptions`). docs/nox-relay.md ("Limits")
 * lists every default.
 */

import { FRAMED_TCP_DEFAULTS } from '../../core/framed-tcp.js';
import type { Logger } from '../../core/logger.js';
import type { ProtocolMetrics } from '../../core/metrics.js';
import type { Authenticator } from './auth.js';
import {
  DEFAULT_CONNECTION_TIMEOUT_S,
  DEFAULT_KEEP_ALIVE_S,
  DEFAULT_MAX_PACKET,
  DEFAULT_PORT,
  DEFAULT_SEGMENTATION_TIMEOUT_S,
} from './constants.js';
import { NoxRelayConfigError } from './errors.js';
import type { InstanceConfig } from './instances.js';

/** Queued-bytes thresholds of one client's send path (see docs/nox-relay.md, Priorities). */
export interface CongestionLimits {
  /** Queued bytes above which Low and Normal messages are dropped. */
  softBytes: number;
  /** Queued bytes above which High messages are dropped too (Critical always goes). */
  hardBytes: number;
  /** Queued bytes at which a TCP connection is closed as a slow consumer, whatever is being sent. */
  closeBytes: number;
}

export interface NoxRelayOptions {
  host?: string;
  /** 0 picks a free port; TCP binds first and UDP then takes the same number. */
  port?: number;
  /** Instances; none → one public default instance (id 0). */
  instances?: InstanceConfig[];
  /** Master server base URL. Unset: offline mode (IsOffline, any token accepted). */
  master?: string;
  /** Replaces the built-in token check (offline or master). */
  authenticate?: Authenticator;
  /** Home server written into offline authentications and Joins. */
  serverAddress?: string;
  maxPacketSize?: number;
  connectionTimeoutMs?: number;
  keepAliveIntervalMs?: number;
  segmentationTimeoutMs?: number;
  /** Most clients, TCP and UDP together (half-open UDP sessions not counted). Default 4096. */
  maxClients?: number;
  /** Most UDP sessions (half-open or not) from one IP address. Default max(64, maxClients / 4): 1024. */
  maxUdpPerIp?: number;
  /** Most TCP connections from one IP address. Default max(64, maxClients / 4): 1024. */
  maxTcpPerIp?: number;
  /**
   * Anti-amplification: until a UDP source proves its address, everything sent to it is at most
   * this many times everything it sent (QUIC's bound, RFC 9000 §8.1, is 3). Default 3.
   */
  udpReplyFactor?: number;
  /**
   * Most half-open UDP sessions (a Handshake answered, nothing else yet), server-wide. They do
   * not count against `maxClients`; a new one evicts the oldest. Default min(4096, maxClients) (about 1 KB each).
   */
  maxHalfOpenUdp?: number;
  /** Most half-open UDP sessions from one IP address; a new one evicts that address's oldest. Default max(1, min(128, maxHalfOpenUdp / 8)). */
  maxHalfOpenUdpPerIp?: number;
  /** A half-open UDP session is forgotten silently after this long. Default min(5000, connection timeout). */
  halfOpenTimeoutMs?: number;
  /** Append the address cookie to UDP Handshake replies and accept it back as proof. Default true. */
  addressCookies?: boolean;
  /** A cookie verifies for between one and two of these periods. Default 120 000 ms. */
  addressCookieLifetimeMs?: number;
  /**
   * Instance aliases, the address proof of clients that do not know the cookie (docs/security.md):
   * an unproven UDP client's Sessions reply lists each public instance under a random id of its
   * own, and a client that then addresses an instance by that id has shown it receives at its
   * address. Offered only while the relay has at most this many public instances (a blind guess
   * hits one of K aliases with probability K / (256 − K)); 0 turns aliases off. Default 4.
   */
  aliasMaxInstances?: number;
  /** Wrong alias guesses one address may make per `aliasGuessWindowMs` (token bucket); past them no alias is checked. Default 2. */
  aliasGuessesPerIp?: number;
  /** The refill period of `aliasGuessesPerIp`. Default 600 000 ms (10 minutes). */
  aliasGuessWindowMs?: number;
  /** Packets (inner packets of Reliable and Segmentation included) one client may send per second. Default 2000. */
  maxRequestsPerSecond?: number;
  /** Burst allowance of that rate, packets. Default 2 × maxRequestsPerSecond. */
  maxRequestBurst?: number;
  /** Packets all clients of one IP address together may send per second (burst: 2 s worth). Default 20 000. */
  maxRequestsPerSecondPerIp?: number;
  /** Each UDP client's send budget: its own queue drains at this many bytes per second. Default 1 MiB. */
  udpSendBytesPerSecond?: number;
  /** A TCP client whose queue stays over the soft limit this long is closed as a slow consumer. Default 5000. */
  slowConsumerTimeoutMs?: number;
  /** Segmentation caps: segments per session, sessions per client, reassembled bytes. */
  maxSegments?: number;
  maxSegmentSessions?: number;
  maxReassembledBytes?: number;
  /** Bytes held for reassembly by all clients together; new segments beyond it are dropped. Default 64 MiB. */
  maxReassemblyBudget?: number;
  /** Bytes held for reassembly by the clients of one IP address. Default min(4 MiB, maxReassemblyBudget). */
  maxReassemblyBytesPerIp?: number;
  /** Largest stored AvatarParams value, bytes. Default 256. */
  maxAvatarParamBytes?: number;
  /** Most AvatarParams bytes (values) stored per player. Default 16 KiB. */
  maxAvatarParamsTotal?: number;
  congestion?: Partial<CongestionLimits>;
  /**
   * TCP: a frame must complete this long after its first byte, the first frame this long after
   * connecting (a backstop: liveness closes silent clients first). Default 2 × connectionTimeoutMs.
   */
  frameTimeoutMs?: number;
  /** TCP: input bytes held across all connections (partial frames, frames waiting their turn). Default 4 MiB. */
  maxBufferedBytes?: number;
  /** TCP: input bytes held for the connections of one address. Default 1 MiB. */
  maxBufferedBytesPerIp?: number;
  /** TCP: packets one connection is given per turn before the next connection's turn. Default 16. */
  framesPerTurn?: number;
  log?: Logger;
  metrics?: ProtocolMetrics;
}

export interface ResolvedOptions {
  host: string;
  port: number;
  maxPacketSize: number;
  connectionTimeoutMs: number;
  keepAliveIntervalMs: number;
  segmentationTimeoutMs: number;
  maxClients: number;
  maxUdpPerIp: number;
  maxTcpPerIp: number;
  maxHalfOpenUdp: number;
  maxHalfOpenUdpPerIp: number;
  halfOpenTimeoutMs: number;
  udpReplyFactor: number;
  addressCookies: boolean;
  addressCookieLifetimeMs: number;
  aliasMaxInstances: number;
  aliasGuessesPerIp: number;
  aliasGuessWindowMs: number;
  maxRequestsPerSecond: number;
  maxRequestBurst: number;
  maxRequestsPerSecondPerIp: number;
  udpSendBytesPerSecond: number;
  slowConsumerTimeoutMs: number;
  maxSegments: number;
  maxSegmentSessions: number;
  maxReassembledBytes: number;
  maxReassemblyBudget: number;
  maxReassemblyBytesPerIp: number;
  maxAvatarParamBytes: number;
  maxAvatarParamsTotal: number;
  congestion: CongestionLimits;
  frameTimeoutMs: number;
  maxBufferedBytes: number;
  maxBufferedBytesPerIp: number;
  framesPerTurn: number;
  serverAddress: string;
  master: string | undefined;
}

/** `value` if it is an integer within [min, max]; otherwise a config error naming `name`. */
function checked(name: string, value: number, min: number, max = Number.MAX_SAFE_INTEGER): number {
  if (!Number.isInteger(value) || value < min || value > max) {
    throw new NoxRelayConfigError(
      `nox-relay option ${name} must be an integer ${min}..${max} (got ${value})`,
    );
  }
  return value;
}

/** Fills in the defaults and checks every value, so the server never runs with a nonsense limit. */
export function resolveOptions(options: NoxRelayOptions): ResolvedOptions {
  const maxClients = checked('maxClients', options.maxClients ?? 4096, 1);
  const connectionTimeoutMs = checked(
    'connectionTimeoutMs',
    options.connectionTimeoutMs ?? DEFAULT_CONNECTION_TIMEOUT_S * 1000,
    1,
  );
  const maxHalfOpenUdp = checked(
    'maxHalfOpenUdp',
    options.maxHalfOpenUdp ?? Math.min(4096, Math.max(1, maxClients)),
    1,
  );
  const maxRequestsPerSecond = checked('maxRequestsPerSecond', options.maxRequestsPerSecond ?? 2000, 1);
  const perAddress = Math.max(64, Math.floor(maxClients / 4));
  const maxReassemblyBudget = checked(
    'maxReassemblyBudget',
    options.maxReassemblyBudget ?? 64 * 1024 * 1024,
    0,
  );
  const soft = checked('congestion.softBytes', options.congestion?.softBytes ?? 64 * 1024, 1);
  const hard = checked('congestion.hardBytes', options.congestion?.hardBytes ?? soft * 4, soft);
  const udpReplyFactor = options.udpReplyFactor ?? 3;
  if (!(udpReplyFactor >= 1) || !Number.isFinite(udpReplyFactor)) {
    throw new NoxRelayConfigError(
      `nox-relay option udpReplyFactor must be a number >= 1 (got ${udpReplyFactor})`,
    );
  }
  return {
    host: options.host ?? '0.0.0.0',
    port: checked('port', options.port ?? DEFAULT_PORT, 0, 0xffff),
    maxPacketSize: checked('maxPacketSize', options.maxPacketSize ?? DEFAULT_MAX_PACKET, 16, 0xffff),
    connectionTimeoutMs,
    keepAliveIntervalMs: checked(
      'keepAliveIntervalMs',
      options.keepAliveIntervalMs ?? DEFAULT_KEEP_ALIVE_S * 1000,
      1,
    ),
    segmentationTimeoutMs: checked(
      'segmentationTimeoutMs',
      options.segmentationTimeoutMs ?? DEFAULT_SEGMENTATION_TIMEOUT_S * 1000,
      1,
    ),
    maxClients,
    // A quarter of the relay per address: a campus or carrier NAT fits, one host cannot take it all.
    maxUdpPerIp: checked('maxUdpPerIp', options.maxUdpPerIp ?? perAddress, 1),
    maxTcpPerIp: checked('maxTcpPerIp', options.maxTcpPerIp ?? perAddress, 1),
    maxHalfOpenUdp,
    maxHalfOpenUdpPerIp: checked(
      'maxHalfOpenUdpPerIp',
      options.maxHalfOpenUdpPerIp ?? Math.max(1, Math.min(128, Math.floor(maxHalfOpenUdp / 8))),
      1,
    ),
    halfOpenTimeoutMs: checked(
      'halfOpenTimeoutMs',
      options.halfOpenTimeoutMs ?? Math.min(5000, connectionTimeoutMs),
      1,
    ),
    udpReplyFactor,
    addressCookies: options.addressCookies ?? true,
    addressCookieLifetimeMs: checked(
      'addressCookieLifetimeMs',
      options.addressCookieLifetimeMs ?? 120_000,
      1000,
    ),
    aliasMaxInstances: checked('aliasMaxInstances', options.aliasMaxInstances ?? 4, 0, 128),
    aliasGuessesPerIp: checked('aliasGuessesPerIp', options.aliasGuessesPerIp ?? 2, 1),
    aliasGuessWindowMs: checked('aliasGuessWindowMs', options.aliasGuessWindowMs ?? 600_000, 1),
    maxRequestsPerSecond,
    maxRequestBurst: checked('maxRequestBurst', options.maxRequestBurst ?? maxRequestsPerSecond * 2, 1),
    maxRequestsPerSecondPerIp: checked(
      'maxRequestsPerSecondPerIp',
      options.maxRequestsPerSecondPerIp ?? 20_000,
      1,
    ),
    udpSendBytesPerSecond: checked('udpSendBytesPerSecond', options.udpSendBytesPerSecond ?? 1024 * 1024, 1),
    slowConsumerTimeoutMs: checked('slowConsumerTimeoutMs', options.slowConsumerTimeoutMs ?? 5000, 1),
    maxSegments: checked('maxSegments', options.maxSegments ?? 256, 1, 0xffff),
    maxSegmentSessions: checked('maxSegmentSessions', options.maxSegmentSessions ?? 8, 1),
    maxReassembledBytes: checked('maxReassembledBytes', options.maxReassembledBytes ?? 0xffff, 5),
    maxReassemblyBudget,
    maxReassemblyBytesPerIp: checked(
      'maxReassemblyBytesPerIp',
      options.maxReassemblyBytesPerIp ?? Math.min(4 * 1024 * 1024, maxReassemblyBudget),
      0,
    ),
    maxAvatarParamBytes: checked('maxAvatarParamBytes', options.maxAvatarParamBytes ?? 256, 0, 0xffff),
    maxAvatarParamsTotal: checked('maxAvatarParamsTotal', options.maxAvatarParamsTotal ?? 16 * 1024, 0),
    congestion: {
      softBytes: soft,
      hardBytes: hard,
      closeBytes: checked('congestion.closeBytes', options.congestion?.closeBytes ?? soft * 16, hard),
    },
    frameTimeoutMs: checked('frameTimeoutMs', options.frameTimeoutMs ?? 2 * connectionTimeoutMs, 1),
    maxBufferedBytes: checked(
      'maxBufferedBytes',
      options.maxBufferedBytes ?? FRAMED_TCP_DEFAULTS.maxBufferedBytes,
      1024,
    ),
    maxBufferedBytesPerIp: checked(
      'maxBufferedBytesPerIp',
      options.maxBufferedBytesPerIp ?? FRAMED_TCP_DEFAULTS.maxBufferedBytesPerIp,
      0,
    ),
    framesPerTurn: checked('framesPerTurn', options.framesPerTurn ?? FRAMED_TCP_DEFAULTS.framesPerTurn, 1),
    serverAddress: options.serverAddress ?? 'localhost',
    master: options.master,
  };
}
