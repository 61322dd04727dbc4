/**
 * NoxRelayClient: a NoxVR Relay v1 client over TCP or UDP. Requests are matched with replies by
 * UID (allocated from 1; 0 is for notifications). Events: `message` (every server message),
 * `join`, `leave`, `transform`, `disconnect` (the server's Disconnect), `close`, `error`.
 */
import dgram from 'node:dgram';
import { EventEmitter } from 'node:events';
import net from 'node:net';
import { FramedStreamClient } from '../../core/framed-client.js';
import { WireReader, WireWriter } from '../../wire/index.js';
import { EnterFlags, PROTOCOL_VERSION, TransformType, TravelingAction } from './constants.js';
import { NoxRelayClientError } from './errors.js';
import type { ClientMessage, Quaternion, ServerMessage, Vector3 } from './messages.js';
import { packetMeasure, readServerPacket, splitPackets, writeClientPacket } from './packet.js';

export type Reply<T extends ServerMessage['type']> = Extract<ServerMessage, { type: T }>;

export interface NoxRelayClientOptions {
  host?: string;
  port: number;
  transport?: 'tcp' | 'udp';
  /** How long a request waits for its reply, and a TCP connection to be accepted. Default 5000 ms. */
  requestTimeoutMs?: number;
  /** Latency keep-alive period; default: the Handshake's keep-alive interval. 0 disables. */
  keepAliveMs?: number;
  /** Local address to send from (e.g. `127.0.0.2`); default: chosen by the system. */
  localAddress?: string;
  /**
   * UDP: send the Handshake reply's address cookie back (a second Handshake), so the server
   * counts this address as proven and lifts its anti-amplification budget. Default true; false
   * behaves like a client that does not know the extension.
   */
  proveAddress?: boolean;
}

export interface TransformFields {
  position?: Vector3;
  rotation?: Quaternion;
  scale?: Vector3;
  velocity?: Vector3;
  angularVelocity?: Vector3;
  reset?: boolean;
}

interface Pending {
  expect: string;
  resolve: (m: ServerMessage) => void;
  reject: (e: Error) => void;
  timer: NodeJS.Timeout;
}

const measure = packetMeasure(0xffff);
/** A UDP Handshake datagram is zero-padded to this size (larger than any Handshake reply). */
export const UDP_HANDSHAKE_BYTES = 512;

export class NoxRelayClient extends EventEmitter {
  readonly host: string;
  readonly port: number;
  readonly transport: 'tcp' | 'udp';
  /** Filled in by `handshake()`. */
  handshakeInfo: Reply<'Handshake'> | undefined = undefined;
  private readonly timeoutMs: number;
  private readonly localAddress: string | undefined;
  private readonly proveAddress: boolean;
  private keepAliveMs: number | undefined;
  /** The TCP transport: the core's framed-stream loop. */
  private stream: FramedStreamClient | undefined;
  private udp: dgram.Socket | undefined;
  private readonly reader = new WireReader();
  private readonly writer = new WireWriter({ initialCapacity: 512 });
  private readonly pending = new Map<number, Pending>();
  private nextUid = 1;
  private keepAlive: NodeJS.Timeout | undefined;
  private closed = false;
  /** Bytes received and sent (packet bytes, TCP stream or UDP datagrams). */
  bytesReceived = 0;
  bytesSent = 0;

  constructor(options: NoxRelayClientOptions) {
    super();
    this.host = options.host ?? '127.0.0.1';
    this.port = options.port;
    this.transport = options.transport ?? 'tcp';
    this.timeoutMs = options.requestTimeoutMs ?? 5000;
    this.keepAliveMs = options.keepAliveMs;
    this.localAddress = options.localAddress;
    this.proveAddress = options.proveAddress ?? true;
  }

  /**
   * Opens the TCP connection or the (connected) UDP socket. Fails with the socket's error (a
   * refused connection, a host that does not resolve), or `ERR_NOX_TIMEOUT` when a TCP
   * connection is not accepted within the request timeout.
   */
  connect(): Promise<void> {
    if (this.transport === 'tcp') {
      let connected = false;
      const stream: FramedStreamClient = new FramedStreamClient({
        host: this.host,
        port: this.port,
        ...(this.localAddress === undefined ? {} : { localAddress: this.localAddress }),
        timeoutMs: this.timeoutMs,
        measure,
        maxFrameBytes: 0xffff,
        errors: {
          timeout: () =>
            new NoxRelayClientError(
              'ERR_NOX_TIMEOUT',
              `no TCP connection to ${this.target} within ${this.timeoutMs} ms: is the relay running there?`,
            ),
          // The socket's own errors, as before: callers (and connectFailure) read their codes.
          refused: (cause) => cause,
          connection: (cause) => cause,
          malformed: (cause) => cause,
        },
        onConnect: () => {
          connected = true;
        },
        onChunk: (chunk) => {
          this.bytesReceived += chunk.length;
        },
        onFrame: (buf, start, end) => this.onPacket(buf, start, end),
        onClose: (error, kind) => {
          // A connect that fails rejects `connect()` with its error; later errors go to listeners.
          if (error !== undefined && kind !== 'closed' && connected) this.fail(error);
          this.onClosed();
        },
      });
      this.stream = stream;
      return stream.connect();
    }
    return new Promise((resolve, reject) => {
      const s = dgram.createSocket(net.isIPv6(this.host) ? 'udp6' : 'udp4');
      this.udp = s;
      s.once('error', reject);
      s.on('message', (msg) => {
        this.bytesReceived += msg.length;
        try {
          const ranges = splitPackets(msg, 0, msg.length, measure, []);
          for (let i = 0; i < ranges.length; i += 2) this.onPacket(msg, ranges[i]!, ranges[i + 1]!);
        } catch (err) {
          this.fail(err as Error);
        }
      });
      const connect = () =>
        // dgram hands a failed lookup (ENOTFOUND) to this callback, not to 'error'.
        s.connect(this.port, this.host, (err?: Error) => {
          s.off('error', reject);
          if (err) {
            s.close();
            reject(err);
            return;
          }
          s.on('error', (e) => this.onUdpError(e as NodeJS.ErrnoException));
          resolve();
        });
      if (this.localAddress === undefined) connect();
      else s.bind(0, this.localAddress, connect);
    });
  }

  /** @internal The TCP socket (tests pause it, or read its local port). */
  get tcp(): net.Socket | undefined {
    return this.stream?.socket;
  }

  /** `host:port` (with the transport), for messages. */
  get target(): string {
    return `${this.host.includes(':') ? `[${this.host}]` : this.host}:${this.port} (${this.transport})`;
  }

  /**
   * An error on the connected UDP socket. ECONNREFUSED is the ICMP "port unreachable" for a
   * datagram sent to a port where nothing listens: the requests waiting for a reply fail now
   * (`ERR_NOX_REFUSED`) instead of at their timeouts. The socket stays open (a relay that
   * restarts answers the next request).
   */
  private onUdpError(err: NodeJS.ErrnoException): void {
    if (err.code === 'ECONNREFUSED' && this.pending.size > 0) {
      const refused = new NoxRelayClientError(
        'ERR_NOX_REFUSED',
        `nothing listens at ${this.target}: is the relay running there?`,
        { cause: err },
      );
      for (const p of this.pending.values()) {
        clearTimeout(p.timer);
        p.reject(refused);
      }
      this.pending.clear();
    }
    this.fail(err);
  }

  get isClosed(): boolean {
    return this.closed;
  }

  /** Sends raw bytes (tests use this for malformed input). */
  sendRaw(bytes: Buffer): void {
    this.bytesSent += bytes.length;
    if (this.stream !== undefined) this.stream.write(bytes);
    else this.udp?.send(bytes);
  }

  /** Sends a message with `uid` (0: no reply expected). */
  post(message: ClientMessage, uid = 0): void {
    const w = this.writer.reset();
    writeClientPacket(w, uid, message);
    let bytes = w.toBuffer();
    if (this.udp !== undefined && message.type === 'Handshake' && bytes.length < UDP_HANDSHAKE_BYTES) {
      // Anti-amplification: the server answers a UDP Handshake only from a datagram at least as
      // large as its reply, so the packet is followed by zero padding (docs/nox-relay.md).
      bytes = Buffer.concat([bytes, Buffer.alloc(UDP_HANDSHAKE_BYTES - bytes.length)]);
    }
    this.sendRaw(bytes);
  }

  /** Requests still waiting for their reply. */
  get pendingRequests(): number {
    return this.pending.size;
  }

  private allocUid(): number {
    for (let i = 0; i < 0xfffe; i++) {
      const uid = this.nextUid;
      this.nextUid = uid >= 0xfffe ? 1 : uid + 1;
      if (!this.pending.has(uid)) return uid;
    }
    throw new NoxRelayClientError('ERR_NOX_NO_UID', 'no free request uid: 65534 requests are waiting');
  }

  /** Sends a request and resolves with the reply of type `expect` carrying the same UID. */
  request<T extends ServerMessage['type']>(
    message: ClientMessage,
    expect: T,
    timeoutMs = this.timeoutMs,
  ): Promise<Reply<T>> {
    if (this.closed) return Promise.reject(new NoxRelayClientError('ERR_NOX_CLOSED', 'client is closed'));
    const uid = this.allocUid();
    return new Promise<Reply<T>>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(uid);
        reject(
          new NoxRelayClientError(
            'ERR_NOX_TIMEOUT',
            `no ${expect} reply to uid ${uid} within ${timeoutMs} ms: is the relay running at ${this.target}?`,
          ),
        );
      }, timeoutMs);
      this.pending.set(uid, { expect, resolve: resolve as (m: ServerMessage) => void, reject, timer });
      try {
        this.post(message, uid);
      } catch (err) {
        // Nothing was sent (an encoding error, say): no reply will come.
        this.pending.delete(uid);
        clearTimeout(timer);
        reject(err as Error);
      }
    });
  }

  private onPacket(buf: Buffer, start: number, end: number): void {
    let uid: number;
    let m: ServerMessage;
    try {
      const p = readServerPacket(this.reader.reset(buf, start, end));
      uid = p.uid;
      m = p.message;
    } catch (err) {
      this.fail(err as Error);
      return;
    }
    if (uid !== 0) {
      const p = this.pending.get(uid);
      if (p !== undefined && p.expect === m.type) {
        this.pending.delete(uid);
        clearTimeout(p.timer);
        p.resolve(m);
      }
    }
    this.emit('message', m, uid);
    switch (m.type) {
      case 'Join':
        this.emit('join', m);
        break;
      case 'Leave':
        this.emit('leave', m);
        break;
      case 'Transform':
        this.emit('transform', m);
        break;
      case 'Disconnect':
        this.emit('disconnect', m.reason);
        break;
    }
  }

  // ---- the protocol's steps -----------------------------------------------------------------

  async handshake(engine = 'node', platform: string = process.platform): Promise<Reply<'Handshake'>> {
    let reply = await this.request(
      { type: 'Handshake', protocol: PROTOCOL_VERSION, engine, platform, addressCookie: null },
      'Handshake',
    );
    if (this.udp !== undefined && this.proveAddress && reply.addressCookie !== null) {
      // gamewire's address proof: send the cookie back so the server knows we receive here.
      reply = await this.request(
        {
          type: 'Handshake',
          protocol: PROTOCOL_VERSION,
          engine,
          platform,
          addressCookie: reply.addressCookie,
        },
        'Handshake',
      );
    }
    this.handshakeInfo = reply;
    const every = this.keepAliveMs ?? reply.keepAliveInterval * 1000;
    if (every > 0 && this.keepAlive === undefined) {
      this.keepAlive = setInterval(() => {
        if (!this.closed) this.post({ type: 'Latency', timestamp: BigInt(Date.now()) });
      }, every);
      this.keepAlive.unref();
    }
    return reply;
  }

  authenticate(accessToken: string, flags = 0): Promise<Reply<'Authentification'>> {
    return this.request({ type: 'Authentification', flags, accessToken }, 'Authentification');
  }

  sessions(page = 0): Promise<Reply<'Sessions'>> {
    return this.request({ type: 'Sessions', page }, 'Sessions');
  }

  enter(
    instanceId: number,
    options: { asBot?: boolean; pseudonyme?: string; password?: string; hideInList?: boolean } = {},
  ): Promise<Reply<'Enter'>> {
    let flags = 0;
    if (options.asBot === true) flags |= EnterFlags.AsBot;
    if (options.pseudonyme !== undefined) flags |= EnterFlags.UsePseudonyme;
    if (options.password !== undefined) flags |= EnterFlags.UsePassword;
    if (options.hideInList === true) flags |= EnterFlags.HideInList;
    return this.request(
      {
        type: 'Enter',
        instanceId,
        flags,
        ...(options.pseudonyme !== undefined ? { pseudonyme: options.pseudonyme } : {}),
        ...(options.password !== undefined ? { password: options.password } : {}),
      },
      'Enter',
    );
  }

  /** Traveling Travel, then Ready (the world "loads" instantly). Resolves with the Ready reply. */
  async travel(instanceId: number): Promise<Reply<'Traveling'>> {
    const travel = await this.request(
      { type: 'Traveling', instanceId, action: TravelingAction.Travel },
      'Traveling',
    );
    if ((travel.result & 0x04) === 0) return travel;
    return this.request({ type: 'Traveling', instanceId, action: TravelingAction.Ready }, 'Traveling');
  }

  quit(instanceId: number, reason: string | null = null): Promise<Reply<'Quit'>> {
    return this.request({ type: 'Quit', instanceId, quitType: 0, reason }, 'Quit');
  }

  latency(): Promise<Reply<'Latency'>> {
    return this.request({ type: 'Latency', timestamp: BigInt(Date.now()) }, 'Latency');
  }

  serverConfig(
    message: Omit<Extract<ClientMessage, { type: 'ServerConfig' }>, 'type'>,
  ): Promise<Reply<'ServerConfig'>> {
    return this.request({ type: 'ServerConfig', ...message }, 'ServerConfig');
  }

  /** One transform of the own player (no reply). */
  sendTransform(instanceId: number, rig: number, t: TransformFields): void {
    const flags =
      (t.position ? 0x01 : 0) |
      (t.rotation ? 0x02 : 0) |
      (t.scale ? 0x04 : 0) |
      (t.velocity ? 0x08 : 0) |
      (t.angularVelocity ? 0x10 : 0) |
      (t.reset ? 0x20 : 0);
    this.post({
      type: 'Transform',
      instanceId,
      transformType: TransformType.OnPlayer,
      playerId: 0xffff,
      rig,
      flags,
      ...(t.position ? { position: t.position } : {}),
      ...(t.rotation ? { rotation: t.rotation } : {}),
      ...(t.scale ? { scale: t.scale } : {}),
      ...(t.velocity ? { velocity: t.velocity } : {}),
      ...(t.angularVelocity ? { angularVelocity: t.angularVelocity } : {}),
    });
  }

  /** Clean goodbye: Disconnect, wait briefly for the confirmation, then close. */
  async disconnect(reason: string | null = null): Promise<void> {
    if (this.closed) return;
    try {
      await this.request({ type: 'Disconnect', reason }, 'Disconnect', 1000);
    } catch {
      // The server may already be gone; closing is what matters.
    }
    await this.close();
  }

  close(): Promise<void> {
    if (this.keepAlive !== undefined) clearInterval(this.keepAlive);
    this.keepAlive = undefined;
    if (this.closed) return Promise.resolve();
    return new Promise((resolve) => {
      if (this.stream !== undefined) {
        if (this.stream.closed) return resolve(this.onClosed());
        void this.stream.end({ lingerMs: 500 }).then(resolve);
      } else if (this.udp !== undefined) {
        this.udp.close(() => resolve(this.onClosed()));
      } else {
        resolve(this.onClosed());
      }
    });
  }

  /** Reports an error to `error` listeners; without any, it is dropped rather than thrown. */
  private fail(err: Error): void {
    if (this.listenerCount('error') > 0) this.emit('error', err);
  }

  private onClosed(): void {
    if (this.closed) return;
    this.closed = true;
    if (this.keepAlive !== undefined) clearInterval(this.keepAlive);
    for (const p of this.pending.values()) {
      clearTimeout(p.timer);
      p.reject(new NoxRelayClientError('ERR_NOX_CLOSED', 'connection closed'));
    }
    this.pending.clear();
    this.emit('close');
  }
}
