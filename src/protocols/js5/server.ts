/**
 * The JS5 server (docs/js5.md, "Server").
 *
 * Scheduling: one scheduler for all connections. Connections with work and a writable socket
 * sit in a ring; each turn gives one connection up to `sliceBytes` of output (urgent requests
 * before prefetch, a large group spread over many turns), then moves it to the back. So a client
 * flooding prefetch for huge groups delays another client's urgent request by at most one slice.
 *
 * Backpressure: a connection with `urgentCap` urgent or `prefetchCap` prefetch requests queued
 * stops being read (TCP then throttles the client); a socket whose `write` returns false leaves
 * the ring until `drain`.
 *
 * Admission: connections are counted per remote address as they are accepted (`maxPerIp`, reply
 * 9 beyond it); a connection must complete its handshake within `handshakeTimeoutMs`; a JS5
 * session is closed after `idleTimeoutMs` without a request (keep-alives such as logged-in do not
 * count) unless the server is still sending it responses it asked for.
 */

import type net from 'node:net';
import type { Logger } from 'pino';
import type { ProtocolMetrics } from '../../core/metrics.js';
import { listenTcp, type TcpListener } from '../../core/tcp.js';
import { DecodeError, ErrorCode } from '../../wire/errors.js';
import { fixedFrames, StreamDeframer } from '../../wire/framing.js';
import { WireReader } from '../../wire/reader.js';
import type { MasterIndexFormat } from './cache/master-index.js';
import type { Store } from './cache/store.js';
import { Js5Error } from './errors.js';
import { xorInPlace } from './framing.js';
import { RateLimitedLog } from './log-limit.js';
import { HandshakeStatus, INIT_JS5_OPCODE, Js5Request } from './messages.js';
import { handshakeIsSeeded, type Js5Profile, PROFILES, type ProfileSpec } from './profiles.js';
import { ResponseSource, requestKey } from './responses.js';

export type MissingGroupBehaviour = 'close' | 'drop';

export interface Js5ServerOptions {
  host: string;
  port: number;
  store: Store;
  profile: Js5Profile;
  /** Build the server accepts; others get 6 (out of date). Default: the profile's. */
  build?: number;
  /** Master index format (default: the profile's). */
  masterIndexFormat?: MasterIndexFormat;
  /** JS5 sessions beyond this get 7 (full). */
  maxClients?: number;
  /**
   * Connections per remote address (counted from accept, handshaken or not); one more gets 9
   * (IP limit) at once and is closed. 0 = no limit (behind a proxy every client shares one address).
   */
  maxPerIp?: number;
  /** A connection that has not sent its whole handshake this long after accept is closed. */
  handshakeTimeoutMs?: number;
  /**
   * A JS5 session with no request (prefetch or urgent) for this long is closed, unless responses
   * it asked for are still being written and the socket keeps taking them. 0 disables.
   */
  idleTimeoutMs?: number;
  /** Info-level refusal logs (wrong build, missing group, full): at most one per reason per this. */
  logIntervalMs?: number;
  missingGroup?: MissingGroupBehaviour;
  /** Bytes one connection may be sent per scheduler turn: a positive integer (CLI: ≥ 512). */
  sliceBytes?: number;
  /** Bytes queued in a socket's user-space buffer before the connection waits for 'drain'. */
  maxBufferedBytes?: number;
  cacheBytes?: number;
  preload?: boolean;
  preloadMaxBytes?: number;
  log: Logger;
  metrics: ProtocolMetrics;
}

interface Queued {
  key: number;
  /** Scheduler turn and bytes sent (all connections) when the request arrived: fairness accounting. */
  turn: number;
  bytes: number;
}

/**
 * Smallest `--js5-slice-bytes` the CLI accepts: one 512-byte block of the response framing.
 * The constructor accepts any positive integer (tiny slices exercise the framing in tests).
 */
export const MIN_SLICE_BYTES = 512;

/**
 * Default connections per address. One player needs one JS5 connection (two briefly while it
 * reconnects); a few players may share an address behind NAT. Behind a proxy, raise it or use 0.
 */
export const DEFAULT_MAX_PER_IP = 8;

const MODE_HANDSHAKE = 0;
const MODE_JS5 = 1;

class Session {
  readonly socket: net.Socket;
  readonly deframer: StreamDeframer;
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
  writable = true;
  inRing = false;
  corked = false;
  paused = false;
  closed = false;
  onFrame!: (buf: Buffer, start: number, end: number) => boolean;

  constructor(socket: net.Socket, deframer: StreamDeframer) {
    this.socket = socket;
    this.deframer = deframer;
    this.ip = socket.remoteAddress ?? '';
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
  private readonly options: Required<Omit<Js5ServerOptions, 'build' | 'masterIndexFormat'>>;
  private readonly sessions = new Set<Session>();
  private ring: Session[] = [];
  private ringHead = 0;
  private scheduled = false;
  private listener: TcpListener | undefined;
  private closing = false;
  private readonly reader = new WireReader();
  private readonly corked: Session[] = [];
  /** Open connections per remote address, counted from accept. */
  private readonly perIp = new Map<string, number>();
  private js5Sessions = 0;
  private sweeper: NodeJS.Timeout | undefined;
  private readonly notice: RateLimitedLog;

  constructor(options: Js5ServerOptions) {
    this.profile = PROFILES[options.profile];
    this.build = options.build ?? this.profile.defaultBuild;
    this.options = {
      maxClients: 1000,
      maxPerIp: DEFAULT_MAX_PER_IP,
      handshakeTimeoutMs: 10_000,
      idleTimeoutMs: 30_000,
      logIntervalMs: 10_000,
      missingGroup: 'close',
      sliceBytes: 16 * 1024,
      maxBufferedBytes: 256 * 1024,
      cacheBytes: 64 * 1024 * 1024,
      preload: false,
      preloadMaxBytes: 1024 * 1024 * 1024,
      ...options,
    } as Required<Omit<Js5ServerOptions, 'build' | 'masterIndexFormat'>>;
    const slice = this.options.sliceBytes;
    if (!Number.isInteger(slice) || slice < 1) {
      throw new Js5Error('ERR_JS5_BAD_OPTION', `sliceBytes must be a positive integer, got ${slice}`);
    }
    for (const k of [
      'maxClients',
      'maxPerIp',
      'handshakeTimeoutMs',
      'idleTimeoutMs',
      'logIntervalMs',
    ] as const) {
      const v = this.options[k];
      if (!Number.isInteger(v) || v < 0)
        throw new Js5Error('ERR_JS5_BAD_OPTION', `${k} must be a whole number, got ${v}`);
    }
    if (this.options.handshakeTimeoutMs === 0)
      throw new Js5Error('ERR_JS5_BAD_OPTION', 'handshakeTimeoutMs must be positive');
    this.notice = new RateLimitedLog(this.options.log, this.options.logIntervalMs);
    this.responses = new ResponseSource(options.store, {
      masterIndexFormat: options.masterIndexFormat ?? this.profile.masterIndexFormat,
      cacheBytes: this.options.cacheBytes,
      preload: this.options.preload,
      preloadMaxBytes: this.options.preloadMaxBytes,
    });
  }

  get port(): number {
    return this.listener?.port ?? 0;
  }

  get connections(): number {
    return this.sessions.size;
  }

  async listen(): Promise<this> {
    this.listener = await listenTcp({
      host: this.options.host,
      port: this.options.port,
      // Room above the JS5 cap so that extra clients can be told "full" (7) rather than dropped.
      maxConnections: this.options.maxClients + 64,
      // Our own idle rule (requests only) replaces the transport's any-byte timer.
      idleTimeoutMs: 0,
      metrics: this.options.metrics,
      log: this.options.log,
      onConnection: (socket) => this.accept(socket),
    });
    const shortest = Math.min(
      this.options.handshakeTimeoutMs,
      this.options.idleTimeoutMs > 0 ? this.options.idleTimeoutMs : Number.POSITIVE_INFINITY,
    );
    this.sweeper = setInterval(() => this.sweep(), Math.max(20, Math.min(1000, Math.floor(shortest / 4))));
    this.sweeper.unref();
    return this;
  }

  async close(): Promise<void> {
    this.closing = true;
    if (this.sweeper !== undefined) clearInterval(this.sweeper);
    await this.listener?.close();
    this.options.store.close();
  }

  // ---- connections -----------------------------------------------------------------------

  private accept(socket: net.Socket): void {
    const ip = socket.remoteAddress ?? '';
    const open = this.perIp.get(ip) ?? 0;
    if (this.options.maxPerIp > 0 && open >= this.options.maxPerIp) {
      // Refused before anything is read: 9 (IP limit) is what real clients expect here. The byte
      // waits in their receive buffer until they read the handshake reply.
      this.options.metrics.close('ip_limit');
      this.notice.info(
        'ip_limit',
        { remote: ip, open, maxPerIp: this.options.maxPerIp },
        'js5 connection refused: too many connections from this address (reply 9)',
      );
      socket.on('data', () => {});
      socket.end(Buffer.of(HandshakeStatus.ipLimit));
      // Not counted per address, so held briefly: long enough for the reply to be read, short
      // enough that a flood of refused connections cannot fill the listener.
      this.linger(socket, Math.min(1000, this.options.handshakeTimeoutMs));
      return;
    }
    this.perIp.set(ip, open + 1);
    this.options.log.debug({ remote: ip, port: socket.remotePort }, 'js5 connection open');
    const seededBuild = handshakeIsSeeded(this.profile.name, this.build);
    const build = this.build;
    const deframer = new StreamDeframer(
      (buf, offset, available) => {
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
      },
      { maxFrameBytes: 21, maxBufferedBytes: 256 * 1024 },
    );
    const s = new Session(socket, deframer);
    this.sessions.add(s);
    s.onFrame = (buf, start, end) => this.onFrame(s, buf, start, end);
    socket.on('data', (chunk: Buffer) => {
      if (s.closed || s.draining) return;
      try {
        if (!deframer.push(chunk, s.onFrame) && !s.closed) this.pauseReading(s);
      } catch (e) {
        this.fail(s, e);
      }
    });
    socket.on('drain', () => {
      if (s.closed) return;
      // The peer is taking the responses it asked for: not idle.
      s.lastActivity = Date.now();
      s.writable = true;
      this.enqueue(s);
    });
    socket.on('close', () => {
      this.options.log.debug(
        { remote: s.ip, port: socket.remotePort, js5: s.mode === MODE_JS5 },
        'js5 connection closed',
      );
      s.closed = true;
      this.sessions.delete(s);
      if (s.mode === MODE_JS5) this.js5Sessions--;
      const n = (this.perIp.get(s.ip) ?? 1) - 1;
      if (n <= 0) this.perIp.delete(s.ip);
      else this.perIp.set(s.ip, n);
      s.urgent.length = 0;
      s.prefetch.length = 0;
      s.current = undefined;
    });
  }

  private fail(s: Session, e: unknown): void {
    const reason =
      e instanceof DecodeError
        ? e.code === ErrorCode.UNKNOWN_TYPE
          ? 'unknown_opcode'
          : 'malformed'
        : 'handler_error';
    if (!(e instanceof DecodeError)) this.options.log.error({ err: e }, 'js5 handler failed');
    this.drop(s, reason);
  }

  private drop(s: Session, reason: string): void {
    if (s.closed) return;
    this.options.log.debug({ remote: s.ip, reason }, 'js5 connection dropped');
    this.options.metrics.close(reason);
    s.closed = true;
    s.socket.destroy();
  }

  /** Closes sessions past the handshake deadline or idle by the request-only rule. */
  private sweep(): void {
    const now = Date.now();
    const { handshakeTimeoutMs, idleTimeoutMs } = this.options;
    for (const s of this.sessions) {
      if (s.closed) continue;
      if (s.mode === MODE_HANDSHAKE) {
        if (now - s.acceptedAt >= handshakeTimeoutMs) this.drop(s, 'handshake_timeout');
        continue;
      }
      if (idleTimeoutMs > 0 && now - s.lastActivity >= idleTimeoutMs) this.drop(s, 'idle_timeout');
    }
  }

  private pauseReading(s: Session): void {
    if (!s.paused) {
      s.paused = true;
      s.socket.pause();
    }
  }

  private maybeResume(s: Session): void {
    if (!s.paused || s.closed || s.draining) return;
    if (s.urgent.length >= this.profile.urgentCap || s.prefetch.length >= this.profile.prefetchCap) return;
    s.paused = false;
    try {
      if (!s.deframer.resume(s.onFrame)) {
        if (!s.closed) this.pauseReading(s);
        return;
      }
    } catch (e) {
      this.fail(s, e);
      return;
    }
    if (!s.closed) s.socket.resume();
  }

  private onFrame(s: Session, buf: Buffer, start: number, end: number): boolean {
    if (s.closed || s.draining) return false;
    if (s.mode === MODE_HANDSHAKE) return this.onHandshake(s, buf, start);
    const m = this.options.metrics;
    m.received++;
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
    this.enqueue(s);
    if (s.urgent.length >= this.profile.urgentCap || s.prefetch.length >= this.profile.prefetchCap) {
      this.pauseReading(s);
      return false;
    }
    return true;
  }

  /**
   * A request for a group the cache does not have. `drop`: forget the request. `close`: read no
   * further requests, send every response queued before this one, then close.
   */
  private missing(s: Session, key: number): boolean {
    const where = { archive: Math.floor(key / 65536), group: key % 65536, remote: s.ip };
    if (this.options.missingGroup === 'drop') {
      this.options.metrics.drop('missing_group');
      this.notice.info('missing_group', where, 'js5 request for a missing group dropped');
      return true;
    }
    if (!s.draining) {
      this.notice.info(
        'missing_group',
        where,
        'js5 request for a missing group: closing after queued responses',
      );
      s.draining = true;
      this.pauseReading(s);
      if (!s.hasWork()) this.finishDrain(s);
    }
    return false;
  }

  /** Ends a draining session once its queued responses are written (the end flushes them). */
  private finishDrain(s: Session): void {
    if (s.closed) return;
    this.options.metrics.close('missing_group');
    s.closed = true;
    s.socket.end();
    this.linger(s.socket);
  }

  /**
   * After the server ended a connection, the peer gets `handshakeTimeoutMs` to close its side
   * (reading what was sent); a peer that never does is dropped, so it cannot hold its slot.
   */
  private linger(socket: net.Socket, ms = this.options.handshakeTimeoutMs): void {
    setTimeout(() => socket.destroy(), ms).unref();
  }

  private onHandshake(s: Session, buf: Buffer, start: number): boolean {
    const build = buf.readUInt32BE(start + 1);
    const reply = (status: number, reason?: string) => {
      s.socket.write(Buffer.of(status));
      if (reason !== undefined) {
        this.options.metrics.close(reason);
        s.closed = true;
        s.socket.end();
        this.linger(s.socket);
      }
    };
    if (build !== this.build) {
      this.notice.info(
        'out_of_date',
        { remote: s.ip, clientBuild: build, serverBuild: this.build, profile: this.profile.name },
        `js5 handshake refused: client build ${build}, server expects ${this.build} (reply 6)`,
      );
      reply(HandshakeStatus.outOfDate, 'out_of_date');
      return false;
    }
    if (this.js5Sessions >= this.options.maxClients) {
      this.notice.info(
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
    s.deframer.setMeasure(fixedFrames(4));
    return true;
  }

  // ---- scheduler -------------------------------------------------------------------------

  private enqueue(s: Session): void {
    if (s.inRing || s.closed || !s.writable || !s.hasWork()) return;
    s.inRing = true;
    this.ring.push(s);
    if (!this.scheduled) {
      this.scheduled = true;
      setImmediate(this.run);
    }
  }

  private readonly run = (): void => {
    this.scheduled = false;
    if (this.closing) return;
    // Bound the work per event-loop turn so that reads and timers still get their turn.
    let budget = 4 * 1024 * 1024;
    const corked = this.corked;
    while (budget > 0 && this.ringHead < this.ring.length) {
      const s = this.ring[this.ringHead++]!;
      s.inRing = false;
      if (s.closed) continue;
      const sent = this.serveSlice(s);
      budget -= sent;
      if (s.draining && !s.hasWork()) this.finishDrain(s);
      if (!s.closed) {
        this.maybeResume(s);
        this.enqueue(s);
      }
      // A turn that sent nothing made no progress: leave the rest to the next event-loop turn
      // rather than spinning here (the constructor's check on sliceBytes makes this a safeguard).
      if (sent === 0) break;
    }
    // Writes of one run to one socket go out together (one writev instead of one write each).
    for (const s of corked) {
      s.corked = false;
      if (!s.closed) s.socket.uncork();
    }
    corked.length = 0;
    if (this.ringHead > 1024 || this.ringHead === this.ring.length) {
      this.ring = this.ring.slice(this.ringHead);
      this.ringHead = 0;
    }
    if (this.ring.length > 0 && !this.scheduled) {
      this.scheduled = true;
      setImmediate(this.run);
    }
  };

  /** Sends up to one slice to `s`. Returns the bytes written. */
  private serveSlice(s: Session): number {
    const slice = this.options.sliceBytes;
    let sent = 0;
    let wrote = false;
    while (sent < slice && s.writable && !s.closed) {
      if (s.current === undefined && !this.next(s)) break;
      if (!s.corked) {
        s.corked = true;
        s.socket.cork();
        this.corked.push(s);
      }
      const buf = s.current!;
      const off = s.currentOffset;
      const n = Math.min(slice - sent, buf.length - off);
      const ok = this.write(s, buf, off, n);
      wrote = true;
      sent += n;
      s.currentOffset = off + n;
      if (s.currentOffset === buf.length) {
        s.current = undefined;
        this.options.metrics.sent++;
        this.stats.responses++;
      }
      // Keep writing past the stream's small high-water mark, up to a bounded user-space
      // buffer per connection; beyond it, wait for 'drain' (write() returned false by then).
      if (!ok && s.socket.writableLength >= this.options.maxBufferedBytes) s.writable = false;
    }
    if (wrote) {
      // Bytes the socket took without backing up: the peer is reading.
      if (s.writable) s.lastActivity = Date.now();
      this.stats.turns++;
      this.stats.bytesSent += sent;
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
      return true;
    }
  }

  /** Writes `buf[off, off + n)` with the prefetch flag and XOR applied as needed. */
  private write(s: Session, buf: Buffer, off: number, n: number): boolean {
    const end = off + n;
    // The 0x80 flag lives in the compression byte, response offset 3.
    const flag = s.currentPrefetch && this.profile.prefetchFlag && off <= 3 && end > 3;
    if (s.xorKey === 0 && !flag) return s.socket.write(buf.subarray(off, end));
    if (s.xorKey === 0) {
      // Only the compression byte differs from the shared frame: copy up to it, then a view.
      const head = Buffer.from(buf.subarray(off, 4));
      head[head.length - 1]! |= 0x80;
      const ok = s.socket.write(head);
      return end > 4 ? s.socket.write(buf.subarray(4, end)) : ok;
    }
    const copy = Buffer.from(buf.subarray(off, end));
    if (flag) copy[3 - off]! |= 0x80;
    xorInPlace(copy, s.xorKey);
    return s.socket.write(copy);
  }
}
