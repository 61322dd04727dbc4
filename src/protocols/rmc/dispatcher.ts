/**
 * The RMC dispatcher: turns one request frame into one response frame. The per-connection
 * context lives in `connection.ts`, the envelope's byte-level helpers in `envelope.ts`; this
 * file is registration, routing, argument decoding and writing the outcome.
 * It knows nothing about
 * sockets: a transport (TCP today, PRUDP later) opens a connection with a sink for outgoing
 * bytes, hands it whole frames, and closes it. Handlers never see the transport.
 *
 * - Protocols register by name; lookups go through `Map`s (wire strings are attacker input).
 * - The response echoes the call id and the method name with `*` appended.
 * - An `RmcError` thrown by a handler becomes (namespace, code); an unknown protocol or method
 *   gets Core::NotImplemented (counted and logged); arguments that do not parse get
 *   Core::InvalidArgument; any other exception gets Core::Exception.
 * - A malformed envelope (the part before the arguments) throws DecodeError: the transport
 *   closes that connection, since it cannot answer a call it cannot read.
 */
import type { Logger } from '../../core/logger.js';
import type { ProtocolMetrics } from '../../core/metrics.js';
import type { WireTap } from '../../core/wire-tap.js';
import {
  DeclarationError,
  DecodeError,
  type DecodeLimits,
  ErrorCode,
  WireReader,
  type WireWriter,
} from '../../wire/index.js';
import { DispatcherConnection, type RmcConnection, type RmcSink } from './connection.js';
import { encodeString, matchAt, readClassVersions, writeFailure } from './envelope.js';
import { RmcError } from './errors.js';
import { beginFrame, endFrame, type RmcVariant, readProtocolId, writeProtocolId } from './messages.js';
import { RecentCalls } from './recent-calls.js';
import type { ArgsOf, MethodDef, ProtocolDef, ResultsOf } from './signature.js';
import { shortMethodName } from './signature.js';
import { type ClassVersion, qString } from './types.js';

export type { RmcConnection, RmcSink, RmcUser } from './connection.js';

/** What a handler receives besides its arguments. */
export interface CallContext {
  readonly connection: RmcConnection;
  readonly callId: number;
  /** The protocol name as received. */
  readonly protocol: string;
  /** The method name as received (e.g. `LoginProtocol::Register_V1`). */
  readonly method: string;
  readonly classVersions: readonly ClassVersion[];
  /** Classic packed variant only: the numeric protocol and method ids. */
  readonly protocolId: number | undefined;
  readonly methodId: number | undefined;
  readonly log: Logger;
  /** `performance.now()` when the call arrived (the dashboard's call latency). */
  readonly receivedAt: number;
}

export type Handler<M extends MethodDef> = (
  ctx: CallContext,
  args: ArgsOf<M>,
) => ResultsOf<M> | Promise<ResultsOf<M>>;

/** Handlers for some or all of a protocol's methods; the missing ones answer NotImplemented. */
export type Handlers<P extends ProtocolDef<any>> = {
  [K in keyof P['methods']]?: P['methods'][K] extends MethodDef ? Handler<P['methods'][K]> : never;
};

/** A handler for methods the protocol does not declare: gets the raw argument bytes. */
export type FallbackHandler = (
  ctx: CallContext,
  method: string,
  args: Buffer,
) => Buffer | undefined | Promise<Buffer | undefined>;

export interface RegisterOptions {
  /** Answers methods without a declared signature or handler (results as raw bytes). */
  fallback?: FallbackHandler;
}

export interface DispatcherOptions {
  log: Logger;
  metrics: ProtocolMetrics;
  /**
   * Wire variant: `hyperscape` (default; failures as namespace + u16), `nex-verbose` (failures
   * as a u32 code) or `classic` (packed numeric ids; protocols and methods need declared ids).
   */
  variant?: RmcVariant;
  limits?: Partial<DecodeLimits>;
  /** Most distinct unimplemented method names remembered for `unimplemented()`. */
  maxTrackedUnimplemented?: number;
}

interface RegisteredMethod {
  def: MethodDef;
  /** The encoded String of `fullName`, to recognise requests without decoding the name. */
  nameString: Buffer;
  handler: Handler<any> | undefined;
  /** The encoded String of `fullName*`, written as is when the request used the full name. */
  replyName: Buffer;
}

interface RegisteredProtocol {
  def: ProtocolDef<any>;
  /** The method matched last (a one-entry cache keyed by the encoded name). */
  lastMethod: RegisteredMethod | undefined;
  methods: Map<string, RegisteredMethod>;
  fallback: FallbackHandler | undefined;
  /** Encoded String of the protocol name, for replies. */
  nameString: Buffer;
}

export class RmcDispatcher {
  private readonly protocols = new Map<string, RegisteredProtocol>();
  private readonly reader: WireReader;
  private readonly log: Logger;
  private readonly metrics: ProtocolMetrics;
  private readonly variant: RmcVariant;
  private readonly protocolsById = new Map<number, RegisteredProtocol>();
  private readonly unimplementedSeen = new Map<string, number>();
  private readonly maxTracked: number;
  private readonly connections = new Set<DispatcherConnection>();
  private lastProtocol: RegisteredProtocol | undefined = undefined;
  /** The last calls answered (the dashboard's recent calls). */
  readonly recentCalls = new RecentCalls(200);
  /** The admin endpoint's wire view; one boolean check per frame while nobody watches. */
  wireTap: WireTap | undefined;

  constructor(options: DispatcherOptions) {
    this.log = options.log;
    this.metrics = options.metrics;
    this.variant = options.variant ?? 'hyperscape';
    this.reader = new WireReader(undefined, options.limits);
    this.maxTracked = options.maxTrackedUnimplemented ?? 256;
  }

  /** Registers a protocol with typed handlers. Registering the same name twice is an error. */
  register<P extends ProtocolDef<any>>(
    protocol: P,
    handlers: Handlers<P>,
    options: RegisterOptions = {},
  ): this {
    if (this.protocols.has(protocol.name))
      throw new DeclarationError(`protocol ${protocol.name} is already registered`);
    const methods = new Map<string, RegisteredMethod>();
    const given = new Map<string, Handler<any>>(Object.entries(handlers as Record<string, Handler<any>>));
    for (const name of given.keys()) {
      if (!protocol.byName.has(name)) throw new DeclarationError(`${protocol.name} has no method ${name}`);
    }
    for (const [short, def] of protocol.byName) {
      methods.set(short, {
        def,
        nameString: encodeString(def.fullName),
        handler: given.get(short),
        replyName: encodeString(`${def.fullName}*`),
      });
    }
    const reg: RegisteredProtocol = {
      def: protocol,
      methods,
      fallback: options.fallback,
      nameString: encodeString(protocol.name),
      lastMethod: undefined,
    };
    if (this.variant === 'classic') {
      if (protocol.id === undefined)
        throw new DeclarationError(`${protocol.name} needs an id for the classic variant`);
      if (this.protocolsById.has(protocol.id))
        throw new DeclarationError(`protocol id ${protocol.id} is already registered`);
      this.protocolsById.set(protocol.id, reg);
    }
    this.protocols.set(protocol.name, reg);
    return this;
  }

  /** The registered protocols (for introspection and docs). */
  get registered(): ProtocolDef<any>[] {
    return [...this.protocols.values()].map((p) => p.def);
  }

  /** Unimplemented `Protocol::Method` names clients asked for, with counts (bounded). */
  unimplemented(): Map<string, number> {
    return new Map(this.unimplementedSeen);
  }

  /** The connections open now (the dashboard's list). */
  liveConnections(): IterableIterator<RmcConnection> {
    return this.connections.values();
  }

  /** Opens an RMC connection over a transport's connection (`sink.connection`). */
  open(sink: RmcSink): RmcConnection {
    const c = new DispatcherConnection(sink, this.log);
    this.connections.add(c);
    return c;
  }

  /** The transport reports that a connection ended: runs its disconnect hooks. */
  closeConnection(connection: RmcConnection): void {
    const c = connection as DispatcherConnection;
    this.connections.delete(c);
    c.end();
  }

  /**
   * Handles one whole frame `buf[start, end)` (u32 length included). Reads everything it
   * needs before returning, so the bytes may be reused afterwards. Throws DecodeError when
   * the envelope is malformed; the transport must then close the connection.
   */
  handleFrame(connection: RmcConnection, buf: Buffer, start: number, end: number): void {
    const conn = connection as DispatcherConnection;
    if (this.wireTap?.armed) this.wireTap.record('client', conn.id, conn.transport, buf, start, end);
    const r = this.reader;
    r.reset(buf, start, end);
    if (r.u32le() !== end - start - 4) {
      throw new DecodeError(
        ErrorCode.BAD_LENGTH,
        `RMC length ${buf.readUInt32LE(start)} does not match the ${end - start}-byte frame`,
        start,
      );
    }
    if (this.variant === 'classic') this.dispatchClassic(conn, r);
    else this.dispatch(conn, r);
  }

  private dispatch(conn: DispatcherConnection, r: WireReader): void {
    // The envelope. Names are matched against the last protocol and method seen as raw bytes
    // first (no string is decoded on that path), then decoded and looked up in the Maps.
    let field = 'protocol';
    let protocol: string;
    let method: string;
    let callId: number;
    let classVersions: ClassVersion[];
    let p: RegisteredProtocol | undefined;
    let m: RegisteredMethod | undefined;
    try {
      const lastP = this.lastProtocol;
      if (lastP !== undefined && matchAt(r, lastP.nameString)) {
        p = lastP;
        protocol = lastP.def.name;
      } else {
        protocol = qString.read(r);
        p = this.protocols.get(protocol);
        if (p !== undefined) this.lastProtocol = p;
      }
      field = 'isRequest';
      if (!r.bool()) {
        // The server does not call clients; a response is unexpected but well-formed.
        this.metrics.drop('unexpected_response');
        conn.sink.commit();
        return;
      }
      field = 'callId';
      callId = r.u32le();
      field = 'method';
      const lastM = p?.lastMethod;
      if (lastM !== undefined && matchAt(r, lastM.nameString)) {
        m = lastM;
        method = lastM.def.fullName;
      } else {
        method = qString.read(r);
        if (p !== undefined) {
          const short = shortMethodName(p.def.name, method);
          m = short === undefined ? undefined : p.methods.get(short);
          if (m !== undefined && method === m.def.fullName) p.lastMethod = m;
        }
      }
      field = 'classVersions';
      classVersions = readClassVersions(r);
    } catch (e) {
      throw e instanceof DecodeError ? e.withPath(field) : e;
    }

    const ctx: CallContext = {
      connection: conn,
      callId,
      protocol,
      method,
      classVersions,
      protocolId: undefined,
      methodId: undefined,
      log: this.log,
      receivedAt: performance.now(),
    };
    this.call(conn, r, ctx, p, m);
  }

  /** The classic packed envelope: protocol byte (0x80 = request), call id, method id. */
  private dispatchClassic(conn: DispatcherConnection, r: WireReader): void {
    let field = 'protocolId';
    let protocolId: number;
    let callId: number;
    let methodId: number;
    try {
      const head = readProtocolId(r);
      protocolId = head.protocolId;
      if (!head.isRequest) {
        this.metrics.drop('unexpected_response');
        conn.sink.commit();
        return;
      }
      field = 'callId';
      callId = r.u32le();
      field = 'methodId';
      methodId = r.u32le();
    } catch (e) {
      throw e instanceof DecodeError ? e.withPath(field) : e;
    }
    const p = this.protocolsById.get(protocolId);
    const def = p?.def.byId.get(methodId);
    const m = def === undefined ? undefined : p!.methods.get(def.name);
    const protocol = p?.def.name ?? `#${protocolId}`;
    const ctx: CallContext = {
      connection: conn,
      callId,
      protocol,
      method: m?.def.fullName ?? `${protocol}::#${methodId}`,
      classVersions: [],
      protocolId,
      methodId,
      log: this.log,
      receivedAt: performance.now(),
    };
    this.call(conn, r, ctx, p, m);
  }

  /** Decodes the arguments, runs the handler (or the fallback) and writes the outcome. */
  private call(
    conn: DispatcherConnection,
    r: WireReader,
    ctx: CallContext,
    p: RegisteredProtocol | undefined,
    m: RegisteredMethod | undefined,
  ): void {
    const { protocol, method } = ctx;
    if (m === undefined || m.handler === undefined) {
      if (p?.fallback !== undefined) {
        this.metrics.count('fallback_calls');
        const args = Buffer.from(r.rest());
        let out: unknown;
        try {
          out = p.fallback(ctx, method, args);
        } catch (err) {
          this.fail(conn, ctx, err);
          return;
        }
        this.settle(conn, ctx, p, undefined, out);
        return;
      }
      this.notImplemented(conn, ctx);
      return;
    }

    let args: unknown;
    try {
      args = m.def.args.read(r);
      if (r.offset !== r.end) r.expectEnd('arguments');
    } catch (e) {
      if (!(e instanceof DecodeError)) throw e;
      this.metrics.count('invalid_arguments');
      this.log.debug(
        { protocol, method, code: e.code, err: e.message },
        'RMC call with unreadable arguments',
      );
      this.writeError(conn, ctx, new RmcError('Core', 0x0a, `arguments: ${e.message}`));
      return;
    }
    let out: unknown;
    try {
      out = m.handler(ctx, args as never);
    } catch (err) {
      this.fail(conn, ctx, err);
      return;
    }
    this.settle(conn, ctx, p!, m, out);
  }

  /** Writes a handler's outcome: at once for a plain value, when it settles for a promise. */
  private settle(
    conn: DispatcherConnection,
    ctx: CallContext,
    p: RegisteredProtocol,
    m: RegisteredMethod | undefined,
    out: unknown,
  ): void {
    if (out !== null && typeof out === 'object' && typeof (out as Promise<unknown>).then === 'function') {
      (out as Promise<unknown>)
        .then(
          (v) => this.succeed(conn, ctx, p, m, v),
          (err) => this.fail(conn, ctx, err),
        )
        .catch((err: unknown) => {
          // succeed/fail do not throw; if one ever does, this connection's output is in an
          // unknown state: log it and close the connection rather than crash the process.
          this.metrics.count('handler_exceptions');
          this.log.error(
            { err, method: ctx.method },
            'RMC answer could not be written; closing the connection',
          );
          conn.close();
        });
    } else {
      this.succeed(conn, ctx, p, m, out);
    }
  }

  private succeed(
    conn: DispatcherConnection,
    ctx: CallContext,
    p: RegisteredProtocol,
    m: RegisteredMethod | undefined,
    value: unknown,
  ): void {
    if (conn.closed) return;
    const w = conn.sink.writer;
    const frameStart = w.offset;
    try {
      const at = beginFrame(w);
      if (ctx.protocolId !== undefined) {
        writeProtocolId(w, ctx.protocolId, false);
        w.bool(true);
        w.u32le(ctx.callId);
        w.u32le((ctx.methodId! | 0x8000) >>> 0);
      } else {
        if (ctx.protocol === p.def.name) w.bytes(p.nameString);
        else qString.write(w, ctx.protocol);
        w.bool(false);
        w.bool(true);
        w.u32le(ctx.callId);
        if (m !== undefined && ctx.method === m.def.fullName) w.bytes(m.replyName);
        else qString.write(w, `${ctx.method}*`);
      }
      if (m !== undefined) m.def.results.write(w, value);
      else if (value instanceof Uint8Array) w.bytes(value);
      endFrame(w, at);
    } catch (err) {
      w.offset = frameStart;
      this.log.error({ err, method: ctx.method }, 'RMC handler returned results that cannot be encoded');
      this.writeError(conn, ctx, new RmcError('Core', 0x05, 'results could not be encoded'));
      return;
    }
    this.answered(conn, ctx, w, frameStart, '', 0);
    conn.sink.commit();
  }

  private fail(conn: DispatcherConnection, ctx: CallContext, err: unknown): void {
    if (conn.closed) return;
    if (err instanceof RmcError) {
      this.writeError(conn, ctx, err);
      return;
    }
    this.metrics.count('handler_exceptions');
    this.log.error({ err, method: ctx.method }, 'RMC handler threw');
    this.writeError(conn, ctx, new RmcError('Core', 0x05));
  }

  private notImplemented(conn: DispatcherConnection, ctx: CallContext): void {
    const { protocol, method } = ctx;
    this.metrics.count('unimplemented_calls');
    // Names are attacker input: keep the remembered keys short.
    const key = `${protocol.slice(0, 100)} ${method.slice(0, 200)}`;
    const seen = this.unimplementedSeen.get(key);
    if (seen !== undefined) this.unimplementedSeen.set(key, seen + 1);
    else if (this.unimplementedSeen.size < this.maxTracked) {
      this.unimplementedSeen.set(key, 1);
      this.log.warn(
        { protocol: protocol.slice(0, 100), method: method.slice(0, 200) },
        'RMC call to an unimplemented method',
      );
    }
    this.writeError(conn, ctx, new RmcError('Core', 0x02));
  }

  /**
   * Writes a failure in the server's variant. A failure that cannot be encoded (a namespace
   * too long for a String, a full writer) is rolled back and replaced by a fixed
   * Core::Exception; if even that cannot be written, the connection is closed. Never throws.
   */
  private writeError(conn: DispatcherConnection, ctx: CallContext, err: RmcError): void {
    if (conn.closed) return;
    const w = conn.sink.writer;
    const frameStart = w.offset;
    try {
      writeFailure(w, this.variant, ctx, err.namespace, err.code);
    } catch (e1) {
      w.offset = frameStart;
      this.log.error(
        { err: e1, method: ctx.method, code: err.code },
        'RMC failure could not be encoded; answering Core::Exception',
      );
      try {
        writeFailure(w, this.variant, ctx, 'Core', 0x05);
      } catch (e2) {
        w.offset = frameStart;
        this.log.error(
          { err: e2, method: ctx.method },
          'RMC failure could not be written; closing the connection',
        );
        conn.sink.commit();
        conn.close();
        return;
      }
    }
    this.answered(conn, ctx, w, frameStart, err.namespace, err.code);
    conn.sink.commit();
  }

  /** Counts an answer just written at `w[frameStart..]`, remembers the call, shows it to the wire view. */
  private answered(
    conn: DispatcherConnection,
    ctx: CallContext,
    w: WireWriter,
    frameStart: number,
    errorNamespace: string,
    errorCode: number,
  ): void {
    this.metrics.sent++;
    this.metrics.bytesSent += w.offset - frameStart;
    this.recentCalls.record(conn.id, ctx.protocol, ctx.method, ctx.receivedAt, errorNamespace, errorCode);
    if (this.wireTap?.armed)
      this.wireTap.record('server', conn.id, conn.transport, w.buf, frameStart, w.offset);
  }
}
