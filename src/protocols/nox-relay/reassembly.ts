/**
 * Segmentation reassembly (the protocol: sessions keyed by segment id and sender, any order, duplicates
 * overwrite, a timeout) with memory caps: per session, per client, per source address and
 * server-wide. A segment that would pass a cap is dropped and counted; nothing is allocated for
 * it first.
 *
 * `storeSegment` is the one reassembly of NoxVR segments: the relay (`Reassembly`, with its
 * budgets) and the inspector (src/protocols/nox-relay/inspect.ts, per flow and direction) both
 * run it. The generated Wireshark dissector carries the same steps in Lua (inspect.ts).
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

export interface SegmentLimits {
  /** Largest `totalSegments` accepted. */
  maxSegments: number;
  /** Sessions open at once for one sender. */
  maxSegmentSessions: number;
  /** Largest reassembled packet. */
  maxReassembledBytes: number;
  /** A session with no segment for this long is forgotten (Infinity: never). */
  segmentationTimeoutMs: number;
  /** When the sender's sessions are full: forget the oldest (true) or refuse the new one. */
  evictOldest: boolean;
}

/** What `storeSegment` reports besides its result, and the memory budget it asks. */
export interface SegmentHooks {
  /** A segment or session was dropped for `reason` (a `DropReason` value). */
  drop(reason: string, m: SegmentMessage): void;
  /** The reason `growth` more bytes cannot be held, or undefined when they can. */
  refuse?(growth: number): string | undefined;
  /** Bytes held changed by `delta` (positive on store, negative when a session is forgotten). */
  account?(delta: number): void;
}

/** Removes one session and returns its bytes to the budget. */
export function forgetSegmentSession(
  sessions: Map<number, SegmentSession>,
  id: number,
  s: SegmentSession,
  hooks: SegmentHooks,
): void {
  if (sessions.get(id) !== s) return;
  sessions.delete(id);
  hooks.account?.(-s.bytes);
}

/**
 * Stores one segment of one sender. Returns the whole packet when this segment completed its
 * session (a fresh buffer the caller owns), otherwise undefined.
 */
export function storeSegment(
  sessions: Map<number, SegmentSession>,
  m: SegmentMessage,
  now: number,
  o: SegmentLimits,
  hooks: SegmentHooks,
): Buffer | undefined {
  if (m.totalSegments === 0 || m.currentSegment >= m.totalSegments || m.totalSegments > o.maxSegments) {
    hooks.drop(DropReason.BadSegment, m);
    return undefined;
  }
  let s = sessions.get(m.segmentId);
  if (s !== undefined && (now - s.lastUpdate >= o.segmentationTimeoutMs || s.total !== m.totalSegments)) {
    forgetSegmentSession(sessions, m.segmentId, s, hooks);
    hooks.drop(DropReason.SegmentExpired, m);
    s = undefined;
  }
  const previous = s?.parts[m.currentSegment];
  const growth = m.segmentData.length - (previous?.length ?? 0);
  if (growth > 0 && hooks.refuse !== undefined) {
    const refused = hooks.refuse(growth);
    if (refused !== undefined) {
      // Memory cap: new segments wait until others complete or expire.
      hooks.drop(refused, m);
      return undefined;
    }
  }
  if (s === undefined) {
    if (sessions.size >= o.maxSegmentSessions) {
      if (!o.evictOldest || sessions.size === 0) {
        hooks.drop(DropReason.SegmentSessions, m);
        return undefined;
      }
      const [oldId, old] = sessions.entries().next().value!;
      forgetSegmentSession(sessions, oldId, old, hooks);
    }
    s = {
      total: m.totalSegments,
      parts: new Array(m.totalSegments),
      received: 0,
      bytes: 0,
      lastUpdate: now,
    };
    sessions.set(m.segmentId, s);
  }
  const bytes = s.bytes + growth;
  if (bytes > o.maxReassembledBytes) {
    forgetSegmentSession(sessions, m.segmentId, s, hooks);
    hooks.drop(DropReason.SegmentTooLarge, m);
    return undefined;
  }
  if (previous === undefined) s.received++;
  // The datagram or frame is only valid during this call: keep a copy.
  s.parts[m.currentSegment] = Buffer.from(m.segmentData);
  hooks.account?.(growth);
  s.bytes = bytes;
  s.lastUpdate = now;
  if (s.received < s.total) return undefined;
  forgetSegmentSession(sessions, m.segmentId, s, hooks);
  return Buffer.concat(s.parts as Buffer[], s.bytes);
}

/** The relay's reassembly: `storeSegment` per client, under the server-wide and per-address budgets. */
export class Reassembly {
  /** Bytes held, all clients together. */
  private total = 0;
  /** Bytes held per source address. */
  private readonly byIp = new Map<string, number>();
  private readonly options: ResolvedOptions;
  private readonly limits: SegmentLimits;
  private readonly metrics: ProtocolMetrics;
  /** The client of the call in progress (the hooks below are made once, not per segment). */
  private client: RelayClient | undefined;
  private readonly hooks: SegmentHooks;

  constructor(options: ResolvedOptions, metrics: ProtocolMetrics) {
    this.options = options;
    this.metrics = metrics;
    this.limits = {
      maxSegments: options.maxSegments,
      maxSegmentSessions: options.maxSegmentSessions,
      maxReassembledBytes: options.maxReassembledBytes,
      segmentationTimeoutMs: options.segmentationTimeoutMs,
      evictOldest: false,
    };
    this.hooks = {
      drop: (reason) => this.metrics.drop(reason),
      refuse: (growth) => {
        if (this.total + growth > this.options.maxReassemblyBudget) return DropReason.ReassemblyBudget;
        if (this.bytesHeldBy(this.client!.addressKey) + growth > this.options.maxReassemblyBytesPerIp)
          return DropReason.ReassemblyBudgetIp;
        return undefined;
      },
      account: (delta) => this.account(this.client!.addressKey, delta),
    };
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
    this.client = client;
    const whole = storeSegment(client.segments, m, now, this.limits, this.hooks);
    if (whole !== undefined) this.metrics.count(Counter.SegmentsReassembled);
    return whole;
  }

  /** Removes one session and returns its bytes to the budgets. */
  forget(client: RelayClient, id: number, s: SegmentSession): void {
    this.client = client;
    forgetSegmentSession(client.segments, id, s, this.hooks);
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
