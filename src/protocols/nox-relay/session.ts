/**
 * One connected client (a TCP connection, or a UDP source address), its state, its send path
 * with per-connection priorities, and its segmentation sessions.
 */
import type dgram from 'node:dgram';
import type net from 'node:net';
import type { ProtocolMetrics } from '../../core/metrics.js';
import { Priority } from './constants.js';
import type { Player } from './instances.js';

export interface CongestionLimits {
  /** Queued bytes above which Low and Normal messages are dropped. */
  softBytes: number;
  /** Queued bytes above which High messages are dropped too (Critical always goes). */
  hardBytes: number;
  /** Queued bytes above which a TCP connection is closed as a slow consumer. */
  closeBytes: number;
}

export interface SegmentSession {
  total: number;
  parts: (Buffer | undefined)[];
  received: number;
  bytes: number;
  lastUpdate: number;
}

export type AuthState = 'none' | 'pending' | 'done';

export class RelayClient {
  readonly id: number;
  readonly transport: 'tcp' | 'udp';
  readonly ip: string;
  readonly port: number;
  readonly key: string;
  handshaked = false;
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
   * UDP only: the source has sent a Handshake but no other valid packet yet, so its address is
   * unproven. Half-open sessions have their own cap and timeout and are never sent a Disconnect.
   */
  halfOpen = false;
  /** UDP only: size of the datagram being processed (the anti-amplification budget for replies). */
  datagramBytes = 0;
  closed = false;
  /** instance id → player. */
  readonly players = new Map<number, Player>();
  readonly segments = new Map<number, SegmentSession>();
  private readonly socket: net.Socket | undefined;
  private readonly udp: dgram.Socket | undefined;
  /** The UDP socket's send queue, sampled by the server once per received datagram (one native call, not one per send). */
  private readonly udpQueue: { bytes: number };
  private readonly limits: CongestionLimits;
  private readonly metrics: ProtocolMetrics;

  constructor(
    id: number,
    transport:
      | { tcp: net.Socket }
      | { udp: dgram.Socket; ip: string; port: number; queue: { bytes: number } },
    limits: CongestionLimits,
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
    this.lastSeen = performance.now();
    this.createdAt = this.lastSeen;
  }

  /**
   * Bytes waiting to leave: the connection's own queue on TCP. UDP clients share the server's
   * one socket, so its kernel-side send queue is their congestion signal.
   */
  get queued(): number {
    return this.socket !== undefined ? this.socket.writableLength : this.udpQueue.bytes;
  }

  /**
   * Sends one or more whole packets. `bytes` must not change afterwards (the socket keeps a
   * reference). Under congestion, Low and Normal go first, then High; Critical always goes.
   */
  send(bytes: Buffer, priority: Priority): boolean {
    if (this.closed) return false;
    const q = this.queued;
    if (q > this.limits.softBytes) {
      if (priority <= Priority.Normal || (priority === Priority.High && q > this.limits.hardBytes)) {
        this.metrics.drop(
          priority === Priority.Low
            ? 'congestion_low'
            : priority === Priority.Normal
              ? 'congestion_normal'
              : 'congestion_high',
        );
        return false;
      }
      if (this.socket !== undefined && q > this.limits.closeBytes) {
        this.metrics.close('slow_consumer');
        this.socket.destroy();
        return false;
      }
    }
    this.metrics.sent++;
    if (this.socket !== undefined) {
      this.socket.write(bytes);
    } else {
      this.udp!.send(bytes, this.port, this.ip);
    }
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
