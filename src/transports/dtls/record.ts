import { DTLS_1_0, DTLS_1_2, RECORD_HEADER_LENGTH } from './constants.js';
import type { ReplaySnapshot } from './offload.js';

/**
 * One record's header fields, filled in place by `readRecord` (one instance reused per datagram
 * walk, so parsing a datagram allocates only the fragment views).
 */
export class RecordView {
  type = 0;
  version = 0;
  epoch = 0;
  seq = 0;
  /** Offset of the fragment in the datagram, and its length. */
  fragmentStart = 0;
  fragmentLength = 0;
  /** Offset just past this record: where the next one starts. */
  end = 0;
}

/** Why a record header was rejected (also the drop reason reported to the caller). */
export type RecordFault = 'truncated-record' | 'bad-record-version';

/**
 * Reads the record header at `offset` (RFC 6347 §4.1). Returns undefined and fills `view` when it
 * is well formed and its fragment lies inside the datagram, else the fault. Never reads past
 * `datagram.length`.
 */
export function readRecord(datagram: Buffer, offset: number, view: RecordView): RecordFault | undefined {
  if (datagram.length - offset < RECORD_HEADER_LENGTH) return 'truncated-record';
  const version = datagram.readUInt16BE(offset + 1);
  if (version !== DTLS_1_2 && version !== DTLS_1_0) return 'bad-record-version';
  const length = datagram.readUInt16BE(offset + 11);
  const start = offset + RECORD_HEADER_LENGTH;
  if (datagram.length - start < length) return 'truncated-record';
  view.type = datagram[offset]!;
  view.version = version;
  view.epoch = datagram.readUInt16BE(offset + 3);
  view.seq = datagram.readUIntBE(offset + 5, 6);
  view.fragmentStart = start;
  view.fragmentLength = length;
  view.end = start + length;
  return undefined;
}

/** Writes an unprotected (epoch 0) record around `fragment`. */
export function plainRecord(
  type: number,
  version: number,
  epoch: number,
  seq: number,
  fragment: Buffer,
): Buffer {
  const out = Buffer.allocUnsafe(RECORD_HEADER_LENGTH + fragment.length);
  out[0] = type;
  out.writeUInt16BE(version, 1);
  out.writeUInt16BE(epoch, 3);
  out.writeUIntBE(seq, 5, 6);
  out.writeUInt16BE(fragment.length, 11);
  fragment.copy(out, RECORD_HEADER_LENGTH);
  return out;
}

/**
 * The anti-replay window of RFC 6347 §4.1.2.6: 64 sequence numbers below the highest one
 * accepted, kept as two 32-bit words (bit i = "highest − i was seen"). `isFresh` before
 * decrypting, `mark` only after the record authenticated.
 */
export class ReplayWindow {
  #highest = -1;
  #low = 0;
  #high = 0;

  /** The window as plain numbers (handed to a record-layer offload and back). */
  snapshot(): ReplaySnapshot {
    return { highest: this.#highest, low: this.#low, high: this.#high };
  }

  /** Sets the window to a snapshot (taken from this window, maybe advanced by an offload since). */
  restore(s: ReplaySnapshot): void {
    this.#highest = s.highest;
    this.#low = s.highest < 0 ? 0 : s.low >>> 0;
    this.#high = s.highest < 0 ? 0 : s.high >>> 0;
  }

  isFresh(seq: number): boolean {
    if (seq > this.#highest) return true;
    const back = this.#highest - seq;
    if (back >= 64) return false;
    const bit = back < 32 ? (this.#low >>> back) & 1 : (this.#high >>> (back - 32)) & 1;
    return bit === 0;
  }

  mark(seq: number): void {
    if (seq > this.#highest) {
      const shift = this.#highest < 0 ? 64 : seq - this.#highest;
      if (shift >= 64) {
        this.#low = 0;
        this.#high = 0;
      } else if (shift >= 32) {
        this.#high = shift === 32 ? this.#low : (this.#low << (shift - 32)) >>> 0;
        this.#low = 0;
      } else {
        this.#high = ((this.#high << shift) | (this.#low >>> (32 - shift))) >>> 0;
        this.#low = (this.#low << shift) >>> 0;
      }
      this.#highest = seq;
      this.#low = (this.#low | 1) >>> 0;
      return;
    }
    const back = this.#highest - seq;
    if (back >= 64) return;
    if (back < 32) this.#low = (this.#low | (1 << back)) >>> 0;
    else this.#high = (this.#high | (1 << (back - 32))) >>> 0;
  }
}
