/**
 * The relay: the message handlers of the Unity Relay protocol, for every transport. A message
 * arrives from a `RelayLink` (links.ts): a UDP source, a DTLS association or a WebSocket; replies
 * go back on that link (for UDP: from the socket the request arrived on), and RELAY goes out on
 * the recipient's link, whatever transport it uses. Every datagram is counted; anything that is not acted on is
 * dropped with a reason (`metrics.drop`). Nothing a datagram contains can throw out of here.
 *
 * Hot path (RELAY, PING): no decoding into objects, no copies. The sender is found from the
 * 16 id bytes in place (`AllocationStore.find`), and the received Buffer is sent on unchanged.
 */

import { timingSafeEqual } from 'node:crypto';
import { ConnectionTable } from '../../core/connection.js';
import type { Logger } from '../../core/logger.js';
import type { ProtocolMetrics } from '../../core/metrics.js';
import type { WireTap } from '../../core/wire-tap.js';
import { WireReader } from '../../wire/reader.js';
import { type Allocation, type AllocationStore, nonceIsNewer } from './allocations.js';
import { DEFAULT_LIMITER_KEYS, TokenBuckets } from './limits.js';
import {
  DEFAULT_MAX_TO_DTLS,
  DEFAULT_MAX_TO_WS,
  type NativeCounters,
  type RelayLink,
  type RelayUdpSocket,
  sameLink,
  type UdpLink,
  UdpSource,
  UnbindReason,
} from './links.js';
import {
  BIND_LENGTH,
  BIND_RECEIVED_BYTES,
  BIND_SIGNED_LENGTH,
  BindMsg,
  bindHmac,
  CLOSE_LENGTH,
  CONNECT_REQUEST_LENGTH,
  DISCONNECT_LENGTH,
  encodeMessage,
  HMAC_LENGTH,
  MessageType,
  PING_LENGTH,
  RELAY_HEADER_LENGTH,
  RelayErrorCode,
} from './messages.js';

export interface RelayOptions {
  /**
   * The native data plane's mirror, when the socket is a `NativeRelaySocket`: the sweep brings its
   * last-seen times and counters back before deciding anything.
   */
  nativeMirror?: {
    refreshLastSeen(store: AllocationStore): void;
    pullCounters(metrics: ProtocolMetrics): void;
    /** RELAYs the native side forwarded from and to one allocation (a UDP binding's counters add them). */
    counters: NativeCounters;
  };
  /** Largest message accepted, in bytes of UDP payload (or WebSocket/DTLS plaintext). Default 1472 (a 1500-byte MTU). */
  maxDatagramBytes?: number;
  /** ERROR replies allowed per source IP address (all its ports together), per second. Default 5. */
  errorRatePerSecond?: number;
  /** Burst of ERROR replies allowed per source IP. Default 10. */
  errorBurst?: number;
  /** Most sources each rate limiter remembers; the least recently used is evicted. Default 100 000. */
  errorSources?: number;
  /**
   * BIND and CONNECT_REQUEST messages (each costs an HMAC) that fail, per source IP per second:
   * forged or unknown connection data, a wrong HMAC, a replay, an allocation over its own budget.
   * A source with nothing left is dropped before any HMAC is computed. Default 50.
   */
  hmacRatePerSecond?: number;
  /** Burst of failed BIND/CONNECT_REQUEST per source IP. Default 100. */
  hmacBurst?: number;
  /**
   * BIND and CONNECT_REQUEST messages per allocation per second (UTP sends one a second until
   * answered). What a crowd behind one address sends is paid from here, each player its own, not
   * from its address's budget. Default 10.
   */
  allocationHmacRatePerSecond?: number;
  /** Burst of BIND/CONNECT_REQUEST per allocation. Default 20. */
  allocationHmacBurst?: number;
  /** Largest relay message forwarded to a DTLS recipient (UTP drops bigger datagrams). Default 1363. */
  maxMessageToDtls?: number;
  /** Largest relay message forwarded to a WebSocket recipient (UTP aborts on bigger frames). Default 1386. */
  maxMessageToWs?: number;
  /** How often idle allocations are swept. Default: a quarter of the shortest timeout, ≤ 1 s. */
  sweepIntervalMs?: number;
}

/** Default largest datagram accepted (an Ethernet MTU's UDP payload). */
export const DEFAULT_MAX_DATAGRAM_BYTES = 1472;

/** Default most sources the rate limiters remember. */
export const DEFAULT_ERROR_SOURCES = DEFAULT_LIMITER_KEYS;

/** Whether the 16 bytes at `msg[offset]` are `id`. */
function idAt(msg: Buffer, offset: number, id: Buffer): boolean {
  return msg.length >= offset + 16 && msg.compare(id, 0, 16, offset, offset + 16) === 0;
}

export class RelayServer {
  readonly socket: RelayUdpSocket;
  readonly store: AllocationStore;
  readonly maxMessageToDtls: number;
  readonly maxMessageToWs: number;
  readonly maxDatagram: number;
  private readonly metrics: ProtocolMetrics;
  private readonly log: Logger;
  /** ERROR replies per source IP. */
  private readonly errorLimiter: TokenBuckets;
  /** BIND / CONNECT_REQUEST (HMAC work) that failed, per source IP. */
  private readonly hmacLimiter: TokenBuckets;
  /** BIND / CONNECT_REQUEST per allocation (keyed by its id). */
  private readonly allocationHmacLimiter: TokenBuckets;
  private readonly reader = new WireReader();
  private readonly sweepTimer: NodeJS.Timeout;
  private readonly nativeMirror: RelayOptions['nativeMirror'];
  /** The source of the UDP datagram being handled (reused; see links.ts). */
  private readonly udpSource: UdpSource;
  /**
   * The connection seam's table of UDP bindings: each `UdpLink` is a connection (transport
   * `udp`) from the BIND that binds an allocation from an address to the end of that binding.
   * No cap of its own: the allocations it carries are already capped (the store's
   * `maxAllocations`, the API's per-address and rate limits, the HMAC budget per source), and a
   * count of bindings per address would stop a NAT or a backend that the allocation limits let in.
   */
  readonly udpTable: ConnectionTable<UdpLink>;
  /** The admin endpoint's wire view; one boolean check per message while nobody watches. */
  wireTap: WireTap | undefined;

  constructor(
    socket: RelayUdpSocket,
    store: AllocationStore,
    metrics: ProtocolMetrics,
    log: Logger,
    options: RelayOptions = {},
  ) {
    this.socket = socket;
    this.store = store;
    this.metrics = metrics;
    this.log = log;
    this.maxDatagram = options.maxDatagramBytes ?? DEFAULT_MAX_DATAGRAM_BYTES;
    this.maxMessageToDtls = options.maxMessageToDtls ?? DEFAULT_MAX_TO_DTLS;
    this.maxMessageToWs = options.maxMessageToWs ?? DEFAULT_MAX_TO_WS;
    const sources = options.errorSources ?? DEFAULT_ERROR_SOURCES;
    this.errorLimiter = new TokenBuckets(options.errorRatePerSecond ?? 5, options.errorBurst ?? 10, sources);
    this.hmacLimiter = new TokenBuckets(options.hmacRatePerSecond ?? 50, options.hmacBurst ?? 100, sources);
    this.allocationHmacLimiter = new TokenBuckets(
      options.allocationHmacRatePerSecond ?? 10,
      options.allocationHmacBurst ?? 20,
      sources,
    );
    this.udpSource = new UdpSource(socket, this.maxDatagram);
    this.nativeMirror = options.nativeMirror;
    this.udpTable = new ConnectionTable<UdpLink>({
      protocol: metrics.protocol,
      transport: 'udp',
      maxConnections: Number.POSITIVE_INFINITY,
      maxConnectionsPerIp: 0,
    });
    const mirror = this.nativeMirror;
    this.udpSource.bindings = {
      table: this.udpTable,
      end: (link, reason) => {
        const a = this.store.find(link.allocationId, 0);
        if (a !== undefined && a.state === 'bound' && a.link === link) this.unbindFor(a, reason);
      },
      nativeCounters: mirror === undefined ? undefined : (id) => mirror.counters(id),
    };
    const shortest = Math.min(store.idleTimeoutMs, store.hostAloneTimeoutMs, store.bindTimeoutMs);
    const every = options.sweepIntervalMs ?? Math.max(10, Math.min(1000, Math.floor(shortest / 4)));
    this.sweepTimer = setInterval(() => this.sweep(), every);
    this.sweepTimer.unref();
    socket.on('message', this.onMessage);
    socket.on('error', (err) => this.log.warn({ err }, 'udp socket error'));
  }

  /** Brings the native data plane's counters and last-seen times back now (the sweep does it too). */
  syncDataplane(): void {
    if (this.nativeMirror === undefined) return;
    this.nativeMirror.refreshLastSeen(this.store);
    this.nativeMirror.pullCounters(this.metrics);
  }

  stop(): void {
    clearInterval(this.sweepTimer);
    this.socket.off('message', this.onMessage);
    this.nativeMirror?.pullCounters(this.metrics);
    // The UDP bindings end with the server (their counters read while the native plane is open).
    this.udpTable.closing();
    for (const link of [...this.udpTable.connections()]) link.unbound(UnbindReason.ServerClosing);
  }

  private readonly onMessage = (msg: Buffer, rinfo: { address: string; port: number }): void => {
    this.metrics.received++;
    this.metrics.bytesReceived += msg.length;
    if (this.wireTap?.armed && this.wireTap.sample())
      this.wireTap.keep('client', `${rinfo.address}:${rinfo.port}`, 'udp', msg);
    try {
      this.handle(msg, rinfo.address, rinfo.port);
    } catch (err) {
      // A bug, never the datagram's fault: count it and carry on.
      this.metrics.drop('internal_error');
      this.log.error({ err }, 'relay handler failed');
    }
  };

  /** Handles one UDP datagram from `address:port`. Public for tests and embedders that own the socket loop. */
  handle(msg: Buffer, address: string, port: number): void {
    const src = this.udpSource;
    src.address = address;
    src.port = port;
    this.dispatch(msg, src);
  }

  /**
   * Handles one relay message that arrived on a connection-like link (a DTLS association, a
   * WebSocket). Never throws; counts the message.
   */
  handleFrom(msg: Buffer, link: RelayLink): void {
    this.metrics.received++;
    this.metrics.bytesReceived += msg.length;
    if (this.wireTap?.armed && this.wireTap.sample())
      this.wireTap.keep('client', `${link.address}:${link.port}`, link.transport, msg);
    try {
      this.dispatch(msg, link);
    } catch (err) {
      this.metrics.drop('internal_error');
      this.log.error({ err }, 'relay handler failed');
    }
  }

  private dispatch(msg: Buffer, src: RelayLink): void {
    const len = msg.length;
    if (len > this.maxDatagram) {
      this.metrics.drop('too_large');
      return;
    }
    if (len < 4 || msg[0] !== 0xda || msg[1] !== 0x72) {
      this.metrics.drop('bad_header');
      return;
    }
    if (msg[2] !== 0) {
      this.metrics.drop('bad_version');
      return;
    }
    switch (msg[3]) {
      case MessageType.RELAY:
        this.onRelay(msg, src);
        return;
      case MessageType.PING:
        this.onPing(msg, src);
        return;
      case MessageType.BIND:
        this.onBind(msg, src);
        return;
      case MessageType.CONNECT_REQUEST:
        this.onConnectRequest(msg, src);
        return;
      case MessageType.DISCONNECT:
        this.onDisconnect(msg, src);
        return;
      case MessageType.CLOSE:
        this.onClose(msg, src);
        return;
      default: {
        // Server-to-client types (BIND_RECEIVED, ACCEPTED, REJECTED, ERROR) and unknown codes.
        this.metrics.drop('unexpected_type');
        return;
      }
    }
  }

  /**
   * The live allocation whose id is at `msg[offset]`, if it is bound through `src`.
   * Otherwise: a live allocation bound elsewhere (or not bound yet) gets ERROR 3, an unknown or
   * expired one is dropped without a reply (as the real relay does: UTP re-binds on silence).
   * A link that authenticated as one allocation (DTLS) may speak only for that one.
   */
  private sender(msg: Buffer, offset: number, src: RelayLink): Allocation | undefined {
    if (src.identity !== undefined && !idAt(msg, offset, src.identity)) {
      this.metrics.drop('identity_mismatch');
      return undefined;
    }
    const a = this.store.find(msg, offset);
    if (a === undefined || a.state === 'expired') {
      this.metrics.drop('unknown_allocation');
      return undefined;
    }
    if (a.state !== 'bound' || !sameLink(a.link, src)) {
      this.sendError(a.id, RelayErrorCode.CLIENT_PLAYER_MISMATCH, src, msg.length);
      this.metrics.drop('not_bound_from_address');
      return undefined;
    }
    a.lastSeen = this.store.now();
    a.packetsIn++;
    a.bytesIn += msg.length;
    // Counted on the binding (a UDP datagram is matched to its binding only here).
    a.link!.accepted(msg.length);
    return a;
  }

  private onRelay(msg: Buffer, src: RelayLink): void {
    if (msg.length < RELAY_HEADER_LENGTH) {
      this.metrics.drop('bad_length');
      return;
    }
    const r = this.reader.reset(msg, 36);
    if (r.u16be() !== msg.length - RELAY_HEADER_LENGTH) {
      this.metrics.drop('bad_length');
      return;
    }
    const from = this.sender(msg, 4, src);
    if (from === undefined) return;
    const to = this.store.find(msg, 20);
    if (to === undefined || !from.peers.has(to)) {
      this.sendError(from.id, RelayErrorCode.NOT_CONNECTED, from.link!, msg.length);
      this.metrics.drop('not_connected');
      return;
    }
    const link = to.link;
    if (to.state !== 'bound' || link === undefined) {
      this.metrics.drop('peer_not_bound');
      return;
    }
    to.packetsOut++;
    to.bytesOut += msg.length;
    this.forward(msg, link);
  }

  /**
   * Sends a message on to a recipient's link, within that recipient's size limit. UDP to UDP is
   * the single `socket.send` of `UdpLink.send`.
   */
  private forward(msg: Buffer, link: RelayLink): void {
    if (msg.length > link.maxMessage) {
      this.metrics.drop(`too_large_for_${link.transport}`);
      return;
    }
    if (!link.open) {
      this.metrics.drop('peer_link_closed');
      return;
    }
    link.send(msg);
    this.countSent(msg, link);
  }

  /** Counts a message sent on `link`, and shows it to the wire view when someone watches. */
  private countSent(msg: Buffer, link: RelayLink): void {
    this.metrics.sent++;
    this.metrics.bytesSent += msg.length;
    if (this.wireTap?.armed && this.wireTap.sample())
      this.wireTap.keep('server', `${link.address}:${link.port}`, link.transport, msg);
  }

  private onPing(msg: Buffer, src: RelayLink): void {
    if (msg.length !== PING_LENGTH) {
      this.metrics.drop('bad_length');
      return;
    }
    const from = this.sender(msg, 4, src);
    if (from === undefined) return;
    // Echo as received: UTP only needs some valid message back to stay "alive". Replies to a
    // verified sender go out on its binding's link (the same peer as `src`), which counts them.
    const link = from.link!;
    link.send(msg);
    from.packetsOut++;
    from.bytesOut += msg.length;
    this.countSent(msg, link);
  }

  /**
   * Room in the source address's budget for HMAC work that fails; checked before computing any.
   * Work that succeeds is paid by its allocation (`allocationAllows`), so a crowd behind one
   * address binds at once while forgeries and replays from it are cut after the burst.
   */
  private hmacAllowed(src: RelayLink): boolean {
    if (this.hmacLimiter.bucket(src.address, this.store.now()).peek(this.store.now()) >= 1) return true;
    this.metrics.drop('hmac_rate_limited');
    return false;
  }

  /** HMAC work from `src` that failed (or was refused): paid from its address's budget. */
  private chargeFailed(src: RelayLink): void {
    this.hmacLimiter.take(src.address, this.store.now());
  }

  /** A BIND or CONNECT_REQUEST dropped for `reason` after HMAC work: charged to `src`, counted. */
  private failed(src: RelayLink, reason: string): void {
    this.chargeFailed(src);
    this.metrics.drop(reason);
  }

  /** One BIND or CONNECT_REQUEST of allocation `a`, from its own budget (else charged to `src`). */
  private allocationAllows(a: Allocation, src: RelayLink): boolean {
    if (this.allocationHmacLimiter.take(a.guid, this.store.now())) return true;
    this.failed(src, 'allocation_hmac_rate_limited');
    return false;
  }

  private onBind(msg: Buffer, src: RelayLink): void {
    if (msg.length !== BIND_LENGTH) {
      this.metrics.drop('bad_length');
      return;
    }
    if (!this.hmacAllowed(src)) return;
    const bind = BindMsg.read(this.reader.reset(msg, 4));
    const id = this.store.verifyConnectionData(msg, 8); // bind.connectionData, in place
    if (id === undefined) {
      this.failed(src, 'unknown_connection_data');
      return;
    }
    if (src.identity !== undefined && !id.equals(src.identity)) {
      this.failed(src, 'identity_mismatch');
      return;
    }
    let a = this.store.find(id, 0);
    if (a === undefined && !this.store.adoptFromConnectionData) {
      // Connection data we issued, for an allocation long forgotten.
      this.sendError(id, RelayErrorCode.ALLOCATION_NOT_FOUND, src, msg.length);
      this.failed(src, 'allocation_not_found');
      return;
    }
    // A relay node derives the key of an allocation it has not seen yet from the fleet secret, and
    // every node that of an expired one (its tombstone keeps no key).
    const key = a !== undefined && a.state !== 'expired' ? a.key : this.store.credentials.keyFor(id);
    const expected = bindHmac(key, msg.subarray(0, BIND_SIGNED_LENGTH));
    if (!timingSafeEqual(expected, msg.subarray(BIND_SIGNED_LENGTH, BIND_SIGNED_LENGTH + HMAC_LENGTH))) {
      this.failed(src, 'bad_hmac'); // silently, as the doc says
      return;
    }
    if (a === undefined) {
      // First BIND on a relay node: the connection data says all the node needs (no store lookup).
      const adopted = this.store.adopt(msg, 8);
      if (typeof adopted === 'string') {
        // Placed on another node, or too late: the client cannot succeed here (ERROR 4 is fatal
        // for it, rather than re-binding forever).
        this.sendError(id, RelayErrorCode.ALLOCATION_NOT_FOUND, src, msg.length);
        this.failed(src, adopted === 'other_node' ? 'placed_on_other_node' : adopted);
        return;
      }
      a = adopted;
      this.metrics.count('allocations_adopted');
    }
    if (a.state === 'expired') {
      this.sendError(a.id, RelayErrorCode.ALLOCATION_NOT_FOUND, src, msg.length);
      this.failed(src, 'allocation_expired');
      return;
    }
    const sameAddress = a.state === 'bound' && sameLink(a.link, src);
    // A new address (or no binding at all, e.g. after CLOSE) needs a newer nonce, wrap-aware.
    if (!sameAddress && !nonceIsNewer(bind.nonce, a.nonce)) {
      this.failed(src, 'stale_nonce'); // a replay from another address
      return;
    }
    // Charged only now, once the BIND is genuine: forged BINDs for an allocation (its connection
    // data is no secret from its game's other players) cannot spend its budget.
    if (!this.allocationAllows(a, src)) return;
    if (a.state !== 'bound') this.metrics.open++;
    else if (!sameAddress) this.metrics.count('rebind_new_address');
    // The source says what it binds through (a reused UDP source is never stored: a binding to a
    // new UDP address gets its own link, a connection of the seam).
    const link = src.linkForBind(a.link, a.id);
    this.store.bind(a, src.address, src.port, bind.nonce, link);
    link.accepted(msg.length);
    link.send(BIND_RECEIVED_BYTES);
    this.countSent(BIND_RECEIVED_BYTES, link);
  }

  private onConnectRequest(msg: Buffer, src: RelayLink): void {
    if (msg.length !== CONNECT_REQUEST_LENGTH) {
      this.metrics.drop('bad_length');
      return;
    }
    const requester = this.sender(msg, 4, src);
    if (requester === undefined) return;
    if (!this.hmacAllowed(src)) return;
    // Replies go out on the requester's binding (the same peer as `src`), which counts them.
    const back = requester.link!;
    const targetId = this.store.verifyConnectionData(msg, 21);
    if (targetId === undefined) this.chargeFailed(src);
    // Charged once the request names a genuine target: a spoofer who knows a player's address,
    // port and allocation id also needs a host's connection data to spend that player's budget.
    else if (!this.allocationAllows(requester, src)) return;
    const target = targetId === undefined ? undefined : this.store.find(targetId, 0);
    if (
      target === undefined &&
      targetId !== undefined &&
      this.store.adoptFromConnectionData &&
      this.store.placedHere(msg, 21)
    ) {
      // A relay node learns of a host at its first BIND: not bound here yet, the client retries.
      this.metrics.drop('target_not_bound');
      return;
    }
    if (target === undefined || target.state === 'expired') {
      this.sendError(requester.id, RelayErrorCode.ALLOCATION_NOT_FOUND, back, msg.length);
      this.metrics.drop('target_not_found');
      return;
    }
    if (target === requester) {
      this.sendError(requester.id, RelayErrorCode.SELF_CONNECT_NOT_ALLOWED, back, msg.length);
      this.metrics.drop('self_connect');
      return;
    }
    if (target.state !== 'bound') {
      this.metrics.drop('target_not_bound'); // the client retries
      return;
    }
    const ids = { fromAllocationId: target.id, toAllocationId: requester.id };
    if (!target.peers.has(requester)) {
      if (target.peers.size >= target.maxConnections) {
        this.reply(encodeMessage({ type: 'REJECTED', ...ids }), back, msg.length);
        this.metrics.count('rejected_full');
        return;
      }
      this.store.link(target, requester);
      this.metrics.count('connections');
    }
    // Again on every retry: the client resends CONNECT_REQUEST until it sees ACCEPTED.
    this.reply(encodeMessage({ type: 'ACCEPTED', ...ids }), back, msg.length);
  }

  private onDisconnect(msg: Buffer, src: RelayLink): void {
    if (msg.length !== DISCONNECT_LENGTH) {
      this.metrics.drop('bad_length');
      return;
    }
    const from = this.sender(msg, 4, src);
    if (from === undefined) return;
    const to = this.store.find(msg, 20);
    if (to === undefined || !from.peers.has(to)) {
      this.metrics.drop('not_connected');
      return;
    }
    this.store.unlink(from, to);
    this.metrics.count('disconnects');
    if (to.state === 'bound' && to.link !== undefined) this.forward(msg, to.link);
  }

  private onClose(msg: Buffer, src: RelayLink): void {
    if (msg.length !== CLOSE_LENGTH) {
      this.metrics.drop('bad_length');
      return;
    }
    const a = this.sender(msg, 4, src);
    if (a === undefined) return;
    // CLOSE unbinds: the address and the links go, the allocation stays (a later BIND binds it again).
    this.end(a, this.store.unbind(a, UnbindReason.Close), true, 'close');
  }

  /** The dashboard's disconnect: unbinds `a` as its CLOSE would (its peers get a DISCONNECT). */
  unbindNow(a: Allocation): void {
    if (a.state !== 'bound') return;
    this.unbindFor(a, UnbindReason.AdminDisconnect);
  }

  /** Unbinds `a` for `reason` (its link's close): as a CLOSE would, its peers get a DISCONNECT. */
  private unbindFor(a: Allocation, reason: string): void {
    this.end(a, this.store.unbind(a, reason), true, reason);
  }

  /** The dashboard's end: expires `a` now, as the idle timeout would. */
  expireNow(a: Allocation): void {
    if (a.state === 'expired') return;
    const wasBound = a.state === 'bound';
    this.end(a, this.store.expire(a, UnbindReason.AdminEnd), wasBound, 'admin_end');
  }

  private sweep(): void {
    try {
      if (this.nativeMirror !== undefined) {
        this.nativeMirror.refreshLastSeen(this.store);
        this.nativeMirror.pullCounters(this.metrics);
      }
      this.store.sweep((a, peers, wasBound) => this.end(a, peers, wasBound, 'idle_timeout'));
      const now = this.store.now();
      this.errorLimiter.prune(now);
      this.hmacLimiter.prune(now);
      this.allocationHmacLimiter.prune(now);
    } catch (err) {
      this.log.error({ err }, 'sweep failed');
    }
  }

  /** Bookkeeping for a binding that just ended (expiry, CLOSE); its bound peers get a DISCONNECT from it. */
  private end(a: Allocation, peers: Allocation[], wasBound: boolean, reason: string): void {
    if (wasBound) {
      this.metrics.open--;
      this.metrics.close(reason);
    }
    for (const p of peers) {
      if (p.state !== 'bound' || p.link === undefined) continue;
      this.forward(
        encodeMessage({ type: 'DISCONNECT', fromAllocationId: a.id, toAllocationId: p.id }),
        p.link,
      );
    }
  }

  /** Sends an ERROR, rate-limited per source IP address (whatever its port). */
  private sendError(id: Buffer, code: number, src: RelayLink, receivedLength: number): void {
    if (!this.errorLimiter.take(src.address, this.store.now())) {
      this.metrics.count('error_replies_rate_limited');
      return;
    }
    this.reply(encodeMessage({ type: 'ERROR', allocationId: id, errorCode: code }), src, receivedLength);
    this.metrics.count(`error_${code}`);
  }

  /** Replies to the source of a message, never with more bytes than it sent (no amplification). */
  private reply(bytes: Buffer, src: RelayLink, receivedLength: number): void {
    if (bytes.length > receivedLength) {
      this.metrics.count('replies_suppressed_too_large');
      return;
    }
    src.send(bytes);
    this.countSent(bytes, src);
  }
}
