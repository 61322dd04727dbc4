/**
 * Framed TCP: the one transport for protocols that cut a TCP stream into frames (a length
 * prefix, or any `FrameMeasure`). It adds to `listenTcp` (connection caps, idle timeout,
 * diagnostics) everything a server needs to stay up when peers are hostile:
 *
 * - **Arrival-sized input.** A partial frame holds the bytes that arrived, never its announced
 *   length; a buffer grown by one large frame is released once it empties.
 * - **A frame deadline.** A frame begun must complete within `frameTimeoutMs`; so must the first
 *   frame after connecting. Otherwise the connection closes (`frame_timeout`).
 * - **Input budgets.** Bytes held across all connections (`maxBufferedBytes`) and per address
 *   (`maxBufferedBytesPerIp`). A connection that would grow past either stops being read (TCP
 *   then throttles the peer) until others release memory, or its frame deadline ends it.
 * - **Fair delivery.** A connection gets at most `framesPerTurn` frames per turn; connections
 *   with more waiting sit in a ring and are served round-robin, yielding to I/O between rounds.
 *   So a peer pipelining thousands of calls delays another peer by one turn, not by its backlog.
 * - **Bounded output with per-frame backpressure.** Replies go into a per-connection writer,
 *   flushed at the end of each turn (and on the next tick for asynchronous replies). Once more
 *   than `maxQueuedBytes` wait for the peer to read, or the socket refuses more, delivery stops
 *   until 'drain'.
 * - **Produced output.** A protocol whose output is a queue drained over many turns (JS5 serves
 *   large groups a slice at a time) gives its sink a `produce()`; the seam calls it in fair
 *   round-robin turns while the peer reads (under `maxQueuedBytes`), pausing on backpressure.
 *   With `outputTurnsPerAddress`, the turns are shared per address first, then per connection.
 * - **Error isolation.** A `DecodeError` from the handler closes that connection as `malformed`
 *   (or the protocol's `malformedReason`); any other exception as `handler_error`. Replies already
 *   written still go out first.
 */
import type net from 'node:net';
import { DecodeError } from '../wire/errors.js';
import { type FrameMeasure, StreamDeframer } from '../wire/framing.js';
import { WireWriter } from '../wire/writer.js';
import type { Connection } from './connection.js';
import type { Logger } from './logger.js';
import type { ProtocolMetrics } from './metrics.js';
import {
  CloseReason,
  closeReasonOf,
  closeSocket,
  listenTcp,
  TcpConnection,
  type TcpListener,
} from './tcp.js';

/** Every limit of a framed TCP server. Each is a server option; see `FRAMED_TCP_DEFAULTS`. */
export interface FramedTcpLimits {
  /** Largest frame accepted, header included; a larger announced length closes as `malformed`. */
  maxFrameBytes: number;
  /** Most simultaneous connections. */
  maxConnections: number;
  /** Most connections from one address (IPv4, or IPv6 /64); 0 = no limit. */
  maxConnectionsPerIp: number;
  /** Close a connection that sends nothing for this long; 0 disables. */
  idleTimeoutMs: number;
  /** A frame must complete this long after its first byte (the first frame: after connecting); 0 disables. */
  frameTimeoutMs: number;
  /** Most input bytes held across all connections (partial frames, frames waiting their turn). */
  maxBufferedBytes: number;
  /** Most input bytes held for the connections of one address; 0 = only the global budget. */
  maxBufferedBytesPerIp: number;
  /** Reply bytes waiting for one peer to read before its input stops being delivered. */
  maxQueuedBytes: number;
  /** Frames one connection is given per turn before the next connection's turn. */
  framesPerTurn: number;
}

/** Defaults for a public server. RMC uses these; see docs/security.md for tuning. */
export const FRAMED_TCP_DEFAULTS: Readonly<FramedTcpLimits> = {
  maxFrameBytes: 1024 * 1024,
  maxConnections: 10_000,
  maxConnectionsPerIp: 32,
  idleTimeoutMs: 120_000,
  frameTimeoutMs: 30_000,
  maxBufferedBytes: 4 * 1024 * 1024,
  maxBufferedBytesPerIp: 1024 * 1024,
  maxQueuedBytes: 256 * 1024,
  framesPerTurn: 16,
};

/** What a protocol attaches to each connection. */
export interface FrameSink {
  /**
   * One whole frame, `buf[start, end)`; the bytes are valid only during the call. Return `false`
   * to hold further delivery until `connection.resume()`. Throw DecodeError for a malformed frame.
   */
  onFrame(buf: Buffer, start: number, end: number): boolean | undefined;
  /** Runs once, after the socket closed, with the reason it closed for. */
  onClose?(reason: string): void;
  /**
   * Output produced over several turns (a queue drained under backpressure). Called in fair
   * turns after `connection.produceLater()`, while the peer reads: write one turn's worth
   * (`connection.send` or the writer), return true while more remains.
   */
  produce?(): boolean;
}

/** How `FramedConnection.close` ends a connection. */
export interface CloseOptions {
  /** Drop unsent output and close at once (default: flush, then end). */
  abort?: boolean;
  /** The protocol already counted this close in its metrics: record the reason, do not count it. */
  counted?: boolean;
  /** After a graceful end, destroy the socket if the peer has not closed its side within this (ms). */
  lingerMs?: number;
}

/**
 * One accepted connection, as the protocol sees it: a `Connection` of the seam (counters: frames
 * in, `send` calls and writer flushes out) with what framing adds.
 */
export interface FramedConnection extends Connection {
  readonly transport: 'tcp';
  /** Reply buffer: append whole frames, then `commit()`. Flushed at the end of the turn. */
  readonly writer: WireWriter;
  /** Replies were appended outside a turn (asynchronously): flush them on the next tick. */
  commit(): void;
  /** Delivery is held (the sink returned false); `resume()` restarts it. */
  readonly held: boolean;
  resume(): void;
  /** Flushes the replies written so far, then ends the connection (see `CloseOptions`). */
  close(reason?: string, options?: CloseOptions): void;
  /** Switches the framing rule from the next frame on (e.g. after a handshake). */
  setMeasure(measure: FrameMeasure): void;
  /** Queues `bytes` after what the writer holds, without copying; they must not change afterwards. */
  send(bytes: Buffer): void;
  /** The sink has output to produce: schedule `produce()` turns. */
  produceLater(): void;
  readonly closed: boolean;
  /** `close()` was called or the connection failed: nothing more is delivered or produced. */
  readonly closing: boolean;
  /** Reply bytes not yet taken by the kernel (writer + socket queue). */
  readonly queuedBytes: number;
  /** Input bytes held (partial frame, frames waiting their turn). */
  readonly bufferedBytes: number;
  /** True while the socket is not being read (backpressure, budget, held). */
  readonly readingPaused: boolean;
}

export interface FramedTcpOptions extends Partial<Omit<FramedTcpLimits, 'maxFrameBytes'>> {
  host: string;
  port: number;
  /** Protocol name for diagnostics events (default `metrics.protocol`). */
  protocol?: string;
  measure: FrameMeasure;
  maxFrameBytes: number;
  metrics: ProtocolMetrics;
  log: Logger;
  /** Close reason for a malformed frame (default `malformed`), e.g. to tell an unknown opcode apart. */
  malformedReason?(err: DecodeError): string;
  /** Close reason when the first frame (a handshake) is overdue (default `frame_timeout`). */
  firstFrameTimeoutReason?: string;
  /**
   * Produce turns are shared per address (IPv4, or IPv6 /64): each round, the connections of one
   * address get at most this many turns between them, one each while they are fewer. So many
   * clients behind one address (a NAT, a venue) are all served, sharing that address's part of the
   * bandwidth, instead of one address outweighing others by its connection count. Unset or 0: one
   * turn per connection.
   */
  outputTurnsPerAddress?: number;
  /** Accept the connection: return its sink (a refused one: `connection.close(...)`, then any sink). */
  onConnection(connection: FramedConnection): FrameSink;
}

export interface FramedTcpServer {
  readonly port: number;
  readonly listener: TcpListener;
  readonly limits: Readonly<FramedTcpLimits>;
  /** Input bytes held across all connections (what `maxBufferedBytes` bounds). */
  readonly bufferedBytes: number;
  connections(): Iterable<FramedConnection>;
  close(graceMs?: number): Promise<void>;
}

/** The connections of one address waiting for produce turns (`outputTurnsPerAddress`). */
interface AddressOutput {
  readonly key: string;
  conns: Conn[];
  head: number;
  inRing: boolean;
}

/** A connection stops reading while this many input bytes wait behind its turn. */
const READ_HIGH_WATER = 64 * 1024;
/** An emptied input buffer larger than this is released; smaller ones are kept for reuse. */
const RETAINED_INPUT_BYTES = 16 * 1024;
const WRITER_INITIAL_BYTES = 4096;
/** A writer grown past this by a burst of replies is replaced after the flush. */
const WRITER_SHRINK_BYTES = 64 * 1024;
/** Input a connection may hold without being paused by a budget. */
const SMALL_HOLD_BYTES = 16 * 1024;
/** A budget-paused partial frame stalled this long may be closed to admit newcomers. */
const STALL_EVICT_MS = 5000;
/** A connection's turn on its own data, when no connection waits in the ring, is this many times `framesPerTurn`. */
const IDLE_TURN_FACTOR = 4;
/** Turns in one scheduler run go on, past one round, until this many frames were delivered. */
const RUN_MIN_FRAMES = 256;
/** Produced output written in one scheduler run (all connections), before yielding to I/O. */
const RUN_OUTPUT_BYTES = 4 * 1024 * 1024;

class Conn extends TcpConnection implements FramedConnection {
  readonly deframer: StreamDeframer;
  writer = new WireWriter({ initialCapacity: WRITER_INITIAL_BYTES });
  sink!: FrameSink;
  onFrame!: (buf: Buffer, start: number, end: number) => boolean;
  /** Chunks received while the connection could not take them (not yet in the deframer). */
  pending: Buffer[] = [];
  pendingBytes = 0;
  held = false;
  waitingDrain = false;
  /** The sink produces its own output (`produce`): output backpressure holds production only. */
  producer = false;
  inRing = false;
  inTurn = false;
  turnLeft = 0;
  socketPaused = false;
  budgetPaused = false;
  failed = false;
  closed = false;
  flushScheduled = false;
  /** The sink has output to produce; `inOutRing`: waiting for its produce turn. */
  wantsOutput = false;
  inOutRing = false;
  corked = false;
  /** Bytes handed to the socket so far (what a produce turn wrote). */
  sentBytes = 0;
  /** Bytes counted against the budgets. */
  accounted = 0;
  /** When the incomplete frame at the head began (0: none). */
  partialSince = 0;
  lastConsumed = 0;
  openedAt = Date.now();
  private readonly owner: FramedTcpServerImpl;

  constructor(owner: FramedTcpServerImpl, socket: net.Socket, measure: FrameMeasure, maxFrameBytes: number) {
    super(socket, owner.metrics);
    this.owner = owner;
    this.deframer = new StreamDeframer(measure, { maxFrameBytes, maxRetainedBytes: RETAINED_INPUT_BYTES });
  }

  get queuedBytes(): number {
    return this.writer.offset + this.socket.writableLength;
  }

  get bufferedBytes(): number {
    return this.deframer.buffered + this.pendingBytes;
  }

  get closing(): boolean {
    return this.failed || this.closed;
  }

  override get open(): boolean {
    return !this.failed && !this.closed;
  }

  get readingPaused(): boolean {
    return this.socketPaused || this.deframer.isPaused;
  }

  /** May frames be delivered now? */
  get eligible(): boolean {
    return !this.held && !(this.waitingDrain && !this.producer) && !this.failed && !this.closed;
  }

  commit(): void {
    if (this.inTurn || this.flushScheduled) return;
    this.flushScheduled = true;
    process.nextTick(this.owner.flushTick, this);
  }

  resume(): void {
    if (!this.held) return;
    this.held = false;
    this.owner.settle(this);
  }

  override close(reason: string = CloseReason.ClosedByServer, options?: CloseOptions): void {
    if (this.closed || this.socket.destroyed) return;
    // Nothing more is read, delivered or produced; what was answered still goes out.
    this.failed = true;
    this.wantsOutput = false;
    const metrics = options?.counted === true ? undefined : this.owner.metrics;
    if (options?.abort === true) {
      this.writer.reset();
      this.owner.release(this);
      recordClose(this.socket, reason, metrics, 'destroy');
      return;
    }
    this.owner.flush(this);
    recordClose(this.socket, reason, metrics, 'end');
    const linger = options?.lingerMs;
    if (linger !== undefined && linger > 0) {
      const socket = this.socket;
      setTimeout(() => socket.destroy(), linger).unref();
    }
  }

  setMeasure(measure: FrameMeasure): void {
    this.deframer.setMeasure(measure);
  }

  override send(bytes: Buffer): void {
    const s = this.socket;
    if (this.closed || s.destroyed || s.writableEnded) return;
    if (this.writer.offset > 0) this.owner.flush(this);
    this.sentBytes += bytes.length;
    this.messagesOut++;
    // Past the stream's small high-water mark writes go on, up to `maxQueuedBytes` queued.
    if (!s.write(bytes) && this.queuedBytes >= this.owner.limits.maxQueuedBytes) this.owner.waitDrain(this);
  }

  produceLater(): void {
    if (this.closed || this.failed) return;
    this.wantsOutput = true;
    this.owner.enqueueOutput(this);
  }
}

/** `closeSocket`, or (when the protocol counted the close itself) only the reason recorded. */
function recordClose(
  socket: net.Socket,
  reason: string,
  metrics: ProtocolMetrics | undefined,
  how: 'end' | 'destroy' | 'destroySoon',
): void {
  closeSocket(socket, reason, metrics ?? UNCOUNTED, how);
}

/** Metrics that count nothing: the protocol counted the close under its own name. */
const UNCOUNTED = { close() {} } as unknown as ProtocolMetrics;

class FramedTcpServerImpl implements FramedTcpServer {
  listener!: TcpListener;
  readonly limits: FramedTcpLimits;
  readonly metrics: ProtocolMetrics;
  private readonly log: Logger;
  private readonly options: FramedTcpOptions;
  private readonly live = new Set<Conn>();
  private ring: Conn[] = [];
  private ringHead = 0;
  /** Connections waiting for a produce turn, round-robin. */
  private outRing: Conn[] = [];
  private outHead = 0;
  /** With `outputTurnsPerAddress`: addresses with connections waiting, round-robin, and their queues. */
  private addressRing: AddressOutput[] = [];
  private addressHead = 0;
  private readonly addressOutput = new Map<string, AddressOutput>();
  private readonly turnsPerAddress: number;
  private readonly corked: Conn[] = [];
  private scheduled = false;
  bufferedBytes = 0;
  private readonly bufferedPerIp = new Map<string, number>();
  /** Connections paused by a budget, oldest first. */
  private readonly budgetWaiters = new Set<Conn>();
  private sweepTimer: NodeJS.Timeout | undefined = undefined;

  constructor(options: FramedTcpOptions) {
    this.options = options;
    this.metrics = options.metrics;
    this.log = options.log;
    const d = FRAMED_TCP_DEFAULTS;
    this.limits = {
      maxFrameBytes: options.maxFrameBytes,
      maxConnections: options.maxConnections ?? d.maxConnections,
      maxConnectionsPerIp: options.maxConnectionsPerIp ?? d.maxConnectionsPerIp,
      idleTimeoutMs: options.idleTimeoutMs ?? d.idleTimeoutMs,
      frameTimeoutMs: options.frameTimeoutMs ?? d.frameTimeoutMs,
      maxBufferedBytes: options.maxBufferedBytes ?? d.maxBufferedBytes,
      maxBufferedBytesPerIp: options.maxBufferedBytesPerIp ?? d.maxBufferedBytesPerIp,
      maxQueuedBytes: options.maxQueuedBytes ?? d.maxQueuedBytes,
      framesPerTurn: Math.max(1, options.framesPerTurn ?? d.framesPerTurn),
    };
    this.turnsPerAddress = Math.max(0, Math.floor(options.outputTurnsPerAddress ?? 0));
  }

  get port(): number {
    return this.listener.port;
  }

  connections(): Iterable<FramedConnection> {
    return this.live;
  }

  async start(): Promise<void> {
    const l = this.limits;
    this.listener = await listenTcp({
      host: this.options.host,
      port: this.options.port,
      protocol: this.options.protocol ?? this.metrics.protocol,
      maxConnections: l.maxConnections,
      maxConnectionsPerIp: l.maxConnectionsPerIp,
      idleTimeoutMs: l.idleTimeoutMs,
      pauseOnConnect: true,
      metrics: this.metrics,
      log: this.log,
      createConnection: (socket) => new Conn(this, socket, this.options.measure, l.maxFrameBytes),
      onConnection: (_socket, connection) => this.accept(connection as Conn),
    });
    const every = l.frameTimeoutMs > 0 ? Math.min(500, Math.max(10, l.frameTimeoutMs / 4)) : 500;
    this.sweepTimer = setInterval(() => this.sweep(), every);
    this.sweepTimer.unref();
  }

  close(graceMs?: number): Promise<void> {
    if (this.sweepTimer !== undefined) clearInterval(this.sweepTimer);
    this.sweepTimer = undefined;
    for (const c of this.live) this.flush(c);
    return this.listener.close(graceMs);
  }

  private accept(c: Conn): void {
    const socket = c.socket;
    c.onFrame = (buf, start, end) => this.deliver(c, buf, start, end);
    this.live.add(c);
    socket.on('close', () => this.closed(c));
    c.sink = this.options.onConnection(c);
    c.producer = c.sink.produce !== undefined;
    // Refused by the protocol (it closed the connection at once): nothing is ever read.
    if (c.failed) return;
    socket.on('data', (chunk: Buffer) => this.onData(c, chunk));
    // The socket was accepted paused. Over budget, it gets no first read until memory is
    // released (each read would hold up to 64 KiB more per connection); the sweep makes room
    // for such newcomers by closing the longest-stalled partial frames.
    c.socketPaused = true;
    if (this.overBudget(c.addressKey)) {
      c.budgetPaused = true;
      this.budgetWaiters.add(c);
      this.metrics.count('input_budget_pauses');
    } else {
      this.settle(c);
    }
  }

  private onData(c: Conn, chunk: Buffer): void {
    if (c.failed || c.closed) return;
    if (c.eligible && !c.deframer.isPaused && c.pending.length === 0) {
      // The usual case: this connection's turn happens now, on its own data. With nobody
      // waiting in the ring, the turn is longer (a pipelined burst goes out in one write).
      const idle = this.ringHead === this.ring.length;
      this.turn(c, chunk, idle ? IDLE_TURN_FACTOR * this.limits.framesPerTurn : this.limits.framesPerTurn);
    } else {
      c.pending.push(chunk);
      c.pendingBytes += chunk.length;
    }
    this.settle(c);
  }

  /** The deframer's frame handler: counts the turn down, applies backpressure. */
  private deliver(c: Conn, buf: Buffer, start: number, end: number): boolean {
    c.turnLeft--;
    c.messagesIn++;
    if (c.sink.onFrame(buf, start, end) === false) c.held = true;
    if (c.writer.offset > this.limits.maxQueuedBytes) this.flush(c);
    if (c.held || c.failed) return false;
    // A producer's input does not wait for its output (its own caps hold it instead).
    if (!c.producer && (c.waitingDrain || c.queuedBytes > this.limits.maxQueuedBytes)) return false;
    return c.turnLeft > 0;
  }

  /** One turn: up to `framesPerTurn` frames from what is held, then from `chunk`. */
  private turn(c: Conn, chunk: Buffer | undefined, frames: number): number {
    c.turnLeft = frames;
    c.inTurn = true;
    try {
      let going = c.deframer.isPaused ? c.deframer.resume(c.onFrame) : true;
      while (going && c.pending.length > 0) {
        const next = c.pending.shift()!;
        c.pendingBytes -= next.length;
        going = c.deframer.push(next, c.onFrame);
      }
      if (chunk !== undefined) {
        if (going) c.deframer.push(chunk, c.onFrame);
        else {
          c.pending.push(chunk);
          c.pendingBytes += chunk.length;
        }
      }
    } catch (err) {
      c.inTurn = false;
      this.fail(c, err);
      return frames - c.turnLeft;
    }
    c.inTurn = false;
    this.flush(c);
    return frames - c.turnLeft;
  }

  /** After any change: ring membership, budgets, the frame clock, and whether to read. */
  settle(c: Conn): void {
    if (c.closed || c.failed) return;
    if (c.wantsOutput) this.enqueueOutput(c);
    const backlog = c.deframer.isPaused || c.pending.length > 0;
    const eligible = c.eligible;
    if (backlog && eligible && !c.inRing) {
      c.inRing = true;
      this.ring.push(c);
      this.schedule();
    }
    this.account(c);
    // The frame clock runs only while the peer owes the rest of a frame.
    const partial = !backlog && c.deframer.buffered > 0;
    const consumed = c.deframer.consumed;
    if (!partial) c.partialSince = 0;
    else if (c.partialSince === 0 || consumed !== c.lastConsumed) c.partialSince = Date.now();
    c.lastConsumed = consumed;
    const read = eligible && !c.budgetPaused && (!backlog || c.bufferedBytes < READ_HIGH_WATER);
    if (read && c.socketPaused) {
      c.socketPaused = false;
      c.socket.resume();
    } else if (!read && !c.socketPaused) {
      c.socketPaused = true;
      c.socket.pause();
    }
  }

  /** Counts `c`'s held input against the budgets; pauses it when it pushed one over. */
  private account(c: Conn): void {
    // Arrived bytes (the buffer's spare room is bounded: it grows at most 256 KiB beyond them
    // and shrinks when a small remainder sits in a large buffer).
    const now = c.deframer.buffered + c.pendingBytes;
    const delta = now - c.accounted;
    if (delta === 0) return;
    c.accounted = now;
    this.bufferedBytes += delta;
    const ip = (this.bufferedPerIp.get(c.addressKey) ?? 0) + delta;
    if (ip <= 0) this.bufferedPerIp.delete(c.addressKey);
    else this.bufferedPerIp.set(c.addressKey, ip);
    if (delta > 0) {
      // A connection holding little (a small frame's head, the tail of a pipelined burst) is
      // never paused: it must be able to finish its frame, or a busy address would stall.
      if (!c.budgetPaused && now > SMALL_HOLD_BYTES && this.overBudget(c.addressKey, ip)) {
        c.budgetPaused = true;
        this.budgetWaiters.add(c);
        this.metrics.count('input_budget_pauses');
      }
    } else if (this.budgetWaiters.size > 0) {
      this.wakeWaiters();
    }
  }

  private overBudget(key: string, ipBytes = this.bufferedPerIp.get(key) ?? 0): boolean {
    const l = this.limits;
    return (
      this.bufferedBytes > l.maxBufferedBytes ||
      (l.maxBufferedBytesPerIp > 0 && ipBytes > l.maxBufferedBytesPerIp)
    );
  }

  /** Lets budget-paused connections read again, oldest first, while there is room. */
  private wakeWaiters(): void {
    // Connections that hold nothing yet (newcomers) first, then those holding partial frames.
    for (const newcomersOnly of [true, false]) this.wakePass(newcomersOnly);
  }

  private wakePass(newcomersOnly: boolean): void {
    for (const w of this.budgetWaiters) {
      if (newcomersOnly && w.accounted > 0) continue;
      // One holding a small partial frame may always finish it; others wait for room.
      const small = w.accounted > 0 && w.accounted <= SMALL_HOLD_BYTES;
      if (!small && this.overBudget(w.addressKey)) continue;
      this.budgetWaiters.delete(w);
      w.budgetPaused = false;
      // A connection that waited before its first frame gets its full first-frame time now.
      if (w.deframer.consumed === 0) w.openedAt = Date.now();
      this.settle(w);
    }
  }

  private schedule(): void {
    if (this.scheduled) return;
    this.scheduled = true;
    setImmediate(this.run);
  }

  /** One scheduler run: a round of turns (more for few connections), then yield to I/O. */
  private readonly run = (): void => {
    this.scheduled = false;
    let round = this.ring.length - this.ringHead;
    // Few connections waiting: longer turns, fewer writes; many: `framesPerTurn` each.
    const perTurn = Math.max(this.limits.framesPerTurn, Math.floor(RUN_MIN_FRAMES / Math.max(1, round)));
    let frames = 0;
    while (this.ringHead < this.ring.length && (round > 0 || frames < RUN_MIN_FRAMES)) {
      const c = this.ring[this.ringHead++]!;
      round--;
      c.inRing = false;
      if (!c.eligible) continue;
      frames += this.turn(c, undefined, perTurn);
      this.settle(c);
    }
    if (this.ringHead === this.ring.length) {
      this.ring.length = 0;
      this.ringHead = 0;
    } else if (this.ringHead > 1024) {
      this.ring = this.ring.slice(this.ringHead);
      this.ringHead = 0;
    }
    if (this.outputWaiting) this.produceRound();
    if (this.ringHead < this.ring.length || this.outputWaiting) this.schedule();
  };

  private get outputWaiting(): boolean {
    return this.outHead < this.outRing.length || this.addressHead < this.addressRing.length;
  }

  /** Queues `c` for a produce turn (when it has output to produce and the peer reads). */
  enqueueOutput(c: Conn): void {
    if (!c.wantsOutput || c.inOutRing || c.closed || c.failed || c.waitingDrain) return;
    if (c.queuedBytes >= this.limits.maxQueuedBytes) {
      this.waitDrain(c);
      return;
    }
    c.inOutRing = true;
    if (this.turnsPerAddress > 0) {
      let a = this.addressOutput.get(c.addressKey);
      if (a === undefined) {
        a = { key: c.addressKey, conns: [], head: 0, inRing: false };
        this.addressOutput.set(c.addressKey, a);
      }
      a.conns.push(c);
      if (!a.inRing) {
        a.inRing = true;
        this.addressRing.push(a);
      }
    } else {
      this.outRing.push(c);
    }
    this.schedule();
  }

  /**
   * Produce turns, round-robin, up to `RUN_OUTPUT_BYTES` in all. Writes of one run to one socket
   * go out together (corked: one writev instead of one write each).
   */
  private produceRound(): void {
    let budget = RUN_OUTPUT_BYTES;
    if (this.turnsPerAddress > 0) {
      budget = this.produceByAddress(budget);
    } else {
      while (budget > 0 && this.outHead < this.outRing.length) {
        const c = this.outRing[this.outHead++]!;
        c.inOutRing = false;
        const sent = this.produceTurn(c);
        if (sent < 0) break;
        budget -= sent;
      }
    }
    for (const c of this.corked) {
      c.corked = false;
      if (!c.socket.destroyed) c.socket.uncork();
    }
    this.corked.length = 0;
    if (this.outHead === this.outRing.length || this.outHead > 1024) {
      this.outRing = this.outRing.slice(this.outHead);
      this.outHead = 0;
    }
    if (this.addressHead === this.addressRing.length || this.addressHead > 1024) {
      this.addressRing = this.addressRing.slice(this.addressHead);
      this.addressHead = 0;
    }
  }

  /**
   * Produce turns shared per address: each visit of an address serves at most
   * `outputTurnsPerAddress` of the connections it had waiting, one turn each, then the address
   * goes to the back of the ring. Returns the budget left.
   */
  private produceByAddress(budget: number): number {
    while (budget > 0 && this.addressHead < this.addressRing.length) {
      // `a.inRing` stays true through the visit: a connection served now queues again in `a`
      // (behind the others) without putting the address in the ring a second time.
      const a = this.addressRing[this.addressHead++]!;
      // Only those waiting now: a connection served in this visit queues again behind them.
      let turns = Math.min(this.turnsPerAddress, a.conns.length - a.head);
      let stalled = false;
      while (turns > 0 && a.head < a.conns.length) {
        const c = a.conns[a.head++]!;
        c.inOutRing = false;
        turns--;
        const sent = this.produceTurn(c);
        if (sent < 0) {
          stalled = true;
          break;
        }
        budget -= sent;
      }
      if (a.head === a.conns.length) {
        a.conns.length = 0;
        a.head = 0;
        a.inRing = false;
        this.addressOutput.delete(a.key);
      } else {
        if (a.head > 64) {
          a.conns = a.conns.slice(a.head);
          a.head = 0;
        }
        this.addressRing.push(a);
      }
      if (stalled) break;
    }
    return budget;
  }

  /**
   * One produce turn of `c`: the bytes it wrote, or -1 when it made no progress while it has more
   * (the rest waits for the next run: timers and I/O first).
   */
  private produceTurn(c: Conn): number {
    if (!c.wantsOutput || c.closed || c.failed || c.waitingDrain) return 0;
    if (!c.corked) {
      c.corked = true;
      c.socket.cork();
      this.corked.push(c);
    }
    const before = c.sentBytes;
    let more: boolean;
    c.inTurn = true;
    try {
      more = c.sink.produce?.() === true;
    } catch (err) {
      c.inTurn = false;
      this.fail(c, err);
      return 0;
    }
    c.inTurn = false;
    this.flush(c);
    const sent = c.sentBytes - before;
    c.wantsOutput = more && !c.failed;
    if (!c.failed && !c.closed) this.settle(c);
    return sent === 0 && more ? -1 : sent;
  }

  /** Holds delivery and production for `c` until its socket drains. */
  waitDrain(c: Conn): void {
    if (c.waitingDrain || c.socket.destroyed) return;
    c.waitingDrain = true;
    c.socket.once('drain', () => {
      c.waitingDrain = false;
      this.settle(c);
    });
    if (!c.inTurn) this.settle(c);
  }

  /** Drops what `c` holds of input (it is closing). */
  release(c: Conn): void {
    c.deframer.reset();
    c.pending = [];
    c.pendingBytes = 0;
    this.account(c);
  }

  readonly flushTick = (c: Conn): void => {
    c.flushScheduled = false;
    this.flush(c);
  };

  /** Hands the writer's bytes to the socket; waits for 'drain' when it refuses more. */
  flush(c: Conn): void {
    const w = c.writer;
    if (w.offset === 0) return;
    const s = c.socket;
    if (s.destroyed || s.writableEnded) {
      w.reset();
      return;
    }
    const out = w.toBuffer();
    w.reset();
    if (w.buf.length > WRITER_SHRINK_BYTES)
      c.writer = new WireWriter({ initialCapacity: WRITER_INITIAL_BYTES });
    c.sentBytes += out.length;
    c.messagesOut++;
    if (!s.write(out)) this.waitDrain(c);
  }

  private fail(c: Conn, err: unknown): void {
    c.failed = true;
    c.wantsOutput = false;
    const socket = c.socket;
    if (err instanceof DecodeError) {
      const reason = this.options.malformedReason?.(err) ?? CloseReason.Malformed;
      this.metrics.drop(reason);
      this.log.debug(
        { code: err.code, err: err.message, offset: err.offset, remote: c.remoteAddress, reason },
        'malformed frame; closing',
      );
      this.flush(c);
      closeSocket(socket, reason, this.metrics, 'destroySoon');
    } else {
      this.log.error({ err, remote: c.remoteAddress }, 'frame handler failed; closing the connection');
      this.flush(c);
      closeSocket(socket, CloseReason.HandlerError, this.metrics, 'destroySoon');
    }
    c.deframer.reset();
    c.pending = [];
    c.pendingBytes = 0;
    this.account(c);
    if (!c.socketPaused) {
      c.socketPaused = true;
      socket.pause();
    }
  }

  private closed(c: Conn): void {
    if (c.closed) return;
    c.closed = true;
    c.wantsOutput = false;
    this.live.delete(c);
    this.budgetWaiters.delete(c);
    c.deframer.reset();
    c.pending = [];
    c.pendingBytes = 0;
    c.writer.reset();
    this.account(c);
    if (this.budgetWaiters.size > 0) this.wakeWaiters();
    try {
      c.sink.onClose?.(closeReasonOf(c.socket) ?? CloseReason.PeerClosed);
    } catch (err) {
      this.log.error({ err }, 'connection close handler failed');
    }
  }

  /** Closes `c` at once, releasing its input (answers already written still go out). */
  private shed(c: Conn, reason: string): void {
    c.failed = true;
    c.deframer.reset();
    c.pending = [];
    c.pendingBytes = 0;
    this.account(c);
    this.flush(c);
    closeSocket(c.socket, reason, this.metrics, 'destroy');
  }

  /** Closes connections whose frame (or first frame) is overdue. */
  private sweep(): void {
    const now = Date.now();
    const limit = this.limits.frameTimeoutMs;
    const firstReason = this.options.firstFrameTimeoutReason ?? CloseReason.FrameTimeout;
    for (const c of this.live) {
      if (limit <= 0) break;
      if (c.failed || c.closed) continue;
      const first = c.deframer.consumed === 0;
      const overdue =
        (c.partialSince !== 0 && now - c.partialSince > limit) ||
        (first && c.pending.length === 0 && !c.deframer.isPaused && now - c.openedAt > limit);
      if (overdue) this.shed(c, first ? firstReason : CloseReason.FrameTimeout);
    }
    this.makeRoomForNewcomers(now);
  }

  /**
   * While connections wait to send their first bytes and the budget is spent, closes the
   * connections whose partial frames have been stalled longest (over 5 s), so an attack that
   * holds the budget delays new players by seconds, not by the whole frame deadline.
   */
  private makeRoomForNewcomers(now: number): void {
    if (this.bufferedBytes <= this.limits.maxBufferedBytes) return;
    let waiting = 0;
    for (const w of this.budgetWaiters) if (w.accounted === 0 && !w.failed) waiting++;
    if (waiting === 0) return;
    const room = Math.min(waiting, 16) * READ_HIGH_WATER;
    for (const w of this.budgetWaiters) {
      if (this.bufferedBytes + room <= this.limits.maxBufferedBytes) break;
      if (w.failed || w.accounted === 0 || w.partialSince === 0 || now - w.partialSince < STALL_EVICT_MS)
        continue;
      this.metrics.count('stalled_frames_evicted');
      this.shed(w, CloseReason.OverBudget);
    }
  }
}

/** Listens for framed TCP connections. Port 0 picks a free port (see `port`). */
export async function listenFramedTcp(options: FramedTcpOptions): Promise<FramedTcpServer> {
  const server = new FramedTcpServerImpl(options);
  await server.start();
  return server;
}
