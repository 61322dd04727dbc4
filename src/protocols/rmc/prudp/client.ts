/**
 * The client side of a PRUDP connection: SYN, CONNECT (with optional credentials: a Kerberos
 * ticket or an ECDH key), then reliable messages over a PrudpLink, keep-alive PINGs, and
 * DISCONNECT. Packets look like the official clients' (vport 0x3f → 0x31, no HAS_SIZE, the
 * connection signature derived from the server's address).
 */
import { randomBytes } from 'node:crypto';
import dgram from 'node:dgram';
import net from 'node:net';
import { ProtocolMetrics } from '../../../core/metrics.js';
import { GamewireError } from '../../../wire/errors.js';
import { DecodeError, WireWriter } from '../../../wire/index.js';
import { accessKeyByte, type ChecksumWidth } from './checksum.js';
import { CLIENT_VPORT, Flag, PacketType, PRUDP_DEFAULTS, SERVER_VPORT } from './constants.js';
import { type LinkOptions, PrudpLink } from './link.js';
import { type ChecksumConfig, newPacket, readPacket, writePacket } from './packet.js';
import { ClassicPayloadCodec, type PayloadCodec } from './payload.js';

/** What a client sends in CONNECT and how it reads the CONNECT-ACK. */
export interface ClientCredentials {
  /** The CONNECT payload as it goes on the wire. */
  connectPayload(): Buffer;
  /** Checks the CONNECT-ACK payload and returns the DATA payload codec. Throws when it is wrong. */
  accept(ackPayload: Buffer): PayloadCodec;
}

/** No credentials: an empty CONNECT and classic payloads (an auth-server connection). */
export const noCredentials: ClientCredentials = {
  connectPayload: () => Buffer.alloc(0),
  accept: () => new ClassicPayloadCodec(),
};

export interface PrudpConnectOptions extends LinkOptions {
  host: string;
  port: number;
  /** Sandbox access key (the server's `--prudp-access-key`). */
  accessKey: string;
  checksumWidth?: ChecksumWidth;
  credentials?: ClientCredentials;
  localVport?: number;
  serverVport?: number;
  connectTimeoutMs?: number;
  /** PING after this long without sending (ms; 0 disables). */
  pingIntervalMs?: number;
  /** Give up when nothing valid arrived for this long (ms; 0 disables). */
  idleTimeoutMs?: number;
  metrics?: ProtocolMetrics;
  /**
   * Socket receive buffer (default 1 MiB): a window of answers arrives as a burst of datagrams,
   * and the kernel's default buffer (about 90 small datagrams on Linux) drops the rest.
   */
  recvBufferSize?: number;
  /** Local address to send from (e.g. `127.0.0.2`). Default: chosen by the system. */
  localAddress?: string;
  /** Local port to send from (a fixed port a firewall lets through). Default: chosen by the system. */
  localPort?: number;
}

/** The error a PRUDP client connection fails with. */
export class PrudpClientError extends GamewireError {
  constructor(code: string, message: string) {
    super(code, message);
  }
  override get name(): string {
    return 'PrudpClientError';
  }
}

/** The signature the official clients announce: the server's IPv4 (big-endian) OR port << 16. */
export function clientSignatureFor(host: string, port: number): number {
  if (net.isIPv4(host)) {
    const ip = host.split('.').reduce((a, b) => ((a << 8) | Number(b)) >>> 0, 0);
    const v = (ip | (port << 16)) >>> 0;
    if (v !== 0) return v;
  }
  return randomBytes(4).readUInt32LE(0) || 1;
}

export class PrudpClientConnection {
  private readonly socket: dgram.Socket;
  private readonly o: PrudpConnectOptions;
  private link: PrudpLink | undefined;
  private readonly packet = newPacket();
  private readonly checksum: ChecksumConfig;
  private timer: NodeJS.Timeout | undefined;
  private closedError: Error | undefined;
  private disconnectSeq = -1;
  private disconnectDone: (() => void) | undefined;
  readonly metrics: ProtocolMetrics;
  /** A whole message from the server. */
  onMessage: (message: Buffer) => void = () => {};
  /** The connection ended (error says why; ERR_PRUDP_CLOSED for a normal close). */
  onClose: (err: Error) => void = () => {};

  private constructor(socket: dgram.Socket, options: PrudpConnectOptions, checksum: ChecksumConfig) {
    this.socket = socket;
    this.o = options;
    this.checksum = checksum;
    this.metrics = options.metrics ?? new ProtocolMetrics('rmc-client');
  }

  get closed(): boolean {
    return this.closedError !== undefined;
  }

  /** Reliable packets not yet acked (for tests and flow control). */
  get pending(): number {
    return this.link?.pending ?? 0;
  }

  /** Connects (SYN, CONNECT) and resolves once the CONNECT-ACK is accepted. */
  static async connect(options: PrudpConnectOptions): Promise<PrudpClientConnection> {
    const type = net.isIPv6(options.host) ? 'udp6' : 'udp4';
    const socket = dgram.createSocket(type);
    await new Promise<void>((resolve, reject) => {
      socket.once('error', (err) => {
        socket.close();
        reject(err);
      });
      const connect = () =>
        // dgram hands a failed lookup (ENOTFOUND) to this callback, not to 'error'.
        socket.connect(options.port, options.host, (err?: Error) => {
          socket.removeAllListeners('error');
          if (err) {
            socket.close();
            reject(err);
          } else resolve();
        });
      if (options.localAddress === undefined && options.localPort === undefined) connect();
      else socket.bind(options.localPort ?? 0, options.localAddress, connect);
    });
    try {
      socket.setRecvBufferSize(options.recvBufferSize ?? 1024 * 1024);
    } catch {
      // Capped by the kernel (net.core.rmem_max): the default still works, with more retransmissions.
    }
    const checksum = { width: options.checksumWidth ?? 1, keyByte: accessKeyByte(options.accessKey) };
    const c = new PrudpClientConnection(socket, options, checksum);
    try {
      await c.handshake();
    } catch (err) {
      c.shutdown(err as Error);
      throw err;
    }
    return c;
  }

  private sendRaw(d: Buffer): void {
    if (this.closedError !== undefined) return;
    this.metrics.sent++;
    this.socket.send(d);
  }

  private handshake(): Promise<void> {
    const o = this.o;
    const localVport = o.localVport ?? CLIENT_VPORT;
    const serverVport = o.serverVport ?? SERVER_VPORT;
    const creds = o.credentials ?? noCredentials;
    const clientSignature = clientSignatureFor(o.host, o.port);
    const clientSession = randomBytes(1)[0]!;
    const w = new WireWriter({ initialCapacity: 256 });
    const build = (f: Parameters<typeof writePacket>[1], payload?: Buffer) => {
      w.reset();
      writePacket(w, f, payload, this.checksum);
      return Buffer.from(w.view());
    };
    const syn = build({
      source: localVport,
      destination: serverVport,
      type: PacketType.SYN,
      flags: Flag.NEED_ACK,
      sessionId: 0,
      packetSignature: 0,
      sequenceId: 0,
      connectionSignature: 0,
    });
    return new Promise<void>((resolve, reject) => {
      let current = syn;
      let serverSignature = 0;
      let tries = 0;
      let wait = o.retransmitMs ?? PRUDP_DEFAULTS.retransmitMs;
      const limit = o.maxRetransmits ?? PRUDP_DEFAULTS.maxRetransmits;
      const overall = setTimeout(
        () =>
          fail(new PrudpClientError('ERR_PRUDP_TIMEOUT', `PRUDP connect to ${o.host}:${o.port} timed out`)),
        o.connectTimeoutMs ?? 10_000,
      );
      let retry: NodeJS.Timeout | undefined;
      const arm = () => {
        retry = setTimeout(() => {
          if (++tries > limit) {
            fail(new PrudpClientError('ERR_PRUDP_TIMEOUT', `no answer from ${o.host}:${o.port}`));
            return;
          }
          wait = Math.min(o.retransmitMaxMs ?? PRUDP_DEFAULTS.retransmitMaxMs, wait * 1.5);
          this.sendRaw(current);
          arm();
        }, wait);
      };
      const done = () => {
        clearTimeout(overall);
        if (retry !== undefined) clearTimeout(retry);
        this.socket.off('message', onHandshake);
        this.socket.off('error', onError);
      };
      const fail = (err: Error) => {
        done();
        reject(err);
      };
      const onError = (err: Error) => {
        if ((err as NodeJS.ErrnoException).code === 'ECONNREFUSED') return; // retried until the limit
        fail(new PrudpClientError('ERR_PRUDP_CONNECTION', `socket error: ${err.message}`));
      };
      const onHandshake = (msg: Buffer) => {
        const p = this.packet;
        try {
          readPacket(msg, 0, this.checksum, p);
        } catch (e) {
          if (!(e instanceof DecodeError)) throw e;
          this.metrics.drop(e.code === 'ERR_BAD_CHECKSUM' ? 'prudp_bad_checksum' : 'prudp_malformed');
          return;
        }
        if ((p.flags & Flag.ACK) === 0) return;
        if (p.type === PacketType.SYN && current === syn) {
          serverSignature = p.connectionSignature;
          current = build(
            {
              source: localVport,
              destination: serverVport,
              type: PacketType.CONNECT,
              flags: Flag.RELIABLE | Flag.NEED_ACK,
              sessionId: clientSession,
              packetSignature: serverSignature,
              sequenceId: 1,
              connectionSignature: clientSignature,
            },
            creds.connectPayload(),
          );
          if (retry !== undefined) clearTimeout(retry);
          wait = o.retransmitMs ?? PRUDP_DEFAULTS.retransmitMs;
          tries = 0;
          this.sendRaw(current);
          arm();
          return;
        }
        if (p.type === PacketType.CONNECT && current !== syn && p.sequenceId === 1) {
          if (p.packetSignature !== clientSignature) {
            this.metrics.drop('prudp_bad_signature');
            return;
          }
          let payload: PayloadCodec;
          try {
            payload = creds.accept(Buffer.from(p.payload));
          } catch (err) {
            fail(
              new PrudpClientError(
                'ERR_PRUDP_CONNECT_REFUSED',
                `CONNECT-ACK not accepted: ${(err as Error).message}`,
              ),
            );
            return;
          }
          done();
          this.open({
            localVport,
            remoteVport: serverVport,
            localSession: clientSession,
            remoteSession: p.sessionId,
            localSignature: clientSignature,
            remoteSignature: serverSignature,
            hasSize: false,
            checksum: this.checksum,
            payload,
            nextSeq: 2,
            expectedSeq: 1,
          });
          resolve();
        }
      };
      this.socket.on('message', onHandshake);
      this.socket.on('error', onError);
      this.sendRaw(syn);
      arm();
    });
  }

  private open(id: ConstructorParameters<typeof PrudpLink>[0]): void {
    const link = new PrudpLink(
      id,
      {
        send: (d) => this.sendRaw(d),
        message: (m) => this.onMessage(m),
        failed: (reason) =>
          this.shutdown(
            reason === 'peer_disconnect'
              ? new PrudpClientError('ERR_PRUDP_CLOSED', 'the server closed the PRUDP connection')
              : new PrudpClientError('ERR_PRUDP_LINK', `PRUDP connection failed: ${reason}`),
          ),
        metrics: this.metrics,
      },
      this.o,
    );
    const now = Date.now();
    link.lastHeard = now;
    link.lastSent = now;
    this.link = link;
    this.socket.on('message', (msg) => this.onDatagram(msg));
    this.socket.on('error', (err) => {
      // An ICMP "port unreachable" on the connected socket is transient: retransmission decides.
      if ((err as NodeJS.ErrnoException).code === 'ECONNREFUSED') {
        this.metrics.count('prudp_icmp_unreachable');
        return;
      }
      this.shutdown(new PrudpClientError('ERR_PRUDP_CONNECTION', `socket error: ${err.message}`));
    });
    const tickMs = Math.max(10, Math.min(50, (this.o.retransmitMs ?? PRUDP_DEFAULTS.retransmitMs) / 4));
    this.timer = setInterval(() => this.tick(), tickMs);
    this.timer.unref();
  }

  private tick(): void {
    const link = this.link;
    if (link === undefined || link.closed) return;
    const now = Date.now();
    link.tick(now);
    const idle = this.o.idleTimeoutMs ?? PRUDP_DEFAULTS.idleTimeoutMs;
    if (idle > 0 && now - link.lastHeard > idle) {
      this.shutdown(new PrudpClientError('ERR_PRUDP_TIMEOUT', 'the server went silent'));
      return;
    }
    const ping = this.o.pingIntervalMs ?? PRUDP_DEFAULTS.pingIntervalMs;
    if (ping > 0 && now - link.lastSent > ping) link.sendPing();
  }

  private onDatagram(msg: Buffer): void {
    const link = this.link;
    if (link === undefined || link.closed) return;
    const p = this.packet;
    let off = 0;
    try {
      while (off < msg.length) {
        off = readPacket(msg, off, this.checksum, p);
        this.metrics.received++;
        if (p.packetSignature !== link.id.localSignature) {
          this.metrics.drop('prudp_bad_signature');
        } else if (p.type === PacketType.SYN || p.type === PacketType.CONNECT) {
          // Late handshake acks: nothing to do.
        } else if (p.sessionId !== link.id.remoteSession) {
          this.metrics.drop('prudp_bad_session');
        } else {
          const now = Date.now();
          link.lastHeard = now;
          if ((p.flags & Flag.ACK) !== 0) {
            const type = link.onAck(p, now);
            if (type === PacketType.DISCONNECT && p.sequenceId === this.disconnectSeq)
              this.disconnectDone?.();
          } else if (p.type === PacketType.DATA) link.onData(p);
          else if (p.type === PacketType.PING) link.onPing(p);
          else if (p.type === PacketType.DISCONNECT) link.onDisconnect(p);
        }
        if (this.closedError !== undefined) return;
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

  /** Sends one message reliably (fragmented at 963 plaintext bytes). */
  send(message: Uint8Array): void {
    if (this.closedError !== undefined) throw this.closedError;
    this.link!.sendMessage(message);
  }

  private shutdown(err: Error): void {
    if (this.closedError !== undefined) return;
    this.closedError = err;
    if (this.timer !== undefined) clearInterval(this.timer);
    this.link?.stop();
    try {
      this.socket.close();
    } catch {
      // already closed
    }
    this.onClose(err);
  }

  /** Closes the socket without a DISCONNECT, as a crashed client would (the server times out). */
  abort(): void {
    this.shutdown(new PrudpClientError('ERR_PRUDP_CLOSED', 'PRUDP connection is closed'));
  }

  /** Sends DISCONNECT, waits (bounded) for its ack, and closes the socket. */
  async close(timeoutMs = 2000): Promise<void> {
    const link = this.link;
    if (this.closedError !== undefined || link === undefined) {
      this.shutdown(new PrudpClientError('ERR_PRUDP_CLOSED', 'PRUDP connection is closed'));
      return;
    }
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, timeoutMs);
      this.disconnectDone = () => {
        clearTimeout(timer);
        resolve();
      };
      this.disconnectSeq = link.sendDisconnect();
    });
    this.shutdown(new PrudpClientError('ERR_PRUDP_CLOSED', 'PRUDP connection is closed'));
  }
}
