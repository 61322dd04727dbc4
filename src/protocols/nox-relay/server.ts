/**
 * The NoxVR Relay v1 server: TCP and UDP on one port, the session table, dispatch, liveness and
 * segmentation. Message handlers live in handlers/.
 */
import type dgram from 'node:dgram';
import type net from 'node:net';
import type { Logger } from 'pino';
import { silentLogger } from '../../core/logger.js';
import { ProtocolMetrics } from '../../core/metrics.js';
import type { Endpoint } from '../../core/server.js';
import { listenTcp, type TcpListener } from '../../core/tcp.js';
import { bindUdp, closeUdp } from '../../core/udp.js';
import { type FrameMeasure, StreamDeframer, WireReader, WireWriter } from '../../wire/index.js';
import { type Authenticator, masterAuthenticator, offlineAuthenticator } from './auth.js';
import {
  DEFAULT_CONNECTION_TIMEOUT_S,
  DEFAULT_KEEP_ALIVE_S,
  DEFAULT_MAX_PACKET,
  DEFAULT_PORT,
  DEFAULT_SEGMENTATION_TIMEOUT_S,
  Priority,
  QuitType,
} from './constants.js';
import {
  handleAuthentification,
  handleHandshake,
  handleLatency,
  handleSessions,
} from './handlers/connection.js';
import {
  handleEnter,
  handlePasswordRequirement,
  handleQuit,
  handleTraveling,
  removePlayer,
} from './handlers/membership.js';
import {
  handleAvatarChanged,
  handleAvatarParams,
  handleCustom,
  handleTeleport,
  handleTransform,
} from './handlers/relay.js';
import { handleServerConfig } from './handlers/server-config.js';
import { DEFAULT_INSTANCE, Instance, type InstanceConfig } from './instances.js';
import type { ClientMessage, ServerMessage } from './messages.js';
import { packetMeasure, readClientPacket, splitPackets, writeServerPacket } from './packet.js';
import { type CongestionLimits, RelayClient, udpKey } from './session.js';

export interface NoxRelayOptions {
  host?: string;
  /** 0 picks a free port; TCP binds first and UDP then takes the same number. */
  port?: number;
  /** Instances; none → one public default instance (id 0). */
  instances?: InstanceConfig[];
  /** Master server base URL. Unset: offline mode (IsOffline, any token accepted). */
  master?: string;
  /** Replaces the built-in token check (offline or master). */
  authenticate?: Authenticator;
  /** Home server written into offline authentications and Joins. */
  serverAddress?: string;
  maxPacketSize?: number;
  connectionTimeoutMs?: number;
  keepAliveIntervalMs?: number;
  segmentationTimeoutMs?: number;
  /** Most clients, TCP and UDP together. */
  maxClients?: number;
  /** Most UDP sessions from one IP address (limits handshake amplification). */
  maxUdpPerIp?: number;
  /** Segmentation caps: segments per session, sessions per client, reassembled bytes. */
  maxSegments?: number;
  maxSegmentSessions?: number;
  maxReassembledBytes?: number;
  congestion?: Partial<CongestionLimits>;
  log?: Logger;
  metrics?: ProtocolMetrics;
}

export interface ResolvedOptions {
  host: string;
  port: number;
  maxPacketSize: number;
  connectionTimeoutMs: number;
  keepAliveIntervalMs: number;
  segmentationTimeoutMs: number;
  maxClients: number;
  maxUdpPerIp: number;
  maxSegments: number;
  maxSegmentSessions: number;
  maxReassembledBytes: number;
  serverAddress: string;
  master: string | undefined;
}

function asBuffer(b: Uint8Array): Buffer {
  return Buffer.isBuffer(b) ? b : Buffer.from(b.buffer, b.byteOffset, b.byteLength);
}

/** Reliable and Segmentation may nest (a reassembled Reliable, say) this deep, no deeper. */
const MAX_NESTING = 2;

export class NoxRelayServer {
  readonly options: ResolvedOptions;
  readonly log: Logger;
  readonly metrics: ProtocolMetrics;
  readonly instances = new Map<number, Instance>();
  readonly clients = new Map<number, RelayClient>();
  readonly authenticate: Authenticator;
  private readonly udpClients = new Map<string, RelayClient>();
  private readonly udpPerIp = new Map<string, number>();
  private readonly congestion: CongestionLimits;
  private readonly measure: FrameMeasure;
  private readonly reader = new WireReader();
  private readonly writer = new WireWriter({ initialCapacity: 2048 });
  /** Scratch writer for the transform fan-out (hot path). */
  readonly fanWriter = new WireWriter({ initialCapacity: 256 });
  private readonly ranges: number[] = [];
  private tcp: TcpListener | undefined;
  private udp: dgram.Socket | undefined;
  private readonly udpQueue = { bytes: 0 };
  private timer: NodeJS.Timeout | undefined;
  private closing: Promise<void> | undefined;

  constructor(options: NoxRelayOptions = {}) {
    this.options = {
      host: options.host ?? '0.0.0.0',
      port: options.port ?? DEFAULT_PORT,
      maxPacketSize: options.maxPacketSize ?? DEFAULT_MAX_PACKET,
      connectionTimeoutMs: options.connectionTimeoutMs ?? DEFAULT_CONNECTION_TIMEOUT_S * 1000,
      keepAliveIntervalMs: options.keepAliveIntervalMs ?? DEFAULT_KEEP_ALIVE_S * 1000,
      segmentationTimeoutMs: options.segmentationTimeoutMs ?? DEFAULT_SEGMENTATION_TIMEOUT_S * 1000,
      maxClients: options.maxClients ?? 4096,
      maxUdpPerIp: options.maxUdpPerIp ?? 256,
      maxSegments: options.maxSegments ?? 256,
      maxSegmentSessions: options.maxSegmentSessions ?? 8,
      maxReassembledBytes: options.maxReassembledBytes ?? 0xffff,
      serverAddress: options.serverAddress ?? 'localhost',
      master: options.master,
    };
    if (this.options.maxPacketSize < 16 || this.options.maxPacketSize > 0xffff) {
      throw new Error('maxPacketSize must be 16..65535');
    }
    this.log = options.log ?? silentLogger();
    this.metrics = options.metrics ?? new ProtocolMetrics('nox-relay');
    this.authenticate =
      options.authenticate ??
      (this.options.master !== undefined
        ? masterAuthenticator(this.options.master)
        : offlineAuthenticator(this.options.serverAddress));
    const soft = options.congestion?.softBytes ?? 64 * 1024;
    this.congestion = {
      softBytes: soft,
      hardBytes: options.congestion?.hardBytes ?? soft * 4,
      closeBytes: options.congestion?.closeBytes ?? soft * 16,
    };
    this.measure = packetMeasure(this.options.maxPacketSize);
    const list =
      options.instances === undefined || options.instances.length === 0
        ? [DEFAULT_INSTANCE]
        : options.instances;
    for (const c of list) this.instances.set(c.id, new Instance(c));
  }

  get offline(): boolean {
    return this.options.master === undefined;
  }

  /** TCP first (port 0 allowed), then UDP on the very same port number. */
  async start(): Promise<Endpoint[]> {
    const { host } = this.options;
    this.tcp = await listenTcp({
      host,
      port: this.options.port,
      maxConnections: this.options.maxClients,
      idleTimeoutMs: 0, // liveness is the protocol's own (Disconnect "Connection timed out.")
      metrics: this.metrics,
      log: this.log,
      onConnection: (socket) => this.onTcpConnection(socket),
    });
    try {
      this.udp = await bindUdp({
        host,
        port: this.tcp.port,
        recvBufferSize: 4 << 20,
        sendBufferSize: 4 << 20,
      });
    } catch (err) {
      await this.tcp.close();
      throw err;
    }
    this.udp.on('message', (msg, rinfo) => this.onDatagram(msg, rinfo));
    this.udp.on('error', (err) => this.log.warn({ err: err.message }, 'udp socket error'));
    const tick = Math.max(
      20,
      Math.min(
        1000,
        Math.floor(Math.min(this.options.connectionTimeoutMs, this.options.segmentationTimeoutMs) / 4),
      ),
    );
    this.timer = setInterval(() => this.sweep(), tick);
    this.timer.unref();
    return this.endpoints;
  }

  get port(): number {
    return this.tcp?.port ?? this.options.port;
  }

  get endpoints(): Endpoint[] {
    const host = this.options.host;
    return [
      { transport: 'tcp', host, port: this.port, description: 'NoxVR Relay v1 (TCP)' },
      { transport: 'udp', host, port: this.port, description: 'NoxVR Relay v1 (UDP)' },
    ];
  }

  close(): Promise<void> {
    this.closing ??= (async () => {
      if (this.timer !== undefined) clearInterval(this.timer);
      for (const inst of this.instances.values())
        if (inst.flushTimer !== undefined) clearTimeout(inst.flushTimer);
      for (const c of [...this.clients.values()])
        this.disconnect(c, 'Server is shutting down.', QuitType.UnknownError);
      await Promise.all([this.tcp?.close(500), this.udp === undefined ? undefined : closeUdp(this.udp)]);
    })();
    return this.closing;
  }

  // ---- sending --------------------------------------------------------------------------

  /** Encodes one packet into a fresh buffer (safe to hand to several sockets). */
  encode(uid: number, message: ServerMessage): Buffer {
    const w = this.writer.reset();
    writeServerPacket(w, uid, message);
    return w.toBuffer();
  }

  send(client: RelayClient, uid: number, message: ServerMessage, priority: Priority): void {
    client.send(this.encode(uid, message), priority);
  }

  // ---- transports -----------------------------------------------------------------------

  private freeClientId(): number {
    let id = 0;
    while (this.clients.has(id)) id++;
    return id;
  }

  private onTcpConnection(socket: net.Socket): void {
    if (this.clients.size >= this.options.maxClients || this.closing !== undefined) {
      this.metrics.close('over_capacity');
      socket.destroy();
      return;
    }
    const client = new RelayClient(this.freeClientId(), { tcp: socket }, this.congestion, this.metrics);
    this.clients.set(client.id, client);
    const deframer = new StreamDeframer(this.measure, { maxFrameBytes: this.options.maxPacketSize });
    const onFrame = (buf: Buffer, start: number, end: number) => {
      this.onPacket(client, buf, start, end, 0);
    };
    socket.on('data', (chunk: Buffer) => {
      try {
        deframer.push(chunk, onFrame);
      } catch (err) {
        // A bad length prefix: the stream cannot be resynchronised. Only this connection goes.
        this.metrics.close('malformed');
        this.log.debug({ err: (err as Error).message, client: client.id }, 'bad frame, closing');
        socket.destroy();
      }
    });
    socket.on('close', () => {
      deframer.reset();
      this.dropClient(client, QuitType.UnknownError, null);
    });
  }

  private onDatagram(msg: Buffer, rinfo: dgram.RemoteInfo): void {
    this.udpQueue.bytes = this.udp!.getSendQueueSize();
    let ranges: number[];
    try {
      ranges = splitPackets(msg, 0, msg.length, this.measure, this.ranges);
    } catch {
      this.metrics.drop('malformed');
      return;
    }
    if (ranges.length === 0) {
      this.metrics.drop('malformed');
      return;
    }
    const key = udpKey(rinfo.address, rinfo.port);
    let client = this.udpClients.get(key);
    if (client === undefined) {
      // State is created only by a Handshake, never by arbitrary traffic from a (spoofable) source.
      if (msg[4] !== 0x01) {
        this.metrics.drop('unknown_source');
        return;
      }
      const perIp = this.udpPerIp.get(rinfo.address) ?? 0;
      if (
        this.clients.size >= this.options.maxClients ||
        perIp >= this.options.maxUdpPerIp ||
        this.closing !== undefined
      ) {
        this.metrics.drop('over_capacity');
        return;
      }
      client = new RelayClient(
        this.freeClientId(),
        { udp: this.udp!, ip: rinfo.address, port: rinfo.port, queue: this.udpQueue },
        this.congestion,
        this.metrics,
      );
      this.clients.set(client.id, client);
      this.udpClients.set(key, client);
      this.udpPerIp.set(rinfo.address, perIp + 1);
      this.metrics.open++;
    }
    // `ranges` is a shared scratch array: copy the bounds out before dispatch can reuse it.
    const n = ranges.length;
    if (n === 2) {
      this.onPacket(client, msg, ranges[0]!, ranges[1]!, 0);
      return;
    }
    const copy = ranges.slice(0, n);
    for (let i = 0; i < n && !client.closed; i += 2) this.onPacket(client, msg, copy[i]!, copy[i + 1]!, 0);
  }

  /** One packet `buf[start, end)` from `client`; `depth` > 0 inside Reliable/Segmentation. */
  onPacket(client: RelayClient, buf: Buffer, start: number, end: number, depth: number): void {
    if (client.closed) return;
    this.metrics.received++;
    client.lastSeen = performance.now();
    let uid: number;
    let message: ClientMessage;
    try {
      const r = this.reader.reset(buf, start, end);
      const p = readClientPacket(r);
      uid = p.uid;
      message = p.message;
    } catch (err) {
      this.metrics.drop('malformed');
      this.log.debug({ err: (err as Error).message, client: client.id }, 'undecodable packet dropped');
      return;
    }
    try {
      this.dispatch(client, uid, message, depth);
    } catch (err) {
      this.metrics.count('handler_error');
      this.log.error({ err, client: client.id, type: message.type }, 'handler failed');
    }
  }

  private dispatch(client: RelayClient, uid: number, m: ClientMessage, depth: number): void {
    if (m.type === 'Handshake') {
      handleHandshake(this, client, uid, m);
      return;
    }
    if (m.type === 'Reliable' || m.type === 'Segmentation') {
      if (depth >= MAX_NESTING) {
        this.metrics.drop('nesting');
        return;
      }
      if (m.type === 'Reliable') {
        this.onReliable(client, m.messages, depth);
        return;
      }
      this.onSegment(client, m, depth);
      return;
    }
    if (!client.handshaked) {
      this.metrics.drop('not_handshaked');
      return;
    }
    switch (m.type) {
      case 'Disconnect':
        this.onDisconnect(client, uid);
        break;
      case 'Latency':
        handleLatency(this, client, uid, m);
        break;
      case 'Authentification':
        handleAuthentification(this, client, uid, m);
        break;
      case 'Sessions':
        handleSessions(this, client, uid, m);
        break;
      case 'Enter':
        handleEnter(this, client, uid, m);
        break;
      case 'Quit':
        handleQuit(this, client, uid, m);
        break;
      case 'Traveling':
        handleTraveling(this, client, uid, m);
        break;
      case 'PasswordRequirement':
        handlePasswordRequirement(this, client, uid, m);
        break;
      case 'Transform':
        handleTransform(this, client, m);
        break;
      case 'Custom':
        handleCustom(this, client, m);
        break;
      case 'Teleport':
        handleTeleport(this, client, m);
        break;
      case 'AvatarChanged':
        handleAvatarChanged(this, client, uid, m);
        break;
      case 'AvatarParams':
        handleAvatarParams(this, client, m);
        break;
      case 'ServerConfig':
        handleServerConfig(this, client, uid, m);
        break;
    }
  }

  /** Each entry is a complete inner packet, dispatched in order (spec §4.4, §7.8). */
  private onReliable(client: RelayClient, entries: readonly Uint8Array[], depth: number): void {
    this.metrics.count('reliable_batches');
    for (const raw of entries) {
      const e = asBuffer(raw);
      if (client.closed) return;
      if (e.length < 5 || e.readUInt16BE(0) !== e.length || e.length > this.options.maxPacketSize) {
        this.metrics.drop('malformed');
        continue;
      }
      this.onPacket(client, e, 0, e.length, depth + 1);
    }
  }

  /** Reassembly keyed by (segment id, client), with caps and a timeout (spec §4.3, §7.8). */
  private onSegment(
    client: RelayClient,
    m: { segmentId: number; totalSegments: number; currentSegment: number; segmentData: Uint8Array },
    depth: number,
  ): void {
    const o = this.options;
    if (m.totalSegments === 0 || m.currentSegment >= m.totalSegments || m.totalSegments > o.maxSegments) {
      this.metrics.drop('bad_segment');
      return;
    }
    const now = performance.now();
    let s = client.segments.get(m.segmentId);
    if (s !== undefined && (now - s.lastUpdate >= o.segmentationTimeoutMs || s.total !== m.totalSegments)) {
      client.segments.delete(m.segmentId);
      this.metrics.drop('segment_expired');
      s = undefined;
    }
    if (s === undefined) {
      if (client.segments.size >= o.maxSegmentSessions) {
        this.metrics.drop('segment_sessions');
        return;
      }
      s = {
        total: m.totalSegments,
        parts: new Array(m.totalSegments),
        received: 0,
        bytes: 0,
        lastUpdate: now,
      };
      client.segments.set(m.segmentId, s);
    }
    const previous = s.parts[m.currentSegment];
    const bytes = s.bytes - (previous?.length ?? 0) + m.segmentData.length;
    if (bytes > o.maxReassembledBytes) {
      client.segments.delete(m.segmentId);
      this.metrics.drop('segment_too_large');
      return;
    }
    if (previous === undefined) s.received++;
    // The datagram or frame is only valid during this call: keep a copy.
    s.parts[m.currentSegment] = Buffer.from(m.segmentData);
    s.bytes = bytes;
    s.lastUpdate = now;
    if (s.received < s.total) return;
    client.segments.delete(m.segmentId);
    const whole = Buffer.concat(s.parts as Buffer[], s.bytes);
    this.metrics.count('segments_reassembled');
    if (whole.length < 5 || whole.readUInt16BE(0) !== whole.length) {
      this.metrics.drop('malformed');
      return;
    }
    this.onPacket(client, whole, 0, whole.length, depth + 1);
  }

  private onDisconnect(client: RelayClient, uid: number): void {
    this.send(client, uid, { type: 'Disconnect', reason: null }, Priority.Critical);
    this.dropClient(client, QuitType.Normal, null);
    this.metrics.close('disconnect');
  }

  /** Tells the client why, then forgets it. */
  disconnect(client: RelayClient, reason: string, quitType: number): void {
    this.send(client, 0, { type: 'Disconnect', reason }, Priority.Critical);
    this.dropClient(client, quitType, null);
  }

  /** Removes a client: its players leave (Leave to whoever knew them), TCP ends after flushing. */
  dropClient(client: RelayClient, quitType: number, reason: string | null): void {
    if (client.closed) return;
    for (const p of [...client.players.values()]) removePlayer(this, p, quitType, reason, null, null, false);
    client.closed = true;
    this.clients.delete(client.id);
    if (client.transport === 'udp') {
      this.udpClients.delete(client.key);
      const n = (this.udpPerIp.get(client.ip) ?? 1) - 1;
      if (n <= 0) this.udpPerIp.delete(client.ip);
      else this.udpPerIp.set(client.ip, n);
      this.metrics.open--;
    } else {
      client.end();
    }
  }

  /** Liveness (Disconnect "Connection timed out.") and expired segmentation sessions. */
  private sweep(): void {
    const now = performance.now();
    const o = this.options;
    for (const c of [...this.clients.values()]) {
      if (now - c.lastSeen >= o.connectionTimeoutMs) {
        this.metrics.close('timeout');
        this.disconnect(c, 'Connection timed out.', QuitType.Timeout);
        continue;
      }
      for (const [id, s] of c.segments) {
        if (now - s.lastUpdate >= o.segmentationTimeoutMs) {
          c.segments.delete(id);
          this.metrics.drop('segment_expired');
        }
      }
    }
  }
}
