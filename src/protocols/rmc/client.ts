/**
 * RmcClient: typed RMC calls over TCP or PRUDP (`transport: 'prudp'`), any variant.
 *
 * - `call(Protocol, 'Method_V1', args)` encodes the arguments from the method's declaration
 *   and resolves with its decoded results.
 * - Call ids start at 1 and wrap at 2^32 (skipping 0 and ids still waiting).
 * - Each response's method must be the request's method + `*`; otherwise the call fails with
 *   ERR_RMC_METHOD_MISMATCH.
 * - A failure response rejects with `RmcError(namespace, code)`.
 * - Every call has a timeout; closing (either side) rejects every pending call.
 * - Calls made in the same tick leave in one write (pipelining).
 */
import { FramedStreamClient } from '../../core/framed-client.js';
import { GamewireError } from '../../wire/errors.js';
import { DecodeError, decode, lengthPrefixed, WireReader, WireWriter } from '../../wire/index.js';
import { fromResultCode, RmcError } from './errors.js';
import {
  beginFrame,
  ClassicEnvelope,
  DEFAULT_MAX_FRAME_BYTES,
  endFrame,
  HyperscapeEnvelope,
  NexVerboseEnvelope,
  type RmcVariant,
} from './messages.js';
import { PrudpClientConnection, PrudpClientError, type PrudpConnectOptions } from './prudp/client.js';
import type { ArgsOf, MethodDef, ProtocolDef, ResultsOf } from './signature.js';

const NO_BYTES = Buffer.alloc(0);

/** A transport-level client failure (timeout, closed connection, protocol violation). */
export class RmcClientError extends GamewireError {
  constructor(code: string, message: string, options?: { cause?: unknown }) {
    super(code, message, options);
  }

  override get name(): string {
    return 'RmcClientError';
  }
}

export interface RmcClientOptions {
  host: string;
  port: number;
  /** Default per-call timeout (default 10 s). */
  timeoutMs?: number;
  /** Connect timeout (default 5 s). */
  connectTimeoutMs?: number;
  maxFrameBytes?: number;
  /**
   * Wire variant the server speaks: `hyperscape` (default), `nex-verbose` (u32 failure codes)
   * or `classic` (packed ids: protocols and methods must declare ids).
   */
  variant?: RmcVariant;
  /** `tcp` (u32-framed, default) or `prudp` (RMC in PRUDP DATA over UDP). */
  transport?: 'tcp' | 'prudp';
  /** PRUDP: the sandbox access key. */
  accessKey?: string;
  /** PRUDP: checksum width, credentials (Kerberos / ECDH), retransmission and limits. */
  prudp?: Partial<PrudpConnectOptions>;
  /** Local address to send from (e.g. `127.0.0.2`). Default: chosen by the system. */
  localAddress?: string;
}

interface Pending {
  method: string;
  /** Classic variant: the method id the response must carry. */
  methodId: number;
  resolve(results: Buffer): void;
  reject(err: Error): void;
  timer: NodeJS.Timeout | undefined;
}

export class RmcClient {
  private readonly link: FrameLink;
  private readonly pending = new Map<number, Pending>();
  private readonly writer = new WireWriter({ initialCapacity: 4096 });
  private readonly reader = new WireReader();
  private readonly timeoutMs: number;
  private readonly variant: RmcVariant;
  private nextCallId = 1;
  private flushScheduled = false;
  private closedError: Error | undefined;
  /** Responses whose call id matched nothing (late after a timeout, or bogus). */
  unmatched = 0;
  /** RMC bytes (whole frames) sent and received. */
  bytesSent = 0;
  bytesReceived = 0;

  private constructor(link: FrameLink, options: RmcClientOptions) {
    this.link = link;
    this.timeoutMs = options.timeoutMs ?? 10_000;
    this.variant = options.variant ?? 'hyperscape';
    link.onFrame = (buf, start, end) => this.onFrame(buf, start, end);
    link.onClose = (err) => this.shutdown(err);
  }

  /** Connects over TCP (default) or PRUDP (`transport: 'prudp'`). */
  static connect(options: RmcClientOptions): Promise<RmcClient> {
    if (options.transport === 'prudp') return RmcClient.connectPrudp(options);
    return connectTcpLink(options).then((link) => new RmcClient(link, options));
  }

  private static async connectPrudp(options: RmcClientOptions): Promise<RmcClient> {
    let conn: PrudpClientConnection;
    try {
      conn = await PrudpClientConnection.connect({
        ...options.prudp,
        host: options.host,
        port: options.port,
        ...(options.localAddress === undefined ? {} : { localAddress: options.localAddress }),
        accessKey: options.accessKey ?? options.prudp?.accessKey ?? '',
        connectTimeoutMs: options.connectTimeoutMs ?? options.prudp?.connectTimeoutMs ?? 5000,
      });
    } catch (err) {
      if (err instanceof PrudpClientError) throw new RmcClientError(err.code, err.message);
      throw err;
    }
    return new RmcClient(prudpLink(conn, options.maxFrameBytes ?? DEFAULT_MAX_FRAME_BYTES), options);
  }

  /** Calls in flight. */
  get inFlight(): number {
    return this.pending.size;
  }

  get closed(): boolean {
    return this.closedError !== undefined;
  }

  /** A typed call: arguments and results follow the method's declaration. */
  call<P extends ProtocolDef<any>, K extends keyof P['methods'] & string>(
    protocol: P,
    method: K,
    args: ArgsOf<P['methods'][K]>,
    options: { timeoutMs?: number } = {},
  ): Promise<ResultsOf<P['methods'][K]>> {
    const def = protocol.byName.get(method) as MethodDef | undefined;
    if (def === undefined)
      return Promise.reject(
        new RmcClientError('ERR_RMC_UNKNOWN_METHOD', `${protocol.name} has no ${method}`),
      );
    const classic = this.variant === 'classic';
    if (classic && (protocol.id === undefined || def.id === undefined)) {
      return Promise.reject(
        new RmcClientError('ERR_RMC_VARIANT', `${def.fullName} has no protocol or method id`),
      );
    }
    const target: [string | number, string | number] = classic
      ? [protocol.id!, def.id!]
      : [protocol.name, def.fullName];
    return this.send(target[0], target[1], (w) => def.args.write(w, args), options.timeoutMs).then((raw) =>
      decode(def.results, raw),
    );
  }

  /**
   * A call with raw argument bytes; resolves with the raw result bytes. Names for the
   * string-named variants, numeric ids for `classic`.
   */
  callRaw(
    protocol: string | number,
    method: string | number,
    args: Uint8Array,
    options: { timeoutMs?: number } = {},
  ): Promise<Buffer> {
    return this.send(protocol, method, (w) => w.bytes(args), options.timeoutMs);
  }

  private allocCallId(): number {
    for (;;) {
      const id = this.nextCallId;
      this.nextCallId = id === 0xffffffff ? 1 : id + 1;
      if (!this.pending.has(id)) return id;
    }
  }

  private send(
    protocol: string | number,
    method: string | number,
    writeArgs: (w: WireWriter) => void,
    timeoutMs?: number,
  ): Promise<Buffer> {
    if (this.closedError !== undefined) return Promise.reject(this.closedError);
    const classic = this.variant === 'classic';
    if (classic !== (typeof protocol === 'number' && typeof method === 'number')) {
      return Promise.reject(
        new RmcClientError(
          'ERR_RMC_VARIANT',
          classic
            ? 'the classic variant calls by protocol and method id'
            : 'string-named variants call by name',
        ),
      );
    }
    const w = this.writer;
    const frameStart = w.offset;
    const callId = this.allocCallId();
    try {
      const at = beginFrame(w);
      // The declared envelope with empty arguments, then the arguments written in place.
      if (classic) {
        ClassicEnvelope.write(w, {
          type: 'request',
          protocolId: protocol as number,
          isRequest: true,
          callId,
          methodId: method as number,
          args: NO_BYTES,
        });
      } else {
        // List<ClassVersion> is empty: verbose structures carry no headers.
        HyperscapeEnvelope.write(w, {
          type: 'request',
          protocol: protocol as string,
          isRequest: true,
          callId,
          method: method as string,
          classVersions: [],
          args: NO_BYTES,
        });
      }
      writeArgs(w);
      endFrame(w, at);
    } catch (e) {
      w.offset = frameStart;
      return Promise.reject(e);
    }
    return new Promise<Buffer>((resolve, reject) => {
      const ms = timeoutMs ?? this.timeoutMs;
      const name = classic ? `#${protocol}::#${method}` : (method as string);
      const p: Pending = {
        method: name,
        methodId: classic ? (method as number) : -1,
        resolve,
        reject,
        timer: undefined,
      };
      if (ms > 0) {
        p.timer = setTimeout(() => {
          this.pending.delete(callId);
          reject(new RmcClientError('ERR_RMC_TIMEOUT', `${name} (call ${callId}) timed out after ${ms} ms`));
        }, ms);
      }
      this.pending.set(callId, p);
      if (!this.flushScheduled) {
        this.flushScheduled = true;
        process.nextTick(() => this.flush());
      }
    });
  }

  private flush(): void {
    this.flushScheduled = false;
    if (this.writer.offset === 0 || this.closedError !== undefined) return;
    const frames = this.writer.view();
    this.bytesSent += frames.length;
    this.link.write(frames);
    this.writer.reset();
  }

  /** One packet from the server, decoded with the variant's declared envelope. */
  private onFrame(buf: Buffer, start: number, end: number): void {
    this.bytesReceived += end - start;
    const r = this.reader.reset(buf, start + 4, end);
    const envelope =
      this.variant === 'classic'
        ? ClassicEnvelope
        : this.variant === 'hyperscape'
          ? HyperscapeEnvelope
          : NexVerboseEnvelope;
    const m = envelope.read(r);
    // Server-to-client calls are not supported; ignore them.
    if (m.type === 'request') return;
    if (m.type === 'error') {
      r.expectEnd('error response');
      const f = 'namespace' in m ? m : fromResultCode(m.errorCode);
      this.take(m.callId)?.reject(new RmcError(f.namespace, f.code));
      return;
    }
    const p = this.take(m.callId);
    if (p === undefined) return;
    if ('methodId' in m) {
      if (m.methodId !== p.methodId) {
        p.reject(
          new RmcClientError(
            'ERR_RMC_METHOD_MISMATCH',
            `response to ${p.method} (call ${m.callId}) carries method id 0x${((m.methodId | 0x8000) >>> 0).toString(16)}`,
          ),
        );
        return;
      }
    } else if (m.method !== `${p.method}*`) {
      p.reject(
        new RmcClientError(
          'ERR_RMC_METHOD_MISMATCH',
          `response to ${p.method} (call ${m.callId}) names ${JSON.stringify(m.method)}`,
        ),
      );
      return;
    }
    p.resolve(Buffer.from(m.results));
  }

  private take(callId: number): Pending | undefined {
    const p = this.pending.get(callId);
    if (p === undefined) {
      this.unmatched++;
      return undefined;
    }
    this.pending.delete(callId);
    if (p.timer !== undefined) clearTimeout(p.timer);
    return p;
  }

  private shutdown(err: Error): void {
    if (this.closedError === undefined) this.closedError = err;
    this.link.destroy();
    const all = [...this.pending.values()];
    this.pending.clear();
    for (const p of all) {
      if (p.timer !== undefined) clearTimeout(p.timer);
      p.reject(err);
    }
  }

  /** Closes the connection; pending calls reject with ERR_RMC_CLOSED. */
  async close(): Promise<void> {
    const closing = this.link.close();
    this.shutdown(new RmcClientError('ERR_RMC_CLOSED', 'RMC connection is closed'));
    await closing;
  }
}

/** The transport under an RmcClient: whole frames out, whole frames in. */
interface FrameLink {
  /** Sends whole frames (the bytes may be reused after the call returns). */
  write(frames: Buffer): void;
  /** Ends the transport politely (TCP end, PRUDP DISCONNECT); resolves once it is closed. */
  close(): Promise<void>;
  /** Ends it at once. */
  destroy(): void;
  onFrame: (buf: Buffer, start: number, end: number) => void;
  onClose: (err: Error) => void;
}

/** Frames are a u32le length, then the message, over the core's framed-stream loop. */
async function connectTcpLink(options: RmcClientOptions): Promise<FrameLink> {
  const maxFrameBytes = options.maxFrameBytes ?? DEFAULT_MAX_FRAME_BYTES;
  const target = `${options.host}:${options.port}`;
  const badFrame = (e: unknown) =>
    new RmcClientError(
      e instanceof DecodeError ? e.code : 'ERR_INTERNAL',
      `bad frame from server: ${e instanceof Error ? e.message : String(e)}`,
    );
  // Until the client attaches its handlers, frames and closes go nowhere (as before connecting).
  const link: FrameLink = {
    write: (frames) => {
      // The client's writer is reused: the socket gets a copy.
      stream.write(Buffer.from(frames));
    },
    close: () => stream.destroy(),
    destroy: () => {
      void stream.destroy();
    },
    onFrame: () => {},
    onClose: () => {},
  };
  const stream: FramedStreamClient = new FramedStreamClient({
    host: options.host,
    port: options.port,
    ...(options.localAddress === undefined ? {} : { localAddress: options.localAddress }),
    timeoutMs: options.connectTimeoutMs ?? 5000,
    measure: lengthPrefixed({
      prefix: 'u32le',
      counts: 'rest',
      maxFrameBytes,
      minFrameBytes: (options.variant ?? 'hyperscape') === 'classic' ? 6 : 7,
    }),
    maxFrameBytes,
    errors: {
      timeout: () => new RmcClientError('ERR_RMC_TIMEOUT', `connect to ${target} timed out`),
      refused: (cause) =>
        new RmcClientError('ERR_RMC_CONNECTION', `cannot connect to ${target}: ${cause.message}`, { cause }),
      connection: (cause, phase) =>
        phase === 'connect'
          ? new RmcClientError('ERR_RMC_CONNECTION', `cannot connect to ${target}: ${cause.message}`, {
              cause,
            })
          : new RmcClientError('ERR_RMC_CONNECTION', `connection error: ${cause.message}`),
      closed: () => new RmcClientError('ERR_RMC_CLOSED', 'RMC connection is closed'),
      malformed: badFrame,
      handler: badFrame,
    },
    onFrame: (buf, start, end) => link.onFrame(buf, start, end),
    onClose: (error) =>
      link.onClose(error ?? new RmcClientError('ERR_RMC_CLOSED', 'RMC connection is closed')),
  });
  await stream.connect();
  return link;
}

/** Each RMC frame travels as one PRUDP message (fragmented by the link at 963 bytes). */
function prudpLink(conn: PrudpClientConnection, maxFrameBytes: number): FrameLink {
  let closing: Promise<void> | undefined;
  const link: FrameLink = {
    write: (frames) => {
      let off = 0;
      while (off + 4 <= frames.length) {
        const len = frames.readUInt32LE(off) + 4;
        if (off + len > frames.length) break;
        conn.send(frames.subarray(off, off + len));
        off += len;
      }
    },
    close: () => {
      closing ??= conn.close();
      return closing;
    },
    destroy: () => {
      // A polite close (DISCONNECT) runs in the background unless one is under way.
      if (!conn.closed) closing ??= conn.close();
    },
    onFrame: () => {},
    onClose: () => {},
  };
  conn.onMessage = (m) => {
    // One message must be exactly one frame.
    if (m.length < 4 || m.length > maxFrameBytes || m.readUInt32LE(0) !== m.length - 4) {
      link.onClose(
        new RmcClientError('ERR_BAD_LENGTH', `PRUDP message of ${m.length} bytes is not one RMC frame`),
      );
      return;
    }
    try {
      link.onFrame(m, 0, m.length);
    } catch (e) {
      const msg = e instanceof Error ? e.message : String(e);
      link.onClose(
        new RmcClientError(
          e instanceof DecodeError ? e.code : 'ERR_INTERNAL',
          `bad frame from server: ${msg}`,
        ),
      );
    }
  };
  conn.onClose = (err) =>
    link.onClose(
      err instanceof PrudpClientError && err.code === 'ERR_PRUDP_CLOSED'
        ? new RmcClientError('ERR_RMC_CLOSED', 'RMC connection is closed')
        : new RmcClientError((err as PrudpClientError).code ?? 'ERR_RMC_CONNECTION', err.message),
    );
  return link;
}
