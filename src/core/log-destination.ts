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
 *
 * Lines logged in one turn of the event loop are written together (one write per turn, or per
 * 64 KiB), as sonic-boom does, rather than one write per line; what is still gathered when the
 * process exits is handed to the stream then (a non-blocking attempt on a pipe).
 */
import type { Writable } from 'node:stream';

export interface LogDestinationOptions {
  /** Queued bytes (written but not yet taken by the reader) beyond which lines are dropped. Default 1 MiB. */
  maxBacklogBytes?: number;
  /** Turns a pino JSON line into what is written (pino-pretty's formatter on a terminal). */
  format?: (line: string) => string;
}

/** Gathered text is written at once beyond this size, without waiting for the end of the turn. */
const GATHER_BYTES = 64 * 1024;

/** Destinations with gathered text, written out when the process exits. */
const live = new Set<LogDestination>();
let exitHook = false;
function writeAllAtExit(): void {
  for (const d of live) d.writeGathered();
}

/** A pino JSON line's level (30: info, 40: warn …); 50 when it cannot be read, so it is kept. */
function levelOf(line: string): number {
  const m = /^\{"level":(\d+)/.exec(line);
  return m === null ? 50 : Number(m[1]);
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
  /** Lines of this turn, not yet handed to the stream. */
  private gathered = '';
  /** While set (`hold()`), lines wait here instead of being written. */
  private held: string[] | undefined;
  private scheduled = false;
  /** Writes handed to the stream and not yet taken (their callbacks have not run). */
  private inFlight = 0;
  /** `flush` callbacks waiting for those writes. */
  private waiters: ((err?: Error) => void)[] = [];

  constructor(stream: Writable, options: LogDestinationOptions = {}) {
    this.stream = stream;
    this.maxBacklogBytes = options.maxBacklogBytes ?? 1024 * 1024;
    this.format = options.format;
    stream.on('error', this.onError);
  }

  private readonly onError = (): void => {
    this.failed = true;
    this.gathered = '';
    this.wakeWaiters();
  };

  private readonly written = (): void => {
    this.inFlight--;
    if (this.inFlight <= 0) this.wakeWaiters();
  };

  private wakeWaiters(): void {
    for (const cb of this.waiters.splice(0)) cb();
  }

  /**
   * Keeps every line back until `release`: `serve` holds its start-up lines so that a start that
   * fails (a port in use) reports its error alone, not after lines about servers it then stops.
   */
  hold(): void {
    this.held ??= [];
  }

  /** Writes the held lines (all of them, or only warnings and worse when `all` is false) and stops holding. */
  release(all = true): void {
    const lines = this.held;
    this.held = undefined;
    for (const line of lines ?? []) {
      if (all || levelOf(line) >= 40) this.write(line);
    }
  }

  /** pino calls this with one serialized line (newline included). */
  write(line: string): void {
    if (this.held !== undefined) {
      this.held.push(line);
      return;
    }
    if (
      this.failed ||
      this.stream.destroyed ||
      this.stream.writableLength + this.gathered.length > this.maxBacklogBytes
    ) {
      this.dropped++;
      this.unreported++;
      return;
    }
    if (this.unreported > 0) {
      const n = this.unreported;
      this.unreported = 0;
      this.gather(
        `${JSON.stringify({ level: 40, time: Date.now(), dropped: n, msg: `${n} log lines were dropped: stderr was not being read` })}\n`,
      );
    }
    this.gather(line);
  }

  private gather(line: string): void {
    this.gathered += this.format === undefined ? line : this.format(line);
    if (this.gathered.length >= GATHER_BYTES) {
      this.writeGathered();
      return;
    }
    if (!this.scheduled) {
      this.scheduled = true;
      live.add(this);
      if (!exitHook) {
        exitHook = true;
        process.once('exit', writeAllAtExit);
      }
      setImmediate(this.endOfTurn);
    }
  }

  private readonly endOfTurn = (): void => {
    this.scheduled = false;
    live.delete(this);
    this.writeGathered();
  };

  /** Hands what was gathered to the stream (never waits for it to be taken). */
  writeGathered(): void {
    if (this.gathered === '') return;
    const text = this.gathered;
    this.gathered = '';
    if (this.failed || this.stream.destroyed) return;
    try {
      this.inFlight++;
      this.stream.write(text, this.written);
    } catch {
      this.inFlight--;
      // A stream that throws synchronously (closed under us) is a failed one.
      this.failed = true;
    }
  }

  /**
   * pino's `logger.flush(cb)`: writes what was gathered, then calls back once the reader has
   * taken what is queued, or at once when nothing is queued or the stream failed. It never waits
   * for a reader that is gone.
   */
  flush(cb?: (err?: Error) => void): void {
    this.writeGathered();
    if (cb === undefined) return;
    if (this.failed || this.stream.destroyed || this.inFlight <= 0) cb();
    else this.waiters.push(cb);
  }

  /** Stops listening to the stream (for tests that make many destinations on one stream). */
  detach(): void {
    this.stream.off('error', this.onError);
    live.delete(this);
  }
}
