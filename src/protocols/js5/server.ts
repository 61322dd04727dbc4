/**
 * The JS5 server (docs/js5.md, "Server"), on the framed TCP seam (src/core/framed-tcp.ts): the
 * seam cuts the stream (the handshake, then 4-byte requests: `setMeasure`), bounds input across
 * connections and per address, enforces the frame deadline (the handshake's is
 * `handshakeTimeoutMs`), gives connections fair turns and bounds their output.
 *
 * Scheduling: each connection's responses are produced by the seam's fair output turns
 * (`produce`): one turn gives one connection up to `sliceBytes` of output (urgent requests before
 * prefetch, a large group spread over many turns), then moves it to the back. So a client flooding
 * prefetch for huge groups delays another client's urgent request by at most one slice.
 *
 * Backpressure: a connection with `urgentCap` urgent or `prefetchCap` prefetch requests queued
 * is held (its input is no longer delivered, then no longer read: TCP throttles the client); a
 * connection with `maxBufferedBytes` of output waiting for the peer gets no turn until `drain`.
 *
 * Admission: connections are counted per remote address as they are accepted (`maxPerIp`, a
 * quarter of the server by default, reply 9 beyond it); a connection must complete its handshake
 * within `handshakeTimeoutMs`, and any later request within the same time of its first byte; at
 * most `maxHandshaking` connections may be in their handshake at once, a newcomer closing the
 * oldest (`evicted`); a JS5 session is closed after `idleTimeoutMs` without a request (keep-alives
 * such as logged-in do not count) unless the server is still sending it responses it asked for.
 *
 * Crowds: many clients behind one address (a venue, a campus NAT) are all served; the seam shares
 * output turns per address (`turnsPerIp` per round between that address's connections), so a crowd
 * gets all the bandwidth it asks for when there is enough, and the share of `turnsPerIp` players
 * when the server is contended, rather than its clients being refused (the 530 client gives up
 * after four refusals: docs/js5.md).
 */

import { ConfigError } from '../../core/errors.js';
import {
  FRAMED_TCP_DEFAULTS,
  type FramedConnection,
  type FramedTcpServer,
  type FrameSink,
  listenFramedTcp,
} from '../../core/framed-tcp.js';
import type { Logger } from '../../core/logger.js';
import { RateLimitedLog } from '../../core/logger.js';
import type { ProtocolMetrics } from '../../core/metrics.js';
import type { OptionValues } from '../../core/options.js';
import type { WireTap } from '../../core/wire-tap.js';
import { DecodeError, ErrorCode } from '../../wire/errors.js';
import { type FrameMeasure, fixedFrames } from '../../wire/framing.js';
import { WireReader } from '../../wire/reader.js';
import type { MasterIndexFormat } from './cache/master-index.js';
import type { Store } from './cache/store.js';
import { Js5Error } from './errors.js';
import { xorInPlace } from './framing.js';
import { HandshakeStatus, INIT_JS5_OPCODE, Js5Request } from './messages.js';
import { type JS5_OPTIONS, type Js5Options, js5Options } from './options.js';
import { handshakeIsSeeded, PROFILES, type ProfileSpec } from './profiles.js';
import { ResponseSource, requestKey } from './responses.js';

export type MissingGroupBehaviour = 'close' | 'drop';

/**
 * What `Js5Server` is constructed with: any part of the js5 options (`Js5Options`, declared once
 * in options.ts: `host`, `port`, `profile`, `build`, `maxClients`, `sliceBytes`, `cacheMb`, …),
 * resolved through that declaration (its defaults, derived defaults and checks; a bad value is
 * `ERR_JS5_BAD_OPTION`), plus what only a library caller has: the store, logger and metrics.
 */
export type Js5ServerOptions = OptionValues<typeof JS5_OPTIONS> & {
  store: Store;
  log: Logger;
  metrics: ProtocolMetrics;
  /**
   * Bytes queued in a socket's user-space buffer before the connection waits for 'drain'
   * (library only; default: the framed TCP seam's `maxQueuedBytes`).
   */
  maxBufferedBytes?: number;
  /** The framed-group cache in bytes, finer than `cacheMb` (which it overrides; tests, benches). */
  cacheBytes?: number;
  /** The `preload` budget in bytes, finer than `preloadMaxMb` (which it overrides). */
  preloadMaxBytes?: number;
  /** Former name of `masterIndex`, still accepted. */
  masterIndexFormat?: MasterIndexFormat;
};

/** What the server runs with: the resolved js5 options and the library caller's own. */
type Js5Settings = Js5Options & {
  store: Store;
  log: Logger;
  metrics: ProtocolMetrics;
  maxBufferedBytes: number;
};

const MIB = 1024 * 1024;

/** `Js5ServerOptions` resolved through the one declaration; a bad value is `ERR_JS5_BAD_OPTION`. */
function resolveJs5(given: Js5ServerOptions): {
  settings: Js5Settings;
  cacheBytes: number;
  preloadMaxBytes: number;
} {
  const { store, log, metrics, maxBufferedBytes, cacheBytes, preloadMaxBytes, masterIndexFormat, ...values } =
    given;
  let options: Js5Options;
  try {
    options = js5Options.resolve(
      masterIndexFormat === undefined || values.masterIndex !== undefined
        ? values
        : { ...values, masterIndex: masterIndexFormat },
    );
  } catch (err) {
    if (err instanceof ConfigError) throw new Js5Error('ERR_JS5_BAD_OPTION', err.message);
    throw err;
  }
  return {
    settings: {
      ...options,
      store,
      log,
      metrics,
      maxBufferedBytes: maxBufferedBytes ?? FRAMED_TCP_DEFAULTS.maxQueuedBytes,
    },
    cacheBytes: cacheBytes ?? options.cacheMb * MIB,
    preloadMaxBytes: preloadMaxBytes ?? options.preloadMaxMb * MIB,
  };
}

interface Queued {
  key: number;
  /** Scheduler turn and bytes sent (all connections) when the request arrived: fairness accounting. */
  turn: number;
  bytes: number;
}

export {
  DEFAULT_MAX_HANDSHAKING,
  DEFAULT_MAX_INPUT_BYTES,
  DEFAULT_MAX_INPUT_BYTES_PER_IP,
  DEFAULT_TURNS_PER_IP,
  defaultMaxPerIp,
  MIN_SLICE_BYTES,
} from './options.js';

const MODE_HANDSHAKE = 0;
const MODE_JS5 = 1;

let nextSessionId = 1;

class Session {
  readonly id = nextSessionId++;
  readonly conn: FramedConnection;
  readonly ip: string;
  readonly acceptedAt = Date.now();
  /** Last request, or last write progress while responses were pending (the idle rule). */
  lastActivity = Date.now();
  /** A missing group was requested: serve what was queued before it, then close. */
  draining = false;
  mode = MODE_HANDSHAKE;
  xorKey = 0;
  readonly urgent: Queued[] = [];
  readonly prefetch: Queued[] = [];
  current: Buffer | undefined = undefined;
  currentOffset = 0;
  currentPrefetch = false;
  closed = false;
  /** Response bytes written to this connection (the dashboard). */
  bytesServed = 0;

  constructor(conn: FramedConnection) {
    this.conn = conn;
    this.ip = conn.remoteAddress;
  }

  hasWork(): boolean {
    return this.current !== undefined || this.urgent.length > 0 || this.prefetch.length > 0;
  }
}

export interface Js5ServerStats {
  /** Most scheduler turns (slices, any connection) an urgent request waited before its response started. */
  maxUrgentWaitTurns: number;
  /** Most bytes sent (any connection) while an urgent request waited for its response to start. */
  maxUrgentWaitBytes: number;
  /** Most requests queued on one connection at once. */
  maxQueued: number;
  turns: number;
  responses: number;
  bytesSent: number;
}

export class Js5Server {
  readonly profile: ProfileSpec;
  readonly build: number;
  readonly responses: ResponseSource;
  readonly stats: Js5ServerStats = {
    maxUrgentWaitTurns: 0,
    maxUrgentWaitBytes: 0,
    maxQueued: 0,
    turns: 0,
    responses: 0,
    bytesSent: 0,
  };
  private readonly options: Js5Settings;
  private readonly sessions = new Set<Session>();
  /** Connections still in their handshake, oldest first (O(1) eviction). */
  private readonly handshaking = new Set<Session>();
  /** The admin endpoint's wire view; one boolean check per request and response otherwise. */
  wireTap: WireTap | undefined;
  private tcp: FramedTcpServer | undefined;
  private closing = false;
  private readonly reader = new WireReader();
  /** Open connections per remote address, counted from accept. */
  private readonly perIp = new Map<string, number>();
  private js5Sessions = 0;
  private sweeper: NodeJS.Timeout | undefined;
  private readonly notice: RateLimitedLog;

  constructor(options: Js5ServerOptions) {
    const { settings, cacheBytes, preloadMaxBytes } = resolveJs5(options);
    this.options = settings;
    this.profile = PROFILES[settings.profile];
    this.build = settings.build;
    // One line per reason per interval; the line names its reason (docs/js5.md, "Logs").
    this.notice = new RateLimitedLog(settings.log, {
      intervalMs: settings.logIntervalMs,
      perInterval: 1,
    });
    this.responses = new ResponseSource(settings.store, {
      masterIndexFormat: settings.masterIndex,
      cacheBytes,
      preload: settings.preload,
      preloadMaxBytes,
    });
    this.reportCacheProblems();
  }

  /** The options this server runs with: the js5 declaration's, every default filled (options.ts). */
  get settings(): Readonly<Js5Options> {
    return this.options;
  }

  /**
   * A damaged cache does not stop the server (docs/js5.md, "A damaged cache"): the bad indexes
   * (and, with `preload`, groups) found at start are logged once, as one warning; each bad group
   * found later is logged at info, rate-limited like the other refusals, and counted
   * (`bad_group`). Requests for them are answered as for a missing group.
   */
  private reportCacheProblems(): void {
    const found = this.responses.problems;
    if (found.length > 0) {
      const shown = found.slice(0, 20);
      this.options.log.warn(
        { problems: shown, more: found.length - shown.length },
        `js5 cache: ${found.length} bad index(es)/group(s), answered as missing; \`gamewire js5 cache verify\` lists every one`,
      );
      this.options.metrics.count('bad_group', found.length);
    }
    this.responses.onProblem = (p) => {
      this.options.metrics.count('bad_group');
      this.refusal(
        'bad_group',
        { archive: p.archive, group: p.group, code: p.code, message: p.message },
        'js5 cache: a bad group, answered as missing',
      );
    };
  }

  /** An info line for a refusal operators must see, at most one per reason per interval. */
  private refusal(reason: string, fields: Record<string, unknown>, message: string): void {
    this.notice.info(reason, { reason, ...fields }, message);
  }

  get port(): number {
    return this.tcp?.port ?? 0;
  }

  /** The framed TCP server underneath (its connections, limits and held input). */
  get transport(): FramedTcpServer | undefined {
    return this.tcp;
  }

  get connections(): number {
    return this.sessions.size;
  }

  async listen(): Promise<this> {
    const o = this.options;
    this.tcp = await listenFramedTcp({
      host: o.host,
      port: o.port,
      protocol: 'js5',
      measure: this.handshakeMeasure(),
      maxFrameBytes: 21,
      // Room above the JS5 cap for connections in their handshake (evicted oldest first beyond
      // maxHandshaking), and for extra clients to be told "full" (7) rather than dropped.
      maxConnections: o.maxClients + o.maxHandshaking + 64,
      // Counted here, so that a refused client is told 9 (IP limit) rather than dropped.
      maxConnectionsPerIp: 0,
      // Our own idle rule (requests only) replaces the transport's any-byte timer.
      idleTimeoutMs: 0, // the transport's setting, not the option
      frameTimeoutMs: o.handshakeTimeoutMs,
      firstFrameTimeoutReason: 'handshake_timeout',
      maxBufferedBytes: o.maxInputBytes,
      maxBufferedBytesPerIp: o.maxInputBytesPerIp,
      maxQueuedBytes: o.maxBufferedBytes,
      outputTurnsPerAddress: o.turnsPerIp,
      malformedReason: (e) => (e.code === ErrorCode.UNKNOWN_TYPE ? 'unknown_opcode' : 'malformed'),
      metrics: o.metrics,
      log: o.log,
      onConnection: (c) => this.accept(c),
    });
    if (o.idleTimeoutMs > 0) {
      this.sweeper = setInterval(
        () => this.sweep(),
        Math.max(20, Math.min(1000, Math.floor(o.idleTimeoutMs / 4))),
      );
      this.sweeper.unref();
    }
    return this;
  }

  async close(): Promise<void> {
    this.closing = true;
    if (this.sweeper !== undefined) clearInterval(this.sweeper);
    await this.tcp?.close();
    this.options.store.close();
  }

  /** The handshake: `15, build u32` (+ 16 seed bytes for OSRS ≥ 223 at the server's build). */
  private handshakeMeasure(): FrameMeasure {
    const seededBuild = handshakeIsSeeded(this.profile.name, this.build);
    const build = this.build;
    return (buf, offset, available) => {
      if (available < 1) return -1;
      if (buf[offset] !== INIT_JS5_OPCODE) {
        throw new DecodeError(
          ErrorCode.UNKNOWN_TYPE,
          `login opcode ${buf[offset]} is not INIT_JS5REMOTE_CONNECTION`,
          offset,
        );
      }
      if (available < 5) return -1;
      return seededBuild && buf.readUInt32BE(offset + 1) === build ? 21 : 5;
    };
  }

  // ---- connections -----------------------------------------------------------------------

  private accept(c: FramedConnection): FrameSink {
    const ip = c.remoteAddress;
    const open = this.perIp.get(ip) ?? 0;
    if (this.options.maxPerIp > 0 && open >= this.options.maxPerIp) {
      // Refused before anything is read: 9 (IP limit) is what real clients expect here. The byte
      // waits in their receive buffer until they read the handshake reply. Not counted per
      // address, so held briefly: long enough for the reply to be read, short enough that a
      // flood of refused connections cannot fill the listener.
      this.refusal(
        'ip_limit',
        { remote: ip, open, maxPerIp: this.options.maxPerIp },
        'js5 connection refused: too many connections from this address (reply 9)',
      );
      c.writer.u8(HandshakeStatus.ipLimit);
      c.close('ip_limit', { lingerMs: Math.min(1000, this.options.handshakeTimeoutMs) });
      return { onFrame: () => false };
    }
    this.perIp.set(ip, open + 1);
    this.options.log.debug({ remote: ip, port: c.remotePort }, 'js5 connection open');
    const s = new Session(c);
    this.sessions.add(s);
    // Connections that never finish their handshake cannot hold the server: past
    // `maxHandshaking`, the oldest of them makes room (a real client handshakes at once).
    if (this.handshaking.size >= this.options.maxHandshaking) {
      for (const oldest of this.handshaking) {
        this.handshaking.delete(oldest);
        this.drop(oldest, 'evicted');
        break;
      }
    }
    this.handshaking.add(s);
    return {
      onFrame: (buf, start, end) => this.onFrame(s, buf, start, end),
      produce: () => this.produce(s),
      onClose: (reason) => {
        this.options.log.debug(
          { remote: s.ip, port: c.remotePort, js5: s.mode === MODE_JS5, reason },
          'js5 connection closed',
        );
        s.closed = true;
        this.sessions.delete(s);
        this.handshaking.delete(s);
        if (s.mode === MODE_JS5) this.js5Sessions--;
        const n = (this.perIp.get(s.ip) ?? 1) - 1;
        if (n <= 0) this.perIp.delete(s.ip);
        else this.perIp.set(s.ip, n);
        s.urgent.length = 0;
        s.prefetch.length = 0;
        s.current = undefined;
      },
    };
  }

  /** The connections now, for the dashboard (built when asked). */
  connectionList(): {
    id: number;
    remote: string;
    js5: boolean;
    urgentQueued: number;
    prefetchQueued: number;
    inFlight: number;
    bytesServed: number;
    since: number;
  }[] {
    return [...this.sessions].map((s) => ({
      id: s.id,
      remote: `${s.ip}:${s.conn.remotePort}`,
      js5: s.mode === MODE_JS5,
      urgentQueued: s.urgent.length,
      prefetchQueued: s.prefetch.length,
      inFlight: s.current === undefined ? 0 : 1,
      bytesServed: s.bytesServed,
      since: s.acceptedAt,
    }));
  }

  /** Closes connection `id` (the dashboard's disconnect); false when there is none. */
  disconnect(id: number): boolean {
    for (const s of this.sessions)
      if (s.id === id) {
        this.drop(s, 'admin_disconnect');
        return true;
      }
    return false;
  }

  /** Closes `s` at once (what was queued for it is dropped). */
  private drop(s: Session, reason: string): void {
    if (s.closed) return;
    this.options.log.debug({ remote: s.ip, reason }, 'js5 connection dropped');
    s.closed = true;
    s.conn.close(reason, { abort: true });
  }

  /** Closes sessions idle by the request-only rule (the handshake deadline is the seam's). */
  private sweep(): void {
    const now = Date.now();
    const { idleTimeoutMs } = this.options;
    for (const s of this.sessions) {
      if (s.closed || s.mode !== MODE_JS5) continue;
      if (now - s.lastActivity >= idleTimeoutMs) this.drop(s, 'idle_timeout');
    }
  }

  /** Queues at a cap hold delivery; below both caps again, delivery resumes. */
  private atCap(s: Session): boolean {
    return s.urgent.length >= this.profile.urgentCap || s.prefetch.length >= this.profile.prefetchCap;
  }

  private onFrame(s: Session, buf: Buffer, start: number, end: number): boolean {
    if (s.closed || s.draining) return false;
    if (this.wireTap?.armed) this.wireTap.record('client', s.id, 'tcp', buf, start, end);
    if (s.mode === MODE_HANDSHAKE) return this.onHandshake(s, buf, start);
    const m = this.options.metrics;
    m.received++;
    m.bytesReceived += end - start;
    const req = Js5Request.read(this.reader.reset(buf, start, end));
    switch (req.type) {
      case 'urgent': {
        const key = requestKey(req.archive, req.group);
        s.lastActivity = Date.now();
        if (!this.responses.has(key)) return this.missing(s, key);
        // A queued prefetch of the same group stays queued: 435, 530 and OSRS clients all keep
        // an upgraded prefetch in their in-flight list and expect a response for it too.
        s.urgent.push({ key, turn: this.stats.turns, bytes: this.stats.bytesSent });
        break;
      }
      case 'prefetch': {
        const key = requestKey(req.archive, req.group);
        s.lastActivity = Date.now();
        if (!this.responses.has(key)) return this.missing(s, key);
        s.prefetch.push({ key, turn: this.stats.turns, bytes: this.stats.bytesSent });
        break;
      }
      case 'rekey':
        s.xorKey = req.key;
        m.count('rekey');
        return true;
      case 'disconnect':
        this.drop(s, 'client_disconnect');
        return false;
      default:
        // loggedIn, loggedOut, connected: nothing to do.
        return true;
    }
    const queued = s.urgent.length + s.prefetch.length;
    if (queued > this.stats.maxQueued) this.stats.maxQueued = queued;
    s.conn.produceLater();
    return !this.atCap(s);
  }

  /**
   * A request for a group the cache does not have. `drop`: forget the request. `close`: read no
   * further requests, send every response queued before this one, then close.
   */
  private missing(s: Session, key: number): boolean {
    const where = { archive: Math.floor(key / 65536), group: key % 65536, remote: s.ip };
    if (this.options.missingGroup === 'drop') {
      this.options.metrics.drop('missing_group');
      this.refusal('missing_group', where, 'js5 request for a missing group dropped');
      return true;
    }
    if (!s.draining) {
      this.refusal('missing_group', where, 'js5 request for a missing group: closing after queued responses');
      // No further request is delivered (the session stays held); what was queued is served.
      s.draining = true;
      if (!s.hasWork()) this.end(s, 'missing_group');
    }
    return false;
  }

  /**
   * Ends a session after what was written (the end flushes it). The peer then gets
   * `handshakeTimeoutMs` to close its side (reading what was sent); a peer that never does is
   * dropped, so it cannot hold its slot.
   */
  private end(s: Session, reason: string): void {
    if (s.closed) return;
    s.closed = true;
    s.conn.close(reason, { lingerMs: this.options.handshakeTimeoutMs });
  }

  private onHandshake(s: Session, buf: Buffer, start: number): boolean {
    this.handshaking.delete(s);
    const build = buf.readUInt32BE(start + 1);
    const reply = (status: number, reason?: string) => {
      s.conn.writer.u8(status);
      if (reason !== undefined) this.end(s, reason);
    };
    if (build !== this.build) {
      this.refusal(
        'out_of_date',
        { remote: s.ip, clientBuild: build, serverBuild: this.build, profile: this.profile.name },
        `js5 handshake refused: client build ${build}, server expects ${this.build} (reply 6)`,
      );
      reply(HandshakeStatus.outOfDate, 'out_of_date');
      return false;
    }
    if (this.js5Sessions >= this.options.maxClients) {
      this.refusal(
        'server_full',
        { remote: s.ip, sessions: this.js5Sessions, maxClients: this.options.maxClients },
        'js5 handshake refused: server full (reply 7)',
      );
      reply(HandshakeStatus.full, 'server_full');
      return false;
    }
    reply(HandshakeStatus.ok);
    s.mode = MODE_JS5;
    s.lastActivity = Date.now();
    this.js5Sessions++;
    s.conn.setMeasure(REQUEST_MEASURE);
    return true;
  }

  // ---- output ------------------------------------------------------------------------------

  /**
   * One output turn of `s` (called by the seam in fair turns while the peer reads): up to one
   * slice of its responses. Returns true while more is queued.
   */
  private produce(s: Session): boolean {
    if (s.closed || this.closing) return false;
    const sent = this.serveSlice(s);
    if (s.draining && !s.hasWork()) {
      this.end(s, 'missing_group');
      return false;
    }
    // Below both caps again: requests held behind a full queue are delivered.
    if (sent > 0 && !s.draining && s.conn.held && !this.atCap(s)) s.conn.resume();
    return s.hasWork();
  }

  /** Sends up to one slice to `s`. Returns the bytes written. */
  private serveSlice(s: Session): number {
    const slice = this.options.sliceBytes;
    const conn = s.conn;
    let sent = 0;
    while (sent < slice && !s.closed) {
      if (s.current === undefined && !this.next(s)) break;
      const buf = s.current!;
      const off = s.currentOffset;
      const n = Math.min(slice - sent, buf.length - off);
      this.write(s, buf, off, n);
      sent += n;
      s.currentOffset = off + n;
      if (s.currentOffset === buf.length) {
        s.current = undefined;
        this.options.metrics.sent++;
        this.stats.responses++;
      }
      // Past the bounded output queue the seam waits for 'drain' before the next turn.
      if (conn.queuedBytes >= this.options.maxBufferedBytes) break;
    }
    if (sent > 0) {
      // Bytes the socket took without backing up: the peer is reading.
      if (conn.queuedBytes < this.options.maxBufferedBytes) s.lastActivity = Date.now();
      this.stats.turns++;
      this.stats.bytesSent += sent;
      s.bytesServed += sent;
      this.options.metrics.bytesSent += sent;
      this.options.metrics.count('bytes_sent', sent);
    }
    return sent;
  }

  /** Starts the next queued response of `s` (urgent first). False when nothing is queued. */
  private next(s: Session): boolean {
    for (;;) {
      const urgent = s.urgent.length > 0;
      const q = urgent ? s.urgent.shift() : s.prefetch.shift();
      if (q === undefined) return false;
      const framed = this.responses.get(q.key);
      if (framed === undefined) {
        // Listed in an index but unreadable (corrupt or removed since start): like a missing
        // group, but what is still queued is served first.
        this.missing(s, q.key);
        continue;
      }
      if (urgent) {
        const waited = this.stats.turns - q.turn;
        if (waited > this.stats.maxUrgentWaitTurns) this.stats.maxUrgentWaitTurns = waited;
        const waitedBytes = this.stats.bytesSent - q.bytes;
        if (waitedBytes > this.stats.maxUrgentWaitBytes) this.stats.maxUrgentWaitBytes = waitedBytes;
      }
      s.current = framed;
      s.currentOffset = 0;
      s.currentPrefetch = !urgent;
      // The logical response, before the prefetch flag and XOR (docs/dashboard-api.md).
      if (this.wireTap?.armed) this.wireTap.record('server', s.id, 'tcp', framed);
      return true;
    }
  }

  /** Writes `buf[off, off + n)` with the prefetch flag and XOR applied as needed. */
  private write(s: Session, buf: Buffer, off: number, n: number): void {
    const end = off + n;
    const conn = s.conn;
    // The 0x80 flag lives in the compression byte, response offset 3.
    const flag = s.currentPrefetch && this.profile.prefetchFlag && off <= 3 && end > 3;
    if (s.xorKey === 0 && !flag) {
      conn.send(buf.subarray(off, end));
      return;
    }
    if (s.xorKey === 0) {
      // Only the compression byte differs from the shared frame: copy up to it, then a view.
      const head = Buffer.from(buf.subarray(off, 4));
      head[head.length - 1]! |= 0x80;
      conn.send(head);
      if (end > 4) conn.send(buf.subarray(4, end));
      return;
    }
    const copy = Buffer.from(buf.subarray(off, end));
    if (flag) copy[3 - off]! |= 0x80;
    xorInPlace(copy, s.xorKey);
    conn.send(copy);
  }
}

/** After the handshake: 4-byte requests. */
const REQUEST_MEASURE = fixedFrames(4);
