/**
 * The DTLS server's per-peer state (server.ts): a remote 5-tuple, its handshake in progress, the
 * per-datagram scratch, and an established association with its keys and sequence numbers.
 */
import type { Hash } from 'node:crypto';
import type { DtlsAssociation } from './api.js';
import { AlertDescription, AlertLevel, ContentType, DTLS_1_2, MAX_SEQUENCE } from './constants.js';
import type { HandshakeView, Reassembler } from './handshake.js';
import type { DtlsRecordState } from './offload.js';
import type { TrafficKeys } from './prf.js';
import { plainRecord, type RecordView, type ReplayWindow } from './record.js';
import type { DtlsServer } from './server.js';
import type { CipherSuite, RecordProtection } from './suites.js';

export type Send = (datagram: Buffer) => void;

const CCS_BODY = Buffer.from([1]);

/** One remote 5-tuple: at most one established association and one handshake in progress. */
export interface Peer {
  readonly address: string;
  readonly port: number;
  /** What the per-address handshake cap counts under: IPv4, or the IPv6 /64 (`addressKey`). */
  readonly addressKey: string;
  readonly send: Send;
  association: ServerAssociation | undefined;
  handshake: PendingHandshake | undefined;
}

/** State of a handshake after its ClientHello carried a valid cookie (before that there is none). */
export interface PendingHandshake {
  state: 'await-client-key-exchange' | 'await-finished';
  readonly suite: CipherSuite;
  readonly extendedMasterSecret: boolean;
  readonly clientRandom: Buffer;
  readonly serverRandom: Buffer;
  /** message_seq of the ClientHello that carried the cookie; ours and the client's follow it. */
  readonly clientHelloSeq: number;
  readonly transcript: Hash;
  /** Our next epoch-0 record sequence number. */
  epoch0Seq: number;
  /** ServerHello and ServerHelloDone, kept to resend when the ClientHello comes again. */
  readonly flight: Buffer[];
  readonly reassembler: Reassembler;
  readonly replay: ReplayWindow;
  readonly timer: NodeJS.Timeout;
  identity?: Buffer;
  master?: Buffer;
  keys?: TrafficKeys;
  expectedClientVerify?: Buffer;
}

/**
 * Per-datagram context and parse scratch, reused from datagram to datagram. A listener that feeds
 * the server another datagram from inside an event gets the next context, so the outer datagram's
 * state is never overwritten.
 */
export interface DatagramContext {
  readonly rv: RecordView;
  readonly hv: HandshakeView;
  address: string;
  port: number;
  send: Send | undefined;
  length: number;
  peer: Peer | undefined;
  /** Resend our last flight once after this datagram: 'checked' only if no larger than the datagram. */
  resendServerHello: boolean;
  resendFinal: 'no' | 'checked' | 'authenticated';
}

/** What a completed handshake hands to its association. */
export interface AssociationInit {
  owner: DtlsServer;
  peer: Peer;
  identity: Buffer;
  suite: CipherSuite;
  extendedMasterSecret: boolean;
  read: RecordProtection;
  write: RecordProtection;
  replay: ReplayWindow;
  epoch0Seq: number;
  finishedMessage: Buffer;
  /** message_seq of the client's ClientKeyExchange and Finished, to recognise their retransmission. */
  clientKeyExchangeSeq: number;
  clientFinishedSeq: number;
  maxPlaintext: number;
}

/** An established association (RFC 6347 calls it a connection): keys, sequence numbers, replay window. */
export class ServerAssociation implements DtlsAssociation {
  readonly remoteAddress: string;
  readonly remotePort: number;
  readonly identity: Buffer;
  readonly extendedMasterSecret: boolean;
  lastReceivedAt: number;
  closed = false;
  readonly owner: DtlsServer;
  readonly peer: Peer;
  readonly suite: CipherSuite;
  readonly read: RecordProtection;
  readonly write: RecordProtection;
  readonly replay: ReplayWindow;
  readonly clientKeyExchangeSeq: number;
  readonly clientFinishedSeq: number;
  readonly maxPlaintext: number;
  /** Our next epoch-0 and epoch-1 record sequence numbers. */
  epoch0Seq: number;
  writeSeq = 0;
  /** Our Finished, kept until the client shows it has it (its first application record). */
  finalFlight: Buffer | undefined;
  /**
   * Its record layer runs in the server's record offload (offload.ts): the write sequence number,
   * the replay window and lastReceivedAt here are stale until the server takes it back.
   */
  offloaded = false;

  constructor(init: AssociationInit) {
    this.owner = init.owner;
    this.peer = init.peer;
    this.remoteAddress = init.peer.address;
    this.remotePort = init.peer.port;
    this.identity = init.identity;
    this.suite = init.suite;
    this.extendedMasterSecret = init.extendedMasterSecret;
    this.read = init.read;
    this.write = init.write;
    this.replay = init.replay;
    this.epoch0Seq = init.epoch0Seq;
    this.finalFlight = init.finishedMessage;
    this.clientKeyExchangeSeq = init.clientKeyExchangeSeq;
    this.clientFinishedSeq = init.clientFinishedSeq;
    this.maxPlaintext = init.maxPlaintext;
    this.lastReceivedAt = Date.now();
  }

  get cipherSuite(): number {
    return this.suite.id;
  }

  send(plaintext: Buffer): boolean {
    if (this.closed || plaintext.length > this.maxPlaintext) return false;
    if (this.offloaded) {
      const sent = this.owner.sendOffloaded(this, plaintext);
      if (sent !== undefined) return sent;
    }
    if (this.writeSeq > MAX_SEQUENCE) {
      // Never wrap the sequence number (RFC 6347 §4.1): this association is spent.
      this.owner.release(this, 'sequence-exhausted', true);
      return false;
    }
    const record = this.write.seal(ContentType.applicationData, 1, this.writeSeq++, plaintext);
    safeSend(this.peer.send, record);
    return true;
  }

  close(): void {
    if (this.closed) return;
    this.owner.release(this, 'local-close', true);
  }

  /** CCS (epoch 0) and Finished (epoch 1) in one datagram, with fresh record sequence numbers. */
  sendFinalFlight(): number {
    if (this.finalFlight === undefined) return 0;
    const ccs = plainRecord(ContentType.changeCipherSpec, DTLS_1_2, 0, this.epoch0Seq++, CCS_BODY);
    const fin = this.write.seal(ContentType.handshake, 1, this.writeSeq++, this.finalFlight);
    const datagram = Buffer.concat([ccs, fin]);
    safeSend(this.peer.send, datagram);
    return datagram.length;
  }

  /** Size of the final flight if it were resent now, for the no-amplification check. */
  finalFlightLength(): number {
    if (this.finalFlight === undefined) return 0;
    return 13 + 1 + this.write.overhead + this.finalFlight.length;
  }

  /** The record state handed to an offload. */
  recordState(): DtlsRecordState {
    const read = this.read.material();
    const write = this.write.material();
    return {
      remoteAddress: this.remoteAddress,
      remotePort: this.remotePort,
      cipherSuite: this.suite.id,
      epoch: 1,
      readKey: read.key,
      readIv: read.iv,
      writeKey: write.key,
      writeIv: write.iv,
      writeSeq: this.writeSeq,
      replay: this.replay.snapshot(),
      maxPlaintext: this.maxPlaintext,
    };
  }

  sendCloseNotify(): void {
    if (this.writeSeq > MAX_SEQUENCE) return;
    const alert = Buffer.from([AlertLevel.warning, AlertDescription.closeNotify]);
    safeSend(this.peer.send, this.write.seal(ContentType.alert, 1, this.writeSeq++, alert));
  }
}

export function safeSend(send: Send, datagram: Buffer): void {
  try {
    send(datagram);
  } catch {
    // The socket is closing or gone: the datagram is lost, as UDP may lose any datagram.
  }
}
