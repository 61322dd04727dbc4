/**
 * RMC server: a dispatcher plus transports, in any of the three variants (`variant`).
 *
 * The TCP transport frames the stream with the RMC u32 length (the wire core's
 * StreamDeframer), caps frame size, closes idle connections, and pipelines calls: answers leave
 * in the order handlers finish, sync answers in one write at the end of each received chunk,
 * async ones batched per tick. It applies backpressure: it stops reading (the deframer stops
 * delivering mid-chunk, and the socket pauses) while more than `maxQueuedBytes` of answers wait
 * for the peer to read them or too many calls are in flight.
 *
 * A PRUDP transport would do the same with reassembled DATA payloads: `dispatcher.open`,
 * `dispatcher.handleFrame` per RMC message, `dispatcher.closeConnection`. Handlers do not change.
 */
import type net from 'node:net';
import type { Logger } from 'pino';
import { silentLogger } from '../../core/logger.js';
import { ProtocolMetrics } from '../../core/metrics.js';
import type { Endpoint, RunningServer } from '../../core/server.js';
import { listenTcp, type TcpListener } from '../../core/tcp.js';
import {
  DecodeError,
  type DecodeLimits,
  lengthPrefixed,
  StreamDeframer,
  WireWriter,
} from '../../wire/index.js';
import { type Handlers, type RegisterOptions, RmcDispatcher, type RmcSink } from './dispatcher.js';
import { DEFAULT_MAX_FRAME_BYTES, type RmcVariant } from './messages.js';
import type { ProtocolDef } from './signature.js';

export interface RmcServerOptions {
  log?: Logger;
  metrics?: ProtocolMetrics;
  /** Wire variant: `hyperscape` (default), `nex-verbose` or `classic` (see RmcDispatcher). */
  variant?: RmcVariant;
  /** Largest frame accepted, u32 length included (default 1 MiB). */
  maxFrameBytes?: number;
  /** Connections silent this long are closed (default 120 s; 0 disables). */
  idleTimeoutMs?: number;
  maxConnections?: number;
  /** Calls in flight per connection before reading pauses (default 1024). */
  maxInFlight?: number;
  /**
   * Answer bytes queued per connection (not yet taken by the kernel) before reading pauses
   * (default 1 MiB). Reading resumes when the socket drains.
   */
  maxQueuedBytes?: number;
  limits?: Partial<DecodeLimits>;
}

/** One connection's transport state (`RmcServer.connectionStats()`). */
export interface RmcConnectionStats {
  id: number;
  remoteAddress: string;
  remotePort: number;
  /** Answer bytes not yet taken by the kernel (writer + socket queue). */
  queuedBytes: number;
  /** Size of the connection's output buffer. */
  writerCapacity: number;
  /** Received bytes held back (a partial frame, or frames waiting behind a pause). */
  bufferedInputBytes: number;
  inFlight: number;
  readingPaused: boolean;
}

/** Default `maxQueuedBytes`. */
export const DEFAULT_MAX_QUEUED_BYTES = 1024 * 1024;
const WRITER_INITIAL_BYTES = 4096;
/** A connection's writer larger than this after a flush is replaced with a small one. */
const WRITER_SHRINK_BYTES = 64 * 1024;

export interface ListenOptions {
  host?: string;
  port?: number;
}

export interface RmcListening extends RunningServer {
  /** The TCP port actually bound (useful with port 0). */
  port: number;
  /** Stops accepting and ends connections; sockets still open after `graceMs` are destroyed. */
  close(graceMs?: number): Promise<void>;
}

/** The smallest RMC frame: length (4), empty String (2), isRequest (1); classic: length, protocol byte, one more. */
const MIN_FRAME_BYTES = 7;
const MIN_CLASSIC_FRAME_BYTES = 6;

export class RmcServer {
  readonly dispatcher: RmcDispatcher;
  readonly log: Logger;
  readonly metrics: ProtocolMetrics;
  private readonly options: RmcServerOptions;
  private readonly listeners: TcpListener[] = [];
  private readonly live = new Set<() => RmcConnectionStats>();

  constructor(options: RmcServerOptions = {}) {
    this.options = options;
    this.log = options.log ?? silentLogger();
    this.metrics = options.metrics ?? new ProtocolMetrics('rmc');
    this.dispatcher = new RmcDispatcher({
      log: this.log,
      metrics: this.metrics,
      variant: options.variant,
      limits: options.limits,
    });
  }

  /** Registers a protocol with its handlers (see RmcDispatcher.register). */
  register<P extends ProtocolDef<any>>(protocol: P, handlers: Handlers<P>, options?: RegisterOptions): this {
    this.dispatcher.register(protocol, handlers, options);
    return this;
  }

  /** Listens on TCP. Port 0 picks a free port (reported in `port` and `endpoints`). */
  async listen(options: ListenOptions = {}): Promise<RmcListening> {
    const host = options.host ?? '0.0.0.0';
    const maxFrameBytes = this.options.maxFrameBytes ?? DEFAULT_MAX_FRAME_BYTES;
    const maxInFlight = this.options.maxInFlight ?? 1024;
    const maxQueuedBytes = this.options.maxQueuedBytes ?? DEFAULT_MAX_QUEUED_BYTES;
    const variant = this.options.variant ?? 'hyperscape';
    const measure = lengthPrefixed({
      prefix: 'u32le',
      counts: 'rest',
      maxFrameBytes,
      minFrameBytes: variant === 'classic' ? MIN_CLASSIC_FRAME_BYTES : MIN_FRAME_BYTES,
    });
    const listener = await listenTcp({
      host,
      port: options.port ?? 9103,
      maxConnections: this.options.maxConnections ?? 10_000,
      idleTimeoutMs: this.options.idleTimeoutMs ?? 120_000,
      metrics: this.metrics,
      log: this.log,
      onConnection: (socket) => this.attach(socket, measure, maxFrameBytes, maxInFlight, maxQueuedBytes),
    });
    this.listeners.push(listener);
    const endpoints: Endpoint[] = [
      {
        transport: 'tcp',
        host,
        port: listener.port,
        description: `Rendez-Vous RMC (${variant} variant), u32-framed`,
      },
    ];
    return {
      port: listener.port,
      endpoints,
      close: (graceMs?: number) => listener.close(graceMs),
    };
  }

  /** Stops every listener started by this server. */
  async close(): Promise<void> {
    await Promise.all(this.listeners.map((l) => l.close()));
  }

  /** Per-connection transport state (queued output, writer size, calls in flight), for monitoring. */
  connectionStats(): RmcConnectionStats[] {
    return [...this.live].map((f) => f());
  }

  private attach(
    socket: net.Socket,
    measure: ReturnType<typeof lengthPrefixed>,
    maxFrameBytes: number,
    maxInFlight: number,
    maxQueuedBytes: number,
  ): void {
    const { dispatcher, metrics, log } = this;
    const deframer = new StreamDeframer(measure, { maxFrameBytes });
    let writer = new WireWriter({ initialCapacity: WRITER_INITIAL_BYTES });
    let flushScheduled = false;
    /** socket.write returned false: reading waits for 'drain'. */
    let waitingForDrain = false;
    /** Too many calls in flight: reading waits until half of them are answered. */
    let pausedForCalls = false;
    /** Inside pump(): re-entrant resumes are left to it. */
    let pumping = false;
    let inFlight = 0;
    let failed = false;

    /** Answers not yet taken by the kernel: still in the writer, or queued in the socket. */
    const queued = () => writer.offset + socket.writableLength;

    const onDrain = () => {
      waitingForDrain = false;
      resumeReading();
    };

    const flush = () => {
      flushScheduled = false;
      if (writer.offset === 0 || socket.destroyed || socket.writableEnded) {
        writer.reset();
        return;
      }
      const out = writer.toBuffer();
      writer.reset();
      // A burst of large answers grows the writer; do not keep that memory for the
      // connection's whole life.
      if (writer.buf.length > WRITER_SHRINK_BYTES)
        writer = new WireWriter({ initialCapacity: WRITER_INITIAL_BYTES });
      if (!socket.write(out) && !waitingForDrain) {
        waitingForDrain = true;
        socket.pause();
        socket.once('drain', onDrain);
      }
    };

    const sink: RmcSink = {
      get writer() {
        return writer;
      },
      commit() {
        if (inFlight > 0) inFlight--;
        if (pausedForCalls && inFlight <= maxInFlight / 2) {
          pausedForCalls = false;
          resumeReading();
        }
        if (!flushScheduled) {
          flushScheduled = true;
          process.nextTick(flush);
        }
      },
      close() {
        if (writer.offset > 0) flush();
        socket.end();
      },
    };
    const conn = dispatcher.open(
      { transport: 'tcp', remoteAddress: socket.remoteAddress ?? '', remotePort: socket.remotePort ?? 0 },
      sink,
    );

    // Returning false pauses the deframer: the rest of the input waits (in the deframer, then in
    // the kernel, since the socket is paused too) until the peer reads its answers.
    const onFrame = (buf: Buffer, start: number, end: number): boolean | undefined => {
      metrics.received++;
      inFlight++;
      dispatcher.handleFrame(conn, buf, start, end);
      if (queued() > maxQueuedBytes || inFlight > maxInFlight) return false;
      return undefined;
    };

    const fail = (err: unknown) => {
      failed = true;
      if (err instanceof DecodeError) {
        metrics.drop('malformed');
        metrics.close('malformed');
        log.info(
          { code: err.code, err: err.message, offset: err.offset, remote: socket.remoteAddress },
          'malformed RMC frame; closing',
        );
      } else {
        metrics.close('handler_error');
        log.error({ err }, 'RMC dispatcher failed; closing the connection');
      }
      deframer.reset();
      // Answers already computed still go out; then the connection ends.
      if (writer.offset > 0) flush();
      socket.destroySoon();
      socket.pause();
    };

    /** Delivers `chunk` (or, without one, what the deframer holds) and decides whether to read on. */
    const pump = (chunk: Buffer | undefined) => {
      if (failed) return;
      pumping = true;
      try {
        let more = chunk === undefined ? deframer.resume(onFrame) : deframer.push(chunk, onFrame);
        for (;;) {
          // Answers from sync handlers leave now, in one write with the rest of this batch's.
          if (writer.offset > 0) flush();
          if (more || waitingForDrain || inFlight > maxInFlight || socket.destroyed) break;
          // Paused over the high-water mark, but the socket took everything: carry on.
          more = deframer.resume(onFrame);
        }
      } catch (err) {
        pumping = false;
        fail(err);
        return;
      }
      pumping = false;
      if (inFlight > maxInFlight) pausedForCalls = true;
      if (deframer.isPaused || waitingForDrain || pausedForCalls) socket.pause();
    };

    const resumeReading = () => {
      if (pumping || failed || socket.destroyed || waitingForDrain || pausedForCalls) return;
      if (deframer.isPaused) {
        pump(undefined);
        if (deframer.isPaused || waitingForDrain || pausedForCalls || failed) return;
      }
      socket.resume();
    };

    socket.on('data', (chunk: Buffer) => pump(chunk));

    const stats = (): RmcConnectionStats => ({
      id: conn.id,
      remoteAddress: conn.remoteAddress,
      remotePort: conn.remotePort,
      queuedBytes: queued(),
      writerCapacity: writer.buf.length,
      bufferedInputBytes: deframer.buffered,
      inFlight,
      readingPaused: deframer.isPaused || waitingForDrain || pausedForCalls,
    });
    this.live.add(stats);
    socket.on('close', () => {
      this.live.delete(stats);
      deframer.reset();
      dispatcher.closeConnection(conn);
    });
  }
}
