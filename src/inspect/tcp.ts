/**
 * One direction of a TCP connection, put back in order. Segments arrive as captured: out of
 * order, repeated (retransmissions), overlapping. Bytes are handed on exactly once, in stream
 * order; a hole is only declared a gap when it can no longer be filled (the peer acknowledged
 * past it, the out-of-order buffer is full, or the stream ended), and is then reported and
 * skipped: never filled with guessed bytes.
 *
 * Sequence numbers wrap at 2^32; positions handed out are stream offsets (0 = first byte after
 * the SYN, or the first byte seen when the SYN was not captured).
 */

export interface TcpSink {
  /** In-order bytes at stream offset `offset`. The buffer is only valid during the call. */
  data(bytes: Buffer, offset: number): void;
  /** `length` bytes at `offset` were never captured and are skipped. */
  gap(offset: number, length: number): void;
}

export interface TcpLimits {
  /** Out-of-order bytes held per direction; beyond this the oldest hole becomes a gap. */
  maxOutOfOrderBytes: number;
}

export const DEFAULT_TCP_LIMITS: TcpLimits = { maxOutOfOrderBytes: 4 << 20 };

interface Held {
  /** Stream offset (relative to the initial sequence number). */
  at: number;
  data: Buffer;
}

/** Signed distance a - b in sequence space. */
function seqDiff(a: number, b: number): number {
  return (a - b) | 0;
}

export class TcpReassembler {
  /** Sequence number of stream offset 0; undefined until the first segment. */
  private base: number | undefined;
  /** Next expected stream offset. */
  next = 0;
  private held: Held[] = [];
  private heldBytes = 0;
  finished = false;
  /** Stream offset of the FIN, once seen. */
  private finAt = Number.POSITIVE_INFINITY;
  /** Bytes skipped as gaps, for the summary. */
  gapBytes = 0;
  private readonly sink: TcpSink;
  private readonly limits: TcpLimits;

  constructor(sink: TcpSink, limits: Partial<TcpLimits> = {}) {
    this.sink = sink;
    this.limits = { ...DEFAULT_TCP_LIMITS, ...limits };
  }

  /** Stream offset for a sequence number (valid once a base is known). */
  private offsetOf(seq: number): number {
    return this.next + seqDiff(seq, (this.base! + this.next) >>> 0);
  }

  /** A captured segment of this direction. */
  segment(seq: number, syn: boolean, fin: boolean, payload: Buffer): void {
    if (syn) {
      if (this.base === undefined) this.base = (seq + 1) >>> 0;
      // The SYN's own sequence number is not data; a payload on a SYN (TFO) starts after it.
      seq = (seq + 1) >>> 0;
    }
    if (this.base === undefined) {
      if (payload.length === 0) return;
      this.base = seq;
    }
    const at = this.offsetOf(seq);
    if (fin) {
      this.finished = true;
      this.finAt = at + payload.length;
    }
    if (payload.length > 0) this.insert(at, payload);
  }

  /** The peer acknowledged everything before `ack`: a hole below it will never be filled. */
  acknowledged(ack: number): void {
    if (this.base === undefined) return;
    // The FIN takes a sequence number of its own: acknowledging it acknowledges no data.
    const upTo = Math.min(this.offsetOf(ack), this.finAt);
    // Skip only the holes below `upTo`: held segments inside the range are real bytes.
    while (upTo > this.next) {
      const held = this.held[0];
      this.skipTo(held !== undefined && held.at < upTo ? held.at : upTo);
    }
  }

  /** The capture ended: holes before held data become gaps, then the held data is delivered. */
  flush(): void {
    while (this.held.length > 0) this.skipTo(this.held[0]!.at);
  }

  private insert(at: number, payload: Buffer): void {
    const end = at + payload.length;
    if (end <= this.next) return; // a retransmission of bytes already delivered
    if (at < this.next) {
      payload = payload.subarray(this.next - at);
      at = this.next;
    }
    if (at === this.next) {
      // Deliver up to the first held segment (the first copy of a byte wins), drain what became
      // contiguous, then carry on with whatever of this payload lies beyond.
      const first = this.held[0];
      if (first !== undefined && first.at < end) {
        this.deliver(at, payload.subarray(0, first.at - at));
        this.drain();
        this.insert(at, payload);
        return;
      }
      this.deliver(at, payload);
      this.drain();
      return;
    }
    // Out of order: keep the parts not already held (first copy wins), as a copy.
    const pieces: Held[] = [];
    let cursor = at;
    for (const h of this.held) {
      const hEnd = h.at + h.data.length;
      if (hEnd <= cursor) continue;
      if (h.at >= end) break;
      if (h.at > cursor) pieces.push({ at: cursor, data: payload.subarray(cursor - at, h.at - at) });
      cursor = Math.max(cursor, hEnd);
      if (cursor >= end) break;
    }
    if (cursor < end) pieces.push({ at: cursor, data: payload.subarray(cursor - at) });
    for (const p of pieces) {
      const copy = Buffer.from(p.data);
      this.heldBytes += copy.length;
      const i = this.held.findIndex((h) => h.at > p.at);
      if (i < 0) this.held.push({ at: p.at, data: copy });
      else this.held.splice(i, 0, { at: p.at, data: copy });
    }
    while (this.heldBytes > this.limits.maxOutOfOrderBytes && this.held.length > 0) {
      this.skipTo(this.held[0]!.at);
    }
  }

  private deliver(at: number, data: Buffer): void {
    this.next = at + data.length;
    this.sink.data(data, at);
  }

  private drain(): void {
    while (this.held.length > 0) {
      const h = this.held[0]!;
      const hEnd = h.at + h.data.length;
      if (h.at > this.next) return;
      this.held.shift();
      this.heldBytes -= h.data.length;
      if (hEnd <= this.next) continue;
      this.deliver(this.next, h.data.subarray(this.next - h.at));
    }
  }

  /** Declares [next, offset) lost and carries on from `offset`. */
  private skipTo(offset: number): void {
    if (offset > this.next) {
      const length = offset - this.next;
      this.gapBytes += length;
      this.sink.gap(this.next, length);
      this.next = offset;
    }
    this.drain();
  }
}
