/**
 * The client side of framed TCP: one loop for every client that reads a TCP stream cut into
 * frames (js5, rmc, nox-relay). It connects, reads, frames, delivers and closes; the protocol
 * gives its framing rule, its frame handler and, through hooks, its own typed errors, so a CLI's
 * error lines are the protocol's whatever the loop underneath.
 *
 * - **Connect** with a deadline that can cover a handshake too (`ready: 'first-frame'`: the
 *   connection is ready once the peer's first frame was handled without an error).
 * - **Framing** by a `FrameMeasure` (the length of the next complete frame, -1 for "need more",
 *   or a `DecodeError` for bytes that break the framing), swappable mid-stream (`setMeasure`:
 *   JS5's one-byte handshake reply, then responses). A claimed length over `maxFrameBytes` fails
 *   before anything is buffered for it; a partial frame holds the bytes that arrived, in a buffer
 *   that grows by amortised doubling (the wire layer's `StreamDeframer`), never a concatenation
 *   of everything held per chunk.
 * - **Delivery** in order; a handler that throws closes the connection with a typed error, and
 *   no later frame of that connection is delivered.
 * - **Output** with backpressure in sight: `write` returns the socket's verdict, `queuedBytes`
 *   counts what the kernel has not taken, `drained()` waits for the queue to empty; `end` closes
 *   gracefully (flushing), `destroy` at once.
 * - **One close report**: `onClose(error, kind)` runs exactly once, whatever ended the connection
 *   (`error` is undefined only for a close the owner asked for).
 */
import net from 'node:net';
import { DecodeError, GamewireError } from '../wire/errors.js';
import { type FrameMeasure, StreamDeframer } from '../wire/framing.js';

/** Where a connection is: connecting, connected but waiting for its first frame, or open. */
export type FramedClientPhase = 'connect' | 'handshake' | 'open';

/** What ended a connection (the second argument of `onClose`). */
export type FramedClientCloseKind =
  /** The owner called `end` or `destroy`. */
  | 'local'
  /** The peer closed the connection. */
  | 'closed'
  /** Nothing listens at the address. */
  | 'refused'
  /** Connecting (or the handshake) took longer than `timeoutMs`. */
  | 'timeout'
  /** Any other socket error (a reset, an unknown host). */
  | 'connection'
  /** Bytes that break the framing (the measure threw, or a claimed length over the limit). */
  | 'malformed'
  /** The frame handler (or `onChunk`, `onConnect`) threw. */
  | 'handler';

/** The core's own error, used where a protocol gives no hook. */
export class FramedClientError extends GamewireError {
  override get name(): string {
    return 'FramedClientError';
  }
}

/**
 * How each failure becomes the protocol's own typed error. Each hook is optional (the default is
 * a `FramedClientError`, or the error itself where it is already typed); `target` is `host:port`.
 */
export interface FramedClientErrors {
  /** Nothing listens at the address (ECONNREFUSED while connecting). */
  refused?(cause: NodeJS.ErrnoException, target: string): Error;
  /** The deadline passed while connecting, or while waiting for the first frame. */
  timeout?(phase: 'connect' | 'handshake', timeoutMs: number, target: string): Error;
  /** The peer closed the connection; `bufferedBytes` of an incomplete frame were held. */
  closed?(phase: 'handshake' | 'open', bufferedBytes: number, target: string): Error;
  /** Any other socket error. */
  connection?(cause: Error, phase: FramedClientPhase, target: string): Error;
  /** Bytes that break the framing (a `DecodeError` with its stream offset). */
  malformed?(cause: DecodeError, target: string): Error;
  /** The handler threw `cause`. */
  handler?(cause: unknown, target: string): Error;
}

export interface FramedClientOptions {
  host: string;
  port: number;
  /** Local address to connect from (e.g. `127.0.0.2`, a second loopback address). */
  localAddress?: string;
  /** Deadline for `connect()` (to the connection, or to the first frame: see `ready`); 0: none. */
  timeoutMs: number;
  /**
   * When `connect()` resolves: once connected (default), or once the peer's first frame (a
   * handshake reply) was handled without an error, the deadline covering both.
   */
  ready?: 'connected' | 'first-frame';
  /** The framing rule; `setMeasure` swaps it from the next frame on. */
  measure: FrameMeasure;
  /** Largest frame accepted; a larger claimed length is `malformed` before it is buffered. */
  maxFrameBytes: number;
  /**
   * An emptied input buffer larger than this is released (default: kept). A client has one
   * connection, and its large frames come in runs (a cache download): keeping the buffer saves
   * growing it again for every large frame. A process holding many clients can bound it.
   */
  maxRetainedBytes?: number;
  errors?: FramedClientErrors;
  /** Connected: write what opens the conversation (a handshake). */
  onConnect?(): void;
  /**
   * Each chunk as it arrives, before it is framed: count bytes, or undo a stream transform in
   * place (JS5's XOR). Not called once the connection failed.
   */
  onChunk?(chunk: Buffer): void;
  /** One whole frame, `buf[start, end)`; the bytes are valid only during the call. */
  onFrame(buf: Buffer, start: number, end: number): void;
  /**
   * Runs once when the connection is over, for whatever reason (also when `connect()` fails).
   * `error` is the typed error (the one `connect()` rejects with while connecting); undefined
   * for a close the owner asked for.
   */
  onClose?(error: Error | undefined, kind: FramedClientCloseKind): void;
}

const formatTarget = (host: string, port: number): string =>
  `${host.includes(':') ? `[${host}]` : host}:${port}`;

/** One framed-stream client connection. Create it, then `connect()`. */
export class FramedStreamClient {
  readonly target: string;
  private readonly options: FramedClientOptions;
  private readonly errors: FramedClientErrors;
  private readonly deframer: StreamDeframer;
  private sock: net.Socket | undefined = undefined;
  private phase: FramedClientPhase = 'connect';
  private finished = false;
  private localClose = false;
  private timer: NodeJS.Timeout | undefined = undefined;
  private handlerFailure: { error: unknown } | undefined = undefined;
  private settleConnect: ((error: Error | undefined) => void) | undefined = undefined;
  private closedPromise: Promise<void> | undefined = undefined;
  private resolveClosed: (() => void) | undefined = undefined;
  private readonly deliver = (buf: Buffer, start: number, end: number): boolean => {
    if (this.finished) return false;
    try {
      this.options.onFrame(buf, start, end);
    } catch (err) {
      // Held until `push` returns, so the failure is reported as the handler's, not the framing's.
      this.handlerFailure = { error: err };
      return false;
    }
    if (this.phase === 'handshake' && !this.finished) this.becomeOpen();
    return !this.finished;
  };

  constructor(options: FramedClientOptions) {
    this.options = options;
    this.errors = options.errors ?? {};
    this.target = formatTarget(options.host, options.port);
    this.deframer = new StreamDeframer(options.measure, {
      maxFrameBytes: options.maxFrameBytes,
      ...(options.maxRetainedBytes === undefined ? {} : { maxRetainedBytes: options.maxRetainedBytes }),
    });
  }

  /** The socket (for what the loop does not cover; read and write through the loop). */
  get socket(): net.Socket | undefined {
    return this.sock;
  }

  /** Connected, not failed, not closing. */
  get open(): boolean {
    const s = this.sock;
    return this.phase !== 'connect' && !this.finished && s !== undefined && !s.destroyed && !s.writableEnded;
  }

  /** The connection is over (`onClose` ran). */
  get closed(): boolean {
    return this.finished;
  }

  get bytesIn(): number {
    return this.sock?.bytesRead ?? 0;
  }

  get bytesOut(): number {
    return this.sock?.bytesWritten ?? 0;
  }

  /** Bytes written but not yet taken by the kernel. */
  get queuedBytes(): number {
    return this.sock?.writableLength ?? 0;
  }

  /** Input bytes held: a partial frame. */
  get bufferedBytes(): number {
    return this.deframer.buffered;
  }

  /** Bytes of memory the input buffer holds (at least `bufferedBytes`; see `maxRetainedBytes`). */
  get inputCapacity(): number {
    return this.deframer.capacity;
  }

  /** Switches the framing rule from the next frame on (e.g. after a handshake reply). */
  setMeasure(measure: FrameMeasure): void {
    this.deframer.setMeasure(measure);
  }

  /**
   * Connects; resolves when ready (see `FramedClientOptions.ready`), rejects with the typed error
   * of whatever failed first.
   */
  connect(): Promise<void> {
    if (this.sock !== undefined) throw new FramedClientError('ERR_INTERNAL', 'connect() called twice');
    const o = this.options;
    return new Promise<void>((resolve, reject) => {
      this.settleConnect = (err) => (err === undefined ? resolve() : reject(err));
      const socket = net.connect({
        host: o.host,
        port: o.port,
        noDelay: true,
        ...(o.localAddress === undefined ? {} : { localAddress: o.localAddress }),
      });
      this.sock = socket;
      this.closedPromise = new Promise<void>((done) => {
        this.resolveClosed = done;
      });
      if (o.timeoutMs > 0) {
        this.timer = setTimeout(() => {
          this.timer = undefined;
          const phase = this.phase === 'connect' ? 'connect' : 'handshake';
          this.fail(
            this.errors.timeout?.(phase, o.timeoutMs, this.target) ??
              new FramedClientError(
                'ERR_CONNECT_TIMEOUT',
                phase === 'connect'
                  ? `no connection to ${this.target} within ${o.timeoutMs} ms`
                  : `${this.target} sent nothing within ${o.timeoutMs} ms of connecting`,
              ),
            'timeout',
          );
        }, o.timeoutMs);
      }
      socket.once('connect', () => this.onConnected());
      socket.on('data', (chunk: Buffer) => this.onData(chunk));
      socket.on('error', (err: NodeJS.ErrnoException) => this.onSocketError(err));
      socket.on('close', () => this.onSocketClose());
    });
  }

  /** Queues `bytes` (they must not change afterwards); false when the caller should wait for `drained()`. */
  write(bytes: Uint8Array): boolean {
    const s = this.sock;
    if (s === undefined || s.destroyed || s.writableEnded || this.finished) return false;
    return s.write(bytes);
  }

  /** Resolves once the queued output was taken by the kernel (or the connection is over). */
  drained(): Promise<void> {
    const s = this.sock;
    if (s === undefined || this.finished || s.destroyed || !s.writableNeedDrain) return Promise.resolve();
    return new Promise<void>((resolve) => {
      const done = () => {
        s.off('drain', done);
        s.off('close', done);
        resolve();
      };
      s.on('drain', done);
      s.on('close', done);
    });
  }

  /**
   * Ends the connection after what was written is flushed; resolves once it is closed. With
   * `lingerMs`, destroys it if the peer has not closed its side by then.
   */
  end(options: { lingerMs?: number } = {}): Promise<void> {
    const s = this.sock;
    if (s === undefined) return Promise.resolve();
    if (!s.destroyed) {
      this.localClose = true;
      s.end();
      if (options.lingerMs !== undefined && options.lingerMs > 0) {
        setTimeout(() => s.destroy(), options.lingerMs).unref();
      }
    }
    return this.whenClosed();
  }

  /** Closes at once, dropping unsent output; resolves once the socket is closed. */
  destroy(): Promise<void> {
    const s = this.sock;
    if (s === undefined) return Promise.resolve();
    if (!s.destroyed) {
      this.localClose = true;
      s.destroy();
    }
    return this.whenClosed();
  }

  /** Resolves once the socket is closed. */
  whenClosed(): Promise<void> {
    return this.closedPromise ?? Promise.resolve();
  }

  private onConnected(): void {
    if (this.finished) return;
    this.phase = this.options.ready === 'first-frame' ? 'handshake' : 'open';
    try {
      this.options.onConnect?.();
    } catch (err) {
      this.failHandler(err);
      return;
    }
    if (this.phase === 'open') this.becomeOpen();
  }

  private becomeOpen(): void {
    this.phase = 'open';
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
    const settle = this.settleConnect;
    this.settleConnect = undefined;
    settle?.(undefined);
  }

  private onData(chunk: Buffer): void {
    if (this.finished) return;
    if (this.options.onChunk !== undefined) {
      try {
        this.options.onChunk(chunk);
      } catch (err) {
        this.failHandler(err);
        return;
      }
    }
    try {
      this.deframer.push(chunk, this.deliver);
    } catch (err) {
      // The deframer throws only DecodeError (a measure's other errors become ERR_INTERNAL).
      const cause =
        err instanceof DecodeError
          ? err
          : new DecodeError('ERR_INTERNAL', String(err), this.deframer.consumed);
      this.fail(this.errors.malformed?.(cause, this.target) ?? cause, 'malformed');
      return;
    }
    const failure = this.handlerFailure;
    if (failure !== undefined) {
      this.handlerFailure = undefined;
      this.failHandler(failure.error);
    }
  }

  private failHandler(err: unknown): void {
    this.fail(
      this.errors.handler?.(err, this.target) ??
        (err instanceof GamewireError
          ? err
          : new FramedClientError(
              'ERR_HANDLER',
              `frame handler failed: ${(err as Error)?.message ?? String(err)}`,
              {
                cause: err,
              },
            )),
      'handler',
    );
  }

  private onSocketError(err: NodeJS.ErrnoException): void {
    if (this.finished) return;
    if (this.phase === 'connect' && err.code === 'ECONNREFUSED') {
      this.fail(
        this.errors.refused?.(err, this.target) ??
          new FramedClientError('ERR_CONNECT_REFUSED', `no server at ${this.target}`, { cause: err }),
        'refused',
      );
      return;
    }
    this.fail(
      this.errors.connection?.(err, this.phase, this.target) ??
        new FramedClientError('ERR_CONNECTION', `connection to ${this.target} failed: ${err.message}`, {
          cause: err,
        }),
      'connection',
    );
  }

  private onSocketClose(): void {
    if (!this.finished) {
      if (this.localClose) this.finish(undefined, 'local');
      else {
        const phase = this.phase === 'open' ? 'open' : 'handshake';
        const held = this.deframer.buffered;
        this.finish(
          this.errors.closed?.(phase, held, this.target) ??
            new FramedClientError(
              'ERR_CONNECTION_CLOSED',
              held > 0
                ? `${this.target} closed the connection in the middle of a frame (${held} bytes held)`
                : `${this.target} closed the connection`,
            ),
          'closed',
        );
      }
    }
    this.deframer.reset();
    this.resolveClosed?.();
  }

  private fail(error: Error, kind: FramedClientCloseKind): void {
    if (this.finished) return;
    this.sock?.destroy();
    this.finish(error, kind);
  }

  private finish(error: Error | undefined, kind: FramedClientCloseKind): void {
    this.finished = true;
    if (this.timer !== undefined) clearTimeout(this.timer);
    this.timer = undefined;
    const settle = this.settleConnect;
    this.settleConnect = undefined;
    if (settle !== undefined) {
      settle(
        error ??
          new FramedClientError(
            'ERR_CONNECTION_CLOSED',
            `the connection to ${this.target} was closed while connecting`,
          ),
      );
    }
    this.options.onClose?.(error, kind);
  }
}
