/**
 * The connection seam: what every server transport (TCP, UDP sessions, DTLS, WebSocket, or one a
 * protocol brings) shows a protocol of one peer, and the table that admits peers under the global and
 * per-address caps and publishes their lifecycle on the `gamewire:connection:*` diagnostics
 * channels. A protocol holds `Connection`s and never asks which transport one came over; a
 * transport keeps its own wire mechanics and reports opens and closes here.
 */
import diagnosticsChannel from 'node:diagnostics_channel';

/**
 * Why a connection ended (or was refused), shared by every transport. Protocols and transports
 * add their own (`malformed` is common to all framed protocols). They are the `reason` of the
 * `gamewire:connection:*` diagnostics events (and, for TCP, of `gamewire_connections_closed_total`).
 */
export const CloseReason = {
  /** The peer closed, or the connection ended without a more specific reason. */
  PeerClosed: 'peer_closed',
  /** Refused at accept: the server holds `maxConnections`. */
  OverCapacity: 'over_capacity',
  /** Refused at accept: the peer's address holds `maxConnectionsPerIp`. */
  PerIpLimit: 'per_ip_limit',
  /** Nothing received for `idleTimeoutMs`. */
  IdleTimeout: 'idle_timeout',
  /** A frame (or the first frame after connecting) did not complete within `frameTimeoutMs`. */
  FrameTimeout: 'frame_timeout',
  /**
   * The input budget was spent, new connections were waiting, and this connection's partial
   * frame had been stalled longest.
   */
  OverBudget: 'over_budget',
  /** Bytes that break the protocol's framing or envelope. */
  Malformed: 'malformed',
  /** The socket reported an error (reset, broken pipe). */
  SocketError: 'socket_error',
  /** A bug in a connection handler; it cost this one connection. */
  HandlerError: 'handler_error',
  /** The server is shutting down. */
  ServerClosing: 'server_closing',
  /** The protocol ended the connection on purpose (e.g. a handler called `close()`). */
  ClosedByServer: 'closed_by_server',
} as const;
export type CloseReasonName = (typeof CloseReason)[keyof typeof CloseReason];

/**
 * How a peer reached the server: one of the built-in kinds (`TransportKinds`), or a kind a
 * protocol brings for a transport of its own (any other lowercase name, declared as a constant in
 * the protocol's folder). An option named for a kind starts with it (`<kind>MaxConnections`;
 * `ws…` for `websocket`). A protocol may read it (to show it), never branch on it.
 */
export type TransportKind = BuiltinTransportKind | (string & {});

/** The transport kinds gamewire's shared transports report. */
export const TransportKinds = {
  tcp: 'tcp',
  udp: 'udp',
  dtls: 'dtls',
  websocket: 'websocket',
} as const;
export type BuiltinTransportKind = (typeof TransportKinds)[keyof typeof TransportKinds];

/** One peer of a server, whatever the transport. */
export interface Connection {
  readonly transport: TransportKind;
  readonly remoteAddress: string;
  readonly remotePort: number;
  /** The key the per-address caps count under (`addressKey(remoteAddress)`). */
  readonly addressKey: string;
  /** False once it closed (or began closing): sends are then dropped. */
  readonly open: boolean;
  /** Bytes received and sent (on the wire of this transport: TCP payload, datagrams, records). */
  readonly bytesIn: number;
  readonly bytesOut: number;
  /**
   * Messages received and sent: frames of a framed stream, datagrams, records, WebSocket
   * messages, a protocol transport's packets. A raw TCP stream has no messages (0).
   */
  readonly messagesIn: number;
  readonly messagesOut: number;
  /** Sends one message (a whole frame, one datagram, one record, one binary frame). */
  send(bytes: Buffer): void;
  /** Ends the connection for `reason` (default `closed_by_server`); what was sent still goes out. */
  close(reason?: string): void;
}

/** Payload of the `gamewire:connection:open|close|drop` diagnostics channels. */
export interface ConnectionEvent {
  /** The protocol module's name (`rmc`, `js5`, …). */
  protocol: string;
  transport: TransportKind;
  /** `address:port` of the peer (`[v6]:port` for IPv6). */
  remote: string;
  /** The address key the per-address caps count the peer under. */
  addressKey: string;
  /** For `close` and `drop`: one of `CloseReason` or a protocol's or transport's own. */
  reason?: string;
  /** For `close`: the connection's counters at the end. */
  bytesIn?: number;
  bytesOut?: number;
  messagesIn?: number;
  messagesOut?: number;
}

/**
 * `node:diagnostics_channel` channels every server transport publishes on: `open` when a
 * connection is admitted, `close` once when it ends (with its reason), `drop` when one is
 * refused. Publishing costs nothing until someone subscribes.
 */
export const connectionChannels = {
  open: diagnosticsChannel.channel('gamewire:connection:open'),
  close: diagnosticsChannel.channel('gamewire:connection:close'),
  drop: diagnosticsChannel.channel('gamewire:connection:drop'),
} as const;

/** `address:port`, with brackets around IPv6 addresses. */
export function formatRemote(address: string | undefined, port: number | undefined): string {
  const a = address ?? '?';
  return a.includes(':') ? `[${a}]:${port ?? 0}` : `${a}:${port ?? 0}`;
}

/**
 * The key per-address limits count under: an IPv4 address (also when mapped into IPv6), or the
 * /64 prefix of an IPv6 address, since one IPv6 host usually holds a whole /64.
 */
export function addressKey(address: string | undefined): string {
  if (address === undefined || address === '') return '?';
  if (address.startsWith('::ffff:') && address.includes('.')) return address.slice(7);
  if (!address.includes(':')) return address;
  const zone = address.indexOf('%');
  const a = zone >= 0 ? address.slice(0, zone) : address;
  const halves = a.split('::');
  const head = halves[0] === '' ? [] : halves[0]!.split(':');
  const tail = halves.length > 1 && halves[1] !== '' ? halves[1]!.split(':') : [];
  const groups =
    halves.length > 1
      ? [...head, ...new Array<string>(8 - head.length - tail.length).fill('0'), ...tail]
      : head;
  return `${groups
    .slice(0, 4)
    .map((g) => Number.parseInt(g || '0', 16).toString(16))
    .join(':')}::/64`;
}

/** The caps a `ConnectionTable` applies when it admits a peer. */
export interface ConnectionCaps {
  /** Most connections held at once (admitted, open or not yet announced). */
  maxConnections: number;
  /** Most connections from one address key (IPv4, or IPv6 /64); 0: no per-address cap. */
  maxConnectionsPerIp: number;
}

/** Where a set of connections publishes its events: the protocol and transport they name. */
export interface ConnectionSetOptions {
  /** Protocol name in the diagnostics events. */
  protocol: string;
  transport: TransportKind;
}

export interface ConnectionTableOptions extends ConnectionSetOptions, ConnectionCaps {}

/**
 * The publishing half of the seam: the connections of one endpoint, counted per address key,
 * with their lifecycle published on the seam's channels (`open` / `close` / `drop`). It applies
 * no cap: a protocol that keeps its own admission rules (nox-relay's UDP sessions) records its
 * connections here; `ConnectionTable` adds the caps for the transports that admit through it.
 * `add` counts a connection unannounced, `announce` publishes `open` once the protocol sees it,
 * `release` forgets it (and publishes `close` if it was announced). An entry added and released
 * unannounced (a handshake that never completed) publishes nothing.
 */
export class ConnectionSet<C extends Connection = Connection> {
  readonly protocol: string;
  readonly transport: TransportKind;
  /** Connections held, and whether each was announced. */
  private readonly live = new Map<C, boolean>();
  private readonly perAddress = new Map<string, number>();

  constructor(options: ConnectionSetOptions) {
    this.protocol = options.protocol;
    this.transport = options.transport;
  }

  /** Connections held (added and not released). */
  get size(): number {
    return this.live.size;
  }

  /** Connections held per address key. */
  get perAddressCounts(): ReadonlyMap<string, number> {
    return this.perAddress;
  }

  /** Connections held from one address key. */
  countFor(key: string): number {
    return this.perAddress.get(key) ?? 0;
  }

  has(connection: C): boolean {
    return this.live.has(connection);
  }

  connections(): IterableIterator<C> {
    return this.live.keys();
  }

  /** Counts `connection` (unannounced); false when it was held already. */
  add(connection: C): boolean {
    if (this.live.has(connection)) return false;
    this.live.set(connection, false);
    const key = connection.addressKey;
    this.perAddress.set(key, (this.perAddress.get(key) ?? 0) + 1);
    return true;
  }

  /** Publishes `open` for a held connection (once). */
  announce(connection: C): void {
    if (this.live.get(connection) !== false) return;
    this.live.set(connection, true);
    if (connectionChannels.open.hasSubscribers) {
      connectionChannels.open.publish({
        protocol: this.protocol,
        transport: this.transport,
        remote: formatRemote(connection.remoteAddress, connection.remotePort),
        addressKey: connection.addressKey,
      } satisfies ConnectionEvent);
    }
  }

  /**
   * Forgets `connection` (it is gone) and publishes `close` with `reason` if it was announced.
   * Returns false when it was not held (released already): each connection closes once.
   */
  release(connection: C, reason: string): boolean {
    const announced = this.live.get(connection);
    if (announced === undefined) return false;
    this.live.delete(connection);
    const key = connection.addressKey;
    const left = (this.perAddress.get(key) ?? 1) - 1;
    if (left <= 0) this.perAddress.delete(key);
    else this.perAddress.set(key, left);
    if (announced && connectionChannels.close.hasSubscribers) {
      connectionChannels.close.publish({
        protocol: this.protocol,
        transport: this.transport,
        remote: formatRemote(connection.remoteAddress, connection.remotePort),
        addressKey: connection.addressKey,
        reason,
        bytesIn: connection.bytesIn,
        bytesOut: connection.bytesOut,
        messagesIn: connection.messagesIn,
        messagesOut: connection.messagesOut,
      } satisfies ConnectionEvent);
    }
    return true;
  }

  /** Publishes `drop` for a peer refused before it was a connection (`reason`: why). */
  refuse(address: string | undefined, port: number | undefined, reason: string): void {
    if (connectionChannels.drop.hasSubscribers) {
      connectionChannels.drop.publish({
        protocol: this.protocol,
        transport: this.transport,
        remote: formatRemote(address, port),
        addressKey: addressKey(address),
        reason,
      } satisfies ConnectionEvent);
    }
  }
}

/**
 * The listener half of the seam, one per endpoint: a `ConnectionSet` that admits connections
 * under the caps. A transport calls `admit` when a peer starts (a TCP accept, a DTLS
 * association, a protocol transport's handshake), `announce` once it is a connection the
 * protocol sees (`open` does both), and `release` when it is gone.
 */
export class ConnectionTable<C extends Connection = Connection> extends ConnectionSet<C> {
  readonly caps: ConnectionCaps;
  /** Set by `closing()`: every later admission is refused as `server_closing`. */
  private refusing = false;

  constructor(options: ConnectionTableOptions) {
    super(options);
    this.caps = { maxConnections: options.maxConnections, maxConnectionsPerIp: options.maxConnectionsPerIp };
  }

  /** Why a newcomer from `key` would be refused now (`undefined`: it would be admitted). */
  refusalFor(key: string): CloseReasonName | undefined {
    if (this.refusing) return CloseReason.ServerClosing;
    if (this.size >= this.caps.maxConnections) return CloseReason.OverCapacity;
    const perIp = this.caps.maxConnectionsPerIp;
    if (perIp > 0 && this.countFor(key) >= perIp) return CloseReason.PerIpLimit;
    return undefined;
  }

  /**
   * Admits `connection` under the caps and counts it, without announcing it. Returns the reason
   * it was refused for (and publishes `drop`), or undefined once admitted.
   */
  admit(connection: C): CloseReasonName | undefined {
    if (this.has(connection)) return undefined;
    const refused = this.refusalFor(connection.addressKey);
    if (refused !== undefined) {
      this.refuse(connection.remoteAddress, connection.remotePort, refused);
      return refused;
    }
    this.add(connection);
    return undefined;
  }

  /** `admit` then `announce`: the refusal reason, or undefined once open. */
  open(connection: C): CloseReasonName | undefined {
    const refused = this.admit(connection);
    if (refused === undefined) this.announce(connection);
    return refused;
  }

  /** The server is shutting down: every later admission is refused as `server_closing`. */
  closing(): void {
    this.refusing = true;
  }
}
