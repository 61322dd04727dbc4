/**
 * The native data plane of the relay (native/relay_dataplane.c + native/dtls_record.c, Node-API,
 * Linux).
 *
 * `NativeRelaySocket` owns the relay's UDP socket, and its DTLS socket when it has one, in C. A
 * worker thread receives in batches (recvmmsg) and forwards every RELAY between two bound, linked
 * peers itself (sendmmsg), without entering JavaScript: UDP to UDP unchanged, and to and from DTLS
 * associations whose record layer JavaScript handed over (native-dtls.ts). Everything else arrives
 * here: UDP datagrams as a `message` event, like a `dgram.Socket`'s, so the relay's handlers run
 * unchanged; DTLS datagrams and decrypted application records through `onDtlsDatagram` and
 * `onDtlsRecord`. The JavaScript allocation store stays the source of truth: it mirrors each
 * bind, unbind, link and expiry into the native table (`bind`, `bindDtls`, `unbind`, `link`,
 * `forget`), and reads back last-seen times and counters.
 */
import { EventEmitter } from 'node:events';
import { isIPv4 } from 'node:net';
import type { ProtocolMetrics } from '../../core/metrics.js';
import type { DtlsAssociation } from '../../transports/dtls/index.js';
import type { Allocation, AllocationObserver, AllocationStore } from './allocations.js';
import type { DtlsLink } from './dtls.js';
import { NativeDataplaneError } from './errors.js';
import type { NativeBindingTarget } from './links.js';
import { loadAddon } from './native-addon.js';

/** What the mirror needs of the DTLS record offload (native-dtls.ts). */
export interface NativeDtlsBindings {
  /** The native id of a DTLS association (assigned on first use). */
  idOf(association: DtlsLink['association']): number;
  /** Takes every association back (paused) or hands them over again. */
  setPaused(paused: boolean): void;
  /** Established associations of the DTLS server, on either plane (the rest of `associations` is JavaScript's). */
  serverAssociations(): number;
}

/** The addon's functions (see native/relay_dataplane.c). */
export interface Addon {
  open(
    host: string,
    udpPort: number,
    dtlsPort: number,
    maxDatagram: number,
    batch: number,
    onBatch: (data: Buffer, meta: Int32Array) => void,
    maxToDtls: number,
    coalesceUs?: number,
  ): [unknown, number, number];
  close(handle: unknown): void;
  send(handle: unknown, msg: Uint8Array, port: number, address: string): number;
  dtlsSend(handle: unknown, msg: Uint8Array, port: number, address: string): number;
  bind(handle: unknown, id: Uint8Array, address: string, port: number): void;
  bindDtls(handle: unknown, id: Uint8Array, associationId: number): void;
  dtlsAttach(
    handle: unknown,
    associationId: number,
    address: string,
    port: number,
    suite: number,
    epoch: number,
    readKey: Buffer,
    readIv: Buffer,
    writeKey: Buffer,
    writeIv: Buffer,
    writeSeq: number,
    replayHighest: number,
    replayLow: number,
    replayHigh: number,
    maxPlaintext: number,
  ): boolean;
  /** With the four key Buffers, the association's keys are written back into them first. */
  dtlsDetach(
    handle: unknown,
    associationId: number,
    readKey?: Buffer,
    readIv?: Buffer,
    writeKey?: Buffer,
    writeIv?: Buffer,
  ): number[] | null;
  dtlsExpectHandshake(handle: unknown, associationId: number, expecting: boolean): boolean;
  dtlsSeal(handle: unknown, associationId: number, contentType: number, plaintext: Uint8Array): number;
  dtlsIdle(handle: unknown, associationId: number): number;
  dtlsAvailable(): boolean;
  /** The first OpenSSL function Node's library lacks (why DTLS stays in JavaScript), or null. */
  dtlsMissing?(): string | null;
  sealRecord(
    suite: number,
    key: Buffer,
    iv: Buffer,
    contentType: number,
    epoch: number,
    seq: number,
    plaintext: Uint8Array,
  ): Buffer;
  openRecord(suite: number, key: Buffer, iv: Buffer, record: Uint8Array): Buffer | null;
  unbind(handle: unknown, id: Uint8Array): void;
  forget(handle: unknown, id: Uint8Array): void;
  link(handle: unknown, a: Uint8Array, b: Uint8Array, linked: boolean): void;
  lastSeen(handle: unknown, id: Uint8Array): number;
  now(): number;
  stats(handle: unknown): number[];
  /** [gso, gro, busyPollUs, batch, drain, coalesceUs, coalesceMinPps]: the offloads in use (see NativeOffloads). */
  offloads(handle: unknown): number[];
  counters(handle: unknown, id: Uint8Array): number[] | null;
}

/**
 * The kernel offloads the native plane uses, chosen when it opens from what the kernel accepts
 * (and GAMEWIRE_NATIVE_TUNING: `gso=0`, `gro=1`, `busy=<µs>`, `batch=<n>`; see
 * docs/native-dataplane.md, Performance).
 */
export interface NativeOffloads {
  /** UDP_SEGMENT: a run of equal-size datagrams to one destination leaves in one send. */
  gso: boolean;
  /** UDP_GRO (opt-in): datagrams the kernel coalesced arrive in one receive and are split here. */
  gro: boolean;
  /** SO_BUSY_POLL on the sockets, in µs (0: off; opt-in, and it may need CAP_NET_ADMIN). */
  busyPollUs: number;
  /** Datagrams per recvmmsg. */
  batch: number;
  /** The longest coalescing sleep after a wake-up, in µs (0: off), and the rate from which it is taken. */
  coalesceUs: number;
  coalesceMinPps: number;
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
  /** Bytes of the RELAY messages forwarded without entering JavaScript. */
  bytesForwarded: number;
  /** Datagrams received on the DTLS socket. */
  dtlsReceived: number;
  /** DTLS datagrams handed to JavaScript as they arrived (handshakes, alerts, unknown peers…). */
  dtlsToJs: number;
  /** Application records opened natively and handed to JavaScript decrypted (not a forwardable RELAY). */
  dtlsDecryptedToJs: number;
  /** RELAYs that arrived over DTLS and were forwarded natively (part of `forwarded`). */
  dtlsForwardedIn: number;
  /** RELAYs sealed natively for a DTLS peer (part of `forwarded`). */
  dtlsSealedOut: number;
  /** Application records dropped natively: a replay, a bad tag, too large (as the JavaScript server would; it is told). */
  dtlsDropReplay: number;
  dtlsDropBadMac: number;
  dtlsDropTooLarge: number;
  /** Records JavaScript sent to an association through the native record layer (sealed natively). */
  dtlsSealedForJs: number;
  /**
   * Junk: datagrams from the address of an association held natively that did not authenticate
   * under its keys, dropped natively without changing which plane holds it. By why: a header or
   * fragment cut short (or larger than the receive slot), not DTLS 1.0/1.2, another epoch, a record
   * of its epoch failing authentication, replayed, too large, and epoch-0 records other than a
   * ClientHello once the peer has the server's Finished.
   */
  dtlsJunkTruncated: number;
  dtlsJunkVersion: number;
  dtlsJunkEpoch: number;
  dtlsJunkBadMac: number;
  dtlsJunkReplay: number;
  dtlsJunkTooLarge: number;
  dtlsJunkPlaintext: number;
  /** Associations handed back because an authenticated record (alert, handshake, several records) needs JavaScript. */
  dtlsSuspended: number;
  /** Hand-overs JavaScript → native, and native → JavaScript. */
  dtlsAttached: number;
  dtlsDetached: number;
  /** Datagrams of batches dropped because a Node-API call failed while handing them to JavaScript. */
  dropJsCall: number;
  /** UDP_SEGMENT (GSO) sends, each of two datagrams or more to one destination, and the datagrams in them. */
  gsoSends: number;
  gsoDatagrams: number;
  /** GSO sends the kernel refused, sent again one datagram at a time. */
  gsoFallbacks: number;
  /** Coalesced receives (UDP_GRO), each split back into its datagrams, and the datagrams in them. */
  groReceived: number;
  groDatagrams: number;
  /** Wake-ups after which the worker slept so the next batch could gather (adaptive coalescing). */
  coalesced: number;
  /**
   * Of those sleeps, the ones after which the worker received straight away (no poll) and found
   * datagrams; after one that finds none it polls again.
   */
  directReceives: number;
  /** Allocations in the native table. */
  tableSize: number;
  /** DTLS associations whose record layer the native side holds. */
  associations: number;
}

const STAT_KEYS = [
  'received',
  'forwarded',
  'toJs',
  'dropBadSource',
  'dropBacklog',
  'dropSendFailed',
  'batches',
  'bytesForwarded',
  'dtlsReceived',
  'dtlsToJs',
  'dtlsDecryptedToJs',
  'dtlsForwardedIn',
  'dtlsSealedOut',
  'dtlsDropReplay',
  'dtlsDropBadMac',
  'dtlsDropTooLarge',
  'dtlsSealedForJs',
  'dtlsJunkTruncated',
  'dtlsJunkVersion',
  'dtlsJunkEpoch',
  'dtlsJunkBadMac',
  'dtlsJunkReplay',
  'dtlsJunkTooLarge',
  'dtlsJunkPlaintext',
  'dtlsSuspended',
  'dtlsAttached',
  'dtlsDetached',
  'dropJsCall',
  'gsoSends',
  'gsoDatagrams',
  'gsoFallbacks',
  'groReceived',
  'groDatagrams',
  'coalesced',
  'directReceives',
  'tableSize',
  'associations',
] as const satisfies readonly (keyof NativeDataplaneStats)[];

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
  /** The relay's UDP port (0: a free one); `null`: no UDP socket (a DTLS-only plane, for tests). */
  port: number | null;
  /** The DTLS port, when the plane serves DTLS too (0: a free one). */
  dtlsPort?: number;
  /** Largest datagram accepted; larger ones are dropped (counted). Default 1472. */
  maxDatagramBytes?: number;
  /** Largest RELAY sealed natively for a DTLS peer; larger ones go to JavaScript (which drops them). Default 1363. */
  maxMessageToDtls?: number;
  /** Datagrams per recvmmsg/sendmmsg call. Default 64. */
  batch?: number;
  /**
   * Adaptive coalescing: while datagrams arrive at COALESCE_MIN_PPS or faster, the worker sleeps
   * after a wake-up until about a batch could have gathered, at most this many µs (0: never).
   * Default DEFAULT_NATIVE_COALESCE_US.
   */
  coalesceUs?: number;
}

/** The longest coalescing wait after a wake-up, in µs (docs/native-dataplane.md, "Coalescing"). */
export const DEFAULT_NATIVE_COALESCE_US = 400;
/** The arrival rate (datagrams per second, both sockets) from which the worker coalesces. */
export const COALESCE_MIN_PPS = 40_000;

/** Remote info of a datagram handed to JavaScript, shaped like dgram's. */
export interface NativeRemoteInfo {
  address: string;
  family: 'IPv4';
  port: number;
  size: number;
}

const ADDRESS_CACHE_LIMIT = 4096;
/** Int32s per datagram in a batch's meta array (native/relay_dataplane.c META_*). */
const META_WIDTH = 6;
const KIND_UDP = 0;
const KIND_DTLS_DATAGRAM = 1;
const KIND_DTLS_RECORD = 2;
/** Why the native side dropped a record (KIND_DTLS_DROP), as the JavaScript server names it. */
const DTLS_DROP_REASONS = [
  '',
  'replay',
  'bad-record-mac',
  'record-too-large',
  'truncated-record',
  'bad-record-version',
  'bad-epoch',
  'unexpected-plaintext-record',
] as const;

/** A decrypted application record from an association the native side holds. */
export type NativeDtlsRecordHandler = (
  associationId: number,
  plaintext: Buffer,
  rinfo: NativeRemoteInfo,
) => void;
/**
 * A datagram on the DTLS socket, as it arrived. `keptBy`: the native id of the association held
 * natively that inspected it and still holds it (a ClientHello, a flight of a handshake JavaScript
 * expects: JavaScript need not take the association back for it), or 0.
 */
export type NativeDtlsDatagramHandler = (msg: Buffer, rinfo: NativeRemoteInfo, keptBy: number) => void;
/** `count` records from one source the native side dropped in one batch (replayed, not authentic, too large, junk). */
export type NativeDtlsDropHandler = (reason: string, rinfo: NativeRemoteInfo, count: number) => void;

/** A relay UDP socket whose RELAY fast path runs in C. Emits `message` like a dgram.Socket. */
export class NativeRelaySocket extends EventEmitter {
  private readonly addon: Addon;
  private handle: unknown;
  private readonly boundHost: string;
  /** The UDP port (-1 for a DTLS-only plane). */
  readonly port: number;
  /** The DTLS port, or undefined when the plane has no DTLS socket. */
  readonly dtlsPort: number | undefined;
  /** Receives the DTLS socket's datagrams (set by NativeDtlsRecords.serve). */
  onDtlsDatagram: NativeDtlsDatagramHandler | undefined;
  /** Receives application records the native side opened and did not forward. */
  onDtlsRecord: NativeDtlsRecordHandler | undefined;
  /** Told of each application record the native side dropped. */
  onDtlsDrop: NativeDtlsDropHandler | undefined;
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
      const [handle, port, dtlsPort] = addon.open(
        options.host,
        options.port ?? -1,
        options.dtlsPort ?? -1,
        options.maxDatagramBytes ?? 1472,
        options.batch ?? 64,
        this.onBatch,
        options.maxMessageToDtls ?? 1363,
        options.coalesceUs ?? DEFAULT_NATIVE_COALESCE_US,
      );
      this.handle = handle;
      this.port = port;
      this.dtlsPort = dtlsPort < 0 ? undefined : dtlsPort;
    } catch (err) {
      const e = err as { code?: string; message: string };
      const failure = new NativeDataplaneError(e.code ?? 'ERR_NATIVE_DATAPLANE', e.message);
      // Which socket failed to bind, so `serve` can name the flag that moves it.
      if (e.code === 'EADDRINUSE' || e.code === 'EACCES' || e.code === 'EADDRNOTAVAIL') {
        const dtls = e.message.includes('(DTLS)');
        const port = dtls ? options.dtlsPort : options.port;
        failure.address = options.host;
        if (port !== undefined && port !== null) failure.port = port;
      }
      throw failure;
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
    for (let i = 0; i < meta.length; i += META_WIDTH) {
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
      const bytes = data.subarray(offset, offset + length);
      const kind = meta[i + 4]!;
      if (kind === KIND_UDP) this.emit('message', bytes, rinfo);
      else if (kind === KIND_DTLS_DATAGRAM) this.onDtlsDatagram?.(bytes, rinfo, meta[i + 5]! >>> 0);
      else if (kind === KIND_DTLS_RECORD) this.onDtlsRecord?.(meta[i + 5]! >>> 0, bytes, rinfo);
      // A drop notice: no bytes; its offset field is how many drops from this source it stands for.
      else this.onDtlsDrop?.(DTLS_DROP_REASONS[meta[i + 5]!] ?? 'bad-record-mac', rinfo, Math.max(1, offset));
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

  /** Sends one datagram, as is, from the DTLS socket (handshake flights, alerts). */
  dtlsSend(msg: Uint8Array, port: number, address: string): void {
    if (this.closed) return;
    this.addon.dtlsSend(this.handle, msg, port, address);
  }

  /** The allocation `id` is bound through the DTLS association the native side knows as `associationId`. */
  bindDtls(id: Uint8Array, associationId: number): void {
    if (!this.closed) this.addon.bindDtls(this.handle, id, associationId);
  }

  /** The addon, for the DTLS record offload (native-dtls.ts); undefined once closed. */
  get dtlsHandle(): { addon: Addon; handle: unknown } | undefined {
    return this.dtlsPort === undefined ? undefined : { addon: this.addon, handle: this.handle };
  }

  get isClosed(): boolean {
    return this.closed;
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

  /** The kernel offloads in use (GSO may turn itself off later when sends with it keep failing). */
  offloads(): NativeOffloads {
    // An addon from before offloads() (GAMEWIRE_NATIVE_ADDON naming an older build) has none.
    if (typeof this.addon.offloads !== 'function')
      return { gso: false, gro: false, busyPollUs: 0, batch: 0, coalesceUs: 0, coalesceMinPps: 0 };
    const [gso, gro, busyPollUs, batch, , coalesceUs, coalesceMinPps] = this.addon.offloads(this.handle);
    return {
      gso: gso === 1,
      gro: gro === 1,
      busyPollUs: busyPollUs ?? 0,
      batch: batch ?? 0,
      // An addon from before coalescing reports none.
      coalesceUs: coalesceUs ?? 0,
      coalesceMinPps: coalesceMinPps ?? 0,
    };
  }

  stats(): NativeDataplaneStats {
    const s = this.finalStats ?? this.addon.stats(this.handle);
    const out = {} as NativeDataplaneStats;
    for (let i = 0; i < STAT_KEYS.length; i++) out[STAT_KEYS[i]!] = s[i]!;
    return out;
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
 * natively only while it is bound over UDP from an IPv4 address, or through a DTLS association
 * of the native DTLS socket; links are mirrored as they are made and broken; expiry forgets it.
 * Also brings native last-seen times and counters back.
 */
export class NativeDataplaneMirror implements AllocationObserver, NativeBindingTarget {
  readonly socket: NativeRelaySocket;
  private last: NativeDataplaneStats;
  /** While true, no binding is forwarded natively: JavaScript sees every RELAY (the dashboard's wire view). */
  private paused = false;
  /** The DTLS record offload, when the DTLS endpoint runs on the native socket. */
  dtls: NativeDtlsBindings | undefined;

  constructor(socket: NativeRelaySocket) {
    this.socket = socket;
    this.last = socket.stats();
  }

  /** The link says whether the plane can carry its binding (`RelayLink.bindNative`); else JavaScript does. */
  bound(a: Allocation): void {
    if (this.paused || a.link === undefined || !a.link.bindNative(this, a.id)) this.socket.unbind(a.id);
  }

  /** The socket is IPv4: an IPv4 UDP peer is forwarded natively. */
  bindUdp(id: Buffer, address: string, port: number): boolean {
    if (!isIPv4(address)) return false;
    this.socket.bind(id, address, port);
    return true;
  }

  /** A DTLS association is forwarded natively while its record layer is offloaded here. */
  bindDtls(id: Buffer, association: DtlsAssociation): boolean {
    if (this.dtls === undefined) return false;
    this.socket.bindDtls(id, this.dtls.idOf(association));
    return true;
  }

  /**
   * Hands every binding to JavaScript (`paused`) or back to the native side. The links stay in
   * the native table either way; only "bound here" changes. DTLS associations come back to
   * JavaScript too (their sequence numbers and replay windows with them), so the JavaScript
   * DTLS server opens every record.
   */
  setPaused(paused: boolean, store: AllocationStore): void {
    if (paused === this.paused) return;
    this.paused = paused;
    this.dtls?.setPaused(paused);
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

  /** RELAYs the native side forwarded from and to allocation `id` (undefined once forgotten or closed). */
  counters(id: Uint8Array): ReturnType<NativeRelaySocket['counters']> {
    return this.socket.counters(id);
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
    metrics.received +=
      forwarded + d('dropBadSource') + d('dropBacklog') + d('dropSendFailed') + d('dropJsCall');
    metrics.sent += forwarded;
    metrics.bytesReceived += d('bytesForwarded');
    metrics.bytesSent += d('bytesForwarded');
    addDrops(metrics, 'bad_source_address', d('dropBadSource'));
    addDrops(metrics, 'native_backlog', d('dropBacklog'));
    addDrops(metrics, 'send_failed', d('dropSendFailed'));
    addDrops(metrics, 'native_js_call_failed', d('dropJsCall'));
    // DTLS records dropped natively reach the DTLS server's drop events (native-dtls.ts) and are
    // counted there, as `dtls_<reason>` drops. Here: which plane did it, and the hand-overs.
    for (const [key, reason] of NATIVE_JUNK) addCount(metrics, `dtls_native_junk_${reason}`, d(key));
    addCount(metrics, 'dtls_handover_to_native', d('dtlsAttached'));
    addCount(metrics, 'dtls_handover_to_js', d('dtlsDetached'));
    addCount(metrics, 'dtls_handover_to_js_authenticated', d('dtlsSuspended'));
    if (this.dtls !== undefined) {
      metrics.gauges.set('dtls_associations_native', s.associations);
      metrics.gauges.set(
        'dtls_associations_js',
        Math.max(0, this.dtls.serverAssociations() - s.associations),
      );
    }
    this.last = s;
  }
}

/** The native junk counters, and the reason each is exposed under (`dtls_native_junk_<reason>` events). */
const NATIVE_JUNK: readonly (readonly [keyof NativeDataplaneStats, string])[] = [
  ['dtlsJunkTruncated', 'truncated'],
  ['dtlsJunkVersion', 'bad_version'],
  ['dtlsJunkEpoch', 'bad_epoch'],
  ['dtlsJunkBadMac', 'bad_mac'],
  ['dtlsJunkReplay', 'replay'],
  ['dtlsJunkTooLarge', 'too_large'],
  ['dtlsJunkPlaintext', 'plaintext'],
  // Single application records that failed, dropped natively too (the JavaScript server is told).
  ['dtlsDropBadMac', 'record_bad_mac'],
  ['dtlsDropReplay', 'record_replay'],
  ['dtlsDropTooLarge', 'record_too_large'],
];

function addCount(metrics: ProtocolMetrics, name: string, n: number): void {
  if (n > 0) metrics.count(name, n);
}

function addDrops(metrics: ProtocolMetrics, reason: string, n: number): void {
  if (n > 0) metrics.dropped.set(reason, (metrics.dropped.get(reason) ?? 0) + n);
}
