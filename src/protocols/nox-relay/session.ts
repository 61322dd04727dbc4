/**
 * One connected client (a TCP connection, or a UDP source address), its state, its send path
 * with per-connection priorities, and its segmentation sessions. What differs between its
 * transports lives in its `PlayerLink` (links.ts).
 */

import type dgram from 'node:dgram';
import { addressKey, type Connection, type TransportKind } from '../../core/connection.js';
import type { ProtocolMetrics } from '../../core/metrics.js';
import { TokenBucket } from '../../core/token-bucket.js';
import type { WireTap } from '../../core/wire-tap.js';
import { Priority } from './constants.js';
import type { Player } from './instances.js';
import {
  type PlayerLink,
  TcpClients,
  type TcpPeer,
  TcpPlayerLink,
  UdpPlayerLink,
  UdpSessions,
  udpKey,
} from './links.js';
import type { CongestionLimits } from './options.js';
import { DropReason } from './reasons.js';
import type { InstanceAliases } from './udp-admission.js';

export type { PlayerLink, TcpPeer } from './links.js';
export { udpKey } from './links.js';
export type { CongestionLimits } from './options.js';

/** What one client's send path enforces (the resolved server options it needs). */
export interface SendLimits {
  congestion: CongestionLimits;
  /** Anti-amplification factor for an unproven UDP source (bytes out ≤ factor × bytes in). */
  udpReplyFactor: number;
  /** Drain rate of a UDP client's own queue, bytes per second. */
  udpSendBytesPerSecond: number;
  /** How long a TCP queue may stay over the soft limit before the connection is closed. */
  slowConsumerTimeoutMs: number;
  /** Packets per second a client may send, and the burst allowed above that rate. */
  maxRequestsPerSecond: number;
  maxRequestBurst: number;
}

export interface SegmentSession {
  total: number;
  parts: (Buffer | undefined)[];
  received: number;
  bytes: number;
  lastUpdate: number;
}

export type AuthState = 'none' | 'pending' | 'done';

/**
 * A transport as `RelayClient`'s constructor takes it: a link, or (for tests and library
 * callers) a TCP peer or a UDP socket and source with an endpoint of their own.
 */
export type RelayTransport =
  | PlayerLink
  | { tcp: TcpPeer }
  | { udp: dgram.Socket; ip: string; port: number; queue: { bytes: number } };

/**
 * One client of the relay (a TCP connection or a UDP session), and a connection of the seam:
 * messages are relay packets (those inside a datagram or a frame counted one by one), bytes the
 * packets' bytes. Its transport's mechanics are its `link`'s.
 */
export class RelayClient implements Connection {
  readonly id: number;
  readonly link: PlayerLink;
  readonly ip: string;
  readonly port: number;
  /** What per-address limits count under: the IPv4 address, or the IPv6 /64 (one host's usual share). */
  readonly addressKey: string;
  readonly key: string;
  handshaked = false;
  /**
   * Handshakes answered: the first, the one carrying gamewire's cookie and a retry at once, then
   * one a second (a client on a lossy path resends every 2 s for as long as it needs).
   */
  handshakes: TokenBucket | undefined = undefined;
  engine = '';
  platform = '';
  auth: AuthState = 'none';
  userId = 0;
  userServer = '';
  /** The token that authenticated this session (a repeat of it is answered again). */
  authToken = '';
  displayName = '';
  /** Master-side privileges (e.g. MasterModerator) OR-ed into every player of this client. */
  userFlags = 0;
  lastSeen: number;
  /** When the client was created (performance.now()). */
  readonly createdAt: number;
  /**
   * Datagram links only: the source has sent a Handshake but no other valid packet yet. Half-open sessions
   * have their own caps and timeout, do not count against maxClients, and are never sent a
   * Disconnect.
   */
  halfOpen = false;
  /**
   * The peer has shown it receives at its address: from the start on a stream (TCP); on a
   * datagram link once it sent back the address cookie of a Handshake reply, or used its
   * instance alias. Until then the anti-amplification budget applies.
   */
  addressProven: boolean;
  /**
   * Unproven datagram links: the instance aliases this client was listed (docs/security.md), set by its first Sessions
   * request while unproven; instance messages to it then name the ids it uses.
   */
  aliases: InstanceAliases | undefined = undefined;
  /** Unproven: bytes received from the source and sent to it (the 3× budget is over all of them). */
  udpBytesIn = 0;
  udpBytesOut = 0;
  closed = false;
  /** Why it closed (the first reason noted); the seam's `close` event carries it. */
  closeReason: string | undefined = undefined;
  /** Set by the server: ends this client (a Disconnect, then it is dropped). */
  closer: ((reason: string) => void) | undefined = undefined;
  bytesIn = 0;
  bytesOut = 0;
  messagesIn = 0;
  messagesOut = 0;
  /** The server's wire tap (the admin endpoint's wire view). */
  wireTap: WireTap | undefined = undefined;
  /** This client's request budget. */
  private readonly requests: TokenBucket;
  /** The request budget of every client of this address together (shared; set by the server). */
  addressRequests: TokenBucket | undefined;
  /** instance id → player. */
  readonly players = new Map<number, Player>();
  readonly segments = new Map<number, SegmentSession>();
  private readonly limits: SendLimits;
  private readonly metrics: ProtocolMetrics;

  constructor(id: number, transport: RelayTransport, limits: SendLimits, metrics: ProtocolMetrics) {
    this.id = id;
    this.limits = limits;
    this.metrics = metrics;
    this.link = linkOf(transport, limits, metrics);
    this.ip = this.link.remoteAddress;
    this.port = this.link.remotePort;
    this.key = udpKey(this.ip, this.port);
    this.addressKey = addressKey(this.ip);
    this.addressProven = !this.link.datagram;
    this.lastSeen = performance.now();
    this.createdAt = this.lastSeen;
    this.requests = new TokenBucket(limits.maxRequestsPerSecond, limits.maxRequestBurst, this.lastSeen);
  }

  get transport(): TransportKind {
    return this.link.transport;
  }

  get remoteAddress(): string {
    return this.ip;
  }

  get remotePort(): number {
    return this.port;
  }

  get open(): boolean {
    return !this.closed;
  }

  /** Ends the client for `reason`: a Disconnect (within its budget), then it is dropped. */
  close(reason = 'closed_by_server'): void {
    if (this.closed) return;
    this.closeReason ??= reason;
    this.closer?.(reason);
  }

  /** Bytes this client may still be sent: unlimited once its address is proven (always on a stream). */
  get sendBudget(): number {
    if (this.addressProven) return Number.POSITIVE_INFINITY;
    return this.udpBytesIn * this.limits.udpReplyFactor - this.udpBytesOut;
  }

  /** Takes one packet from the client's request budget and its address's; false when either is spent. */
  allowRequest(now: number): boolean {
    if (!this.requests.take(now)) return false;
    return this.addressRequests === undefined || this.addressRequests.take(now);
  }

  /**
   * Bytes waiting to leave: the connection's own queue on a stream; on a datagram link the
   * client's own budget backlog (what it was sent beyond its send rate), so one busy client never
   * makes the server shed everyone else's traffic.
   */
  get queued(): number {
    return this.link.queued();
  }

  /**
   * Sends one or more whole packets. `bytes` must not change afterwards (the socket keeps a
   * reference). An unproven (datagram) source never gets more than its anti-amplification
   * budget. Under congestion Low and Normal go first, then High; Critical always goes, but a
   * connection whose own queue reaches the close limit, or stays over the soft limit too long, is
   * closed (the link's rules: links.ts).
   */
  send(bytes: Buffer, priority: Priority = Priority.Normal): boolean {
    if (this.closed) return false;
    if (!this.addressProven && bytes.length > this.sendBudget) {
      this.metrics.drop(DropReason.UdpAmplification);
      return false;
    }
    if (!this.link.allows(priority)) return false;
    if (!this.addressProven) this.udpBytesOut += bytes.length;
    if (this.aliases !== undefined) bytes = this.aliases.outgoing(bytes);
    this.metrics.sent++;
    this.metrics.bytesSent += bytes.length;
    if (this.wireTap?.armed) this.wireTap.record('server', this.id, this.link.transport, bytes);
    this.messagesOut++;
    this.bytesOut += bytes.length;
    this.link.write(bytes);
    return true;
  }
}

/** The link for a transport given to the constructor (a TCP peer or UDP source alone gets an endpoint of its own). */
function linkOf(transport: RelayTransport, limits: SendLimits, metrics: ProtocolMetrics): PlayerLink {
  if ('tcp' in transport) return new TcpPlayerLink(transport.tcp, new TcpClients(), limits, metrics);
  if ('udp' in transport) {
    const sessions = new UdpSessions(transport.udp, transport.queue);
    return new UdpPlayerLink(transport.ip, transport.port, sessions, limits, metrics);
  }
  return transport;
}

/** IPv4 bytes of an address as the socket reports it (`::ffff:a.b.c.d` included); zeros otherwise. */
export function ipv4Bytes(ip: string): Buffer {
  const m = /(?:^|:)(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(ip);
  if (m === null) return Buffer.alloc(4);
  return Buffer.from([Number(m[1]), Number(m[2]), Number(m[3]), Number(m[4])]);
}
