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
  /** An allocation was bound through this link. */
  bound(): void;
  /** The binding that used this link ended (expiry, CLOSE, re-homed): DTLS closes its association. */
  unbound(): void;
}

/** Whether `src` (the source of a message being handled) is the link `bound` an allocation is bound to. */
export function sameLink(bound: RelayLink | undefined, src: RelayLink): boolean {
  if (bound === undefined) return false;
  if (bound === src) return true;
  return (
    src.transport === 'udp' &&
    bound.transport === 'udp' &&
    bound.port === src.port &&
    bound.address === src.address
  );
}

/** A bound UDP peer. `send` is the whole UDP→UDP forwarding path: one `socket.send`, no copy. */
export class UdpLink implements RelayLink {
  readonly transport = 'udp' as const;
  readonly open = true;
  readonly identity = undefined;
  readonly maxMessage: number;
  readonly socket: RelayUdpSocket;
  readonly address: string;
  readonly port: number;

  constructor(socket: RelayUdpSocket, address: string, port: number, maxMessage: number) {
    this.socket = socket;
    this.address = address;
    this.port = port;
    this.maxMessage = maxMessage;
  }

  send(msg: Buffer): void {
    this.socket.send(msg, this.port, this.address);
  }

  bound(): void {}

  unbound(): void {}
}

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

  constructor(socket: RelayUdpSocket, maxMessage: number) {
    this.socket = socket;
    this.maxMessage = maxMessage;
  }

  send(msg: Buffer): void {
    this.socket.send(msg, this.port, this.address);
  }

  bound(): void {}

  unbound(): void {}
}

/** Per-recipient size defaults of the Unity Transport client (its `maxMessageSize` 1400 minus overheads). */
export const DEFAULT_MAX_TO_DTLS = 1363;
export const DEFAULT_MAX_TO_WS = 1386;
