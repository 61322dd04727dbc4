/**
 * The UDP relay: the message handlers of spec §8, on one socket. Replies always leave from the
 * socket the request arrived on. Every datagram is counted; anything that is not acted on is
 * dropped with a reason (`metrics.drop`). Nothing a datagram contains can throw out of here.
 *
 * Hot path (RELAY, PING): no decoding into objects, no copies. The sender is found from the
 * 16 id bytes in place (`AllocationStore.find`), and the received Buffer is sent on unchanged.
 */

import { timingSafeEqual } from 'node:crypto';
import type dgram from 'node:dgram';
import type { Logger } from 'pino';
import type { ProtocolMetrics } from '../../core/metrics.js';
import { WireReader } from '../../wire/reader.js';
import { type Allocation, type AllocationStore, nonceIsNewer } from './allocations.js';
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
  /** Largest datagram accepted, in bytes of UDP payload. Default 1472 (a 1500-byte MTU). */
  maxDatagramBytes?: number;
  /** ERROR replies allowed per source address and port, per second. Default 5. */
  errorRatePerSecond?: number;
  /** Burst of ERROR replies allowed per source. Default 10. */
  errorBurst?: number;
  /** Most sources the ERROR rate limiter remembers; the least recently used is evicted. Default 100 000. */
  errorSources?: number;
  /** How often idle allocations are swept. Default: a quarter of the shortest timeout, ≤ 1 s. */
  sweepIntervalMs?: number;
}

interface Bucket {
  tokens: number;
  at: number;
}

/** Default most sources the ERROR rate limiter remembers. */
export const DEFAULT_ERROR_SOURCES = 100_000;

/**
 * Token bucket per source address and port, for ERROR replies. Bounded: at most `maxSources`
 * buckets. The Map is kept in least-recently-used order (a bucket is re-inserted when used), so
 * when it is full a new source evicts the oldest bucket in O(1), and `prune` walks only the
 * buckets it removes. An evicted source simply starts again with a full bucket.
 */
export class ErrorRateLimiter {
  private readonly buckets = new Map<string, Bucket>();
  private readonly rate: number;
  private readonly burst: number;
  private readonly maxSources: number;
  /** A bucket untouched this long has refilled completely (behaves exactly like a new one). */
  private readonly refillMs: number;

  constructor(ratePerSecond: number, burst: number, maxSources = DEFAULT_ERROR_SOURCES) {
    this.rate = ratePerSecond / 1000;
    this.burst = burst;
    this.maxSources = Math.max(1, Math.floor(maxSources));
    this.refillMs = this.rate > 0 ? burst / this.rate : Number.POSITIVE_INFINITY;
  }

  /** Sources currently remembered. */
  get size(): number {
    return this.buckets.size;
  }

  take(address: string, port: number, now: number): boolean {
    const key = `${address}|${port}`;
    let b = this.buckets.get(key);
    if (b === undefined) {
      if (this.buckets.size >= this.maxSources) {
        // Full: evict the least recently used source (first in insertion order). O(1).
        const oldest = this.buckets.keys().next();
        if (oldest.done !== true) this.buckets.delete(oldest.value);
      }
      b = { tokens: this.burst, at: now };
      this.buckets.set(key, b);
    } else {
      b.tokens = Math.min(this.burst, b.tokens + (now - b.at) * this.rate);
      b.at = now;
      // Move to the end: the Map stays in least-recently-used order.
      this.buckets.delete(key);
      this.buckets.set(key, b);
    }
    if (b.tokens < 1) return false;
    b.tokens -= 1;
    return true;
  }

  /**
   * Forgets buckets that have surely refilled (untouched for `burst / rate`). Buckets are in
   * order of last use, so this stops at the first recent one: the cost is the number removed + 1.
   * The relay calls it once per sweep interval.
   */
  prune(now: number): void {
    for (const [k, b] of this.buckets) {
      if (now - b.at < this.refillMs) break;
      this.buckets.delete(k);
    }
  }
}

export class RelayServer {
  readonly socket: dgram.Socket;
  readonly store: AllocationStore;
  private readonly metrics: ProtocolMetrics;
  private readonly log: Logger;
  private readonly maxDatagram: number;
  private readonly limiter: ErrorRateLimiter;
  private readonly reader = new WireReader();
  private readonly sweepTimer: NodeJS.Timeout;

  constructor(
    socket: dgram.Socket,
    store: AllocationStore,
    metrics: ProtocolMetrics,
    log: Logger,
    options: RelayOptions = {},
  ) {
    this.socket = socket;
    this.store = store;
    this.metrics = metrics;
    this.log = log;
    this.maxDatagram = options.maxDatagramBytes ?? 1472;
    this.limiter = new ErrorRateLimiter(
      options.errorRatePerSecond ?? 5,
      options.errorBurst ?? 10,
      options.errorSources ?? DEFAULT_ERROR_SOURCES,
    );
    const shortest = Math.min(store.idleTimeoutMs, store.hostAloneTimeoutMs, store.bindTimeoutMs);
    const every = options.sweepIntervalMs ?? Math.max(10, Math.min(1000, Math.floor(shortest / 4)));
    this.sweepTimer = setInterval(() => this.sweep(), every);
    this.sweepTimer.unref();
    socket.on('message', this.onMessage);
    socket.on('error', (err) => this.log.warn({ err }, 'udp socket error'));
  }

  stop(): void {
    clearInterval(this.sweepTimer);
    this.socket.off('message', this.onMessage);
  }

  private readonly onMessage = (msg: Buffer, rinfo: dgram.RemoteInfo): void => {
    this.metrics.received++;
    try {
      this.handle(msg, rinfo.address, rinfo.port);
    } catch (err) {
      // A bug, never the datagram's fault: count it and carry on.
      this.metrics.drop('internal_error');
      this.log.error({ err }, 'relay handler failed');
    }
  };

  /** Dispatches one datagram. Public for tests and embedders that own the socket loop. */
  handle(msg: Buffer, address: string, port: number): void {
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
        this.onRelay(msg, address, port);
        return;
      case MessageType.PING:
        this.onPing(msg, address, port);
        return;
      case MessageType.BIND:
        this.onBind(msg, address, port);
        return;
      case MessageType.CONNECT_REQUEST:
        this.onConnectRequest(msg, address, port);
        return;
      case MessageType.DISCONNECT:
        this.onDisconnect(msg, address, port);
        return;
      case MessageType.CLOSE:
        this.onClose(msg, address, port);
        return;
      default: {
        // Server-to-client types (BIND_RECEIVED, ACCEPTED, REJECTED, ERROR) and unknown codes.
        this.metrics.drop('unexpected_type');
        return;
      }
    }
  }

  /**
   * The live allocation whose id is at `msg[offset]`, if it is bound from `address:port`.
   * Otherwise: a live allocation bound elsewhere (or not bound yet) gets ERROR 3, an unknown or
   * expired one is dropped without a reply (as the real relay does: UTP re-binds on silence).
   */
  private sender(msg: Buffer, offset: number, address: string, port: number): Allocation | undefined {
    const a = this.store.find(msg, offset);
    if (a === undefined || a.state === 'expired') {
      this.metrics.drop('unknown_allocation');
      return undefined;
    }
    if (a.state !== 'bound' || a.port !== port || a.address !== address) {
      this.sendError(a.id, RelayErrorCode.CLIENT_PLAYER_MISMATCH, address, port, msg.length);
      this.metrics.drop('not_bound_from_address');
      return undefined;
    }
    a.lastSeen = this.store.now();
    return a;
  }

  private onRelay(msg: Buffer, address: string, port: number): void {
    if (msg.length < RELAY_HEADER_LENGTH) {
      this.metrics.drop('bad_length');
      return;
    }
    const r = this.reader.reset(msg, 36);
    if (r.u16be() !== msg.length - RELAY_HEADER_LENGTH) {
      this.metrics.drop('bad_length');
      return;
    }
    const from = this.sender(msg, 4, address, port);
    if (from === undefined) return;
    const to = this.store.find(msg, 20);
    if (to === undefined || !from.peers.has(to)) {
      this.sendError(from.id, RelayErrorCode.NOT_CONNECTED, address, port, msg.length);
      this.metrics.drop('not_connected');
      return;
    }
    if (to.state !== 'bound') {
      this.metrics.drop('peer_not_bound');
      return;
    }
    this.socket.send(msg, to.port, to.address);
    this.metrics.sent++;
  }

  private onPing(msg: Buffer, address: string, port: number): void {
    if (msg.length !== PING_LENGTH) {
      this.metrics.drop('bad_length');
      return;
    }
    if (this.sender(msg, 4, address, port) === undefined) return;
    // Echo as received: UTP only needs some valid message back to stay "alive".
    this.socket.send(msg, port, address);
    this.metrics.sent++;
  }

  private onBind(msg: Buffer, address: string, port: number): void {
    if (msg.length !== BIND_LENGTH) {
      this.metrics.drop('bad_length');
      return;
    }
    const bind = BindMsg.read(this.reader.reset(msg, 4));
    const id = this.store.verifyConnectionData(msg, 8); // bind.connectionData, in place
    if (id === undefined) {
      this.metrics.drop('unknown_connection_data');
      return;
    }
    const a = this.store.find(id, 0);
    if (a === undefined) {
      // Connection data we issued, for an allocation long forgotten.
      this.sendError(id, RelayErrorCode.ALLOCATION_NOT_FOUND, address, port, msg.length);
      this.metrics.drop('allocation_not_found');
      return;
    }
    const expected = bindHmac(a.key, msg.subarray(0, BIND_SIGNED_LENGTH));
    if (!timingSafeEqual(expected, msg.subarray(BIND_SIGNED_LENGTH, BIND_SIGNED_LENGTH + HMAC_LENGTH))) {
      this.metrics.drop('bad_hmac'); // silently, as the doc says
      return;
    }
    if (a.state === 'expired') {
      this.sendError(a.id, RelayErrorCode.ALLOCATION_NOT_FOUND, address, port, msg.length);
      this.metrics.drop('allocation_expired');
      return;
    }
    const sameAddress = a.state === 'bound' && a.port === port && a.address === address;
    // A new address (or no binding at all, e.g. after CLOSE) needs a newer nonce, wrap-aware.
    if (!sameAddress && !nonceIsNewer(bind.nonce, a.nonce)) {
      this.metrics.drop('stale_nonce');
      return;
    }
    if (a.state !== 'bound') this.metrics.open++;
    else if (!sameAddress) this.metrics.count('rebind_new_address');
    this.store.bind(a, address, port, bind.nonce);
    this.socket.send(BIND_RECEIVED_BYTES, port, address);
    this.metrics.sent++;
  }

  private onConnectRequest(msg: Buffer, address: string, port: number): void {
    if (msg.length !== CONNECT_REQUEST_LENGTH) {
      this.metrics.drop('bad_length');
      return;
    }
    const requester = this.sender(msg, 4, address, port);
    if (requester === undefined) return;
    const targetId = this.store.verifyConnectionData(msg, 21);
    const target = targetId === undefined ? undefined : this.store.find(targetId, 0);
    if (target === undefined || target.state === 'expired') {
      this.sendError(requester.id, RelayErrorCode.ALLOCATION_NOT_FOUND, address, port, msg.length);
      this.metrics.drop('target_not_found');
      return;
    }
    if (target === requester) {
      this.sendError(requester.id, RelayErrorCode.SELF_CONNECT_NOT_ALLOWED, address, port, msg.length);
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
        this.reply(encodeMessage({ type: 'REJECTED', ...ids }), address, port, msg.length);
        this.metrics.count('rejected_full');
        return;
      }
      this.store.link(target, requester);
      this.metrics.count('connections');
    }
    // Again on every retry: the client resends CONNECT_REQUEST until it sees ACCEPTED.
    this.reply(encodeMessage({ type: 'ACCEPTED', ...ids }), address, port, msg.length);
  }

  private onDisconnect(msg: Buffer, address: string, port: number): void {
    if (msg.length !== DISCONNECT_LENGTH) {
      this.metrics.drop('bad_length');
      return;
    }
    const from = this.sender(msg, 4, address, port);
    if (from === undefined) return;
    const to = this.store.find(msg, 20);
    if (to === undefined || !from.peers.has(to)) {
      this.metrics.drop('not_connected');
      return;
    }
    this.store.unlink(from, to);
    this.metrics.count('disconnects');
    if (to.state === 'bound') {
      this.socket.send(msg, to.port, to.address);
      this.metrics.sent++;
    }
  }

  private onClose(msg: Buffer, address: string, port: number): void {
    if (msg.length !== CLOSE_LENGTH) {
      this.metrics.drop('bad_length');
      return;
    }
    const a = this.sender(msg, 4, address, port);
    if (a === undefined) return;
    // CLOSE unbinds: the address and the links go, the allocation stays (a later BIND binds it again).
    this.end(a, this.store.unbind(a), true, 'close');
  }

  private sweep(): void {
    try {
      this.store.sweep((a, peers, wasBound) => this.end(a, peers, wasBound, 'idle_timeout'));
      this.limiter.prune(this.store.now());
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
      if (p.state !== 'bound') continue;
      this.socket.send(
        encodeMessage({ type: 'DISCONNECT', fromAllocationId: a.id, toAllocationId: p.id }),
        p.port,
        p.address,
      );
      this.metrics.sent++;
    }
  }

  /** Sends an ERROR, rate-limited per source. */
  private sendError(id: Buffer, code: number, address: string, port: number, receivedLength: number): void {
    if (!this.limiter.take(address, port, this.store.now())) {
      this.metrics.count('error_replies_rate_limited');
      return;
    }
    this.reply(
      encodeMessage({ type: 'ERROR', allocationId: id, errorCode: code }),
      address,
      port,
      receivedLength,
    );
    this.metrics.count(`error_${code}`);
  }

  /** Replies to the source of a datagram, never with more bytes than it sent (no amplification). */
  private reply(bytes: Buffer, address: string, port: number, receivedLength: number): void {
    if (bytes.length > receivedLength) {
      this.metrics.count('replies_suppressed_too_large');
      return;
    }
    this.socket.send(bytes, port, address);
    this.metrics.sent++;
  }
}
