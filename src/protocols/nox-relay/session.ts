/**
 * One connected client (a TCP connection, or a UDP source address), its state, its send path
 * with per-connection priorities, and its segmentation sessions.
 */

import type dgram from 'node:dgram';
import { addressKey, type Connection } from '../../core/connection.js';
import type { ProtocolMetrics } from '../../core/metrics.js';
import { TokenBucket } from '../../core/token-bucket.js';
import type { WireTap } from '../../core/wire-tap.js';
import { Priority } from './constants.js';
import type { Player } from './instances.js';
import type { CongestionLimits } from './options.js';
import { CloseReason, DropReason } from './reasons.js';
import type { InstanceAliases } from './udp-admission.js';

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

/**
 * A TCP client's side of the connection, as the send path needs it (the server adapts the framed
 * TCP connection to this).
 */
export interface TcpPeer {
  readonly remoteAddress?: string | undefined;
  readonly remotePort?: number | undefined;
  /** Bytes written and not yet taken by the peer. */
  readonly writableLength: number;
  readonly destroyed?: boolean;
  write(bytes: Buffer): unknown;
  /** Ends after what was written. */
  end(): void;
  /** Closes at once; `reason` is recorded as the close reason (already counted by the caller). */
  destroy(reason?: string): void;
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
 * One client of the relay (a TCP connection or a UDP session), and a connection of the seam:
 * messages are relay packets (those inside a datagram or a frame counted one by one), bytes the
 * packets' bytes.
 */
export class RelayClient implements Connection {
  readonly id: number;
  readonly transport: 'tcp' | 'udp';
  readonly ip: string;
  readonly port: number;
  /** What per-address limits count under: the IPv4 address, or the IPv6 /64 (one host's usual share). */
  readonly addressKey: string;
  readonly key: string;
  handshaked = false;
  /** Handshakes received on this session (only the first few are answered). */
  handshakes = 0;
  engine = '';
  platform = '';
  auth: AuthState = 'none';
  userId = 0;
  userServer = '';
  displayName = '';
  /** Master-side privileges (e.g. MasterModerator) OR-ed into every player of this client. */
  userFlags = 0;
  lastSeen: number;
  /** When the client was created (performance.now()). */
  readonly createdAt: number;
  /**
   * UDP only: the source has sent a Handshake but no other valid packet yet. Half-open sessions
   * have their own caps and timeout, do not count against maxClients, and are never sent a
   * Disconnect.
   */
  halfOpen = false;
  /**
   * The peer has shown it receives at its address: always on TCP; on UDP once it sent back the
   * address cookie of a Handshake reply. Until then the anti-amplification budget applies.
   */
  addressProven: boolean;
  /**
   * UDP: the instance aliases this client was listed (docs/security.md), set by its first Sessions
   * request while unproven; instance messages to it then name the ids it uses.
   */
  aliases: InstanceAliases | undefined = undefined;
  /** UDP, unproven: bytes received from the source and sent to it (the 3× budget is over all of them). */
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
  /** UDP send budget: this client's own virtual queue, and when it was last drained. */
  private udpQueued = 0;
  private udpQueuedAt = 0;
  /** TCP: since when the queue has been over the soft limit (0: it is not). */
  congestedSince = 0;
  /** instance id → player. */
  readonly players = new Map<number, Player>();
  readonly segments = new Map<number, SegmentSession>();
  private readonly socket: TcpPeer | undefined;
  private readonly udp: dgram.Socket | undefined;
  /**
   * The shared UDP socket's send queue, sampled by the server once per received datagram (one
   * native call, not one per send). Only a last-resort signal: each client has its own budget.
   */
  private readonly udpQueue: { bytes: number };
  private readonly limits: SendLimits;
  private readonly metrics: ProtocolMetrics;

  constructor(
    id: number,
    transport: { tcp: TcpPeer } | { udp: dgram.Socket; ip: string; port: number; queue: { bytes: number } },
    limits: SendLimits,
    metrics: ProtocolMetrics,
  ) {
    this.id = id;
    this.limits = limits;
    this.metrics = metrics;
    if ('tcp' in transport) {
      this.transport = 'tcp';
      this.socket = transport.tcp;
      this.ip = transport.tcp.remoteAddress ?? '0.0.0.0';
      this.port = transport.tcp.remotePort ?? 0;
      this.udp = undefined;
      this.udpQueue = { bytes: 0 };
    } else {
      this.udpQueue = transport.queue;
      this.transport = 'udp';
      this.udp = transport.udp;
      this.ip = transport.ip;
      this.port = transport.port;
      this.socket = undefined;
    }
    this.key = udpKey(this.ip, this.port);
    this.addressKey = addressKey(this.ip);
    this.addressProven = this.transport === 'tcp';
    this.lastSeen = performance.now();
    this.createdAt = this.lastSeen;
    this.requests = new TokenBucket(limits.maxRequestsPerSecond, limits.maxRequestBurst, this.lastSeen);
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

  /** Bytes this client may still be sent: unlimited once its address is proven (always on TCP). */
  get sendBudget(): number {
    if (this.addressProven) return Number.POSITIVE_INFINITY;
    return this.udpBytesIn * this.limits.udpReplyFactor - this.udpBytesOut;
  }

  /** Takes one packet from the client's request budget and its address's; false when either is spent. */
  allowRequest(now: number): boolean {
    if (!this.requests.take(now)) return false;
    return this.addressRequests === undefined || this.addressRequests.take(now);
  }

  /** The client's own UDP queue after draining at its send rate until `now`. */
  private udpBacklog(now: number): number {
    const drained = ((now - this.udpQueuedAt) * this.limits.udpSendBytesPerSecond) / 1000;
    this.udpQueuedAt = now;
    this.udpQueued = drained >= this.udpQueued ? 0 : this.udpQueued - drained;
    return this.udpQueued;
  }

  /**
   * Bytes waiting to leave: the connection's own queue on TCP; on UDP the client's own budget
   * backlog (what it was sent beyond its send rate), so one busy client never makes the server
   * shed everyone else's traffic.
   */
  get queued(): number {
    return this.socket !== undefined ? this.socket.writableLength : this.udpBacklog(performance.now());
  }

  private congestionDrop(priority: Priority): false {
    this.metrics.drop(
      priority === Priority.Low
        ? DropReason.CongestionLow
        : priority === Priority.Normal
          ? DropReason.CongestionNormal
          : DropReason.CongestionHigh,
    );
    return false;
  }

  /** Closes a TCP client that stopped reading. */
  closeSlowConsumer(): void {
    if (this.socket === undefined || this.socket.destroyed) return;
    this.metrics.close(CloseReason.SlowConsumer);
    this.socket.destroy(CloseReason.SlowConsumer);
  }

  /**
   * Sends one or more whole packets. `bytes` must not change afterwards (the socket keeps a
   * reference). An unproven UDP source never gets more than its anti-amplification budget.
   * Under congestion Low and Normal go first, then High; Critical always goes, but a TCP client
   * whose queue reaches the close limit, or stays over the soft limit too long, is closed.
   */
  send(bytes: Buffer, priority: Priority = Priority.Normal): boolean {
    if (this.closed) return false;
    const l = this.limits;
    if (!this.addressProven && bytes.length > this.sendBudget) {
      this.metrics.drop(DropReason.UdpAmplification);
      return false;
    }
    const c = l.congestion;
    if (this.socket !== undefined) {
      const q = this.socket.writableLength;
      if (q > c.softBytes) {
        const now = performance.now();
        if (this.congestedSince === 0) this.congestedSince = now;
        if (q >= c.closeBytes || now - this.congestedSince >= l.slowConsumerTimeoutMs) {
          this.closeSlowConsumer();
          return false;
        }
        if (priority <= Priority.Normal || (priority === Priority.High && q > c.hardBytes)) {
          return this.congestionDrop(priority);
        }
      } else {
        this.congestedSince = 0;
      }
      this.metrics.sent++;
      this.metrics.bytesSent += bytes.length;
      if (this.wireTap?.armed) this.wireTap.record('server', this.id, 'tcp', bytes);
      this.messagesOut++;
      this.bytesOut += bytes.length;
      this.socket.write(bytes);
      return true;
    }
    const now = performance.now();
    const q = this.udpBacklog(now);
    if (priority !== Priority.Critical) {
      if (q > c.softBytes && (priority <= Priority.Normal || q > c.hardBytes))
        return this.congestionDrop(priority);
      // The shared socket itself is backed up (the host's link is full): shed all but Critical.
      if (this.udpQueue.bytes > c.closeBytes) return this.congestionDrop(priority);
    }
    this.udpQueued = q + bytes.length;
    if (!this.addressProven) this.udpBytesOut += bytes.length;
    if (this.aliases !== undefined) bytes = this.aliases.outgoing(bytes);
    this.metrics.sent++;
    this.metrics.bytesSent += bytes.length;
    if (this.wireTap?.armed) this.wireTap.record('server', this.id, 'udp', bytes);
    this.messagesOut++;
    this.bytesOut += bytes.length;
    this.udp!.send(bytes, this.port, this.ip);
    return true;
  }

  /** Ends the TCP connection after queued writes (no-op for UDP). */
  end(): void {
    this.socket?.end();
  }

  destroy(): void {
    this.socket?.destroy();
  }
}

export function udpKey(ip: string, port: number): string {
  return `${ip}|${port}`;
}

/** IPv4 bytes of an address as the socket reports it (`::ffff:a.b.c.d` included); zeros otherwise. */
export function ipv4Bytes(ip: string): Buffer {
  const m = /(?:^|:)(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(ip);
  if (m === null) return Buffer.alloc(4);
  return Buffer.from([Number(m[1]), Number(m[2]), Number(m[3]), Number(m[4])]);
}
