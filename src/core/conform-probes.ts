/**
 * Sockets for conformance checks: a TCP probe that reads exact byte counts and a UDP probe with
 * an inbox of datagrams. Both wait on events (never fixed sleeps), give up at the check's
 * deadline, are closed by the check's cleanup, and turn "nothing came" or "the server closed"
 * into a CheckFailure carrying what was sent and what arrived. Protocol-free.
 */
import dgram from 'node:dgram';
import net from 'node:net';
import { CheckFailure, type CheckRun, type ConformTarget } from './conform.js';

/** Evidence keeps at most this much of a conversation (the newest bytes). */
const KEEP_BYTES = 4096;

function tail(chunks: readonly Buffer[], max = KEEP_BYTES): Buffer {
  const all = Buffer.concat(chunks);
  return all.length > max ? all.subarray(all.length - max) : all;
}

/** `host:port` for messages (`[v6]:port`). */
export function targetText(t: ConformTarget): string {
  return `${net.isIPv6(t.host) ? `[${t.host}]` : t.host}:${t.port}`;
}

/** A TCP connection whose incoming bytes are read in exact amounts. */
export class TcpProbe {
  readonly socket: net.Socket;
  private readonly run: CheckRun;
  private buffered: Buffer[] = [];
  private bufferedBytes = 0;
  /** Every byte received, as received (the newest KEEP_BYTES kept for evidence). */
  private log: Buffer[] = [];
  private logBytes = 0;
  private lastSent: Buffer = Buffer.alloc(0);
  private wake: (() => void) | undefined;
  /** Total bytes received since the connection opened. */
  receivedBytes = 0;
  closed = false;
  /** Why the socket closed, when it was an error (ECONNRESET …). */
  closeError: Error | undefined;

  private constructor(socket: net.Socket, run: CheckRun) {
    this.socket = socket;
    this.run = run;
    socket.setNoDelay(true);
    socket.on('data', (d: Buffer) => {
      this.buffered.push(d);
      this.bufferedBytes += d.length;
      this.receivedBytes += d.length;
      this.log.push(d);
      this.logBytes += d.length;
      if (this.logBytes > 2 * KEEP_BYTES) {
        this.log = [tail(this.log)];
        this.logBytes = this.log[0]!.length;
      }
      this.notify();
    });
    socket.on('error', (err) => {
      this.closeError = err;
    });
    socket.on('close', () => {
      this.closed = true;
      this.notify();
    });
    run.defer(() => this.destroy());
  }

  /** Connects within the check's deadline (at most `timeoutMs`). */
  static connect(target: ConformTarget, run: CheckRun, timeoutMs = 5000): Promise<TcpProbe> {
    return new Promise((resolve, reject) => {
      const socket = net.connect({ host: target.host, port: target.port });
      const probe = new TcpProbe(socket, run);
      const timer = setTimeout(
        () => {
          socket.destroy();
          reject(new CheckFailure(`no TCP connection to ${targetText(target)} within ${timeoutMs} ms`));
        },
        Math.min(timeoutMs, run.remainingMs()),
      );
      socket.once('connect', () => {
        clearTimeout(timer);
        resolve(probe);
      });
      socket.once('error', (err) => {
        clearTimeout(timer);
        reject(
          new CheckFailure(`cannot connect to ${targetText(target)}: ${err.message}`, {}, { cause: err }),
        );
      });
    });
  }

  private notify(): void {
    const w = this.wake;
    this.wake = undefined;
    w?.();
  }

  /** Sends bytes (and remembers them as the evidence's "sent"). */
  send(bytes: Uint8Array): void {
    const b = Buffer.from(bytes);
    this.lastSent = this.lastSent.length + b.length <= KEEP_BYTES ? Buffer.concat([this.lastSent, b]) : b;
    if (!this.socket.destroyed) this.socket.write(b);
  }

  /** Forgets what was sent so far as evidence (the next failure shows only later sends). */
  clearSent(): void {
    this.lastSent = Buffer.alloc(0);
  }

  /** The newest bytes received (evidence), as received. */
  receivedTail(max = 256): Buffer {
    return tail(this.log, max);
  }

  get sent(): Buffer {
    return this.lastSent;
  }

  /** Bytes that arrived and were not read yet. */
  get available(): number {
    return this.bufferedBytes;
  }

  /** Waits until `n` bytes are available and returns them (consumed). */
  async read(n: number, what: string, timeoutMs = 5000): Promise<Buffer> {
    await this.waitFor(() => this.bufferedBytes >= n, what, timeoutMs);
    return this.take(n);
  }

  /** Waits until `n` bytes are available and returns a copy of them, leaving them unread. */
  async peek(n: number, what: string, timeoutMs = 5000): Promise<Buffer> {
    await this.waitFor(() => this.bufferedBytes >= n, what, timeoutMs);
    const all = this.buffered.length === 1 ? this.buffered[0]! : Buffer.concat(this.buffered);
    this.buffered = [all];
    return Buffer.from(all.subarray(0, n));
  }

  /** Reads whatever is available now (possibly nothing), without waiting. */
  readAvailable(): Buffer {
    return this.take(this.bufferedBytes);
  }

  private take(n: number): Buffer {
    const all = this.buffered.length === 1 ? this.buffered[0]! : Buffer.concat(this.buffered);
    const out = all.subarray(0, n);
    const rest = all.subarray(n);
    this.buffered = rest.length > 0 ? [rest] : [];
    this.bufferedBytes = rest.length;
    return out;
  }

  /**
   * Waits for `cond` (re-checked on every arrival and on close). Fails when the server closes
   * first, when `timeoutMs` passes, or at the check's deadline.
   */
  async waitFor(cond: () => boolean, what: string, timeoutMs = 5000): Promise<void> {
    const limit = Math.min(timeoutMs, this.run.remainingMs());
    const started = performance.now();
    while (!cond()) {
      if (this.closed)
        throw new CheckFailure(`the server closed the connection while the check waited for ${what}`, {
          sent: this.lastSent,
          received: this.receivedTail(),
          note: `${this.receivedBytes} bytes received in all${this.closeError ? `; ${this.closeError.message}` : ''}`,
        });
      const left = limit - (performance.now() - started);
      if (left <= 0 || this.run.signal.aborted)
        throw new CheckFailure(`no ${what} within ${Math.round(limit)} ms`, {
          sent: this.lastSent,
          received: this.receivedTail(),
          note: `${this.receivedBytes} bytes received in all, ${this.bufferedBytes} not yet read`,
        });
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        const onAbort = (): void => resolve();
        this.run.signal.addEventListener('abort', onAbort, { once: true });
        this.wake = () => {
          clearTimeout(timer);
          this.run.signal.removeEventListener('abort', onAbort);
          resolve();
        };
      });
    }
  }

  /** True when the server closes the connection within `timeoutMs` (bytes may arrive meanwhile). */
  async closesWithin(timeoutMs: number): Promise<boolean> {
    try {
      await this.waitFor(() => this.closed, 'the close', timeoutMs);
      return true;
    } catch (err) {
      if (err instanceof CheckFailure && this.closed) return true;
      return false;
    }
  }

  /** True when no byte arrives for `quietMs` (and the connection stays open or closes). */
  async quietFor(quietMs: number): Promise<boolean> {
    const before = this.receivedBytes;
    try {
      await this.waitFor(() => this.receivedBytes !== before || this.closed, 'more bytes', quietMs);
    } catch {
      return this.receivedBytes === before;
    }
    return this.receivedBytes === before;
  }

  /** Stops reading from the socket (the kernel's buffers fill, then the server's writes stall). */
  pause(): void {
    this.socket.pause();
  }

  resume(): void {
    this.socket.resume();
  }

  destroy(): void {
    this.socket.destroy();
  }
}

/**
 * Messages (datagrams, DTLS records, WebSocket frames) waiting to be taken by a check: `next`
 * takes the first one a predicate accepts, leaving the others for later waits.
 */
export class MessageInbox {
  private readonly run: CheckRun;
  private queue: Buffer[] = [];
  /** Every message received (evidence), newest last, at most 64 kept. */
  readonly history: Buffer[] = [];
  private wake: (() => void) | undefined;
  /** Set when the transport closed (no message will come any more). */
  closedReason: string | undefined;

  constructor(run: CheckRun) {
    this.run = run;
  }

  push(message: Buffer): void {
    this.queue.push(message);
    this.history.push(message);
    if (this.history.length > 64) this.history.shift();
    this.notify();
  }

  /** The transport closed: waits end at once. */
  close(reason: string): void {
    this.closedReason ??= reason;
    this.notify();
  }

  private notify(): void {
    const w = this.wake;
    this.wake = undefined;
    w?.();
  }

  /** The first message `match` accepts within `timeoutMs`, or undefined (taken from the inbox). */
  async poll(match: (m: Buffer) => boolean = () => true, timeoutMs = 3000): Promise<Buffer | undefined> {
    const limit = Math.min(timeoutMs, this.run.remainingMs());
    const started = performance.now();
    for (;;) {
      const i = this.queue.findIndex(match);
      if (i >= 0) return this.queue.splice(i, 1)[0]!;
      const left = limit - (performance.now() - started);
      if (left <= 0 || this.run.signal.aborted || this.closedReason !== undefined) return undefined;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        const onAbort = (): void => resolve();
        this.run.signal.addEventListener('abort', onAbort, { once: true });
        this.wake = () => {
          clearTimeout(timer);
          this.run.signal.removeEventListener('abort', onAbort);
          resolve();
        };
      });
    }
  }

  /** Everything not taken yet (emptied). */
  drain(): Buffer[] {
    const out = this.queue;
    this.queue = [];
    return out;
  }

  /** The newest messages received, concatenated (evidence). */
  tail(count = 4): Buffer {
    return Buffer.concat(this.history.slice(-count));
  }
}

/** A received datagram and where it came from. */
export interface Datagram {
  data: Buffer;
  address: string;
  port: number;
}

/**
 * Local ports of this process's recent conformance sessions, oldest first. A server keeps a
 * session (and resends what was not acknowledged) for a while after a check leaves it, some checks
 * on purpose; a later check whose socket got the same port from the kernel would take those
 * resends for answers to its own datagrams (seen once: rmc's prudp.checksum failed on a resend
 * that reached a reused port). So every UDP session of a check comes from a port none of the last
 * RECENT_PORTS used.
 */
const recentPorts: number[] = [];
const RECENT_PORTS = 1024;

/** A UDP socket bound to a port (of `localAddress`, else any) that no recent session of this process used. */
export async function bindFreshUdp(type: 'udp4' | 'udp6', localAddress?: string): Promise<dgram.Socket> {
  for (let attempt = 0; ; attempt++) {
    const socket = dgram.createSocket(type);
    await new Promise<void>((resolve, reject) => {
      // A bind that fails (an address this host does not have) leaves no socket behind.
      const failed = (err: Error) => {
        socket.close();
        reject(err);
      };
      socket.once('error', failed);
      socket.bind(0, localAddress, () => {
        socket.off('error', failed);
        resolve();
      });
    });
    const port = socket.address().port;
    // A kernel that keeps handing out recent ports (a tiny range) still gets a session after 16 tries.
    if (!recentPorts.includes(port) || attempt === 16) {
      recentPorts.push(port);
      if (recentPorts.length > RECENT_PORTS) recentPorts.shift();
      return socket;
    }
    await new Promise<void>((resolve) => socket.close(() => resolve()));
  }
}

/** A UDP socket with an inbox: sends datagrams to the target, waits for matching replies. */
export class UdpProbe {
  readonly socket: dgram.Socket;
  readonly target: ConformTarget;
  private readonly run: CheckRun;
  private inbox: Datagram[] = [];
  /** Every datagram received (for evidence), newest last, at most 64 kept. */
  readonly history: Datagram[] = [];
  private wake: (() => void) | undefined;
  private lastSent: Buffer = Buffer.alloc(0);

  private constructor(socket: dgram.Socket, target: ConformTarget, run: CheckRun) {
    this.socket = socket;
    this.target = target;
    this.run = run;
    socket.on('message', (data, rinfo) => {
      const d = { data, address: rinfo.address, port: rinfo.port };
      this.inbox.push(d);
      this.history.push(d);
      if (this.history.length > 64) this.history.shift();
      const w = this.wake;
      this.wake = undefined;
      w?.();
    });
    socket.on('error', () => {});
    run.defer(() => this.close());
  }

  static async open(target: ConformTarget, run: CheckRun, localAddress?: string): Promise<UdpProbe> {
    const socket = await bindFreshUdp(net.isIPv6(target.host) ? 'udp6' : 'udp4', localAddress);
    return new UdpProbe(socket, target, run);
  }

  get localPort(): number {
    return this.socket.address().port;
  }

  get sent(): Buffer {
    return this.lastSent;
  }

  send(bytes: Uint8Array): void {
    this.lastSent = Buffer.from(bytes);
    this.socket.send(bytes, this.target.port, this.target.host);
  }

  /**
   * The next datagram from the target that `match` accepts (others stay in the inbox for later
   * waits), or a CheckFailure naming `what` when none comes in `timeoutMs`.
   */
  async next(what: string, match: (d: Buffer) => boolean = () => true, timeoutMs = 3000): Promise<Buffer> {
    const got = await this.poll(match, timeoutMs);
    if (got !== undefined) return got;
    throw new CheckFailure(
      `no ${what} within ${Math.round(Math.min(timeoutMs, this.run.remainingMs()))} ms`,
      {
        sent: this.lastSent,
        received: this.receivedTail(),
      },
    );
  }

  /** Like `next`, but resolves undefined when nothing matching comes in `timeoutMs`. */
  async poll(match: (d: Buffer) => boolean = () => true, timeoutMs = 3000): Promise<Buffer | undefined> {
    const limit = Math.min(timeoutMs, this.run.remainingMs());
    const started = performance.now();
    for (;;) {
      const i = this.inbox.findIndex((d) => this.fromTarget(d) && match(d.data));
      if (i >= 0) return this.inbox.splice(i, 1)[0]!.data;
      const left = limit - (performance.now() - started);
      if (left <= 0 || this.run.signal.aborted) return undefined;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        const onAbort = (): void => resolve();
        this.run.signal.addEventListener('abort', onAbort, { once: true });
        this.wake = () => {
          clearTimeout(timer);
          this.run.signal.removeEventListener('abort', onAbort);
          resolve();
        };
      });
    }
  }

  /** Everything received from the target and not taken yet (emptied). */
  drain(): Buffer[] {
    const out = this.inbox.filter((d) => this.fromTarget(d)).map((d) => d.data);
    this.inbox = [];
    return out;
  }

  private fromTarget(d: Datagram): boolean {
    return d.port === this.target.port;
  }

  /** The newest datagrams received, concatenated (evidence). */
  receivedTail(count = 4): Buffer {
    return Buffer.concat(this.history.slice(-count).map((d) => d.data));
  }

  close(): Promise<void> {
    return new Promise((resolve) => {
      try {
        this.socket.close(() => resolve());
      } catch {
        resolve();
      }
    });
  }
}
