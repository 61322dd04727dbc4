/**
 * The transport half of a relay client. A `RelayClient` holds the protocol's state (players,
 * segments, request budgets, address proof); its `PlayerLink` knows how bytes leave, how
 * congestion shows, how the client is counted and released, and how it closes: a framed TCP
 * connection, or a UDP session on the server's one socket. The server and the handlers call the
 * same methods whatever the transport, and never ask which one a client came over. Where NoxVR
 * genuinely differs on datagrams (a source address anyone can forge: address cookies, instance
 * aliases, the anti-amplification budget, half-open sessions), they read the link's `datagram`
 * capability, not its transport's name (docs/ARCHITECTURE.md, "Connections").
 */
import type dgram from 'node:dgram';
import { ConnectionSet, CloseReason as SeamCloseReason, type TransportKind } from '../../core/connection.js';
import type { ProtocolMetrics } from '../../core/metrics.js';
import { Priority } from './constants.js';
import { CloseReason, DropReason } from './reasons.js';
import type { RelayClient, SendLimits } from './session.js';

/** One relay client's transport: what differs between a TCP connection and a UDP session. */
export interface PlayerLink {
  /** How the peer came: to show (admin, logs, the wire view), never to branch on. */
  readonly transport: TransportKind;
  /**
   * Datagrams from a source address anyone can forge: until the peer shows it receives there
   * (address cookie, instance alias) it is sent at most a few times what it sent. False on a
   * stream, whose connection handshake already proved the address.
   */
  readonly datagram: boolean;
  readonly remoteAddress: string;
  readonly remotePort: number;
  /** Bytes waiting to leave, as the congestion rules see them. */
  queued(): number;
  /**
   * Whether a packet of `priority` may leave now. When not, the drop is counted (or, for a
   * consumer that stopped reading, the connection is closed).
   */
  allows(priority: Priority): boolean;
  /** Sends one or more whole packets; `bytes` must not change afterwards. */
  write(bytes: Buffer): void;
  /** The server's periodic sweep: a consumer stalled over the soft limit too long is closed. */
  watch(now: number): void;
  /** The client is held: counted under its endpoint's per-address cap. */
  attach(client: RelayClient): void;
  /** The protocol now sees the client as a connection (the seam's `open`, where the transport has not published it). */
  announce(client: RelayClient): void;
  /** The client is gone: forgotten by its endpoint, closed after what was sent (`reason` for the seam's `close`). */
  release(client: RelayClient, reason: string): void;
  /** Closes at once, dropping what waits to leave (an evicted connection that never handshaked). */
  abort(): void;
}

/** Counts a congestion drop under its priority's reason; returns false (the packet is not sent). */
function congestionDrop(metrics: ProtocolMetrics, priority: Priority): false {
  metrics.drop(
    priority === Priority.Low
      ? DropReason.CongestionLow
      : priority === Priority.Normal
        ? DropReason.CongestionNormal
        : DropReason.CongestionHigh,
  );
  return false;
}

/** Live clients per address key: what a per-address cap counts. */
class AddressCounts {
  private readonly perAddress = new Map<string, number>();
  size = 0;

  countFor(key: string): number {
    return this.perAddress.get(key) ?? 0;
  }

  add(key: string): void {
    this.size++;
    this.perAddress.set(key, (this.perAddress.get(key) ?? 0) + 1);
  }

  remove(key: string): void {
    this.size--;
    const n = (this.perAddress.get(key) ?? 1) - 1;
    if (n <= 0) this.perAddress.delete(key);
    else this.perAddress.set(key, n);
  }
}

// ---- TCP --------------------------------------------------------------------------------------

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

/**
 * The TCP endpoint's clients, per address key (`maxTcpPerIp` counts them). Connections the
 * relay refused at accept are not among them (the listener's own table still holds those until
 * their socket closes).
 */
export class TcpClients extends AddressCounts {}

/**
 * A framed TCP connection: its own queue is the congestion signal, and a consumer that stops
 * reading (its queue at the close limit, or over the soft limit too long) is closed rather than
 * buffered for. The listener publishes its `open`/`close` on the seam.
 */
export class TcpPlayerLink implements PlayerLink {
  readonly transport = 'tcp' as const;
  readonly datagram = false;
  readonly remoteAddress: string;
  readonly remotePort: number;
  /** Since when the queue has been over the soft limit (0: it is not). */
  private congestedSince = 0;
  private readonly peer: TcpPeer;
  private readonly clients: TcpClients;
  private readonly limits: SendLimits;
  private readonly metrics: ProtocolMetrics;

  constructor(peer: TcpPeer, clients: TcpClients, limits: SendLimits, metrics: ProtocolMetrics) {
    this.peer = peer;
    this.clients = clients;
    this.limits = limits;
    this.metrics = metrics;
    this.remoteAddress = peer.remoteAddress ?? '0.0.0.0';
    this.remotePort = peer.remotePort ?? 0;
  }

  queued(): number {
    return this.peer.writableLength;
  }

  allows(priority: Priority): boolean {
    const q = this.peer.writableLength;
    const c = this.limits.congestion;
    if (q <= c.softBytes) {
      this.congestedSince = 0;
      return true;
    }
    const now = performance.now();
    if (this.congestedSince === 0) this.congestedSince = now;
    if (q >= c.closeBytes || now - this.congestedSince >= this.limits.slowConsumerTimeoutMs) {
      this.closeSlowConsumer();
      return false;
    }
    // Beyond the soft limit Low and Normal go first; beyond the hard limit High too.
    if (priority <= Priority.Normal || (priority === Priority.High && q > c.hardBytes))
      return congestionDrop(this.metrics, priority);
    return true;
  }

  write(bytes: Buffer): void {
    this.peer.write(bytes);
  }

  watch(now: number): void {
    // A consumer that stopped reading is closed even when nothing more is sent to it.
    if (this.peer.writableLength <= this.limits.congestion.softBytes) this.congestedSince = 0;
    else if (this.congestedSince === 0) this.congestedSince = now;
    else if (now - this.congestedSince >= this.limits.slowConsumerTimeoutMs) this.closeSlowConsumer();
  }

  attach(client: RelayClient): void {
    this.clients.add(client.addressKey);
  }

  announce(): void {
    // The framed TCP listener published `open` when it accepted the socket.
  }

  release(client: RelayClient): void {
    this.clients.remove(client.addressKey);
    // The connection's close reason (on the seam and in the metrics) is the one its socket
    // recorded first; ending after the flush records none of its own beyond that.
    this.peer.end();
  }

  abort(): void {
    this.peer.destroy();
  }

  private closeSlowConsumer(): void {
    if (this.peer.destroyed === true) return;
    this.metrics.close(CloseReason.SlowConsumer);
    this.peer.destroy(CloseReason.SlowConsumer);
  }
}

// ---- UDP --------------------------------------------------------------------------------------

/** The key of a UDP session: its source address and port. */
export function udpKey(ip: string, port: number): string {
  return `${ip}|${port}`;
}

/**
 * The UDP endpoint: the one socket every session sends on, its sampled send queue, the sessions
 * by source (`maxUdpPerIp` counts them per address key, half-open ones included), and their
 * set on the connection seam (it counts and publishes; the relay applies its own caps).
 */
export class UdpSessions {
  readonly socket: dgram.Socket;
  /**
   * The shared socket's send queue, sampled by the server once per received datagram (one
   * native call, not one per send). Only a last-resort signal: each session has its own budget.
   */
  readonly queue: { bytes: number };
  /** The sessions on the connection seam: the one place nox-relay's UDP set is built. */
  readonly table = new ConnectionSet<RelayClient>({ protocol: 'nox-relay', transport: 'udp' });
  private readonly bySource = new Map<string, RelayClient>();
  /** Set when the server closes: a session that starts then is refused on the seam, not counted. */
  private refusing = false;

  constructor(socket: dgram.Socket, queue: { bytes: number }) {
    this.socket = socket;
    this.queue = queue;
  }

  /** The server is shutting down: later sessions are published as refused (`server_closing`). */
  closing(): void {
    this.refusing = true;
  }

  get size(): number {
    return this.bySource.size;
  }

  countFor(key: string): number {
    return this.table.countFor(key);
  }

  get(ip: string, port: number): RelayClient | undefined {
    return this.bySource.get(udpKey(ip, port));
  }

  add(client: RelayClient): void {
    this.bySource.set(client.key, client);
    // On the seam from its first datagram; announced once it is more than half-open.
    if (this.refusing)
      this.table.refuse(client.remoteAddress, client.remotePort, SeamCloseReason.ServerClosing);
    else this.table.add(client);
  }

  remove(client: RelayClient, reason: string): void {
    this.bySource.delete(client.key);
    this.table.release(client, reason);
  }
}

/**
 * A UDP session. The socket is shared, so congestion is the session's own: a virtual queue
 * drained at `udpSendBytesPerSecond`, so one busy client never makes the server shed everyone
 * else's traffic; the socket's real send queue only sheds all but Critical when the host's link
 * is full. A session has nothing to flush: closing it is forgetting it.
 */
export class UdpPlayerLink implements PlayerLink {
  readonly transport = 'udp' as const;
  readonly datagram = true;
  readonly remoteAddress: string;
  readonly remotePort: number;
  private readonly sessions: UdpSessions;
  private readonly limits: SendLimits;
  private readonly metrics: ProtocolMetrics;
  /** This session's own queue (bytes sent beyond its send rate), and when it was last drained. */
  private backlog = 0;
  private drainedAt = 0;

  constructor(ip: string, port: number, sessions: UdpSessions, limits: SendLimits, metrics: ProtocolMetrics) {
    this.remoteAddress = ip;
    this.remotePort = port;
    this.sessions = sessions;
    this.limits = limits;
    this.metrics = metrics;
  }

  /** The session's queue after draining at its send rate until now. */
  queued(): number {
    const now = performance.now();
    const drained = ((now - this.drainedAt) * this.limits.udpSendBytesPerSecond) / 1000;
    this.drainedAt = now;
    this.backlog = drained >= this.backlog ? 0 : this.backlog - drained;
    return this.backlog;
  }

  allows(priority: Priority): boolean {
    const q = this.queued();
    if (priority === Priority.Critical) return true;
    const c = this.limits.congestion;
    if (q > c.softBytes && (priority <= Priority.Normal || q > c.hardBytes))
      return congestionDrop(this.metrics, priority);
    // The shared socket itself is backed up (the host's link is full): shed all but Critical.
    if (this.sessions.queue.bytes > c.closeBytes) return congestionDrop(this.metrics, priority);
    return true;
  }

  write(bytes: Buffer): void {
    this.backlog += bytes.length;
    this.sessions.socket.send(bytes, this.remotePort, this.remoteAddress);
  }

  watch(): void {
    // Nothing stalls: the session's queue drains by itself.
  }

  attach(client: RelayClient): void {
    this.sessions.add(client);
  }

  announce(client: RelayClient): void {
    this.sessions.table.announce(client);
  }

  release(client: RelayClient, reason: string): void {
    this.sessions.remove(client, reason);
  }

  abort(): void {
    // Nothing waits to leave: `release` forgets the session.
  }
}
