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
  PROTOCOL_VERSION,
  Priority,
  QuitType,
} from './constants.js';
import {
  handleAuthentification,
  handleHandshake,
  handleLatency,
  handleSessions,
  handshakeReply,
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
import { type CongestionLimits, RelayClient, type SegmentSession, udpKey } from './session.js';

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
  /** Most TCP connections from one IP address. Default 64. */
  maxTcpPerIp?: number;
  /**
   * Anti-amplification: a reply to a UDP source that has not proven its address may be at most
   * this many times the datagram that asked (QUIC, RFC 9000 §8.1, uses 3). Default 3, so an
   * unpadded real client Handshake (about 23 bytes) still gets its 24-byte reply.
   */
  udpReplyFactor?: number;
  /**
   * Most half-open UDP sessions (a Handshake answered, no other valid packet yet), server-wide.
   * They do not count against `maxClients`. Default min(256, max(1, maxClients / 4)).
   */
  maxHalfOpenUdp?: number;
  /** A half-open UDP session is forgotten silently after this long. Default min(5000, connection timeout). */
  halfOpenTimeoutMs?: number;
  /** Segmentation caps: segments per session, sessions per client, reassembled bytes. */
  maxSegments?: number;
  maxSegmentSessions?: number;
  maxReassembledBytes?: number;
  /** Bytes held for reassembly by all clients together; new segments beyond it are dropped. Default 64 MiB. */
  maxReassemblyBudget?: number;
  /** Largest stored AvatarParams value, bytes. Default 256. */
  maxAvatarParamBytes?: number;
  /** Most AvatarParams bytes (values) stored per player. Default 16 KiB. */
  maxAvatarParamsTotal?: number;
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
  maxTcpPerIp: number;
  maxHalfOpenUdp: number;
  halfOpenTimeoutMs: number;
  udpReplyFactor: number;
  maxSegments: number;
  maxSegmentSessions: number;
  maxReassembledBytes: number;
  maxReassemblyBudget: number;
  maxAvatarParamBytes: number;
  maxAvatarParamsTotal: number;
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
  private readonly tcpPerIp = new Map<string, number>();
  /** Half-open UDP sessions (not counted against maxClients). */
  private halfOpen = 0;
  /** Bytes held in segmentation sessions, all clients together. */
  private reassemblyBytes = 0;
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
    const maxClients = options.maxClients ?? 4096;
    const connectionTimeoutMs = options.connectionTimeoutMs ?? DEFAULT_CONNECTION_TIMEOUT_S * 1000;
    this.options = {
      host: options.host ?? '0.0.0.0',
      port: options.port ?? DEFAULT_PORT,
      maxPacketSize: options.maxPacketSize ?? DEFAULT_MAX_PACKET,
      connectionTimeoutMs,
      keepAliveIntervalMs: options.keepAliveIntervalMs ?? DEFAULT_KEEP_ALIVE_S * 1000,
      segmentationTimeoutMs: options.segmentationTimeoutMs ?? DEFAULT_SEGMENTATION_TIMEOUT_S * 1000,
      maxClients,
      maxUdpPerIp: options.maxUdpPerIp ?? 256,
      maxTcpPerIp: options.maxTcpPerIp ?? 64,
      maxHalfOpenUdp: options.maxHalfOpenUdp ?? Math.min(256, Math.max(1, Math.floor(maxClients / 4))),
      udpReplyFactor: options.udpReplyFactor ?? 3,
      halfOpenTimeoutMs: options.halfOpenTimeoutMs ?? Math.min(5000, connectionTimeoutMs),
      maxSegments: options.maxSegments ?? 256,
      maxSegmentSessions: options.maxSegmentSessions ?? 8,
      maxReassembledBytes: options.maxReassembledBytes ?? 0xffff,
      maxReassemblyBudget: options.maxReassemblyBudget ?? 64 * 1024 * 1024,
      maxAvatarParamBytes: options.maxAvatarParamBytes ?? 256,
      maxAvatarParamsTotal: options.maxAvatarParamsTotal ?? 16 * 1024,
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
        Math.floor(
          Math.min(
            this.options.connectionTimeoutMs,
            this.options.segmentationTimeoutMs,
            this.options.halfOpenTimeoutMs,
          ) / 4,
        ),
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

  /** Clients that count against maxClients: every TCP connection and every proven UDP source. */
  get establishedClients(): number {
    return this.clients.size - this.halfOpen;
  }

  /** Bytes currently held for segment reassembly, all clients together. */
  get reassemblyBytesHeld(): number {
    return this.reassemblyBytes;
  }

  private onTcpConnection(socket: net.Socket): void {
    const ip = socket.remoteAddress ?? '0.0.0.0';
    const perIp = this.tcpPerIp.get(ip) ?? 0;
    if (this.establishedClients >= this.options.maxClients || this.closing !== undefined) {
      this.metrics.close('over_capacity');
      socket.destroy();
      return;
    }
    if (perIp >= this.options.maxTcpPerIp) {
      this.metrics.close('over_capacity_ip');
      socket.destroy();
      return;
    }
    const client = new RelayClient(this.freeClientId(), { tcp: socket }, this.congestion, this.metrics);
    this.clients.set(client.id, client);
    this.tcpPerIp.set(client.ip, (this.tcpPerIp.get(client.ip) ?? 0) + 1);
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

  /**
   * `msg` as one Handshake packet followed only by zero bytes (the padding that makes a first
   * datagram at least as large as the reply): the packet's end, or -1.
   */
  private handshakeEnd(msg: Buffer): number {
    if (msg.length < 5 || msg[4] !== 0x01) return -1;
    const len = msg.readUInt16BE(0);
    if (len < 5 || len > this.options.maxPacketSize || len > msg.length) return -1;
    for (let i = len; i < msg.length; i++) if (msg[i] !== 0) return -1;
    return len;
  }

  private onDatagram(msg: Buffer, rinfo: dgram.RemoteInfo): void {
    this.udpQueue.bytes = this.udp!.getSendQueueSize();
    const key = udpKey(rinfo.address, rinfo.port);
    const client = this.udpClients.get(key);
    if (client === undefined) {
      this.onFirstDatagram(msg, rinfo, key);
      return;
    }
    let ranges: number[];
    try {
      ranges = splitPackets(msg, 0, msg.length, this.measure, this.ranges);
    } catch {
      // A padded Handshake (packet + zero bytes) is the one datagram that is not all packets.
      const end = this.handshakeEnd(msg);
      if (end < 0) {
        this.metrics.drop('malformed');
        return;
      }
      ranges = this.ranges;
      ranges.length = 0;
      ranges.push(0, end);
    }
    if (ranges.length === 0) {
      this.metrics.drop('malformed');
      return;
    }
    client.datagramBytes = msg.length;
    // `ranges` is a shared scratch array: copy the bounds out before dispatch can reuse it.
    const n = ranges.length;
    if (n === 2) {
      this.onPacket(client, msg, ranges[0]!, ranges[1]!, 0);
      return;
    }
    const copy = ranges.slice(0, n);
    for (let i = 0; i < n && !client.closed; i += 2) this.onPacket(client, msg, copy[i]!, copy[i + 1]!, 0);
  }

  /**
   * A datagram from an unknown source. State is created only by a decoded Handshake (protocol 1)
   * whose datagram is at least as large as the reply, never by arbitrary (spoofable) traffic;
   * the new session stays half-open until the source sends another valid packet.
   */
  private onFirstDatagram(msg: Buffer, rinfo: dgram.RemoteInfo, key: string): void {
    const end = this.handshakeEnd(msg);
    if (end < 0) {
      this.metrics.drop('unknown_source');
      return;
    }
    let uid: number;
    let hs: ClientMessage;
    try {
      const p = readClientPacket(this.reader.reset(msg, 0, end));
      uid = p.uid;
      hs = p.message;
    } catch {
      this.metrics.drop('unknown_source');
      return;
    }
    if (hs.type !== 'Handshake') {
      this.metrics.drop('unknown_source');
      return;
    }
    if (hs.protocol !== PROTOCOL_VERSION) {
      // No session. The reason goes back only if it is no larger than what came in.
      this.metrics.close('bad_protocol');
      const bytes = this.encode(uid, {
        type: 'Disconnect',
        reason: `Incompatible protocol version (${hs.protocol} != ${PROTOCOL_VERSION}).`,
      });
      if (bytes.length <= msg.length * this.options.udpReplyFactor)
        this.udp!.send(bytes, rinfo.port, rinfo.address);
      else this.metrics.drop('udp_amplification');
      return;
    }
    const perIp = this.udpPerIp.get(rinfo.address) ?? 0;
    if (
      this.halfOpen >= this.options.maxHalfOpenUdp ||
      this.establishedClients >= this.options.maxClients ||
      perIp >= this.options.maxUdpPerIp ||
      this.closing !== undefined
    ) {
      this.metrics.drop('over_capacity');
      return;
    }
    const client = new RelayClient(
      this.freeClientId(),
      { udp: this.udp!, ip: rinfo.address, port: rinfo.port, queue: this.udpQueue },
      this.congestion,
      this.metrics,
    );
    client.datagramBytes = msg.length;
    const reply = this.encode(uid, handshakeReply(this, client));
    if (reply.length > msg.length * this.options.udpReplyFactor) {
      this.metrics.drop('udp_amplification');
      return;
    }
    client.halfOpen = true;
    this.halfOpen++;
    this.clients.set(client.id, client);
    this.udpClients.set(key, client);
    this.udpPerIp.set(rinfo.address, perIp + 1);
    this.metrics.open++;
    this.metrics.received++;
    handleHandshake(this, client, uid, hs);
  }

  /** A half-open UDP session proved its address (a second valid packet): it becomes a client. */
  private promote(client: RelayClient): boolean {
    if (this.establishedClients >= this.options.maxClients) {
      this.metrics.drop('over_capacity');
      this.dropClient(client, QuitType.UnknownError, null);
      return false;
    }
    client.halfOpen = false;
    this.halfOpen--;
    return true;
  }

  /** One packet `buf[start, end)` from `client`; `depth` > 0 inside Reliable/Segmentation. */
  onPacket(client: RelayClient, buf: Buffer, start: number, end: number, depth: number): void {
    if (client.closed) return;
    this.metrics.received++;
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
    // Only a valid packet resets the connection timeout (spec).
    client.lastSeen = performance.now();
    if (client.halfOpen && message.type !== 'Handshake' && !this.promote(client)) return;
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
    if (!client.handshaked) {
      this.metrics.drop('not_handshaked');
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
      this.forgetSegments(client, m.segmentId, s);
      this.metrics.drop('segment_expired');
      s = undefined;
    }
    if (this.reassemblyBytes + m.segmentData.length > o.maxReassemblyBudget) {
      // Server-wide memory cap: new segments wait until others complete or expire.
      this.metrics.drop('reassembly_budget');
      return;
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
      this.forgetSegments(client, m.segmentId, s);
      this.metrics.drop('segment_too_large');
      return;
    }
    if (previous === undefined) s.received++;
    // The datagram or frame is only valid during this call: keep a copy.
    s.parts[m.currentSegment] = Buffer.from(m.segmentData);
    this.reassemblyBytes += bytes - s.bytes;
    s.bytes = bytes;
    s.lastUpdate = now;
    if (s.received < s.total) return;
    this.forgetSegments(client, m.segmentId, s);
    const whole = Buffer.concat(s.parts as Buffer[], s.bytes);
    this.metrics.count('segments_reassembled');
    if (whole.length < 5 || whole.readUInt16BE(0) !== whole.length) {
      this.metrics.drop('malformed');
      return;
    }
    this.onPacket(client, whole, 0, whole.length, depth + 1);
  }

  /** Removes one segmentation session and returns its bytes to the server-wide budget. */
  private forgetSegments(client: RelayClient, id: number, s: SegmentSession): void {
    client.segments.delete(id);
    this.reassemblyBytes -= s.bytes;
  }

  private onDisconnect(client: RelayClient, uid: number): void {
    this.send(client, uid, { type: 'Disconnect', reason: null }, Priority.Critical);
    this.dropClient(client, QuitType.Normal, null);
    this.metrics.close('disconnect');
  }

  /** Tells the client why, then forgets it. */
  disconnect(client: RelayClient, reason: string, quitType: number): void {
    // A half-open UDP source never proved its address: nothing is sent to it (anti-amplification).
    if (!client.halfOpen) this.send(client, 0, { type: 'Disconnect', reason }, Priority.Critical);
    this.dropClient(client, quitType, null);
  }

  /** Removes a client: its players leave (Leave to whoever knew them), TCP ends after flushing. */
  dropClient(client: RelayClient, quitType: number, reason: string | null): void {
    if (client.closed) return;
    for (const p of [...client.players.values()]) removePlayer(this, p, quitType, reason, null, null, false);
    client.closed = true;
    this.clients.delete(client.id);
    for (const [id, s] of [...client.segments]) this.forgetSegments(client, id, s);
    if (client.halfOpen) {
      client.halfOpen = false;
      this.halfOpen--;
    }
    if (client.transport === 'udp') {
      this.udpClients.delete(client.key);
      const n = (this.udpPerIp.get(client.ip) ?? 1) - 1;
      if (n <= 0) this.udpPerIp.delete(client.ip);
      else this.udpPerIp.set(client.ip, n);
      this.metrics.open--;
    } else {
      const n = (this.tcpPerIp.get(client.ip) ?? 1) - 1;
      if (n <= 0) this.tcpPerIp.delete(client.ip);
      else this.tcpPerIp.set(client.ip, n);
      client.end();
    }
  }

  /** Liveness (Disconnect "Connection timed out.") and expired segmentation sessions. */
  private sweep(): void {
    const now = performance.now();
    const o = this.options;
    for (const c of [...this.clients.values()]) {
      if (c.halfOpen && now - c.createdAt >= o.halfOpenTimeoutMs) {
        // Never proved its address: forgotten silently.
        this.metrics.close('half_open_timeout');
        this.dropClient(c, QuitType.Timeout, null);
        continue;
      }
      if (now - c.lastSeen >= o.connectionTimeoutMs) {
        this.metrics.close('timeout');
        this.disconnect(c, 'Connection timed out.', QuitType.Timeout);
        continue;
      }
      for (const [id, s] of c.segments) {
        if (now - s.lastUpdate >= o.segmentationTimeoutMs) {
          this.forgetSegments(c, id, s);
          this.metrics.drop('segment_expired');
        }
      }
    }
  }
}
