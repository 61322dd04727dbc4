/**
 * Where the logger's lines go: a Node stream (stderr), written without ever blocking the process
 * or holding up its exit.
 *
 * pino's own destination (sonic-boom) is not used for the process's stdio: at exit it flushes
 * synchronously and retries every 100 ms for as long as the write fails, so a server whose stderr
 * reader went away (EPIPE) or stopped reading (a full non-blocking pipe, EAGAIN) never exits.
 * Here the stream is Node's own (`process.stderr`): a write that cannot complete is queued by
 * libuv, never retried in a loop, and dropped at exit. Lines beyond `maxBacklogBytes` of queued
 * output are dropped and counted (a stalled reader must not grow the server's memory); after a
 * stream error (the reader closed) every later line is dropped.
 */
import type { Writable } from 'node:stream';

export interface LogDestinationOptions {
  /** Queued bytes (written but not yet taken by the reader) beyond which lines are dropped. Default 1 MiB. */
  maxBacklogBytes?: number;
  /** Turns a pino JSON line into what is written (pino-pretty's formatter on a terminal). */
  format?: (line: string) => string;
}

export class LogDestination {
  /** Lines dropped because the reader was too slow, or gone. */
  dropped = 0;
  /** The stream failed (EPIPE, EIO…): nothing more is written. */
  failed = false;
  private readonly stream: Writable;
  private readonly maxBacklogBytes: number;
  private readonly format: ((line: string) => string) | undefined;
  /** Drops not yet reported in the stream (reported once the reader catches up). */
  private unreported = 0;

  constructor(stream: Writable, options: LogDestinationOptions = {}) {
    this.stream = stream;
    this.maxBacklogBytes = options.maxBacklogBytes ?? 1024 * 1024;
    this.format = options.format;
    stream.on('error', this.onError);
  }

  private readonly onError = (): void => {
    this.failed = true;
  };

  /** pino calls this with one serialized line (newline included). */
  write(line: string): void {
    if (this.failed || this.stream.destroyed || this.stream.writableLength > this.maxBacklogBytes) {
      this.dropped++;
      this.unreported++;
      return;
    }
    if (this.unreported > 0) {
      const n = this.unreported;
      this.unreported = 0;
      this.put(
        `${JSON.stringify({ level: 40, time: Date.now(), dropped: n, msg: `${n} log lines were dropped: stderr was not being read` })}\n`,
      );
    }
    this.put(line);
  }

  private put(line: string): void {
    try {
      this.stream.write(this.format === undefined ? line : this.format(line));
    } catch {
      // A stream that throws synchronously (closed under us) is a failed one.
      this.failed = true;
    }
  }

  /**
   * pino's `logger.flush(cb)`: calls back once what is queued has been taken by the reader, or at
   * once when nothing is queued or the stream failed. It never waits for a reader that is gone.
   */
  flush(cb?: (err?: Error) => void): void {
    if (cb === undefined) return;
    if (this.failed || this.stream.destroyed || this.stream.writableLength === 0) {
      cb();
      return;
    }
    let called = false;
    const done = () => {
      if (called) return;
      called = true;
      this.stream.off('drain', done);
      this.stream.off('error', done);
      cb();
    };
    this.stream.once('drain', done);
    this.stream.once('error', done);
  }

  /** Stops listening to the stream (for tests that make many destinations on one stream). */
  detach(): void {
    this.stream.off('error', this.onError);
  }
}
