/**
 * The native UDP data plane of the relay (native/relay_dataplane.c, Node-API, Linux).
 *
 * `NativeRelaySocket` owns the relay's UDP socket in C. A worker thread receives in batches
 * (recvmmsg) and forwards every RELAY between two bound, linked UDP peers itself (sendmmsg),
 * without entering JavaScript. Everything else arrives here as a `message` event, like a
 * `dgram.Socket`'s, so the relay's handlers run unchanged. The JavaScript allocation store stays
 * the source of truth: it mirrors each bind, unbind, link and expiry into the native table
 * (`bind`, `unbind`, `link`, `forget`), and reads back last-seen times and counters.
 */
import { EventEmitter } from 'node:events';
import { isIPv4 } from 'node:net';
import type { ProtocolMetrics } from '../../core/metrics.js';
import { GamewireError } from '../../wire/errors.js';
import type { Allocation, AllocationObserver, AllocationStore } from './allocations.js';
import { loadAddon } from './native-addon.js';

/** The addon's functions (see native/relay_dataplane.c). */
interface Addon {
  open(
    host: string,
    port: number,
    maxDatagram: number,
    batch: number,
    onBatch: (data: Buffer, meta: Int32Array) => void,
  ): [unknown, number];
  close(handle: unknown): void;
  send(handle: unknown, msg: Uint8Array, port: number, address: string): number;
  bind(handle: unknown, id: Uint8Array, address: string, port: number): void;
  unbind(handle: unknown, id: Uint8Array): void;
  forget(handle: unknown, id: Uint8Array): void;
  link(handle: unknown, a: Uint8Array, b: Uint8Array, linked: boolean): void;
  lastSeen(handle: unknown, id: Uint8Array): number;
  now(): number;
  stats(handle: unknown): number[];
  counters(handle: unknown, id: Uint8Array): number[] | null;
}

/** Counters kept by the native side. */
export interface NativeDataplaneStats {
  /** Datagrams received on the socket. */
  received: number;
  /** RELAY datagrams forwarded without entering JavaScript. */
  forwarded: number;
  /** Datagrams handed to JavaScript. */
  toJs: number;
  /** Datagrams whose source is not an IPv4 address (cannot happen on the IPv4 socket), dropped. */
  dropBadSource: number;
  /** Datagrams dropped because JavaScript was too far behind. */
  dropBacklog: number;
  /** Forwards the kernel refused. */
  dropSendFailed: number;
  /** recvmmsg calls that returned datagrams. */
  batches: number;
  /** Bytes of the RELAY datagrams forwarded without entering JavaScript. */
  bytesForwarded: number;
  /** Allocations in the native table. */
  tableSize: number;
}

let loaded: { addon: Addon | undefined; reason: string } | undefined;

/**
 * Loads the addon once (native-addon.ts: `GAMEWIRE_NATIVE_ADDON`, else the package's prebuilt
 * for this platform, else a source build). Returns undefined, with the reason, where it cannot
 * run.
 */
export function loadNativeDataplane(): { addon: Addon | undefined; reason: string } {
  if (loaded !== undefined) return loaded;
  if (process.platform !== 'linux') {
    loaded = { addon: undefined, reason: `${process.platform} has no native data plane` };
    return loaded;
  }
  const { addon, reason } = loadAddon<Addon>();
  loaded = { addon, reason };
  return loaded;
}

export interface NativeRelaySocketOptions {
  host: string;
  port: number;
  /** Largest datagram accepted; larger ones are dropped (counted). Default 1472. */
  maxDatagramBytes?: number;
  /** Datagrams per recvmmsg/sendmmsg call. Default 64. */
  batch?: number;
}

export class NativeDataplaneError extends GamewireError {
  constructor(code: string, message: string) {
    super(code, message);
  }
}

/** Remote info of a datagram handed to JavaScript, shaped like dgram's. */
export interface NativeRemoteInfo {
  address: string;
  family: 'IPv4';
  port: number;
  size: number;
}

const ADDRESS_CACHE_LIMIT = 4096;

/** A relay UDP socket whose RELAY fast path runs in C. Emits `message` like a dgram.Socket. */
export class NativeRelaySocket extends EventEmitter {
  private readonly addon: Addon;
  private handle: unknown;
  private readonly boundHost: string;
  readonly port: number;
  private closed = false;
  /** The counters at close, so a closed socket still reports its totals. */
  private finalStats: number[] | undefined;
  /** IPv4 as an integer → dotted string, so a hot source costs no string building. */
  private readonly addresses = new Map<number, string>();

  private constructor(addon: Addon, options: NativeRelaySocketOptions) {
    super();
    this.addon = addon;
    this.boundHost = options.host;
    try {
      const [handle, port] = addon.open(
        options.host,
        options.port,
        options.maxDatagramBytes ?? 1472,
        options.batch ?? 64,
        this.onBatch,
      );
      this.handle = handle;
      this.port = port;
    } catch (err) {
      const e = err as { code?: string; message: string };
      throw new NativeDataplaneError(e.code ?? 'ERR_NATIVE_DATAPLANE', e.message);
    }
  }

  /** Opens the native socket, or throws NativeDataplaneError (ERR_NATIVE_UNAVAILABLE when not built). */
  static open(options: NativeRelaySocketOptions): NativeRelaySocket {
    const { addon, reason } = loadNativeDataplane();
    if (addon === undefined)
      throw new NativeDataplaneError('ERR_NATIVE_UNAVAILABLE', `native data plane unavailable: ${reason}`);
    return new NativeRelaySocket(addon, options);
  }

  private readonly onBatch = (data: Buffer, meta: Int32Array): void => {
    if (this.closed) return;
    for (let i = 0; i < meta.length; i += 4) {
      const offset = meta[i]!;
      const length = meta[i + 1]!;
      const ip = meta[i + 2]! >>> 0;
      let address = this.addresses.get(ip);
      if (address === undefined) {
        address = `${ip >>> 24}.${(ip >>> 16) & 255}.${(ip >>> 8) & 255}.${ip & 255}`;
        if (this.addresses.size >= ADDRESS_CACHE_LIMIT) this.addresses.clear();
        this.addresses.set(ip, address);
      }
      const rinfo: NativeRemoteInfo = { address, family: 'IPv4', port: meta[i + 3]!, size: length };
      this.emit('message', data.subarray(offset, offset + length), rinfo);
    }
  };

  address(): { address: string; family: 'IPv4'; port: number } {
    return { address: this.boundHost, family: 'IPv4', port: this.port };
  }

  /** Sends one datagram from the relay's socket (non-blocking; a refusal is an `error` event). */
  send(msg: Uint8Array, port: number, address: string, callback?: (err: Error | null) => void): void {
    const rc = this.closed ? -9 : this.addon.send(this.handle, msg, port, address);
    const err =
      rc === 0
        ? null
        : new NativeDataplaneError('ERR_NATIVE_SEND', `send to ${address}:${port} failed (errno ${-rc})`);
    if (callback !== undefined) callback(err);
    else if (err !== null && !this.closed) this.emit('error', err);
  }

  /** The allocation `id` is bound over UDP from address:port (IPv4). */
  bind(id: Uint8Array, address: string, port: number): void {
    if (!this.closed) this.addon.bind(this.handle, id, address, port);
  }

  /** The allocation is no longer bound over UDP (it may be bound over another transport). */
  unbind(id: Uint8Array): void {
    if (!this.closed) this.addon.unbind(this.handle, id);
  }

  /** The allocation is gone. */
  forget(id: Uint8Array): void {
    if (!this.closed) this.addon.forget(this.handle, id);
  }

  link(a: Uint8Array, b: Uint8Array): void {
    if (!this.closed) this.addon.link(this.handle, a, b, true);
  }

  unlink(a: Uint8Array, b: Uint8Array): void {
    if (!this.closed) this.addon.link(this.handle, a, b, false);
  }

  /** Milliseconds since the native side last forwarded for `id`, or undefined if it never did. */
  idleMs(id: Uint8Array): number | undefined {
    if (this.closed) return undefined;
    const t = this.addon.lastSeen(this.handle, id);
    return t < 0 ? undefined : Math.max(0, this.addon.now() - t);
  }

  /** RELAYs the native side forwarded from and to allocation `id` (none once closed or forgotten). */
  counters(
    id: Uint8Array,
  ): { packetsIn: number; bytesIn: number; packetsOut: number; bytesOut: number } | undefined {
    if (this.closed) return undefined;
    const c = this.addon.counters(this.handle, id);
    return c === null ? undefined : { packetsIn: c[0]!, bytesIn: c[1]!, packetsOut: c[2]!, bytesOut: c[3]! };
  }

  stats(): NativeDataplaneStats {
    const s = this.finalStats ?? this.addon.stats(this.handle);
    return {
      received: s[0]!,
      forwarded: s[1]!,
      toJs: s[2]!,
      dropBadSource: s[3]!,
      dropBacklog: s[4]!,
      dropSendFailed: s[5]!,
      batches: s[6]!,
      bytesForwarded: s[7]!,
      tableSize: s[8]!,
    };
  }

  close(callback?: () => void): void {
    if (!this.closed) {
      this.finalStats = this.addon.stats(this.handle);
      this.closed = true;
      this.addon.close(this.handle);
      this.emit('close');
    }
    if (callback !== undefined) queueMicrotask(callback);
  }

  /** Kept for dgram compatibility: the native socket always keeps the process alive while open. */
  ref(): this {
    return this;
  }

  unref(): this {
    return this;
  }
}

/**
 * Keeps the native forwarding table equal to the store's view: an allocation is forwardable
 * natively only while it is bound over UDP from an IPv4 address; links are mirrored as they are
 * made and broken; expiry forgets it. Also brings native last-seen times and counters back.
 */
export class NativeDataplaneMirror implements AllocationObserver {
  readonly socket: NativeRelaySocket;
  private last: NativeDataplaneStats;
  /** While true, no binding is forwarded natively: JavaScript sees every RELAY (the dashboard's wire view). */
  private paused = false;

  constructor(socket: NativeRelaySocket) {
    this.socket = socket;
    this.last = socket.stats();
  }

  bound(a: Allocation): void {
    if (!this.paused && a.link?.transport === 'udp' && isIPv4(a.address))
      this.socket.bind(a.id, a.address, a.port);
    else this.socket.unbind(a.id);
  }

  /**
   * Hands every binding to JavaScript (`paused`) or back to the native side. The links stay in
   * the native table either way; only "bound here" changes.
   */
  setPaused(paused: boolean, store: AllocationStore): void {
    if (paused === this.paused) return;
    this.paused = paused;
    for (const a of store.live()) if (a.state === 'bound') this.bound(a);
  }

  unbound(a: Allocation, expired: boolean): void {
    if (expired) this.socket.forget(a.id);
    else this.socket.unbind(a.id);
  }

  linked(a: Allocation, b: Allocation): void {
    this.socket.link(a.id, b.id);
  }

  unlinked(a: Allocation, b: Allocation): void {
    this.socket.unlink(a.id, b.id);
  }

  /** Brings forward the last-seen time of allocations the native side relayed for. */
  refreshLastSeen(store: AllocationStore): void {
    const now = store.now();
    for (const a of store.live()) {
      if (a.state !== 'bound') continue;
      const idle = this.socket.idleMs(a.id);
      if (idle !== undefined && now - idle > a.lastSeen) a.lastSeen = now - idle;
    }
  }

  /**
   * Adds what the native side did since the last call to the protocol's counters: datagrams it
   * forwarded count as received and sent; the rare ones it dropped itself (JavaScript far behind,
   * a refused send), by reason. Datagrams it handed to JavaScript, too-large ones included, are
   * counted by the relay's handlers exactly as on the JavaScript data plane.
   */
  pullCounters(metrics: ProtocolMetrics): void {
    const s = this.socket.stats();
    const d = (k: keyof NativeDataplaneStats) => s[k] - this.last[k];
    const forwarded = d('forwarded');
    metrics.received += forwarded + d('dropBadSource') + d('dropBacklog') + d('dropSendFailed');
    metrics.sent += forwarded;
    metrics.bytesReceived += d('bytesForwarded');
    metrics.bytesSent += d('bytesForwarded');
    addDrops(metrics, 'bad_source_address', d('dropBadSource'));
    addDrops(metrics, 'native_backlog', d('dropBacklog'));
    addDrops(metrics, 'send_failed', d('dropSendFailed'));
    this.last = s;
  }
}

function addDrops(metrics: ProtocolMetrics, reason: string, n: number): void {
  if (n > 0) metrics.dropped.set(reason, (metrics.dropped.get(reason) ?? 0) + n);
}
