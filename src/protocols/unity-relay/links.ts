/**
 * The transport seam: a bound allocation lives behind a `RelayLink`, something that can send one
 * relay message to its peer. The relay logic (relay.ts) is the same for every transport; only the
 * link differs:
 *
 * | transport | link | the client's "address" | largest message it may receive (default) |
 * |---|---|---|---|
 * | `udp`  | `UdpLink`: socket + address:port | the source address and port | the datagram limit (1472) |
 * | `dtls` | one DTLS association | the association (one per 5-tuple) | 1363 (1400 − 37 B DTLS overhead) |
 * | `ws`, `wss` | one WebSocket connection | the connection | 1386 (1400 − 14 B frame header) |
 *
 * UDP sources are not objects per datagram: the relay describes the source of the datagram it is
 * handling in one reused `UdpSource`, and creates a persistent `UdpLink` only when a BIND binds
 * an allocation to a new address. So the UDP hot path allocates nothing.
 */
import { addressKey, CloseReason, type Connection, type ConnectionTable } from '../../core/connection.js';
import type { DtlsAssociation } from '../../transports/dtls/index.js';

/**
 * What the relay needs of its UDP socket: a `dgram.Socket`, or the native data plane's
 * `NativeRelaySocket` (native-dataplane.ts), which forwards UDP→UDP RELAYs itself and hands the
 * rest over with the same `message` event.
 */
export interface RelayUdpSocket {
  send(msg: Uint8Array, port: number, address: string): void;
  on(event: 'message', listener: (msg: Buffer, rinfo: { address: string; port: number }) => void): unknown;
  on(event: 'error', listener: (err: Error) => void): unknown;
  off(event: 'message', listener: (msg: Buffer, rinfo: { address: string; port: number }) => void): unknown;
}

export type RelayTransport = 'udp' | 'dtls' | 'ws' | 'wss';

export interface RelayLink {
  /** How the peer reached the relay: shown (metrics, wire view, admin), never branched on. */
  readonly transport: RelayTransport;
  /** Remote IP address (limits are keyed by it) and port. */
  readonly address: string;
  readonly port: number;
  /** Largest relay message (bytes, relay header included) this peer accepts; larger ones are dropped. */
  readonly maxMessage: number;
  /** False once the connection is gone; sends to a closed link are dropped and counted. */
  readonly open: boolean;
  /**
   * For links that authenticated as one allocation (DTLS: the PSK identity), its 16 id bytes:
   * the link may speak only for that allocation. Undefined for UDP and WebSocket.
   */
  readonly identity: Buffer | undefined;
  /** Sends one relay message (one datagram, one DTLS record, one binary frame). */
  send(msg: Buffer): void;
  /**
   * Whether the message being handled, which arrived from `src`, came through this link: a
   * connection-like link (DTLS association, WebSocket) is its own source; a UDP binding is any
   * datagram from its address and port (the relay describes each in one reused `UdpSource`).
   */
  carries(src: RelayLink): boolean;
  /**
   * The link a BIND from this source binds allocation `allocationId` through, given the link it
   * is bound through now (`current`, undefined when unbound): a connection-like link is itself;
   * a UDP source keeps `current` when that is its own binding, and otherwise makes a persistent
   * `UdpLink` (the reused source itself is never stored).
   */
  linkForBind(current: RelayLink | undefined, allocationId: Buffer): RelayLink;
  /**
   * A message from this link's peer was accepted for the allocation bound through it. A link
   * that counts every message on arrival (DTLS, WebSocket) ignores it; a UDP binding counts
   * here, the first place a datagram is matched to its binding.
   */
  accepted(bytes: number): void;
  /**
   * Hands allocation `id`'s binding through this link to the native data plane, if the plane
   * can carry it (`plane` says what it can): true when it now forwards it, false when the
   * binding stays with JavaScript (a WebSocket, an IPv6 UDP peer, DTLS without the record offload).
   */
  bindNative(plane: NativeBindingTarget, id: Buffer): boolean;
  /** An allocation was bound through this link. */
  bound(): void;
  /**
   * The binding that used this link ended (`reason`: CLOSE, expiry, re-homed, the server
   * closing…): DTLS closes its association, a UDP binding's connection closes with `reason`.
   */
  unbound(reason: string): void;
}

/** Why a binding ended, as the relay tells its link (`RelayLink.unbound`) and the seam. */
export const UnbindReason = {
  /** The client sent CLOSE. */
  Close: CloseReason.PeerClosed,
  /** Nothing from the allocation for its idle (or host-alone) timeout. */
  Idle: CloseReason.IdleTimeout,
  /** A BIND moved the allocation to another address or link. */
  Rebound: 'rebound',
  /** The dashboard's disconnect (unbind) or end (expire). */
  AdminDisconnect: 'admin_disconnect',
  AdminEnd: 'admin_end',
  /** The relay is shutting down. */
  ServerClosing: CloseReason.ServerClosing,
} as const;

/** Whether `src` (the source of a message being handled) is the link `bound` an allocation is bound to. */
export function sameLink(bound: RelayLink | undefined, src: RelayLink): boolean {
  return bound?.carries(src) === true;
}

/** What the native data plane can carry, as a link asks it to (native-dataplane.ts). */
export interface NativeBindingTarget {
  /** Forwards for `id` to and from a UDP address; false when it cannot (not IPv4). */
  bindUdp(id: Buffer, address: string, port: number): boolean;
  /** Forwards for `id` through a DTLS association; false when the record layer is not offloaded. */
  bindDtls(id: Buffer, association: DtlsAssociation): boolean;
}

/** Counters of the native data plane for one allocation (RELAYs it forwarded without JavaScript). */
export type NativeCounters = (
  id: Buffer,
) => { packetsIn: number; bytesIn: number; packetsOut: number; bytesOut: number } | undefined;

/** What a UDP binding needs beyond its socket: the seam's table, how to end it, the native counters. */
export interface UdpBindings {
  /** The connection seam's table of UDP bindings (diagnostics; no cap of its own). */
  readonly table: ConnectionTable<UdpLink>;
  /** Ends the binding carried by `link` for `reason` (its `close`): the relay unbinds the allocation. */
  end(link: UdpLink, reason: string): void;
  /** The native data plane's per-allocation counters, when RELAYs may bypass JavaScript. */
  nativeCounters: NativeCounters | undefined;
}

/**
 * A bound UDP peer, and a connection of the seam (transport `udp`) from the BIND that bound an
 * allocation from its address to the end of that binding. `send` is the whole UDP→UDP
 * forwarding path: one `socket.send` and two integer adds, no copy, no allocation.
 *
 * Counters: `messagesIn`/`bytesIn` are the datagrams the relay accepted for the binding (the
 * BINDs, PINGs, RELAYs… naming the allocation from this address); datagrams from the address
 * that name no allocation bound here are the relay's drops, not the connection's. `messagesOut`/
 * `bytesOut` are the datagrams sent to it. On the native data plane the RELAYs forwarded in C
 * never enter JavaScript: the counters then add the addon's per-allocation RELAY counters since
 * the binding began (read when asked, e.g. at close), so they count the same traffic on both
 * planes.
 */
export class UdpLink implements RelayLink, Connection {
  readonly transport = 'udp' as const;
  readonly identity = undefined;
  readonly maxMessage: number;
  readonly socket: RelayUdpSocket;
  readonly address: string;
  readonly port: number;
  readonly addressKey: string;
  /** The allocation id it carries (for the native counters). */
  readonly allocationId: Buffer;
  open = true;
  private readonly bindings: UdpBindings | undefined;
  private jsBytesIn = 0;
  private jsBytesOut = 0;
  private jsMessagesIn = 0;
  private jsMessagesOut = 0;
  /** The native counters when the binding began (they are per allocation, since its first BIND). */
  private readonly nativeBase: ReturnType<NativeCounters>;

  constructor(
    socket: RelayUdpSocket,
    address: string,
    port: number,
    maxMessage: number,
    allocationId: Buffer = NO_ID,
    bindings?: UdpBindings,
  ) {
    this.socket = socket;
    this.address = address;
    this.port = port;
    this.maxMessage = maxMessage;
    this.addressKey = addressKey(address);
    this.allocationId = allocationId;
    this.bindings = bindings;
    this.nativeBase = bindings?.nativeCounters?.(allocationId);
  }

  get remoteAddress(): string {
    return this.address;
  }

  get remotePort(): number {
    return this.port;
  }

  /** What the native data plane forwarded for this binding (zeros on the JavaScript plane). */
  private native(): { packetsIn: number; bytesIn: number; packetsOut: number; bytesOut: number } {
    const now = this.bindings?.nativeCounters?.(this.allocationId);
    if (now === undefined) return ZERO_COUNTERS;
    const base = this.nativeBase ?? ZERO_COUNTERS;
    return {
      packetsIn: now.packetsIn - base.packetsIn,
      bytesIn: now.bytesIn - base.bytesIn,
      packetsOut: now.packetsOut - base.packetsOut,
      bytesOut: now.bytesOut - base.bytesOut,
    };
  }

  get bytesIn(): number {
    return this.jsBytesIn + this.native().bytesIn;
  }

  get bytesOut(): number {
    return this.jsBytesOut + this.native().bytesOut;
  }

  get messagesIn(): number {
    return this.jsMessagesIn + this.native().packetsIn;
  }

  get messagesOut(): number {
    return this.jsMessagesOut + this.native().packetsOut;
  }

  send(msg: Buffer): void {
    this.jsMessagesOut++;
    this.jsBytesOut += msg.length;
    this.socket.send(msg, this.port, this.address);
  }

  carries(src: RelayLink): boolean {
    return (
      src === this || (src instanceof UdpSource && src.port === this.port && src.address === this.address)
    );
  }

  linkForBind(): RelayLink {
    return this;
  }

  accepted(bytes: number): void {
    this.jsMessagesIn++;
    this.jsBytesIn += bytes;
  }

  bindNative(plane: NativeBindingTarget, id: Buffer): boolean {
    return plane.bindUdp(id, this.address, this.port);
  }

  bound(): void {}

  /** The binding ended: so does the connection (published as `close` with `reason`). */
  unbound(reason: string): void {
    if (!this.open) return;
    this.open = false;
    this.bindings?.table.release(this, reason);
  }

  /** Ends the binding (the allocation stays, unbound, as after a CLOSE) for `reason`. */
  close(reason: string = CloseReason.ClosedByServer): void {
    if (!this.open) return;
    this.bindings?.end(this, reason);
    // Whoever ends it tells the link; if the binding was already gone, it still closes.
    this.unbound(reason);
  }
}

const NO_ID = Buffer.alloc(16);
const ZERO_COUNTERS = { packetsIn: 0, bytesIn: 0, packetsOut: 0, bytesOut: 0 } as const;

/**
 * The source of the UDP datagram being handled, reused for every datagram (never stored: a BIND
 * makes a `UdpLink` from it).
 */
export class UdpSource implements RelayLink {
  readonly transport = 'udp' as const;
  readonly open = true;
  readonly identity = undefined;
  readonly maxMessage: number;
  readonly socket: RelayUdpSocket;
  address = '';
  port = 0;
  /** Set by the relay: the table and hooks every `UdpLink` it makes gets. */
  bindings: UdpBindings | undefined;

  constructor(socket: RelayUdpSocket, maxMessage: number) {
    this.socket = socket;
    this.maxMessage = maxMessage;
  }

  send(msg: Buffer): void {
    this.socket.send(msg, this.port, this.address);
  }

  carries(src: RelayLink): boolean {
    return src === this;
  }

  /** Keeps the current binding when it is this address's, or makes (and opens) a new `UdpLink`. */
  linkForBind(current: RelayLink | undefined, allocationId: Buffer): RelayLink {
    if (current?.carries(this)) return current;
    const link = new UdpLink(
      this.socket,
      this.address,
      this.port,
      this.maxMessage,
      allocationId,
      this.bindings,
    );
    this.bindings?.table.open(link);
    return link;
  }

  accepted(): void {}

  /** Never stored as a binding's link (`linkForBind` makes a `UdpLink`). */
  bindNative(): boolean {
    return false;
  }

  bound(): void {}

  unbound(): void {}
}

/** Per-recipient size defaults of the Unity Transport client (its `maxMessageSize` 1400 minus overheads). */
export const DEFAULT_MAX_TO_DTLS = 1363;
export const DEFAULT_MAX_TO_WS = 1386;
