/**
 * PRUDP V0 (Quazal Rendez-Vous, Ubisoft flavour) constants: packet types, flags, stream types
 * and the defaults of the reliability layer. See docs/rmc.md, "PRUDP transport".
 */
import type { TransportKind } from '../../../core/connection.js';

/**
 * The transport kind PRUDP connections report (`Connection.transport`, connection events, the
 * admin API): a kind of rmc's own, not one of core's; its caps are the `prudp…` options.
 */
export const PRUDP_TRANSPORT = 'prudp' satisfies TransportKind;

/** Packet types: the low 3 bits of the type_flags byte. */
export const PacketType = {
  SYN: 0,
  CONNECT: 1,
  DATA: 2,
  DISCONNECT: 3,
  PING: 4,
  USER: 5,
  ROUTE: 6,
  RAW: 7,
} as const;
export type PacketTypeValue = (typeof PacketType)[keyof typeof PacketType];
export const PACKET_TYPE_NAMES = [
  'SYN',
  'CONNECT',
  'DATA',
  'DISCONNECT',
  'PING',
  'USER',
  'ROUTE',
  'RAW',
] as const;

/** Flags as they sit in the type_flags byte (flag value << 3). */
export const Flag = {
  ACK: 0x08,
  RELIABLE: 0x10,
  NEED_ACK: 0x20,
  HAS_SIZE: 0x40,
  /** Named FLOODED in one implementation, unknown elsewhere; carried through untouched. */
  UNKNOWN: 0x80,
} as const;
export const FLAG_NAMES: readonly [string, number][] = [
  ['ACK', Flag.ACK],
  ['RELIABLE', Flag.RELIABLE],
  ['NEED_ACK', Flag.NEED_ACK],
  ['HAS_SIZE', Flag.HAS_SIZE],
  ['UNKNOWN', Flag.UNKNOWN],
];

/** Stream types: the high nibble of a vport. Every Ubisoft RDV connection uses 3. */
export const StreamType = {
  DO: 1,
  RV: 2,
  OLD_RV_SECURE: 3,
  SB_MGMT: 4,
  NAT: 5,
  SESSION_DISCOVERY: 6,
  NAT_ECHO: 7,
  ROUTING: 8,
  GAME: 9,
  RV_SECURE: 10,
  RELAY: 11,
} as const;

/** The server's vport: stream 3, port 1. */
export const SERVER_VPORT = 0x31;
/** A client's first vport: stream 3, port 15. */
export const CLIENT_VPORT = 0x3f;

/** Largest plaintext per DATA fragment (every non-final fragment of the official peers). */
export const FRAGMENT_PLAINTEXT_BYTES = 963;

/** RC4 key of classic payloads, reset for every packet. */
export const CLASSIC_RC4_KEY = 'CD&ML';

/** Header bytes before the payload, without HAS_SIZE, per packet type. */
export function headerBytes(type: number): number {
  return type <= PacketType.CONNECT ? 14 : type === PacketType.DATA ? 11 : 10;
}

/** The two profiles of `--prudp-profile`. */
export type PrudpProfile = 'hyperscape' | 'classic';
export const PRUDP_PROFILES: readonly PrudpProfile[] = ['hyperscape', 'classic'];

/** Reliability and limit defaults (every one is an option). */
export const PRUDP_DEFAULTS = {
  /** First retransmission after this long (ms). */
  retransmitMs: 1000,
  /** Each further wait is multiplied by this. */
  retransmitBackoff: 1.5,
  /** Longest wait between two retransmissions (ms). */
  retransmitMaxMs: 4000,
  /** Retransmissions of one packet before the connection is given up. */
  maxRetransmits: 8,
  /** Reliable packets sent and not yet acked before further ones queue. */
  sendWindow: 128,
  /** Early (out-of-order) reliable packets buffered per connection. */
  maxOutOfOrder: 256,
  /** Bytes of a message being reassembled plus early packets held, per connection. */
  maxReassemblyBytes: 1024 * 1024,
  /** Connections silent this long are dropped (ms). */
  idleTimeoutMs: 60_000,
  /** A SYN not followed by a CONNECT is forgotten after this long (ms). */
  halfOpenTimeoutMs: 10_000,
  maxConnections: 10_000,
  /** Connections from one address: at least 64 (a venue's NAT), else a quarter of maxConnections. */
  maxConnectionsPerIpFloor: 64,
  /** Half-open connections; when full, a new SYN evicts the oldest half-open one. */
  maxHalfOpen: 1024,
  /** Half-open connections from one address (one source cannot churn the whole half-open table). */
  maxHalfOpenPerIp: 128,
  /** A reply to a source without a connection is at most this many times its datagram. */
  maxUnprovenReplyFactor: 3,
  /** Extra acks of a DISCONNECT after the first (the official server repeats it). */
  disconnectAckRepeats: 2,
  /** Client: PING after this long without traffic (ms). */
  pingIntervalMs: 5000,
} as const;

/** The per-address default: max(64, maxConnections / 4), so a NAT's crowd fits but no host takes all. */
export function defaultMaxConnectionsPerIp(maxConnections: number): number {
  return Math.max(PRUDP_DEFAULTS.maxConnectionsPerIpFloor, Math.floor(maxConnections / 4));
}
