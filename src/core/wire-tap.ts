/**
 * The wire view's tap: a bounded, sampled ring of the messages one server handled, for the admin
 * endpoint's live wire view (docs/dashboard-api.md).
 *
 * Cost when nobody looks: the protocol checks `tap.armed` (one boolean) per message and calls
 * nothing else. The tap is armed while a wire client polled or streamed in the last
 * `armedForMs` (10 s); then at most `ratePerSecond` messages a second are copied (up to
 * `maxBytes` each) into a ring of `capacity`; the rest are only counted (`seen`). Decoding and
 * secret masking happen when a client reads, never on the hot path.
 */
import { ConfigError } from './errors.js';
import type { Direction } from './protocol.js';

export interface WireTapOptions {
  /** Messages kept. Default 1000. */
  capacity?: number;
  /** Messages copied per second, at most. Default 200. */
  ratePerSecond?: number;
  /** Bytes kept of one message (the rest is cut, `truncated`). Default 4096. */
  maxBytes?: number;
  /** How long one read keeps the tap armed. Default 10 000 ms. */
  armedForMs?: number;
  /**
   * Masks secret byte ranges of a copied message in place (connection data, HMACs, tickets), so
   * they never sit in the ring. Called on the copy only.
   */
  maskSecrets?: (bytes: Buffer, direction: Direction, transport: string) => void;
  now?: () => number;
}

/** One message as the ring keeps it: raw (masked) bytes, decoded only when served. */
export interface TappedMessage {
  seq: number;
  at: number;
  direction: Direction;
  connection: string | null;
  transport: string;
  bytes: Buffer;
  /** Length of the whole message (may exceed `bytes.length`). */
  length: number;
  truncated: boolean;
}

export const WIRE_TAP_DEFAULTS = {
  capacity: 1000,
  ratePerSecond: 200,
  maxBytes: 4096,
  armedForMs: 10_000,
} as const;

export class WireTap {
  /** True while someone watches: the only thing the hot path reads. */
  armed = false;
  /** Messages offered while armed. */
  seen = 0;
  /** Messages copied into the ring. */
  sampled = 0;
  readonly capacity: number;
  readonly ratePerSecond: number;
  readonly maxBytes: number;
  readonly armedForMs: number;
  private readonly ring: (TappedMessage | undefined)[];
  private nextSeq = 1;
  private windowStart = 0;
  private windowCount = 0;
  private armedUntil = 0;
  private disarmTimer: NodeJS.Timeout | undefined;
  private readonly maskSecrets: WireTapOptions['maskSecrets'];
  private readonly now: () => number;
  private readonly armListeners = new Set<(armed: boolean) => void>();

  constructor(options: WireTapOptions = {}) {
    this.capacity = positive(options.capacity ?? WIRE_TAP_DEFAULTS.capacity, 'capacity');
    this.ratePerSecond = positive(options.ratePerSecond ?? WIRE_TAP_DEFAULTS.ratePerSecond, 'ratePerSecond');
    this.maxBytes = positive(options.maxBytes ?? WIRE_TAP_DEFAULTS.maxBytes, 'maxBytes');
    this.armedForMs = positive(options.armedForMs ?? WIRE_TAP_DEFAULTS.armedForMs, 'armedForMs');
    this.ring = new Array(this.capacity);
    this.maskSecrets = options.maskSecrets;
    this.now = options.now ?? Date.now;
  }

  /** Called on every change of `armed` (the unity-relay data plane moves bindings to JavaScript). */
  onArmedChange(listener: (armed: boolean) => void): () => void {
    this.armListeners.add(listener);
    return () => this.armListeners.delete(listener);
  }

  /** A wire client read: keep the tap armed for `armedForMs` from now. */
  arm(): void {
    this.armedUntil = this.now() + this.armedForMs;
    if (!this.armed) {
      this.armed = true;
      this.emitArmed(true);
    }
    if (this.disarmTimer === undefined) this.scheduleDisarm(this.armedForMs);
  }

  /** Disarms now (server closing, tests). */
  disarm(): void {
    clearTimeout(this.disarmTimer);
    this.disarmTimer = undefined;
    this.armedUntil = 0;
    if (this.armed) {
      this.armed = false;
      this.emitArmed(false);
    }
  }

  private scheduleDisarm(ms: number): void {
    this.disarmTimer = setTimeout(() => {
      this.disarmTimer = undefined;
      const left = this.armedUntil - this.now();
      if (left > 0) this.scheduleDisarm(left);
      else this.disarm();
    }, ms);
    this.disarmTimer.unref();
  }

  private emitArmed(armed: boolean): void {
    for (const l of this.armListeners) {
      try {
        l(armed);
      } catch {
        // a listener's failure must not stop the tap
      }
    }
  }

  /**
   * Offers one whole message (`buf[start..end)`). Call only when `armed`; copies it when the
   * per-second budget allows.
   */
  record(
    direction: Direction,
    connection: string | number | null,
    transport: string,
    buf: Uint8Array,
    start = 0,
    end = buf.length,
  ): void {
    if (this.sample()) this.keep(direction, connection, transport, buf, start, end);
  }

  /**
   * Counts one message offered and says whether the budget lets it be kept: for callers whose
   * connection id costs something to build (`if (tap.armed && tap.sample()) tap.keep(…)`).
   */
  sample(): boolean {
    if (!this.armed) return false;
    this.seen++;
    const now = this.now();
    if (now - this.windowStart >= 1000) {
      this.windowStart = now;
      this.windowCount = 0;
    }
    if (this.windowCount >= this.ratePerSecond) return false;
    this.windowCount++;
    return true;
  }

  /** Copies one message `sample()` admitted. */
  keep(
    direction: Direction,
    connection: string | number | null,
    transport: string,
    buf: Uint8Array,
    start = 0,
    end = buf.length,
  ): void {
    const length = Math.max(0, end - start);
    const kept = Math.min(length, this.maxBytes);
    const bytes = Buffer.allocUnsafe(kept);
    bytes.set(buf.subarray(start, start + kept));
    if (this.maskSecrets !== undefined) {
      try {
        this.maskSecrets(bytes, direction, transport);
      } catch {
        bytes.fill(0);
      }
    }
    const seq = this.nextSeq++;
    this.ring[seq % this.capacity] = {
      seq,
      at: this.now(),
      direction,
      connection: connection === null ? null : String(connection),
      transport,
      bytes,
      length,
      truncated: kept < length,
    };
    this.sampled++;
  }

  /** The sequence number the next message will get. */
  get next(): number {
    return this.nextSeq;
  }

  /** Up to `limit` kept messages with `seq > after`, oldest first. */
  since(after: number, limit: number): TappedMessage[] {
    const out: TappedMessage[] = [];
    const oldest = Math.max(after + 1, this.nextSeq - this.capacity, 1);
    for (let seq = oldest; seq < this.nextSeq && out.length < limit; seq++) {
      const m = this.ring[seq % this.capacity];
      if (m !== undefined && m.seq === seq) out.push(m);
    }
    return out;
  }

  close(): void {
    this.disarm();
    this.armListeners.clear();
  }
}

function positive(n: number, name: string): number {
  if (!Number.isInteger(n) || n < 1)
    throw new ConfigError(`wire tap ${name} must be a whole number ≥ 1`, name);
  return n;
}
