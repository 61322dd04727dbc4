/**
 * The NoxVR Relay v1 server: TCP and UDP on one port, the client table and liveness. The parts
 * live beside it: options.ts (every option declared once: defaults and checks), links.ts (each client's transport: sending,
 * congestion, per-address counts, closing), udp-admission.ts (who gets a UDP session, address
 * cookies), reassembly.ts (Segmentation), dispatch.ts (a packet to its handler) and handlers/
 * (the messages), which see the server only through the RelayContext interface. Past its
 * transport's entry point (an accepted connection, a first datagram) a client is handled the
 * same whatever it came over: what differs is its link's, or its `datagram` capability's.
 */

import type dgram from 'node:dgram';
import { addressKey, type ConnectionSet, CloseReason as SeamCloseReason } from '../../core/connection.js';
import { ConfigError } from '../../core/errors.js';
import {
  type FramedConnection,
  type FramedTcpServer,
  type FrameSink,
  listenFramedTcp,
} from '../../core/framed-tcp.js';
import type { Logger } from '../../core/logger.js';
import { silentLogger } from '../../core/logger.js';
import { ProtocolMetrics } from '../../core/metrics.js';
import { listenOnOnePort } from '../../core/one-port.js';
import type { OptionValues } from '../../core/options.js';
import type { Endpoint } from '../../core/server.js';
import { TokenBucket } from '../../core/token-bucket.js';
import { bindUdp, closeUdp } from '../../core/udp.js';
import type { WireTap } from '../../core/wire-tap.js';
import { type FrameMeasure, WireReader, WireWriter } from '../../wire/index.js';
import { type Authenticator, masterAuthenticator, offlineAuthenticator } from './auth.js';
import { InstanceFlags, PROTOCOL_VERSION, Priority, QuitType } from './constants.js';
import type { RelayContext } from './context.js';
import { type DispatchContext, dispatch } from './dispatch.js';
import { NoxRelayConfigError } from './errors.js';
import { handshakeReply } from './handlers/connection.js';
import { removePlayer } from './handlers/membership.js';
import { Instance } from './instances.js';
import { TcpClients, type TcpPeer, TcpPlayerLink, UdpPlayerLink, UdpSessions } from './links.js';
import type { ClientMessage, ServerMessage } from './messages.js';
import {
  type NOX_RELAY_OPTIONS,
  type NoxRelayOptions,
  noxRelayOptions,
  type ResolvedOptions,
} from './options.js';
import { packetMeasure, readClientPacket, splitPackets, writeServerPacket } from './packet.js';
import { CloseReason, Counter, DropReason } from './reasons.js';
import { Reassembly } from './reassembly.js';
import { RelayClient, type SendLimits } from './session.js';
import { AliasGuessBudget, handshakeEnd, InstanceAliases, UdpAdmission } from './udp-admission.js';

export type { CongestionLimits, NoxRelayOptions, ResolvedOptions } from './options.js';

/** "A cap is reached" is logged at info at most this often. */
const FULL_LOG_INTERVAL_MS = 10_000;

export class NoxRelayServer implements RelayContext, DispatchContext {
  readonly options: ResolvedOptions;
  readonly log: Logger;
  readonly metrics: ProtocolMetrics;
  readonly instances = new Map<number, Instance>();
  readonly clients = new Map<number, RelayClient>();
  readonly authenticate: Authenticator;
  readonly reassembly: Reassembly;
  /** The admin endpoint's wire view (set before start); one boolean check per packet otherwise. */
  wireTap: WireTap | undefined;
  /** Scratch writer for the transform fan-out (hot path). */
  readonly fanWriter = new WireWriter({ initialCapacity: 256 });
  private readonly admission: UdpAdmission;
  private readonly aliasGuesses: AliasGuessBudget;
  /** The real instance ids (fixed at start): aliases never take one of them. */
  private readonly realIds: ReadonlySet<number>;
  /** The TCP endpoint's clients per address (`maxTcpPerIp`). */
  private readonly tcpClients = new TcpClients();
  /** The UDP endpoint: its socket, sessions by source and per address (`maxUdpPerIp`), seam table. */
  private udpSessions: UdpSessions | undefined;

  /** The UDP sessions on the connection seam (undefined before `start`). */
  get udpTable(): ConnectionSet<RelayClient> | undefined {
    return this.udpSessions?.table;
  }
  /**
   * Who goes first when the server is full (docs/security.md): established sessions that have
   * not proven their address (only a datagram link starts unproven), then connections that have
   * not sent their Handshake (only a stream exists before its Handshake: a datagram session is
   * created by one), oldest first (insertion-ordered sets: O(1) eviction).
   */
  private readonly unproven = new Set<RelayClient>();
  private readonly beforeHandshake = new Set<RelayClient>();
  /** Request budget per address, shared by its clients; forgotten with its last client. */
  private readonly addressBuckets = new Map<string, { bucket: TokenBucket; clients: number }>();
  private nextClientId = 0;
  private readonly limits: SendLimits;
  private readonly measure: FrameMeasure;
  private readonly reader = new WireReader();
  private readonly writer = new WireWriter({ initialCapacity: 2048 });
  private readonly ranges: number[] = [];
  private tcp: FramedTcpServer | undefined;
  private udp: dgram.Socket | undefined;
  private readonly udpQueue = { bytes: 0 };
  private timer: NodeJS.Timeout | undefined;
  private lastFullLog = Number.NEGATIVE_INFINITY;
  private closing: Promise<void> | undefined;

  /**
   * `options` resolved through the one declaration (options.ts: `noxRelayOptions`): every
   * default filled, every value checked; a bad one is a `NoxRelayConfigError` (`ERR_CONFIG`).
   */
  constructor(options: NoxRelayOptions = {}) {
    const { log, metrics, authenticate, ...values } = options;
    try {
      this.options = noxRelayOptions.resolve(values as OptionValues<typeof NOX_RELAY_OPTIONS>);
    } catch (err) {
      if (err instanceof ConfigError && !(err instanceof NoxRelayConfigError))
        throw new NoxRelayConfigError(err.message, err.key, err.source);
      throw err;
    }
    const o = this.options;
    this.log = log ?? silentLogger();
    this.metrics = metrics ?? new ProtocolMetrics('nox-relay');
    this.authenticate =
      authenticate ??
      (o.master !== undefined ? masterAuthenticator(o.master) : offlineAuthenticator(o.serverAddress));
    this.limits = {
      congestion: o.congestion,
      udpReplyFactor: o.udpReplyFactor,
      udpSendBytesPerSecond: o.udpSendBytesPerSecond,
      slowConsumerTimeoutMs: o.slowConsumerTimeoutMs,
      maxRequestsPerSecond: o.maxRequestsPerSecond,
      maxRequestBurst: o.maxRequestBurst,
    };
    this.admission = new UdpAdmission(o);
    this.aliasGuesses = new AliasGuessBudget(o);
    this.reassembly = new Reassembly(o, this.metrics);
    this.measure = packetMeasure(o.maxPacketBytes);
    for (const c of o.instances) this.instances.set(c.id, new Instance(c));
    this.realIds = new Set(this.instances.keys());
  }

  get offline(): boolean {
    return this.options.master === undefined;
  }

  /** TCP first (port 0 allowed), then UDP on the very same port number. */
  async start(): Promise<Endpoint[]> {
    const { host } = this.options;
    const o = this.options;
    const listeners = await listenOnOnePort(
      o.port,
      (port) =>
        listenFramedTcp({
          host,
          port,
          protocol: 'nox-relay',
          measure: this.measure,
          maxFrameBytes: o.maxPacketBytes,
          // maxClients is enforced in onTcpConnection, which may evict an unproven client to make
          // room; the listener's own cap only stops a flood of connections beyond that.
          maxConnections: o.maxClients + 64,
          // Counted here (with its own close reason and log line).
          maxConnectionsPerIp: 0,
          idleTimeoutMs: 0, // liveness is the protocol's own (Disconnect "Connection timed out.")
          frameTimeoutMs: o.frameTimeoutMs,
          maxBufferedBytes: o.maxBufferedBytes,
          maxBufferedBytesPerIp: o.maxBufferedBytesPerIp,
          // Beyond the hard congestion limit even High messages are dropped: the input waits too.
          maxQueuedBytes: o.congestion.hardBytes,
          framesPerTurn: o.framesPerTurn,
          metrics: this.metrics,
          log: this.log,
          onConnection: (c) => this.onTcpConnection(c),
        }),
      (tcp) => tcp.port,
      (tcp) => tcp.close(),
      (port) => bindUdp({ host, port, recvBufferSize: 4 << 20, sendBufferSize: 4 << 20 }),
    );
    this.tcp = listeners.first;
    this.udp = listeners.second;
    this.udpSessions = new UdpSessions(this.udp, this.udpQueue);
    this.udp.on('message', (msg, rinfo) => this.onDatagram(msg, rinfo));
    this.udp.on('error', (err) => this.log.warn({ err: err.message }, 'udp socket error'));
    const shortest = Math.min(
      o.connectionTimeoutMs,
      o.segmentationTimeoutMs,
      o.halfOpenTimeoutMs,
      o.slowConsumerTimeoutMs,
    );
    this.timer = setInterval(() => this.sweep(), Math.max(20, Math.min(1000, Math.floor(shortest / 4))));
    this.timer.unref();
    return this.endpoints;
  }

  get port(): number {
    return this.tcp?.port ?? this.options.port;
  }

  /** The framed TCP server underneath (its connections, limits and held input); UDP is separate. */
  get tcpTransport(): FramedTcpServer | undefined {
    return this.tcp;
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
      this.udpSessions?.closing();
      for (const c of this.clients.values()) c.closeReason ??= SeamCloseReason.ServerClosing;
      if (this.timer !== undefined) clearInterval(this.timer);
      for (const inst of this.instances.values())
        if (inst.flushTimer !== undefined) clearTimeout(inst.flushTimer);
      for (const c of [...this.clients.values()])
        this.disconnect(c, 'Server is shutting down.', QuitType.UnknownError);
      await Promise.all([this.tcp?.close(500), this.udp === undefined ? undefined : closeUdp(this.udp)]);
    })();
    return this.closing;
  }

  // ---- RelayContext: what handlers use --------------------------------------------------

  encode(uid: number, message: ServerMessage): Buffer {
    const w = this.writer.reset();
    writeServerPacket(w, uid, message);
    return w.toBuffer();
  }

  send(client: RelayClient, uid: number, message: ServerMessage, priority: Priority): void {
    client.send(this.encode(uid, message), priority);
  }

  disconnect(client: RelayClient, reason: string, quitType: number): void {
    // A half-open UDP source never sent a second packet: nothing more is sent to it.
    if (!client.halfOpen) this.send(client, 0, { type: 'Disconnect', reason }, Priority.Critical);
    this.dropClient(client, quitType, null);
  }

  /** Removes a client: its players leave (Leave to whoever knew them), its link closes after flushing. */
  dropClient(client: RelayClient, quitType: number, reason: string | null): void {
    if (client.closed) return;
    for (const p of [...client.players.values()]) removePlayer(this, p, quitType, reason, null, null, false);
    client.closed = true;
    this.clients.delete(client.id);
    this.reassembly.forgetAll(client);
    this.admission.remove(client);
    this.unproven.delete(client);
    this.beforeHandshake.delete(client);
    const shared = this.addressBuckets.get(client.addressKey);
    if (shared !== undefined && --shared.clients <= 0) this.addressBuckets.delete(client.addressKey);
    client.link.release(client, client.closeReason ?? quitReason(quitType));
    this.updateOpen();
  }

  addressCookie(client: RelayClient): Uint8Array | null {
    // Only a datagram source's address is in doubt (a stream's connection proved it).
    if (!client.link.datagram || !this.options.addressCookies) return null;
    return this.admission.cookie(client.ip, client.port);
  }

  proveAddress(client: RelayClient, cookie: Uint8Array): boolean {
    if (!this.options.addressCookies || !this.admission.verify(client.ip, client.port, cookie)) {
      this.metrics.drop(DropReason.BadCookie);
      return false;
    }
    if (client.halfOpen && !this.promote(client)) return false;
    if (!client.addressProven) {
      client.addressProven = true;
      this.unproven.delete(client);
      this.metrics.count(Counter.AddressProven);
    }
    return true;
  }

  instanceAliases(client: RelayClient): InstanceAliases | undefined {
    if (client.aliases !== undefined) return client.aliases;
    // Only an unproven client (a datagram source) proves its address with them.
    if (client.addressProven) return undefined;
    const listed: number[] = [];
    for (const inst of this.instances.values())
      if ((inst.flags & InstanceFlags.IsPublic) !== 0) listed.push(inst.id);
    // Beyond a few instances a blind guess hits some alias too often to count as proof.
    if (listed.length === 0 || listed.length > this.options.aliasMaxInstances) return undefined;
    client.aliases = new InstanceAliases(listed, this.realIds);
    return client.aliases;
  }

  judgeAlias(client: RelayClient, correct: boolean): void {
    if (client.addressProven) return;
    const now = performance.now();
    if (!this.aliasGuesses.open(client.addressKey, now)) {
      // This address has spent its guesses: neither right nor wrong ids are checked now.
      this.metrics.drop(DropReason.AliasUnchecked);
      return;
    }
    if (!correct) {
      this.aliasGuesses.spend(client.addressKey, now);
      this.metrics.drop(DropReason.AliasWrong);
      return;
    }
    if (client.halfOpen && !this.promote(client)) return;
    client.addressProven = true;
    this.unproven.delete(client);
    this.metrics.count(Counter.AddressProven);
    this.metrics.count(Counter.AddressProvenByAlias);
  }

  /** Addresses remembered for their wrong alias guesses (bounded). */
  get aliasGuessEntries(): number {
    return this.aliasGuesses.size;
  }

  // ---- clients and capacity -----------------------------------------------------------------

  /**
   * The next free client id (u16 on the wire), counting on from the last one given: O(1) however
   * many clients a flood of sessions brings (the lowest free id meant a scan from 0 per session).
   */
  private freeClientId(): number {
    let id = this.nextClientId;
    while (this.clients.has(id)) id = (id + 1) & 0xffff;
    this.nextClientId = (id + 1) & 0xffff;
    return id;
  }

  /** Clients that count against maxClients: every one but the half-open UDP sessions. */
  get establishedClients(): number {
    return this.clients.size - this.admission.size;
  }

  /** Half-open UDP sessions, server-wide. */
  get halfOpenClients(): number {
    return this.admission.size;
  }

  /** Bytes currently held for segment reassembly, all clients together. */
  get reassemblyBytesHeld(): number {
    return this.reassembly.bytesHeld;
  }

  /** `gamewire_open`: TCP connections plus UDP sessions, recomputed (never drifts, never negative). */
  private updateOpen(): void {
    this.metrics.open = this.tcpClients.size + (this.udpSessions?.size ?? 0);
  }

  /** Counts a close and, at debug level, logs it with the client it concerns. */
  private noteClose(reason: CloseReason, client?: RelayClient, ip?: string): void {
    this.metrics.close(reason);
    if (client !== undefined) client.closeReason ??= reason;
    if (this.log.isLevelEnabled('debug')) {
      this.log.debug(
        {
          client: client?.id,
          transport: client?.transport,
          ip: client?.ip ?? ip,
          port: client?.port,
          reason,
        },
        'client closed',
      );
    }
  }

  /**
   * A refusal because a cap is reached. Full is worth an operator's attention (the caps may be
   * too low for the load), so it is logged at info, at most once per `FULL_LOG_INTERVAL_MS`.
   */
  private noteFull(cap: 'maxClients' | 'maxUdpPerIp' | 'maxTcpPerIp', ip: string): void {
    const now = performance.now();
    if (now - this.lastFullLog < FULL_LOG_INTERVAL_MS) return;
    this.lastFullLog = now;
    this.log.info(
      {
        cap,
        limit: this.options[cap],
        ip,
        flag: `--nox-${cap.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)}`,
      },
      'nox-relay is refusing new clients: a cap is reached (raise it if this is normal load)',
    );
  }

  private register(client: RelayClient): void {
    this.clients.set(client.id, client);
    client.closer = (reason) => {
      this.metrics.close(reason);
      this.disconnect(client, 'Disconnected by the server.', QuitType.UnknownError);
    };
    client.wireTap = this.wireTap;
    let shared = this.addressBuckets.get(client.addressKey);
    if (shared === undefined) {
      const rate = this.options.maxRequestsPerSecondPerIp;
      shared = { bucket: new TokenBucket(rate, rate * 2, performance.now()), clients: 0 };
      this.addressBuckets.set(client.addressKey, shared);
    }
    shared.clients++;
    client.addressRequests = shared.bucket;
    // Counted under its endpoint's per-address cap (and, for a datagram session, on the seam).
    client.link.attach(client);
    this.updateOpen();
    if (this.log.isLevelEnabled('debug')) {
      this.log.debug(
        {
          client: client.id,
          transport: client.transport,
          ip: client.ip,
          port: client.port,
          halfOpen: client.halfOpen,
        },
        'client connected',
      );
    }
  }

  // ---- TCP ----------------------------------------------------------------------------------

  private onTcpConnection(c: FramedConnection): FrameSink {
    const ip = c.remoteAddress || '0.0.0.0';
    // The shared listener set the gauge to its own count; ours includes UDP.
    const refused: FrameSink = { onFrame: () => false, onClose: () => this.updateOpen() };
    // A stream's newcomer is proven (its connection handshake showed it receives there).
    if (this.closing !== undefined || !this.roomFor(true)) {
      this.noteClose(CloseReason.OverCapacity, undefined, ip);
      if (this.closing === undefined) this.noteFull('maxClients', ip);
      c.close(CloseReason.OverCapacity, { abort: true, counted: true });
      return refused;
    }
    if (this.tcpClients.countFor(addressKey(ip)) >= this.options.maxTcpPerIp) {
      this.noteClose(CloseReason.OverCapacityIp, undefined, ip);
      this.noteFull('maxTcpPerIp', ip);
      c.close(CloseReason.OverCapacityIp, { abort: true, counted: true });
      return refused;
    }
    const link = new TcpPlayerLink(tcpPeer(c), this.tcpClients, this.limits, this.metrics);
    const client = new RelayClient(this.freeClientId(), link, this.limits, this.metrics);
    this.register(client);
    this.beforeHandshake.add(client);
    return {
      onFrame: (buf, start, end) => {
        this.onPacket(client, buf, start, end, 0);
        return undefined;
      },
      onClose: (reason) => {
        // Closes the transport decided (a bad length prefix: the stream cannot be resynchronised,
        // an overdue frame, the input budget) cost only this connection; counted by the transport.
        if (!client.closed && this.log.isLevelEnabled('debug'))
          this.log.debug({ client: client.id, ip: client.ip, port: client.port, reason }, 'client closed');
        this.dropClient(client, QuitType.UnknownError, null);
        this.updateOpen();
      },
    };
  }

  // ---- UDP ----------------------------------------------------------------------------------

  private onDatagram(msg: Buffer, rinfo: dgram.RemoteInfo): void {
    this.udpQueue.bytes = this.udp!.getSendQueueSize();
    const client = this.udpSessions!.get(rinfo.address, rinfo.port);
    if (client === undefined) {
      this.onFirstDatagram(msg, rinfo);
      return;
    }
    // Every datagram counts towards an unproven source's budget, whatever it holds.
    if (!client.addressProven) client.udpBytesIn += msg.length;
    let ranges: number[];
    try {
      ranges = splitPackets(msg, 0, msg.length, this.measure, this.ranges);
    } catch {
      // A padded Handshake (packet + zero bytes) is the one datagram that is not all packets.
      const end = handshakeEnd(msg, this.options.maxPacketBytes);
      if (end < 0) {
        this.metrics.drop(DropReason.Malformed);
        return;
      }
      ranges = this.ranges;
      ranges.length = 0;
      ranges.push(0, end);
    }
    if (ranges.length === 0) {
      this.metrics.drop(DropReason.Malformed);
      return;
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

  /**
   * A datagram from an unknown source. State is created only by a decoded protocol-1 Handshake
   * whose reply fits the anti-amplification budget, never by arbitrary (spoofable) traffic. With
   * a valid address cookie the session starts proven; otherwise it is half-open, and a new
   * half-open session evicts the oldest one of its address (or of all) rather than being refused.
   */
  private onFirstDatagram(msg: Buffer, rinfo: dgram.RemoteInfo): void {
    const o = this.options;
    const end = handshakeEnd(msg, o.maxPacketBytes);
    if (end < 0) {
      this.metrics.drop(DropReason.UnknownSource);
      return;
    }
    let uid: number;
    let hs: ClientMessage;
    try {
      const p = readClientPacket(this.reader.reset(msg, 0, end));
      uid = p.uid;
      hs = p.message;
    } catch {
      this.metrics.drop(DropReason.UnknownSource);
      return;
    }
    if (hs.type !== 'Handshake') {
      this.metrics.drop(DropReason.UnknownSource);
      return;
    }
    const budget = msg.length * o.udpReplyFactor;
    if (hs.protocol !== PROTOCOL_VERSION) {
      // No session. The reason goes back only within the budget.
      this.metrics.close(CloseReason.BadProtocol);
      const bytes = this.encode(uid, {
        type: 'Disconnect',
        reason: `Incompatible protocol version (${hs.protocol} != ${PROTOCOL_VERSION}).`,
      });
      if (bytes.length <= budget) this.udp!.send(bytes, rinfo.port, rinfo.address);
      else this.metrics.drop(DropReason.UdpAmplification);
      return;
    }
    const ip = rinfo.address;
    // A bad cookie is counted when the Handshake is handled; here it only means "not proven".
    const proven =
      hs.addressCookie !== null &&
      o.addressCookies &&
      this.admission.verify(ip, rinfo.port, hs.addressCookie);
    // A half-open newcomer does not count against maxClients; a proven one may evict an unproven client.
    if (this.closing !== undefined || (proven && !this.roomFor(true))) {
      this.metrics.drop(DropReason.OverCapacity);
      if (this.closing === undefined) this.noteFull('maxClients', rinfo.address);
      return;
    }
    // The bare reply (no cookie) is the least an unproven source can be sent.
    if (!proven && this.encode(uid, handshakeReply(this, { id: 0, ip, port: rinfo.port })).length > budget) {
      this.metrics.drop(DropReason.UdpAmplification);
      return;
    }
    // Room for one more session from this address: its own oldest half-open session goes first.
    if (!this.makeRoom(addressKey(ip), proven)) {
      this.metrics.drop(DropReason.OverCapacity);
      this.noteFull('maxUdpPerIp', ip);
      return;
    }
    const link = new UdpPlayerLink(ip, rinfo.port, this.udpSessions!, this.limits, this.metrics);
    const client = new RelayClient(this.freeClientId(), link, this.limits, this.metrics);
    if (proven) {
      client.addressProven = true;
      this.metrics.count(Counter.AddressProven);
    } else {
      client.udpBytesIn = msg.length;
      this.admission.add(client);
    }
    // On the seam from its first datagram (register); announced once it is more than half-open.
    this.register(client);
    if (!client.halfOpen) link.announce(client);
    this.metrics.received++;
    this.metrics.bytesReceived += msg.length;
    client.messagesIn++;
    client.bytesIn += msg.length;
    if (this.wireTap?.armed) this.wireTap.record('client', client.id, 'udp', msg);
    client.allowRequest(client.createdAt);
    try {
      dispatch(this, client, uid, hs, 0);
    } catch (err) {
      this.metrics.count(Counter.HandlerError);
      this.log.error({ err, client: client.id, type: hs.type }, 'handler failed');
    }
    // A Handshake that could not be answered leaves nothing behind.
    if (!client.handshaked) this.dropClient(client, QuitType.UnknownError, null);
  }

  /**
   * Makes room for a new UDP session from address `key`: evicts half-open sessions (its oldest
   * first, then the oldest of all) until the per-address and server-wide caps allow it. False
   * when the address is full of established sessions.
   */
  private makeRoom(key: string, proven: boolean): boolean {
    const o = this.options;
    const evict = (c: RelayClient | undefined): boolean => {
      if (c === undefined) return false;
      this.noteClose(CloseReason.HalfOpenEvicted, c);
      this.dropClient(c, QuitType.Timeout, null);
      return true;
    };
    while (this.udpSessions!.countFor(key) >= o.maxUdpPerIp)
      if (!evict(this.admission.oldest(key))) return false;
    if (proven) return true;
    while (this.admission.countFor(key) >= o.maxHalfOpenUdpPerIp)
      if (!evict(this.admission.oldest(key))) return false;
    while (this.admission.size >= o.maxHalfOpenUdp) if (!evict(this.admission.oldest())) return false;
    return true;
  }

  /** A half-open UDP session sent a second valid packet (or its cookie): it becomes a client. */
  private promote(client: RelayClient): boolean {
    if (!this.roomFor(client.addressProven)) {
      this.metrics.drop(DropReason.OverCapacity);
      this.noteFull('maxClients', client.ip);
      this.dropClient(client, QuitType.UnknownError, null);
      return false;
    }
    this.admission.remove(client);
    if (!client.addressProven) this.unproven.add(client);
    client.link.announce(client);
    return true;
  }

  /**
   * Room for one more established client. At `maxClients`, global limits protect proven
   * sessions first: a newcomer evicts the oldest established session that never proved its
   * address, else (a proven newcomer: every stream, or a datagram source with its cookie) the
   * oldest connection that never sent its Handshake. A proven session is never evicted. False
   * when nothing may go.
   */
  private roomFor(newcomerProven: boolean): boolean {
    if (this.establishedClients < this.options.maxClients) return true;
    let victim: RelayClient | undefined;
    for (const c of this.unproven) {
      victim = c;
      break;
    }
    if (victim === undefined && newcomerProven) {
      for (const c of this.beforeHandshake) {
        victim = c;
        break;
      }
    }
    if (victim === undefined) return false;
    this.noteClose(CloseReason.Evicted, victim);
    if (victim.handshaked) {
      // Told why, then gone.
      this.disconnect(victim, 'Server is full.', QuitType.UnknownError);
    } else {
      // Never handshaked: nothing to tell it, nothing of it worth flushing.
      victim.link.abort();
      this.dropClient(victim, QuitType.UnknownError, null);
    }
    return this.establishedClients < this.options.maxClients;
  }

  // ---- dispatch -----------------------------------------------------------------------------

  /** One packet `buf[start, end)` from `client`; `depth` > 0 inside Reliable/Segmentation. */
  onPacket(client: RelayClient, buf: Buffer, start: number, end: number, depth: number): void {
    if (client.closed) return;
    this.metrics.received++;
    client.messagesIn++;
    // Bytes once, as they arrived: inner packets (Reliable, reassembled segments) are already in.
    if (depth === 0) {
      this.metrics.bytesReceived += end - start;
      client.bytesIn += end - start;
    }
    if (this.wireTap?.armed) this.wireTap.record('client', client.id, client.transport, buf, start, end);
    const now = performance.now();
    if (!client.allowRequest(now)) {
      this.metrics.drop(DropReason.RateLimited);
      return;
    }
    let uid: number;
    let message: ClientMessage;
    try {
      const p = readClientPacket(this.reader.reset(buf, start, end));
      uid = p.uid;
      message = p.message;
    } catch (err) {
      this.metrics.drop(DropReason.Malformed);
      this.log.debug({ err: (err as Error).message, client: client.id }, 'undecodable packet dropped');
      return;
    }
    // Only a valid packet resets the connection timeout (docs/nox-relay.md).
    client.lastSeen = now;
    if (client.halfOpen && message.type !== 'Handshake' && !this.promote(client)) return;
    try {
      dispatch(this, client, uid, message, depth);
    } catch (err) {
      this.metrics.count(Counter.HandlerError);
      this.log.error({ err, client: client.id, type: message.type }, 'handler failed');
    }
    if (message.type === 'Handshake' && client.handshaked) this.beforeHandshake.delete(client);
  }

  // ---- liveness -----------------------------------------------------------------------------

  /** Liveness (Disconnect "Connection timed out."), stalled consumers, expired segments. */
  private sweep(): void {
    const now = performance.now();
    const o = this.options;
    for (const c of [...this.clients.values()]) {
      if (c.halfOpen && now - c.createdAt >= o.halfOpenTimeoutMs) {
        // Never sent a second packet: forgotten silently.
        this.noteClose(CloseReason.HalfOpenTimeout, c);
        this.dropClient(c, QuitType.Timeout, null);
        continue;
      }
      if (now - c.lastSeen >= o.connectionTimeoutMs) {
        this.noteClose(CloseReason.Timeout, c);
        this.disconnect(c, 'Connection timed out.', QuitType.Timeout);
        continue;
      }
      c.link.watch(now);
      this.reassembly.expire(c, now);
    }
  }
}

/** The seam's close reason of a client dropped without a reason noted, from its quit type. */
function quitReason(quitType: number): string {
  switch (quitType) {
    case QuitType.Normal:
      return CloseReason.Disconnect;
    case QuitType.Timeout:
      return CloseReason.Timeout;
    case QuitType.ConfigurationError:
      return CloseReason.BadProtocol;
    default:
      return SeamCloseReason.PeerClosed;
  }
}

/** The send path's view of a framed TCP connection: packets are batched into one write per turn. */
function tcpPeer(c: FramedConnection): TcpPeer {
  return {
    remoteAddress: c.remoteAddress,
    remotePort: c.remotePort,
    get writableLength() {
      return c.queuedBytes;
    },
    get destroyed() {
      return c.closing;
    },
    write(bytes: Buffer) {
      c.writer.bytes(bytes);
      c.commit();
    },
    // The server counted why (noteClose, handlers): only the reason is recorded here.
    end: () => c.close(undefined, { counted: true }),
    destroy: (reason?: string) => c.close(reason, { abort: true, counted: true }),
  };
}
