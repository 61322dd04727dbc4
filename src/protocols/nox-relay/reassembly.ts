/**
 * Segmentation reassembly (the protocol: sessions keyed by segment id and sender, any order, duplicates
 * overwrite, a timeout) with memory caps: per session, per client, per source address and
 * server-wide. A segment that would pass a cap is dropped and counted; nothing is allocated for
 * it first.
 */
import type { ProtocolMetrics } from '../../core/metrics.js';
import type { ResolvedOptions } from './options.js';
import { Counter, DropReason } from './reasons.js';
import type { RelayClient, SegmentSession } from './session.js';

export interface SegmentMessage {
  segmentId: number;
  totalSegments: number;
  currentSegment: number;
  segmentData: Uint8Array;
}

export class Reassembly {
  /** Bytes held, all clients together. */
  private total = 0;
  /** Bytes held per source address. */
  private readonly byIp = new Map<string, number>();
  private readonly options: ResolvedOptions;
  private readonly metrics: ProtocolMetrics;

  constructor(options: ResolvedOptions, metrics: ProtocolMetrics) {
    this.options = options;
    this.metrics = metrics;
  }

  /** Bytes currently held, all clients together. */
  get bytesHeld(): number {
    return this.total;
  }

  /** Bytes currently held for the clients of one address (its `addressKey`). */
  bytesHeldBy(key: string): number {
    return this.byIp.get(key) ?? 0;
  }

  private account(key: string, delta: number): void {
    this.total += delta;
    const n = (this.byIp.get(key) ?? 0) + delta;
    if (n <= 0) this.byIp.delete(key);
    else this.byIp.set(key, n);
  }

  /**
   * Stores one segment. Returns the whole packet when this segment completed its session (a
   * fresh buffer the caller owns), otherwise undefined.
   */
  accept(client: RelayClient, m: SegmentMessage, now: number): Buffer | undefined {
    const o = this.options;
    if (m.totalSegments === 0 || m.currentSegment >= m.totalSegments || m.totalSegments > o.maxSegments) {
      this.metrics.drop(DropReason.BadSegment);
      return undefined;
    }
    let s = client.segments.get(m.segmentId);
    if (s !== undefined && (now - s.lastUpdate >= o.segmentationTimeoutMs || s.total !== m.totalSegments)) {
      this.forget(client, m.segmentId, s);
      this.metrics.drop(DropReason.SegmentExpired);
      s = undefined;
    }
    const previous = s?.parts[m.currentSegment];
    const growth = m.segmentData.length - (previous?.length ?? 0);
    if (growth > 0) {
      if (this.total + growth > o.maxReassemblyBudget) {
        // Memory cap: new segments wait until others complete or expire.
        this.metrics.drop(DropReason.ReassemblyBudget);
        return undefined;
      }
      if (this.bytesHeldBy(client.addressKey) + growth > o.maxReassemblyBytesPerIp) {
        this.metrics.drop(DropReason.ReassemblyBudgetIp);
        return undefined;
      }
    }
    if (s === undefined) {
      if (client.segments.size >= o.maxSegmentSessions) {
        this.metrics.drop(DropReason.SegmentSessions);
        return undefined;
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
    const bytes = s.bytes + growth;
    if (bytes > o.maxReassembledBytes) {
      this.forget(client, m.segmentId, s);
      this.metrics.drop(DropReason.SegmentTooLarge);
      return undefined;
    }
    if (previous === undefined) s.received++;
    // The datagram or frame is only valid during this call: keep a copy.
    s.parts[m.currentSegment] = Buffer.from(m.segmentData);
    this.account(client.addressKey, growth);
    s.bytes = bytes;
    s.lastUpdate = now;
    if (s.received < s.total) return undefined;
    this.forget(client, m.segmentId, s);
    this.metrics.count(Counter.SegmentsReassembled);
    return Buffer.concat(s.parts as Buffer[], s.bytes);
  }

  /** Removes one session and returns its bytes to the budgets. */
  forget(client: RelayClient, id: number, s: SegmentSession): void {
    if (client.segments.get(id) !== s) return;
    client.segments.delete(id);
    this.account(client.addressKey, -s.bytes);
  }

  /** Removes every session of a client that is going away. */
  forgetAll(client: RelayClient): void {
    for (const [id, s] of [...client.segments]) this.forget(client, id, s);
  }

  /** Drops the client's sessions that had no segment for the segmentation timeout. */
  expire(client: RelayClient, now: number): void {
    if (client.segments.size === 0) return;
    for (const [id, s] of [...client.segments]) {
      if (now - s.lastUpdate >= this.options.segmentationTimeoutMs) {
        this.forget(client, id, s);
        this.metrics.drop(DropReason.SegmentExpired);
      }
    }
  }
}
