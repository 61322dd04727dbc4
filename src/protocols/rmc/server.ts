/**
 * RMC server: a dispatcher plus transports, in any of the three variants (`variant`).
 *
 * The TCP transport is the shared framed-TCP seam (`src/core/framed-tcp.ts`) with the RMC u32
 * length as its measure: per-address connection cap, frame deadline, input budgets, idle
 * timeout, round-robin delivery and bounded output all come from there. This file adds what is
 * RMC's own: a bound on calls in flight per connection (delivery holds until half of them are
 * answered), and answers written straight into the connection's writer by the dispatcher
 * (pipelined: they leave in the order handlers finish, sync ones at the end of each turn, async
 * ones batched per tick).
 *
 * A PRUDP transport does the same with reassembled DATA payloads: `dispatcher.open`,
 * `dispatcher.handleFrame` per RMC message, `dispatcher.closeConnection`. Handlers do not change.
 */

import {
  FRAMED_TCP_DEFAULTS,
  type FramedConnection,
  type FrameSink,
  listenFramedTcp,
} from '../../core/framed-tcp.js';
import type { Logger } from '../../core/logger.js';
import { silentLogger } from '../../core/logger.js';
import { ProtocolMetrics } from '../../core/metrics.js';
import type { OptionValues } from '../../core/options.js';
import type { Endpoint, RunningServer } from '../../core/server.js';
import type { DecodeLimits } from '../../wire/index.js';
import { lengthPrefixed } from '../../wire/index.js';
import { type Handlers, type RegisterOptions, RmcDispatcher, type RmcSink } from './dispatcher.js';
import type { RmcVariant } from './messages.js';
import { DEFAULT_MAX_IN_FLIGHT, type RmcOptions, rmcOptions } from './options.js';
import type { ProtocolDef } from './signature.js';

/** Why rmc closes connections (the `reason` of `gamewire_connections_closed_total`). */
export const RmcCloseReason = {
  /** A frame whose length or envelope cannot be read (the stream cannot be resynchronised). */
  Malformed: 'malformed',
  /** The dispatcher itself failed (a bug); the connection is closed, the server keeps going. */
  HandlerError: 'handler_error',
  /** A handler (or an answer that could not be written) closed the connection. */
  ClosedByHandler: 'closed_by_server',
  IdleTimeout: 'idle_timeout',
  FrameTimeout: 'frame_timeout',
  OverCapacity: 'over_capacity',
  PerIpLimit: 'per_ip_limit',
  SocketError: 'socket_error',
} as const;

/** Why rmc drops input without closing (the `reason` of `gamewire_dropped_total`). */
export const RmcDropReason = {
  /** A malformed frame (the connection is then closed as `malformed`). */
  Malformed: 'malformed',
  /** A response frame sent to the server, which never calls clients. */
  UnexpectedResponse: 'unexpected_response',
} as const;

/** The rmc options `RmcServer` runs its TCP transport with (declared in options.ts, `RMC_OPTIONS`). */
type TcpOptionKey =
  | 'maxFrameBytes'
  | 'idleTimeoutMs'
  | 'maxConnections'
  | 'maxConnectionsPerIp'
  | 'frameTimeoutMs'
  | 'maxBufferedBytes'
  | 'maxBufferedBytesPerIp'
  | 'maxInFlight'
  | 'maxQueuedBytes'
  | 'framesPerTurn';

/**
 * What `RmcServer` takes: `host`, `port` and the transport options of `gamewire serve rmc`
 * (`maxFrameBytes`, `idleTimeoutMs`, `maxConnections`, `maxConnectionsPerIp`, `frameTimeoutMs`,
 * `maxBufferedBytes`, `maxBufferedBytesPerIp`, `maxInFlight`, `maxQueuedBytes`, `framesPerTurn`:
 * defaults, derived defaults and checks are the declaration's, options.ts), plus what only a
 * library caller has.
 */
export type RmcServerOptions = Pick<OptionValues<RmcOptionDeclarations>, TcpOptionKey | 'host' | 'port'> & {
  log?: Logger;
  metrics?: ProtocolMetrics;
  /** Wire variant: `hyperscape` (default), `nex-verbose` or `classic` (see RmcDispatcher). */
  variant?: RmcVariant;
  limits?: Partial<DecodeLimits>;
};

type RmcOptionDeclarations = (typeof rmcOptions)['declarations'];

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
export const DEFAULT_MAX_QUEUED_BYTES = FRAMED_TCP_DEFAULTS.maxQueuedBytes;
/** Default `maxInFlight` (the declaration's, options.ts). */
export { DEFAULT_MAX_IN_FLIGHT };

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
  /** The options it runs with: what it was given, resolved through the one declaration (`rmcOptions`). */
  readonly settings: RmcOptions;
  private readonly variant: RmcVariant;
  private readonly listeners: { close(graceMs?: number): Promise<void> }[] = [];
  private readonly live = new Set<() => RmcConnectionStats>();

  /** A value out of range is a `ConfigError` (`ERR_CONFIG`) naming `rmc.<key>`, as in the config file. */
  constructor(options: RmcServerOptions = {}) {
    const { log, metrics, variant, limits, ...values } = options;
    this.settings = rmcOptions.resolve(values);
    this.log = log ?? silentLogger();
    this.metrics = metrics ?? new ProtocolMetrics('rmc');
    this.variant = variant ?? 'hyperscape';
    this.dispatcher = new RmcDispatcher({ log: this.log, metrics: this.metrics, variant, limits });
  }

  /** Registers a protocol with its handlers (see RmcDispatcher.register). */
  register<P extends ProtocolDef<any>>(protocol: P, handlers: Handlers<P>, options?: RegisterOptions): this {
    this.dispatcher.register(protocol, handlers, options);
    return this;
  }

  /**
   * Listens on TCP, on `host` and `port` given here or else the server's (`settings`). Port 0
   * picks a free port (reported in `port` and `endpoints`).
   */
  async listen(options: ListenOptions = {}): Promise<RmcListening> {
    const o = this.settings;
    const host = options.host ?? o.host;
    const { maxFrameBytes, maxInFlight } = o;
    const { variant } = this;
    const measure = lengthPrefixed({
      prefix: 'u32le',
      counts: 'rest',
      maxFrameBytes,
      minFrameBytes: variant === 'classic' ? MIN_CLASSIC_FRAME_BYTES : MIN_FRAME_BYTES,
    });
    const tcp = await listenFramedTcp({
      host,
      port: options.port ?? o.port,
      protocol: 'rmc',
      measure,
      maxFrameBytes,
      maxConnections: o.maxConnections,
      maxConnectionsPerIp: o.maxConnectionsPerIp,
      idleTimeoutMs: o.idleTimeoutMs,
      frameTimeoutMs: o.frameTimeoutMs,
      maxBufferedBytes: o.maxBufferedBytes,
      maxBufferedBytesPerIp: o.maxBufferedBytesPerIp,
      maxQueuedBytes: o.maxQueuedBytes,
      framesPerTurn: o.framesPerTurn,
      metrics: this.metrics,
      log: this.log,
      onConnection: (c) => this.attach(c, maxInFlight),
    });
    this.listeners.push(tcp);
    const endpoints: Endpoint[] = [
      {
        transport: 'tcp', // the endpoint's kind, not the option (--rmc-transport)
        host,
        port: tcp.port,
        description: `Rendez-Vous RMC (${variant} variant), u32-framed`,
      },
    ];
    return {
      port: tcp.port,
      endpoints,
      close: (graceMs?: number) => tcp.close(graceMs),
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

  private attach(c: FramedConnection, maxInFlight: number): FrameSink {
    const { dispatcher, metrics } = this;
    let inFlight = 0;
    const resumeAt = Math.floor(maxInFlight / 2);

    const sink: RmcSink = {
      get writer() {
        return c.writer;
      },
      commit() {
        if (inFlight > 0) inFlight--;
        if (c.held && inFlight <= resumeAt) c.resume();
        c.commit();
      },
      close() {
        c.close(RmcCloseReason.ClosedByHandler);
      },
      connection: c,
    };
    const conn = dispatcher.open(sink);

    const stats = (): RmcConnectionStats => ({
      id: conn.id,
      remoteAddress: conn.remoteAddress,
      remotePort: conn.remotePort,
      queuedBytes: c.queuedBytes,
      writerCapacity: c.writer.buf.length,
      bufferedInputBytes: c.bufferedBytes,
      inFlight,
      readingPaused: c.readingPaused,
    });
    this.live.add(stats);

    return {
      onFrame(buf, start, end) {
        metrics.received++;
        metrics.bytesReceived += end - start;
        inFlight++;
        dispatcher.handleFrame(conn, buf, start, end);
        // Too many calls unanswered: hold delivery until half of them are.
        return inFlight >= maxInFlight ? false : undefined;
      },
      onClose: () => {
        this.live.delete(stats);
        dispatcher.closeConnection(conn);
      },
    };
  }
}
