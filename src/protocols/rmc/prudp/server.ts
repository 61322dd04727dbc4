/**
 * The PRUDP server transport: one UDP socket, the connection table, the handshake of the
 * official server (SYN-ACK 0x48, CONNECT-ACK 0x49, acks with HAS_SIZE and size 0, DATA 0x72
 * with its own sequence from 1), and an RmcSink per connection so the RMC dispatcher runs
 * unchanged on top.
 *
 * Limits (each an option): connections in all and per IP, half-open connections (a SYN without
 * a CONNECT yet) in all and per IP and how long they live, reassembly bytes, idle timeout, and no
 * reply to a source without a connection larger than `maxUnprovenReplyFactor` times its datagram.
 * Every dropped datagram is counted in ProtocolMetrics (`dropped`), by reason.
 *
 * Proven connections (CONNECT completed, so the source received our SYN-ACK) come first: a SYN
 * that finds the half-open table (or the whole table) full evicts the oldest half-open connection
 * rather than being refused, so spoofed SYNs from many addresses cannot lock players out, and
 * never touch an open connection.
 */
import { createHmac, randomBytes } from 'node:crypto';
import type dgram from 'node:dgram';
import { crc32 } from 'node:zlib';
import { addressKey, CloseReason, type Connection, ConnectionTable } from '../../../core/connection.js';
import type { Logger } from '../../../core/logger.js';
import type { ProtocolMetrics } from '../../../core/metrics.js';
import type { Endpoint } from '../../../core/server.js';
import { bindUdp, closeUdp } from '../../../core/udp.js';
import { DecodeError, WireWriter } from '../../../wire/index.js';
import type { RmcConnection, RmcDispatcher, RmcSink } from '../dispatcher.js';
import { accessKeyByte, type ChecksumWidth, checksum8, checksum32, learnFromSyn } from './checksum.js';
import {
  defaultMaxConnectionsPerIp,
  Flag,
  PacketType,
  PRUDP_DEFAULTS,
  PRUDP_TRANSPORT,
  type PrudpProfile,
} from './constants.js';
import { type LinkOptions, PrudpLink } from './link.js';
import {
  type ChecksumConfig,
  newPacket,
  PrudpError,
  PrudpErrorCode,
  type PrudpPacket,
  readPacket,
  writePacket,
} from './packet.js';
import { ClassicPayloadCodec, classicRc4, type PayloadCodec } from './payload.js';

/** What a CONNECT's payload establishes. */
export interface ConnectOutcome {
  /** How this connection's DATA payloads are encoded. */
  payload: PayloadCodec;
  /** The CONNECT-ACK payload as it goes on the wire (undefined: none). */
  ackPayload: Buffer | undefined;
  /** Authenticated user, when the CONNECT carried credentials (a Kerberos ticket). */
  user?: { pid: number; name: string };
}

export interface ConnectInfo {
  remoteAddress: string;
  remotePort: number;
  checksum: ChecksumConfig;
}

/**
 * Decides what a CONNECT's payload means (empty: an unauthenticated "auth server" connection;
 * a Kerberos ticket or an ECDH key: a secure one). Throw to refuse the CONNECT (dropped, counted).
 */
export type ConnectHandler = (payload: Buffer, info: ConnectInfo) => ConnectOutcome;

export interface PrudpServerOptions extends LinkOptions {
  dispatcher: RmcDispatcher;
  log: Logger;
  metrics: ProtocolMetrics;
  profile?: PrudpProfile;
  /** Sandbox access key, or `auto` to learn each connection's key byte from its SYN. */
  accessKey?: string;
  /** Checksum width, or `auto` (learned from the SYN's length; default). */
  checksumWidth?: ChecksumWidth | 'auto';
  /** CONNECT payload handler (default: only empty CONNECTs, classic payloads). */
  onConnect?: ConnectHandler;
  idleTimeoutMs?: number;
  halfOpenTimeoutMs?: number;
  maxConnections?: number;
  /** Default max(64, maxConnections / 4). */
  maxConnectionsPerIp?: number;
  maxHalfOpen?: number;
  maxHalfOpenPerIp?: number;
  maxUnprovenReplyFactor?: number;
  /** Timer resolution for retransmissions (ms, default 50). */
  tickMs?: number;
}

export interface PrudpListenOptions {
  host?: string;
  port?: number;
}

const State = { HalfOpen: 0, Open: 1 } as const;
type State = (typeof State)[keyof typeof State];

/** Least time between two answers to SYNs from the source of an open connection (ms). */
const RESTART_SYN_INTERVAL_MS = 500;

/**
 * One PRUDP peer (a source address, port and virtual port): admitted at its SYN, a `Connection`
 * of the seam once its CONNECT is accepted. Its messages are PRUDP packets; `send` takes one
 * whole RMC frame (fragmented and sent reliably).
 */
class PrudpPeer implements Connection {
  readonly transport = PRUDP_TRANSPORT;
  readonly key: string;
  readonly remoteAddress: string;
  readonly remotePort: number;
  readonly addressKey: string;
  readonly vport: number;
  state: State = State.HalfOpen;
  readonly checksum: ChecksumConfig;
  readonly serverSignature: number;
  readonly synAck: Buffer;
  readonly createdAt = Date.now();
  /** Set once open. */
  link: PrudpLink | undefined = undefined;
  connectAck: Buffer | undefined = undefined;
  connectSeq = 0;
  /** CRC-32 of the CONNECT's payload (a resend carries the same; a new client's key or ticket does not). */
  connectCrc = 0;
  /** When a SYN from this source was last answered after the connection opened (0: never; see onRestartSyn). */
  restartSynAt = 0;
  rmc: RmcConnection | undefined = undefined;
  writer: WireWriter | undefined = undefined;
  removed = false;
  bytesIn = 0;
  bytesOut = 0;
  messagesIn = 0;
  messagesOut = 0;
  private readonly server: PrudpServer;

  constructor(
    server: PrudpServer,
    key: string,
    address: string,
    port: number,
    vport: number,
    checksum: ChecksumConfig,
    serverSignature: number,
    synAck: Buffer,
  ) {
    this.server = server;
    this.key = key;
    this.remoteAddress = address;
    this.remotePort = port;
    this.addressKey = addressKey(address);
    this.vport = vport;
    this.checksum = checksum;
    this.serverSignature = serverSignature;
    this.synAck = synAck;
  }

  get open(): boolean {
    return this.state === State.Open && !this.removed;
  }

  send(bytes: Buffer): void {
    if (this.open) this.link!.sendMessage(bytes);
  }

  close(reason: string = CloseReason.ClosedByServer): void {
    this.server.closePeer(this, reason);
  }
}

/** The key byte under which `datagram`'s last `width` bytes are its checksum (undefined: none). */
function keyByteOf(datagram: Buffer, width: 1 | 4): number | undefined {
  const end = datagram.length - width;
  if (end < 11) return undefined;
  if (width === 1) return (datagram[end]! - checksum8(datagram, 0, end, 0)) & 0xff;
  const k = (datagram.readUInt32LE(end) - checksum32(datagram, 0, end, 0)) >>> 0;
  return k <= 0xff ? k : undefined;
}

/** The default CONNECT handler: empty payloads only (an auth-server style connection). */
export const plainConnect: ConnectHandler = (payload) => {
  if (payload.length !== 0)
    throw new PrudpError(PrudpErrorCode.BAD_PAYLOAD, 'this endpoint takes no CONNECT credentials');
  // The official server acks with one payload byte: RC4 of a stored, empty body.
  return { payload: new ClassicPayloadCodec(), ackPayload: classicRc4(Buffer.from([0])) };
};

export class PrudpServer {
  private readonly o: PrudpServerOptions;
  private readonly peers = new Map<string, PrudpPeer>();
  /** Caps (connections in all and per address key, half-open ones included) and diagnostics. */
  readonly table: ConnectionTable<PrudpPeer>;
  /** Half-open peers, oldest first (the first to be evicted), and their count per address key. */
  private readonly halfOpenPeers = new Map<string, PrudpPeer>();
  private readonly halfOpenPerIp = new Map<string, number>();
  private halfOpen = 0;
  /** Keys the SYN-ACK signatures (SYN cookies); new for every server. */
  private readonly cookieKey = randomBytes(32);
  private openCount = 0;
  private socket: dgram.Socket | undefined;
  private tickTimer: NodeJS.Timeout | undefined;
  private sweepTimer: NodeJS.Timeout | undefined;
  private readonly packet: PrudpPacket = newPacket();
  private readonly scratch = new WireWriter({ initialCapacity: 256 });
  private readonly fixedKeyByte: number | undefined;
  private readonly dispatcher: RmcDispatcher;
  readonly metrics: ProtocolMetrics;
  readonly log: Logger;
  port = 0;

  constructor(options: PrudpServerOptions) {
    this.o = options;
    this.dispatcher = options.dispatcher;
    this.metrics = options.metrics;
    this.log = options.log;
    this.table = new ConnectionTable({
      protocol: options.metrics.protocol,
      transport: PRUDP_TRANSPORT,
      maxConnections: options.maxConnections ?? PRUDP_DEFAULTS.maxConnections,
      maxConnectionsPerIp:
        options.maxConnectionsPerIp ??
        defaultMaxConnectionsPerIp(options.maxConnections ?? PRUDP_DEFAULTS.maxConnections),
    });
    const key = options.accessKey ?? 'auto';
    this.fixedKeyByte = key === 'auto' ? undefined : accessKeyByte(key);
  }

  /** Connections fully open. */
  get connections(): number {
    return this.openCount;
  }

  get halfOpenConnections(): number {
    return this.halfOpen;
  }

  async listen(options: PrudpListenOptions = {}): Promise<{ port: number; endpoints: Endpoint[] }> {
    const host = options.host ?? '0.0.0.0';
    const socket = await bindUdp({ host, port: options.port ?? 9103, recvBufferSize: 4 * 1024 * 1024 });
    this.socket = socket;
    this.port = socket.address().port;
    socket.on('message', (msg, rinfo) => this.onDatagram(msg, rinfo.address, rinfo.port));
    socket.on('error', (err) => this.log.warn({ err }, 'PRUDP socket error'));
    const tickMs = this.o.tickMs ?? 50;
    this.tickTimer = setInterval(() => this.tick(), tickMs);
    this.tickTimer.unref();
    this.sweepTimer = setInterval(() => this.sweep(), 1000);
    this.sweepTimer.unref();
    return {
      port: this.port,
      endpoints: [
        {
          transport: 'udp',
          host,
          port: this.port,
          description: `Rendez-Vous RMC over PRUDP (${this.o.profile ?? 'hyperscape'} profile)`,
        },
      ],
    };
  }

  async close(): Promise<void> {
    this.table.closing();
    if (this.tickTimer !== undefined) clearInterval(this.tickTimer);
    if (this.sweepTimer !== undefined) clearInterval(this.sweepTimer);
    for (const peer of [...this.peers.values()]) {
      if (peer.link !== undefined && !peer.link.closed) {
        // Tell the client (best effort, not retransmitted) so it does not wait for a timeout.
        peer.link.sendDisconnect();
        peer.link.stop();
      }
      this.remove(peer, 'server_close');
    }
    const socket = this.socket;
    // Late answers (async handlers) must find no socket rather than a closed one.
    this.socket = undefined;
    if (socket !== undefined) await closeUdp(socket);
  }

  private send(peer: PrudpPeer, datagram: Buffer): void {
    if (this.socket === undefined) return;
    peer.messagesOut++;
    peer.bytesOut += datagram.length;
    this.sendTo(peer.remoteAddress, peer.remotePort, datagram);
  }

  /** Sends and counts for the server (a peer's own counters are `send`'s). */
  private sendTo(address: string, port: number, datagram: Buffer): void {
    const s = this.socket;
    if (s === undefined) return;
    this.metrics.sent++;
    this.metrics.bytesSent += datagram.length;
    try {
      s.send(datagram, port, address);
    } catch (err) {
      this.log.debug({ err }, 'PRUDP send failed');
    }
  }

  private onDatagram(msg: Buffer, address: string, port: number): void {
    if (msg.length < 11) {
      this.metrics.drop('prudp_short');
      return;
    }
    const key = `${address}:${port}:${msg[0]}`;
    const peer = this.peers.get(key);
    if (peer === undefined) {
      this.onUnknown(msg, key, address, port);
      return;
    }
    if (peer.state !== State.HalfOpen && (msg[2]! & Flag.ACK) === 0) {
      const type = msg[2]! & 0x07;
      if (type === PacketType.SYN) {
        this.onRestartSyn(peer, msg);
        return;
      }
      // After such a SYN, a CONNECT with its cookie is the new client's (else the old one's).
      if (
        type === PacketType.CONNECT &&
        peer.restartSynAt !== 0 &&
        this.onCookieConnect(msg, key, address, port, peer)
      )
        return;
    }
    const p = this.packet;
    let off = 0;
    try {
      while (off < msg.length) {
        const from = off;
        off = readPacket(msg, off, peer.checksum, p);
        this.metrics.received++;
        this.metrics.bytesReceived += off - from;
        peer.messagesIn++;
        peer.bytesIn += off - from;
        this.onPacket(peer, p);
        if (this.peers.get(key) !== peer) return;
        // Only a packet that states its size can be followed by another.
        if ((p.flags & Flag.HAS_SIZE) === 0 && off < msg.length) {
          this.metrics.drop('prudp_trailing');
          return;
        }
      }
    } catch (e) {
      if (!(e instanceof DecodeError)) throw e;
      this.metrics.drop(e.code === 'ERR_BAD_CHECKSUM' ? 'prudp_bad_checksum' : 'prudp_malformed');
    }
  }

  /** A datagram from a source without a connection: only a SYN can start one. */
  private onUnknown(msg: Buffer, key: string, address: string, port: number): void {
    const type = msg[2]! & 0x07;
    if ((msg[2]! & Flag.ACK) === 0 && type === PacketType.CONNECT) {
      if (!this.onCookieConnect(msg, key, address, port)) this.metrics.drop('prudp_unknown_connection');
      return;
    }
    if (type !== PacketType.SYN || (msg[2]! & Flag.ACK) !== 0) {
      this.metrics.drop('prudp_unknown_connection');
      return;
    }
    const answer = this.synAckFor(msg, address, port);
    if (answer === undefined) return;
    const ipKey = addressKey(address);
    if (!this.makeRoom(address, port, ipKey)) return;
    const { checksum, vport, signature, synAck } = answer;
    const peer = this.addHalfOpen(key, address, port, ipKey, vport, checksum, signature, synAck);
    peer.messagesIn++;
    peer.bytesIn += msg.length;
    this.metrics.count('prudp_syn');
    this.send(peer, synAck);
  }

  /**
   * A SYN from the source of an open connection: the client restarted behind the same address
   * and port (a NAT keeps its mapping; an OS can hand out the same ephemeral port again). The old
   * connection stays until a CONNECT proves, with the cookie this SYN-ACK carries, that the new
   * client got it: a spoofed SYN alone never closes anyone.
   */
  private onRestartSyn(peer: PrudpPeer, msg: Buffer): void {
    // At most one answer per RESTART_SYN_INTERVAL_MS (a client resends its SYN every second):
    // spoofed SYNs cannot turn a player's game port into a reflector.
    const now = Date.now();
    if (now - peer.restartSynAt < RESTART_SYN_INTERVAL_MS) {
      this.metrics.drop('prudp_restart_syn_rate');
      return;
    }
    const answer = this.synAckFor(msg, peer.remoteAddress, peer.remotePort);
    if (answer === undefined) return;
    peer.restartSynAt = now;
    this.metrics.count('prudp_restart_syn');
    // Not the old connection's traffic: counted for the server only.
    this.sendTo(peer.remoteAddress, peer.remotePort, answer.synAck);
  }

  /**
   * The SYN-ACK for a SYN (its checksum settings learned or fixed, its signature the cookie for
   * that source), or undefined when the SYN is malformed or the answer would amplify (counted).
   */
  private synAckFor(
    msg: Buffer,
    address: string,
    port: number,
  ): { checksum: ChecksumConfig; vport: number; signature: number; synAck: Buffer } | undefined {
    let checksum: ChecksumConfig;
    const width = this.o.checksumWidth ?? 'auto';
    if (this.fixedKeyByte !== undefined && width !== 'auto') {
      checksum = { width, keyByte: this.fixedKeyByte };
    } else {
      const learned = learnFromSyn(msg);
      if (learned === undefined || (width !== 'auto' && learned.width !== width)) {
        this.metrics.drop('prudp_malformed');
        return undefined;
      }
      if (this.fixedKeyByte !== undefined && learned.keyByte !== this.fixedKeyByte) {
        this.metrics.drop('prudp_bad_checksum');
        return undefined;
      }
      checksum = learned;
    }
    const p = this.packet;
    try {
      const end = readPacket(msg, 0, checksum, p);
      if (end !== msg.length) {
        this.metrics.drop('prudp_trailing');
        return undefined;
      }
    } catch (e) {
      if (!(e instanceof DecodeError)) throw e;
      this.metrics.drop(e.code === 'ERR_BAD_CHECKSUM' ? 'prudp_bad_checksum' : 'prudp_malformed');
      return undefined;
    }
    this.metrics.received++;
    this.metrics.bytesReceived += msg.length;
    const signature = this.cookie(address, port, p.source, checksum, this.epoch());
    const w = this.scratch;
    w.reset();
    writePacket(
      w,
      {
        source: p.destination,
        destination: p.source,
        type: PacketType.SYN,
        flags: Flag.ACK | Flag.HAS_SIZE,
        sessionId: 0,
        packetSignature: 0,
        sequenceId: p.sequenceId,
        connectionSignature: signature,
      },
      undefined,
      checksum,
    );
    const synAck = Buffer.from(w.view());
    if (
      synAck.length >
      msg.length * (this.o.maxUnprovenReplyFactor ?? PRUDP_DEFAULTS.maxUnprovenReplyFactor)
    ) {
      this.metrics.drop('prudp_amplification');
      return undefined;
    }
    return { checksum, vport: p.source, signature, synAck };
  }

  /**
   * Room for one more half-open connection from `address`: false (dropped, counted) when its
   * address is at a cap or the table is full of open connections; evicts the oldest half-open
   * entry when the half-open table (or the whole table) is full.
   */
  private makeRoom(address: string, port: number, ipKey: string): boolean {
    const o = this.o;
    // Per address key: IPv4, or the IPv6 /64 (one host usually holds a whole /64).
    let refused = this.table.refusalFor(ipKey);
    if (refused === CloseReason.PerIpLimit || refused === CloseReason.ServerClosing) {
      this.metrics.drop(refused === CloseReason.PerIpLimit ? 'prudp_per_ip_limit' : 'prudp_connection_limit');
      this.table.refuse(address, port, refused);
      return false;
    }
    if ((this.halfOpenPerIp.get(ipKey) ?? 0) >= (o.maxHalfOpenPerIp ?? PRUDP_DEFAULTS.maxHalfOpenPerIp)) {
      this.metrics.drop('prudp_half_open_per_ip_limit');
      this.table.refuse(address, port, 'half_open_per_ip_limit');
      return false;
    }
    // Full: the oldest half-open connection makes room; open ones are never evicted for a SYN.
    if (this.halfOpen >= (o.maxHalfOpen ?? PRUDP_DEFAULTS.maxHalfOpen) || refused !== undefined) {
      const oldest = this.halfOpenPeers.values().next().value;
      if (oldest !== undefined) this.remove(oldest, 'half_open_evicted');
      refused = this.table.refusalFor(ipKey);
    }
    if (refused !== undefined) {
      this.metrics.drop(refused === CloseReason.PerIpLimit ? 'prudp_per_ip_limit' : 'prudp_connection_limit');
      this.table.refuse(address, port, refused);
      return false;
    }
    return true;
  }

  private addHalfOpen(
    key: string,
    address: string,
    port: number,
    ipKey: string,
    vport: number,
    checksum: ChecksumConfig,
    serverSignature: number,
    synAck: Buffer,
  ): PrudpPeer {
    const peer = new PrudpPeer(this, key, address, port, vport, checksum, serverSignature, synAck);
    this.table.admit(peer);
    this.peers.set(key, peer);
    this.halfOpenPeers.set(key, peer);
    this.halfOpenPerIp.set(ipKey, (this.halfOpenPerIp.get(ipKey) ?? 0) + 1);
    this.halfOpen++;
    return peer;
  }

  /** The current cookie epoch: signatures stay valid for this epoch and the next. */
  private epoch(): number {
    return Math.floor(Date.now() / (this.o.halfOpenTimeoutMs ?? PRUDP_DEFAULTS.halfOpenTimeoutMs));
  }

  /**
   * The server signature a SYN-ACK announces: a keyed hash of the source, its vport, its
   * checksum settings and the epoch (never 0). A CONNECT that carries it proves its source got
   * our SYN-ACK, even when its half-open entry was evicted meanwhile.
   */
  private cookie(address: string, port: number, vport: number, c: ChecksumConfig, epoch: number): number {
    const h = createHmac('sha256', this.cookieKey)
      .update(`${epoch}|${address}|${port}|${vport}|${c.width}|${c.keyByte}`)
      .digest();
    return h.readUInt32LE(0) || 1;
  }

  /**
   * A CONNECT from a source without an entry (its half-open entry was evicted by a flood, or
   * expired), or from a restarted client (`replacing` is the connection it leaves behind):
   * accepted when its signature is the cookie our SYN-ACK gave that source. False when it is not.
   */
  private onCookieConnect(
    msg: Buffer,
    key: string,
    address: string,
    port: number,
    replacing?: PrudpPeer,
  ): boolean {
    const width = this.o.checksumWidth ?? 'auto';
    const p = this.packet;
    for (const w of width === 'auto' ? ([1, 4] as const) : [width]) {
      const keyByte = this.fixedKeyByte ?? keyByteOf(msg, w);
      if (keyByte === undefined) continue;
      const checksum: ChecksumConfig = { width: w, keyByte };
      try {
        if (readPacket(msg, 0, checksum, p) !== msg.length) continue;
      } catch (e) {
        if (!(e instanceof DecodeError)) throw e;
        continue;
      }
      // The old client's own CONNECT again (its CONNECT-ACK was lost, and a late copy of its SYN
      // came first): not a new client, so the open connection answers it as before.
      const link = replacing?.link;
      if (
        link !== undefined &&
        p.sequenceId === replacing!.connectSeq &&
        p.sessionId === link.id.remoteSession &&
        p.connectionSignature === link.id.remoteSignature &&
        crc32(p.payload) === replacing!.connectCrc
      )
        return false;
      const epoch = this.epoch();
      const sig = p.packetSignature;
      if (
        sig !== this.cookie(address, port, p.source, checksum, epoch) &&
        sig !== this.cookie(address, port, p.source, checksum, epoch - 1)
      )
        continue;
      this.metrics.received++;
      this.metrics.bytesReceived += msg.length;
      if (replacing !== undefined) this.remove(replacing, 'client_restarted');
      const ipKey = addressKey(address);
      if (!this.makeRoom(address, port, ipKey)) return true;
      // The SYN-ACK it answered, rebuilt (a SYN retransmitted later gets it again).
      const sw = this.scratch;
      sw.reset();
      writePacket(
        sw,
        {
          source: p.destination,
          destination: p.source,
          type: PacketType.SYN,
          flags: Flag.ACK | Flag.HAS_SIZE,
          sessionId: 0,
          packetSignature: 0,
          sequenceId: 0,
          connectionSignature: sig,
        },
        undefined,
        checksum,
      );
      const peer = this.addHalfOpen(
        key,
        address,
        port,
        ipKey,
        p.source,
        checksum,
        sig,
        Buffer.from(sw.view()),
      );
      peer.messagesIn++;
      peer.bytesIn += msg.length;
      this.metrics.count(replacing === undefined ? 'prudp_cookie_connects' : 'prudp_restarts');
      this.accept(peer, p);
      return true;
    }
    return false;
  }

  private onPacket(peer: PrudpPeer, p: PrudpPacket): void {
    if (peer.state === State.HalfOpen) {
      if (p.type === PacketType.SYN && (p.flags & Flag.ACK) === 0) {
        this.send(peer, peer.synAck); // our SYN-ACK was lost: the same one again
        return;
      }
      if (p.type !== PacketType.CONNECT || (p.flags & Flag.ACK) !== 0) {
        this.metrics.drop('prudp_not_connected');
        return;
      }
      if (p.packetSignature !== peer.serverSignature) {
        this.metrics.drop('prudp_bad_signature');
        return;
      }
      this.accept(peer, p);
      return;
    }
    const link = peer.link!;
    if (p.packetSignature !== link.id.localSignature) {
      this.metrics.drop('prudp_bad_signature');
      return;
    }
    if (p.type !== PacketType.SYN && p.sessionId !== link.id.remoteSession) {
      this.metrics.drop('prudp_bad_session');
      return;
    }
    const now = Date.now();
    link.lastHeard = now;
    if ((p.flags & Flag.ACK) !== 0) {
      link.onAck(p, now);
      return;
    }
    switch (p.type) {
      case PacketType.DATA:
        link.onData(p);
        return;
      case PacketType.PING:
        link.onPing(p);
        return;
      case PacketType.DISCONNECT:
        link.onDisconnect(p);
        return;
      case PacketType.CONNECT:
        // Our CONNECT-ACK was lost: the same one again.
        if (p.sequenceId === peer.connectSeq && peer.connectAck !== undefined)
          this.send(peer, peer.connectAck);
        else this.metrics.drop('prudp_unexpected');
        return;
      default:
        this.metrics.drop('prudp_unexpected');
    }
  }

  private accept(peer: PrudpPeer, p: PrudpPacket): void {
    let outcome: ConnectOutcome;
    try {
      // The payload view belongs to the datagram; handlers get their own copy.
      outcome = (this.o.onConnect ?? plainConnect)(Buffer.from(p.payload), {
        remoteAddress: peer.remoteAddress,
        remotePort: peer.remotePort,
        checksum: peer.checksum,
      });
    } catch (err) {
      this.metrics.drop('prudp_connect_refused');
      this.log.info({ err: (err as Error).message, remote: peer.remoteAddress }, 'PRUDP CONNECT refused');
      return;
    }
    const serverSession = randomBytes(1)[0]!;
    const now = Date.now();
    const writer = new WireWriter({ initialCapacity: 1024 });
    const link = new PrudpLink(
      {
        localVport: p.destination,
        remoteVport: p.source,
        localSession: serverSession,
        remoteSession: p.sessionId,
        localSignature: peer.serverSignature,
        remoteSignature: p.connectionSignature,
        hasSize: true,
        checksum: peer.checksum,
        payload: outcome.payload,
        nextSeq: 1,
        expectedSeq: (p.sequenceId + 1) & 0xffff,
      },
      {
        send: (d) => this.send(peer, d),
        message: (m) => this.onMessage(peer, m),
        failed: (reason) => this.onLinkFailed(peer, reason),
        metrics: this.metrics,
      },
      this.o,
    );
    link.lastHeard = now;
    const w = this.scratch;
    w.reset();
    writePacket(
      w,
      {
        source: p.destination,
        destination: p.source,
        type: PacketType.CONNECT,
        flags: Flag.ACK | Flag.HAS_SIZE,
        sessionId: serverSession,
        packetSignature: p.connectionSignature,
        sequenceId: p.sequenceId,
        connectionSignature: 0,
      },
      outcome.ackPayload,
      peer.checksum,
    );
    peer.connectAck = Buffer.from(w.view());
    peer.connectSeq = p.sequenceId;
    peer.connectCrc = crc32(p.payload);
    peer.link = link;
    peer.writer = writer;
    peer.state = State.Open;
    this.forgetHalfOpen(peer);
    this.openCount++;
    this.metrics.open++;
    this.metrics.count('prudp_connections');
    this.table.announce(peer);
    const sink: RmcSink = {
      writer,
      commit: () => this.flushAnswers(peer),
      close: () => this.closePeer(peer, 'server'),
      connection: peer,
    };
    peer.rmc = this.dispatcher.open(sink);
    if (outcome.user !== undefined) {
      // A Kerberos-authenticated connection: handlers see who it is.
      const pid = Buffer.alloc(4);
      pid.writeUInt32LE(outcome.user.pid);
      peer.rmc.user = { pid, name: outcome.user.name };
      peer.rmc.data.set('prudp.pid', outcome.user.pid);
    }
    this.send(peer, peer.connectAck);
  }

  /** The dispatcher appended whole RMC frames: each becomes one (fragmented) message. */
  private flushAnswers(peer: PrudpPeer): void {
    const w = peer.writer;
    const link = peer.link;
    if (w === undefined || link === undefined) return;
    const buf = w.buf;
    const end = w.offset;
    let off = 0;
    const now = Date.now();
    while (off + 4 <= end) {
      const len = buf.readUInt32LE(off) + 4;
      if (off + len > end) break;
      link.sendMessage(buf.subarray(off, off + len), now);
      off += len;
    }
    if (off === end) w.reset();
    else {
      // A partial frame cannot happen (the dispatcher commits whole frames); keep it anyway.
      buf.copy(buf, 0, off, end);
      w.offset = end - off;
    }
  }

  private onMessage(peer: PrudpPeer, message: Buffer): void {
    const rmc = peer.rmc;
    if (rmc === undefined) return;
    try {
      this.dispatcher.handleFrame(rmc, message, 0, message.length);
    } catch (err) {
      if (err instanceof DecodeError) {
        this.metrics.drop('malformed');
        this.log.info(
          { code: err.code, err: err.message, remote: peer.remoteAddress },
          'malformed RMC message; closing',
        );
      } else {
        this.log.error({ err }, 'RMC dispatcher failed; closing the connection');
      }
      // Answers already sent stay sent (they are no longer retransmitted); then it ends.
      this.closePeer(peer, 'malformed');
    }
  }

  private onLinkFailed(peer: PrudpPeer, reason: string): void {
    // A limit broke the link: tell the client at once (best effort) rather than let it time out.
    if (reason !== 'retransmit_give_up' && reason !== 'peer_disconnect') peer.link?.sendDisconnect();
    this.remove(peer, reason);
  }

  /** Server-side close: a DISCONNECT to the client (not waited for), then forget it. */
  closePeer(peer: PrudpPeer, reason: string): void {
    if (this.peers.get(peer.key) !== peer) return;
    const link = peer.link;
    if (link !== undefined && !link.closed) {
      link.sendDisconnect();
      link.stop();
    }
    this.remove(peer, reason);
  }

  private remove(peer: PrudpPeer, reason: string): void {
    if (this.peers.get(peer.key) !== peer) return;
    this.peers.delete(peer.key);
    peer.removed = true;
    this.table.release(peer, reason === 'server_close' ? CloseReason.ServerClosing : reason);
    if (peer.state === State.HalfOpen) {
      this.forgetHalfOpen(peer);
      if (reason === 'half_open_evicted') this.metrics.count('prudp_half_open_evicted');
      else if (reason !== 'server_close') this.metrics.count('prudp_half_open_expired');
      return;
    }
    this.openCount--;
    this.metrics.open--;
    this.metrics.close(reason);
    peer.link?.stop();
    if (peer.rmc !== undefined) this.dispatcher.closeConnection(peer.rmc);
  }

  private forgetHalfOpen(peer: PrudpPeer): void {
    this.halfOpen--;
    this.halfOpenPeers.delete(peer.key);
    const n = (this.halfOpenPerIp.get(peer.addressKey) ?? 1) - 1;
    if (n <= 0) this.halfOpenPerIp.delete(peer.addressKey);
    else this.halfOpenPerIp.set(peer.addressKey, n);
  }

  private tick(): void {
    const now = Date.now();
    for (const peer of this.peers.values()) {
      const link = peer.link;
      if (link !== undefined && link.pending > 0) link.tick(now);
    }
  }

  private sweep(): void {
    const now = Date.now();
    const idle = this.o.idleTimeoutMs ?? PRUDP_DEFAULTS.idleTimeoutMs;
    const halfOpen = this.o.halfOpenTimeoutMs ?? PRUDP_DEFAULTS.halfOpenTimeoutMs;
    for (const peer of [...this.peers.values()]) {
      if (peer.state === State.HalfOpen) {
        if (now - peer.createdAt > halfOpen) this.remove(peer, 'half_open_timeout');
      } else if (idle > 0 && now - peer.link!.lastHeard > idle) {
        this.closePeer(peer, 'idle_timeout');
      }
    }
  }
}
