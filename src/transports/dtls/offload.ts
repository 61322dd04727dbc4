/**
 * Handing an established association's record layer to someone else, and taking it back.
 *
 * The handshake, alerts and every rule of docs/dtls.md stay in `DtlsServer`. What an offload takes
 * is the record layer of one association: it opens that peer's application records (checking the
 * epoch, the replay window and the tag), and seals records to it with the next sequence number.
 * While it does, the server does not touch the association's mutable record state (write
 * sequence number, replay window, last-received time); when it needs them (a datagram it must
 * read itself, an alert, a close, a resend of its Finished, the idle sweep) it takes the
 * association back (`detach`: the state comes back as the offload left it), acts, and hands it
 * over again. So the server's state is the truth whenever it acts on it.
 *
 * A datagram the offload inspected for an association it holds and found nothing in that needs
 * the association's state (a ClientHello, a flight of a handshake the server expects) comes to
 * `handleDatagram` with that association as `keptBy`: the server leaves it with the offload.
 * An offload drops junk (whatever does not authenticate under the association's keys) itself,
 * and never hands an association back for it.
 *
 * Keys live once: an offload may zero the key and IV Buffers of the state it was given (they are
 * the association's own) once it holds them; `detach` must then write them back into the same
 * Buffers. An offload that loses an association it accepted (detach → undefined) loses its keys:
 * the server then ends the association.
 *
 * The unity-relay native data plane is such an offload (src/protocols/unity-relay/native-dtls.ts);
 * see docs/native-dataplane.md for who owns which state when.
 */
import type { DtlsAssociation } from './api.js';

/** The 64-entry anti-replay window: highest sequence number accepted (-1: none yet) and the bits below it. */
export interface ReplaySnapshot {
  /** Highest accepted sequence number, or -1 when nothing was accepted yet. */
  highest: number;
  /** Bit i set = `highest − i` was accepted (i < 32). */
  low: number;
  /** Bit i set = `highest − 32 − i` was accepted. */
  high: number;
}

/** Everything needed to run one association's record layer (epoch 1, RFC 6347 §4.1). */
export interface DtlsRecordState {
  readonly remoteAddress: string;
  readonly remotePort: number;
  /** IANA id of the negotiated suite (`CIPHER_SUITES`). */
  readonly cipherSuite: number;
  readonly epoch: number;
  /** client_write key and IV: what the peer seals with, so what we open with. */
  readonly readKey: Buffer;
  readonly readIv: Buffer;
  /** server_write key and IV. */
  readonly writeKey: Buffer;
  readonly writeIv: Buffer;
  /** Next sequence number to send. */
  readonly writeSeq: number;
  readonly replay: ReplaySnapshot;
  /** Largest application plaintext accepted (larger records are dropped as `record-too-large`). */
  readonly maxPlaintext: number;
}

/** What comes back when the server takes an association back. */
export interface DtlsRecordProgress {
  writeSeq: number;
  replay: ReplaySnapshot;
  /** Milliseconds since the offload last accepted a record from the peer, if it did. */
  idleMs: number | undefined;
  /** The offload accepted an application record (so the peer has our Finished). */
  applicationDataSeen: boolean;
}

/** The outcome of sealing through the offload. */
export type OffloadSendResult = 'sent' | 'exhausted' | 'detached';

export interface DtlsRecordOffload {
  /**
   * Takes over the association's record layer from `state`. Returns false when it cannot (a suite
   * it does not implement, no room): the server then keeps doing it itself.
   */
  attach(a: DtlsAssociation, state: DtlsRecordState): boolean;
  /** Stops handling the association and returns the state it reached (undefined if it held none). */
  detach(a: DtlsAssociation): DtlsRecordProgress | undefined;
  /** Seals `plaintext` as one record of `contentType` in one datagram, with the next sequence number. */
  send(a: DtlsAssociation, contentType: number, plaintext: Buffer): OffloadSendResult;
  /** Milliseconds since the last record it accepted from the peer, if any (for the idle sweep). */
  idleMs(a: DtlsAssociation): number | undefined;
  /**
   * The server has a new handshake in progress from the association's address and port (a
   * reconnection whose address a cookie proved), or no longer. While it has, the offload hands it
   * the epoch-0 records and the epoch-1 handshake records that do not authenticate under the held
   * association's keys (the new session's flight and Finished) instead of dropping them.
   */
  handshakePending?(a: DtlsAssociation, pending: boolean): void;
}
