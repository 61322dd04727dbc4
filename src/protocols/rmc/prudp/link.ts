/**
 * The reliability layer of one PRUDP connection, shared by the server and the client:
 *
 * - every NEED_ACK packet from the peer is acked individually (an ack is the same type with
 *   ACK set, echoing sequence id and fragment id);
 * - reliable DATA is delivered once and in sequence order: duplicates are re-acked and
 *   dropped, early packets are held (bounded) until the gap fills;
 * - messages are split into fragments of at most 963 plaintext bytes (ids 1, 2, … and 0 for
 *   the last), each compressed and encrypted on its own, and reassembled (bounded) on receipt;
 * - unacked packets are retransmitted with backoff, at most `sendWindow` are in flight, and
 *   after `maxRetransmits` the connection is given up.
 *
 * It knows nothing about sockets: the owner passes received packets in, and gets datagrams to
 * send, whole messages and failures out through `LinkIo`.
 */
import type { ProtocolMetrics } from '../../../core/metrics.js';
import { DecodeError, WireWriter } from '../../../wire/index.js';
import { Flag, FRAGMENT_PLAINTEXT_BYTES, PacketType, PRUDP_DEFAULTS } from './constants.js';
import { type ChecksumConfig, type PacketFields, type PrudpPacket, writePacket } from './packet.js';
import type { PayloadCodec } from './payload.js';

export interface LinkOptions {
  retransmitMs?: number;
  retransmitBackoff?: number;
  retransmitMaxMs?: number;
  maxRetransmits?: number;
  sendWindow?: number;
  maxOutOfOrder?: number;
  maxReassemblyBytes?: number;
  disconnectAckRepeats?: number;
  /** Reliable packets waiting behind the send window before the link is given up (default 8192). */
  maxQueued?: number;
}

export interface LinkIo {
  /** Sends one datagram to the peer (the buffer is not reused afterwards). */
  send(datagram: Buffer): void;
  /** A whole message, reassembled and in order (the buffer is the receiver's to keep). */
  message(plain: Buffer): void;
  /** The link cannot go on (retransmission give-up, reassembly limit, peer DISCONNECT). */
  failed(reason: string): void;
  metrics: ProtocolMetrics;
}

interface Outgoing {
  type: number;
  seq: number;
  datagram: Buffer;
  retries: number;
  waitMs: number;
  due: number;
  /** Later packets acked since this one was (re)sent: 3 mean it was most likely lost. */
  skips: number;
}

export interface LinkIdentity {
  localVport: number;
  remoteVport: number;
  /** Our session byte (on every packet we send). */
  localSession: number;
  /** The peer's session byte (expected on every packet it sends). */
  remoteSession: number;
  /** The signature we announced: the peer stamps it on its packets. */
  localSignature: number;
  /** The signature the peer announced: we stamp it on ours. */
  remoteSignature: number;
  /** Servers set HAS_SIZE on every packet; the official clients never do. */
  hasSize: boolean;
  checksum: ChecksumConfig;
  payload: PayloadCodec;
  /** Our next reliable sequence id (server: 1; client: 2 after SYN 0 and CONNECT 1). */
  nextSeq: number;
  /** The peer's next reliable sequence id we expect. */
  expectedSeq: number;
}

const ACK_SCRATCH = new WireWriter({ initialCapacity: 64 });

export class PrudpLink {
  readonly id: LinkIdentity;
  private readonly io: LinkIo;
  private readonly o: Required<LinkOptions>;
  private readonly unacked = new Map<number, Outgoing>();
  private readonly queue: Outgoing[] = [];
  private queueHead = 0;
  private readonly early = new Map<number, { fragmentId: number; plain: Buffer }>();
  private earlyBytes = 0;
  private parts: Buffer[] = [];
  private partsBytes = 0;
  private nextPingSeq = 1;
  private readonly writer = new WireWriter({ initialCapacity: 1100 });
  closed = false;
  /** Last time a valid packet arrived (ms, caller's clock). */
  lastHeard = 0;
  /** Last time we sent anything (for client keep-alives). */
  lastSent = 0;

  constructor(id: LinkIdentity, io: LinkIo, options: LinkOptions = {}) {
    this.id = id;
    this.io = io;
    this.o = {
      retransmitMs: options.retransmitMs ?? PRUDP_DEFAULTS.retransmitMs,
      retransmitBackoff: options.retransmitBackoff ?? PRUDP_DEFAULTS.retransmitBackoff,
      retransmitMaxMs: options.retransmitMaxMs ?? PRUDP_DEFAULTS.retransmitMaxMs,
      maxRetransmits: options.maxRetransmits ?? PRUDP_DEFAULTS.maxRetransmits,
      sendWindow: options.sendWindow ?? PRUDP_DEFAULTS.sendWindow,
      maxOutOfOrder: options.maxOutOfOrder ?? PRUDP_DEFAULTS.maxOutOfOrder,
      maxReassemblyBytes: options.maxReassemblyBytes ?? PRUDP_DEFAULTS.maxReassemblyBytes,
      disconnectAckRepeats: options.disconnectAckRepeats ?? PRUDP_DEFAULTS.disconnectAckRepeats,
      maxQueued: options.maxQueued ?? 8192,
    };
  }

  /** Reliable packets sent or queued and not yet acked. */
  get pending(): number {
    return this.unacked.size + this.queue.length - this.queueHead;
  }

  /** Bytes held for reassembly (the current message's fragments and early packets). */
  get heldBytes(): number {
    return this.partsBytes + this.earlyBytes;
  }

  private fields(type: number, flags: number, seq: number, fragmentId: number): PacketFields {
    const id = this.id;
    return {
      source: id.localVport,
      destination: id.remoteVport,
      type,
      flags: id.hasSize ? flags | Flag.HAS_SIZE : flags,
      sessionId: id.localSession,
      packetSignature: id.remoteSignature,
      sequenceId: seq,
      fragmentId,
    };
  }

  /** Sends the ack of `p` (`repeat` extra copies for a DISCONNECT). */
  ack(p: PrudpPacket, repeat = 0): void {
    const w = ACK_SCRATCH;
    w.reset();
    writePacket(w, this.fields(p.type, Flag.ACK, p.sequenceId, p.fragmentId), undefined, this.id.checksum);
    const d = Buffer.from(w.view());
    for (let i = 0; i <= repeat; i++) this.io.send(d);
    this.lastSent = Date.now();
  }

  /** Sends one message (fragmenting it) reliably. */
  sendMessage(message: Uint8Array, now = Date.now()): void {
    if (this.closed) return;
    const n = message.length;
    let frag = 0;
    for (let off = 0; off < n || off === 0; off += FRAGMENT_PLAINTEXT_BYTES) {
      const end = Math.min(n, off + FRAGMENT_PLAINTEXT_BYTES);
      const last = end >= n;
      // 1 … 255 then 1 again: 0 always means "last", whatever the message size.
      const fragmentId = last ? 0 : (frag++ % 255) + 1;
      this.sendReliable(PacketType.DATA, message.subarray(off, end), fragmentId, now);
      if (last) break;
    }
  }

  /** Sends a DISCONNECT (reliable); the caller waits for its ack through `onAck`. */
  sendDisconnect(now = Date.now()): number {
    const seq = this.id.nextSeq;
    this.sendReliable(PacketType.DISCONNECT, new Uint8Array(0), 0, now, true);
    return seq;
  }

  /** Sends a PING (unreliable, own counter). */
  sendPing(): void {
    const w = this.writer;
    w.reset();
    writePacket(
      w,
      this.fields(PacketType.PING, Flag.NEED_ACK, this.nextPingSeq, 0),
      undefined,
      this.id.checksum,
    );
    this.nextPingSeq = (this.nextPingSeq + 1) & 0xffff;
    this.io.send(Buffer.from(w.view()));
    this.lastSent = Date.now();
  }

  /** `urgent` skips the send window (a DISCONNECT must leave even when the window is full). */
  private sendReliable(
    type: number,
    plain: Uint8Array,
    fragmentId: number,
    now: number,
    urgent = false,
  ): void {
    const id = this.id;
    const seq = id.nextSeq;
    id.nextSeq = (seq + 1) & 0xffff;
    const payload = plain.length === 0 ? undefined : id.payload.encode(plain);
    const w = this.writer;
    w.reset();
    writePacket(w, this.fields(type, Flag.RELIABLE | Flag.NEED_ACK, seq, fragmentId), payload, id.checksum);
    const out: Outgoing = {
      type,
      seq,
      datagram: Buffer.from(w.view()),
      retries: 0,
      waitMs: this.o.retransmitMs,
      due: 0,
      skips: 0,
    };
    if (urgent || (this.unacked.size < this.o.sendWindow && this.queueHead === this.queue.length))
      this.transmit(out, now);
    else if (this.queue.length - this.queueHead >= this.o.maxQueued) {
      // A peer that stops acking while calls keep coming must not grow our memory without end.
      this.io.metrics.drop('prudp_send_queue_full');
      this.fail('send_queue_full');
    } else this.queue.push(out);
  }

  private transmit(out: Outgoing, now: number): void {
    out.due = now + out.waitMs;
    this.unacked.set(out.seq, out);
    this.io.send(out.datagram);
    this.lastSent = now;
  }

  private fillWindow(now: number): void {
    while (this.unacked.size < this.o.sendWindow && this.queueHead < this.queue.length) {
      const out = this.queue[this.queueHead]!;
      this.queue[this.queueHead++] = undefined as unknown as Outgoing;
      this.transmit(out, now);
    }
    if (this.queueHead === this.queue.length && this.queueHead > 0) {
      this.queue.length = 0;
      this.queueHead = 0;
    }
  }

  /** Retransmits what is due; gives the link up after too many tries. */
  tick(now: number): void {
    if (this.closed || this.unacked.size === 0) return;
    for (const out of this.unacked.values()) {
      if (out.due > now) continue;
      if (out.retries >= this.o.maxRetransmits) {
        this.io.metrics.count('prudp_retransmit_give_up');
        this.fail('retransmit_give_up');
        return;
      }
      out.retries++;
      out.skips = 0;
      out.waitMs = Math.min(this.o.retransmitMaxMs, out.waitMs * this.o.retransmitBackoff);
      out.due = now + out.waitMs;
      this.io.metrics.count('prudp_retransmits');
      this.io.send(out.datagram);
    }
  }

  /** An ACK packet from the peer. Returns the acked packet's type, or -1 if nothing matched. */
  onAck(p: PrudpPacket, now: number): number {
    const out = this.unacked.get(p.sequenceId);
    if (out === undefined || out.type !== p.type) return -1;
    // Fast retransmit: packets sent before this one and still unacked after three later acks
    // were most likely lost; resend them now instead of waiting for their timer. (The map keeps
    // send order, so in-order acks stop at the first entry.)
    for (const older of this.unacked.values()) {
      if (older === out) break;
      if (++older.skips === 3) {
        older.skips = 0;
        older.due = now + older.waitMs;
        this.io.metrics.count('prudp_fast_retransmits');
        this.io.send(older.datagram);
      }
    }
    this.unacked.delete(p.sequenceId);
    this.fillWindow(now);
    return out.type;
  }

  /**
   * A reliable DATA packet from the peer (already checksum- and signature-checked). Acks it,
   * drops duplicates, holds early packets and delivers complete messages in order.
   */
  onData(p: PrudpPacket): void {
    if (this.closed) return;
    const id = this.id;
    const d = (p.sequenceId - id.expectedSeq) & 0xffff;
    if (d >= 0x8000 || (d > 0 && this.early.has(p.sequenceId))) {
      // Already delivered or already held: ack again (our ack may have been lost), deliver once.
      this.io.metrics.count('prudp_duplicates');
      this.ack(p);
      return;
    }
    if (d > this.o.maxOutOfOrder) {
      this.io.metrics.drop('prudp_out_of_window');
      return;
    }
    const room = this.o.maxReassemblyBytes - this.heldBytes;
    let plain: Buffer;
    try {
      plain = id.payload.decode(p.payload, Math.max(0, room));
    } catch (e) {
      if (!(e instanceof DecodeError)) throw e;
      if (e.code === 'ERR_TOO_LARGE') {
        if (d === 0) {
          this.io.metrics.drop('prudp_reassembly_limit');
          this.fail('reassembly_limit');
        } else this.io.metrics.drop('prudp_reassembly_full');
        return;
      }
      this.io.metrics.drop('prudp_bad_payload');
      return;
    }
    this.ack(p);
    if (d > 0) {
      // Early: hold it (decoded payloads never share memory with the datagram) until the gap fills.
      this.early.set(p.sequenceId, { fragmentId: p.fragmentId, plain });
      this.earlyBytes += plain.length;
      return;
    }
    this.deliver(p.fragmentId, plain);
    id.expectedSeq = (id.expectedSeq + 1) & 0xffff;
    for (;;) {
      if (this.early.size === 0 || this.closed) return;
      const next = this.early.get(id.expectedSeq);
      if (next === undefined) return;
      this.early.delete(id.expectedSeq);
      this.earlyBytes -= next.plain.length;
      this.deliver(next.fragmentId, next.plain);
      id.expectedSeq = (id.expectedSeq + 1) & 0xffff;
    }
  }

  private deliver(fragmentId: number, plain: Buffer): void {
    if (fragmentId === 0 && this.parts.length === 0) {
      this.io.message(plain);
      return;
    }
    this.parts.push(plain);
    this.partsBytes += plain.length;
    if (fragmentId !== 0) return;
    const whole = Buffer.concat(this.parts, this.partsBytes);
    this.parts = [];
    this.partsBytes = 0;
    this.io.message(whole);
  }

  /**
   * A DISCONNECT from the peer: acks it (repeated, like the official server). Only one in
   * sequence (or a retransmission of it) ends the link.
   */
  onDisconnect(p: PrudpPacket): void {
    this.ack(p, this.o.disconnectAckRepeats);
    if (!this.closed) this.fail('peer_disconnect');
  }

  /** A PING: acked when it asks for one. */
  onPing(p: PrudpPacket): void {
    if ((p.flags & Flag.NEED_ACK) !== 0) this.ack(p);
  }

  fail(reason: string): void {
    if (this.closed) return;
    this.closed = true;
    this.unacked.clear();
    this.queue.length = 0;
    this.queueHead = 0;
    this.early.clear();
    this.parts = [];
    this.io.failed(reason);
  }

  /** Ends the link without telling the owner (the owner is closing it). */
  stop(): void {
    this.closed = true;
    this.unacked.clear();
    this.queue.length = 0;
    this.queueHead = 0;
    this.early.clear();
    this.parts = [];
  }
}
