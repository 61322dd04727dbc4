/**
 * The Redis a fleet process keeps its control plane in, as `/metrics` shows it (read when
 * scraped; src/core/redis.ts keeps it).
 */
export interface StoreState {
  /** One Redis, or a Sentinel set. */
  mode: 'single' | 'sentinel';
  /** True while commands can be sent. */
  up: boolean;
  /** `host:port` of the server this process talks to (the primary; '' before the first). */
  primary: string;
  /** Times this process came back on another primary than before (failovers it went through). */
  failovers: number;
  /** How long this process was without a primary in the last of them, in seconds (0: none yet). */
  lastFailoverSeconds: number;
  /** Durable writes refused because too few replicas held them in time. */
  durabilityErrors: number;
  /** Durable writes acknowledged after replicas held them. */
  durableWrites: number;
  /** Replicas a durable write waits for (0: none). */
  waitReplicas: number;
}

/**
 * Per-protocol counters. The hot path only bumps plain numbers (`received++`); prom-client reads
 * them when scraped, so counting costs nothing per packet beyond an increment.
 */
export class ProtocolMetrics {
  readonly protocol: string;
  /** Datagrams or frames accepted. */
  received = 0;
  /** Datagrams or frames sent. */
  sent = 0;
  /** Bytes of the datagrams or frames counted in `received` (as they arrived: headers included). */
  bytesReceived = 0;
  /** Bytes of the datagrams or frames counted in `sent`. */
  bytesSent = 0;
  /** Connections currently open (TCP) or bindings currently live (UDP). */
  open = 0;
  /** Drops and closes by reason: `bad_hmac`, `malformed`, `rate_limited`, `idle_timeout`, … */
  readonly dropped = new Map<string, number>();
  readonly closed = new Map<string, number>();
  /** Anything else a protocol wants counted (`unimplemented_calls`, `cache_misses`, …). */
  readonly counters = new Map<string, number>();
  /** Current values a protocol reports (a fleet node's `players`, `heartbeat_age_ms`, …). */
  readonly gauges = new Map<string, number>();
  /**
   * Gauges per node of a fleet: gauge name (`node_allocations`, `node_load`,
   * `node_heartbeat_age_seconds`) → node id → value. Set by scaled-out servers, read when scraped.
   */
  readonly nodeGauges = new Map<string, Map<string, number>>();
  /** The fleet's Redis, when this server has one (set by the fleet code). */
  store: (() => StoreState) | undefined = undefined;

  constructor(protocol: string) {
    this.protocol = protocol;
  }

  drop(reason: string): void {
    this.dropped.set(reason, (this.dropped.get(reason) ?? 0) + 1);
  }

  close(reason: string): void {
    this.closed.set(reason, (this.closed.get(reason) ?? 0) + 1);
  }

  count(name: string, by = 1): void {
    this.counters.set(name, (this.counters.get(name) ?? 0) + by);
  }

  /** Plain object for tests, logs and the `serve` shutdown summary. */
  snapshot(): Record<string, unknown> {
    return {
      received: this.received,
      sent: this.sent,
      bytesReceived: this.bytesReceived,
      bytesSent: this.bytesSent,
      open: this.open,
      dropped: Object.fromEntries(this.dropped),
      closed: Object.fromEntries(this.closed),
      counters: Object.fromEntries(this.counters),
    };
  }
}

/**
 * The one-line form of the counters for the shutdown summary: only what is non-zero,
 * `rmc received=10 sent=10 closed.idle_timeout=2`.
 */
export function summaryLine(m: ProtocolMetrics): string {
  const parts = [m.protocol];
  if (m.received > 0) parts.push(`received=${m.received}`);
  if (m.sent > 0) parts.push(`sent=${m.sent}`);
  const add = (prefix: string, map: Map<string, number>) => {
    for (const [k, v] of map) if (v > 0) parts.push(`${prefix}.${k}=${v}`);
  };
  add('dropped', m.dropped);
  add('closed', m.closed);
  add('events', m.counters);
  return parts.join(' ');
}
