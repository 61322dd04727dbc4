/**
 * A PRUDP V0 client as the conformance checks drive it: every packet written and read with
 * gamewire's packet codec and checksums, but every step (SYN, CONNECT, DATA and its ACK, PING,
 * DISCONNECT, fragments, retransmissions) under the check's control, so a check can leave a
 * packet unacknowledged, repeat one, or break its checksum on purpose.
 */
import type dgram from 'node:dgram';
import net from 'node:net';
import { CheckFailure, type CheckRun, type ConformTarget } from '../../../core/conform.js';
import { bindFreshUdp, MessageInbox } from '../../../core/conform-probes.js';
import { WireWriter } from '../../../wire/writer.js';
import type { ChecksumWidth } from '../prudp/checksum.js';
import { clientSignatureFor } from '../prudp/client.js';
import {
  CLIENT_VPORT,
  Flag,
  FRAGMENT_PLAINTEXT_BYTES,
  PacketType,
  SERVER_VPORT,
} from '../prudp/constants.js';
import {
  type ChecksumConfig,
  newPacket,
  type PacketFields,
  type PrudpPacket,
  readPacket,
  writePacket,
} from '../prudp/packet.js';
import type { PayloadCodec } from '../prudp/payload.js';

/** A received packet, copied out of its datagram. */
export interface Received extends PrudpPacket {
  raw: Buffer;
}

/**
 * SYN and CONNECT are sent at most this many times, a second apart: a busy server (a login's key
 * derivation holds some servers' event loop for a while) still gets the time a client gives it.
 */
const CONNECT_TRIES = 6;

export const hasFlag = (p: { flags: number }, f: number): boolean => (p.flags & f) !== 0;

export class PrudpPeer {
  readonly inbox: MessageInbox;
  readonly cfg: ChecksumConfig;
  /** Datagrams whose packets do not read (a bad checksum, a short packet) with the reason. */
  readonly unreadable: { raw: Buffer; error: string }[] = [];
  readonly clientSignature: number;
  readonly session = 0x5c;
  serverSignature = 0;
  serverSession = 0;
  /** The next sequence id of our reliable packets (1 is the CONNECT). */
  seq = 2;
  private pingSeq = 0;
  /** Set once a CONNECT was acknowledged: closing then says DISCONNECT, as a client logging out does. */
  private connected = false;
  /** Sequence ids of the server's DATA already delivered (a resent one is not a new message). */
  private readonly delivered = new Set<number>();
  private closed = false;
  private readonly socket: dgram.Socket;
  private readonly target: ConformTarget;
  private readonly writer = new WireWriter({ initialCapacity: 1500 });
  private lastSent: Buffer = Buffer.alloc(0);

  private constructor(socket: dgram.Socket, target: ConformTarget, run: CheckRun, cfg: ChecksumConfig) {
    this.socket = socket;
    this.target = target;
    this.cfg = cfg;
    this.inbox = new MessageInbox(run);
    this.clientSignature = clientSignatureFor(target.host, target.port);
    socket.on('message', (d, rinfo) => {
      if (rinfo.port !== target.port) return;
      // Every packet of the datagram becomes one inbox entry (several may share a datagram).
      let off = 0;
      const pkt = newPacket();
      while (off < d.length) {
        try {
          const end = readPacket(d, off, cfg, pkt);
          this.inbox.push(Buffer.from(d.subarray(off, end)));
          off = end;
        } catch (err) {
          this.unreadable.push({ raw: Buffer.from(d), error: (err as Error).message });
          break;
        }
      }
    });
    socket.on('error', () => {});
    run.defer(() => this.close());
  }

  static async open(target: ConformTarget, run: CheckRun, cfg: ChecksumConfig): Promise<PrudpPeer> {
    const socket = await bindFreshUdp(net.isIPv6(target.host) ? 'udp6' : 'udp4');
    return new PrudpPeer(socket, target, run, cfg);
  }

  get sent(): Buffer {
    return this.lastSent;
  }

  /** Reads one packet (as it sits in the inbox). */
  read(raw: Buffer): Received {
    const p = newPacket();
    readPacket(raw, 0, this.cfg, p);
    return { ...p, payload: Buffer.from(p.payload), raw };
  }

  /** Builds one packet from our side (client vports, our session, the server's signature). */
  build(
    f: Partial<PacketFields> & { type: number; flags: number },
    payload?: Uint8Array,
    cfg = this.cfg,
  ): Buffer {
    this.writer.reset();
    writePacket(
      this.writer,
      {
        source: CLIENT_VPORT,
        destination: SERVER_VPORT,
        sessionId: f.type === PacketType.SYN ? 0 : this.session,
        packetSignature: f.type === PacketType.SYN ? 0 : this.serverSignature,
        sequenceId: 0,
        ...f,
      },
      payload,
      cfg,
    );
    return Buffer.from(this.writer.view());
  }

  sendRaw(datagram: Buffer): void {
    this.lastSent = datagram;
    this.socket.send(datagram, this.target.port, this.target.host);
  }

  /** The next packet `match` accepts, or a failure naming `what` (and a packet we could not read). */
  async next(what: string, match: (p: Received) => boolean, timeoutMs = 8000): Promise<Received> {
    const raw = await this.inbox.poll((r) => match(this.read(r)), timeoutMs);
    if (raw !== undefined) return this.read(raw);
    const bad = this.unreadable.at(-1);
    throw new CheckFailure(
      bad !== undefined
        ? `no ${what}; the server sent a packet that does not read: ${bad.error}`
        : `no ${what} within ${timeoutMs} ms`,
      { sent: this.lastSent, received: bad?.raw ?? this.inbox.tail() },
    );
  }

  poll(match: (p: Received) => boolean, timeoutMs: number): Promise<Received | undefined> {
    return this.inbox
      .poll((r) => match(this.read(r)), timeoutMs)
      .then((r) => (r === undefined ? undefined : this.read(r)));
  }

  /** SYN, sent again every second like the clients do, until the SYN-ACK (at most CONNECT_TRIES). */
  async syn(): Promise<Received> {
    const syn = this.build({ type: PacketType.SYN, flags: Flag.NEED_ACK, connectionSignature: 0 });
    for (let i = 0; i < CONNECT_TRIES; i++) {
      this.sendRaw(syn);
      const got = await this.poll((p) => p.type === PacketType.SYN && hasFlag(p, Flag.ACK), 1000);
      if (got !== undefined) {
        this.serverSignature = got.connectionSignature;
        return got;
      }
    }
    throw new CheckFailure(`no SYN-ACK for a SYN (sent ${CONNECT_TRIES} times, 1 s apart)`, {
      sent: syn,
      expected: 'a SYN packet with the ACK flag and the server’s connection signature',
      received: this.unreadable.at(-1)?.raw ?? this.inbox.tail(),
      ...(this.unreadable.length > 0 ? { note: this.unreadable.at(-1)!.error } : {}),
    });
  }

  /** CONNECT (sequence 1, our signature, `payload`), sent again every second until the CONNECT-ACK. */
  async connect(payload: Buffer): Promise<Received> {
    const connect = this.build(
      {
        type: PacketType.CONNECT,
        flags: Flag.RELIABLE | Flag.NEED_ACK,
        sequenceId: 1,
        connectionSignature: this.clientSignature,
      },
      payload,
    );
    for (let i = 0; i < CONNECT_TRIES; i++) {
      this.sendRaw(connect);
      const got = await this.poll((p) => p.type === PacketType.CONNECT && hasFlag(p, Flag.ACK), 1000);
      if (got !== undefined) {
        this.serverSession = got.sessionId;
        this.connected = true;
        return got;
      }
    }
    throw new CheckFailure(`no CONNECT-ACK for a CONNECT (sent ${CONNECT_TRIES} times, 1 s apart)`, {
      sent: connect,
      received: this.inbox.tail(),
    });
  }

  /** Sends `message` as reliable DATA, cut into fragments of 963 plaintext bytes; returns the packets. */
  sendMessage(message: Buffer, codec: PayloadCodec): { seq: number; frag: number; raw: Buffer }[] {
    const out: { seq: number; frag: number; raw: Buffer }[] = [];
    const chunks: Buffer[] = [];
    for (let o = 0; o < message.length; o += FRAGMENT_PLAINTEXT_BYTES)
      chunks.push(message.subarray(o, o + FRAGMENT_PLAINTEXT_BYTES));
    chunks.forEach((chunk, i) => {
      const frag = i === chunks.length - 1 ? 0 : i + 1;
      const seq = this.seq++;
      const raw = this.build(
        {
          type: PacketType.DATA,
          flags: Flag.RELIABLE | Flag.NEED_ACK | Flag.HAS_SIZE,
          sequenceId: seq,
          fragmentId: frag,
        },
        codec.encode(chunk),
      );
      this.sendRaw(raw);
      out.push({ seq, frag, raw });
    });
    return out;
  }

  /** Acknowledges one of the server's packets (DATA: the same sequence and fragment id). */
  ack(p: Received): void {
    this.sendRaw(
      this.build({
        type: p.type,
        flags: Flag.ACK | Flag.HAS_SIZE,
        sequenceId: p.sequenceId,
        fragmentId: p.fragmentId,
      }),
    );
  }

  /**
   * Receives one whole message: the server's reliable DATA packets up to fragment 0, in sequence
   * order, each acknowledged (unless `ack` is false) and decoded with `codec`.
   */
  async receiveMessage(
    codec: PayloadCodec,
    options: { ack?: boolean; timeoutMs?: number } = {},
  ): Promise<{ message: Buffer; packets: Received[] }> {
    const packets: Received[] = [];
    for (;;) {
      const p = await this.next(
        'reliable DATA from the server (the answer)',
        (x) =>
          x.type === PacketType.DATA &&
          !hasFlag(x, Flag.ACK) &&
          // A resend of an answer already delivered (its ack was late) is not this answer.
          !this.delivered.has(x.sequenceId) &&
          !packets.some((q) => q.sequenceId === x.sequenceId),
        options.timeoutMs ?? 8000,
      );
      if (options.ack !== false) this.ack(p);
      packets.push(p);
      if (p.fragmentId === 0) break;
    }
    for (const p of packets) this.delivered.add(p.sequenceId);
    packets.sort((a, b) => a.sequenceId - b.sequenceId);
    return { message: Buffer.concat(packets.map((p) => codec.decode(p.payload, 1 << 20))), packets };
  }

  ping(): { seq: number; raw: Buffer } {
    const seq = ++this.pingSeq;
    const raw = this.build({ type: PacketType.PING, flags: Flag.NEED_ACK, sequenceId: seq });
    this.sendRaw(raw);
    return { seq, raw };
  }

  disconnect(): { seq: number; raw: Buffer } {
    const seq = this.seq++;
    const raw = this.build({
      type: PacketType.DISCONNECT,
      flags: Flag.RELIABLE | Flag.NEED_ACK,
      sequenceId: seq,
    });
    this.sendRaw(raw);
    return { seq, raw };
  }

  close(): Promise<void> {
    if (this.closed) return Promise.resolve();
    this.closed = true;
    // Leave as a client does, so the server frees the connection now rather than at its timeout.
    if (this.connected) this.disconnect();
    return new Promise((resolve) => {
      try {
        this.socket.close(() => resolve());
      } catch {
        resolve();
      }
    });
  }
}

export type { ChecksumWidth };
