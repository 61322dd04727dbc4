import { Counter, Gauge, Registry } from 'prom-client';

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
  /** Connections currently open (TCP) or bindings currently live (UDP). */
  open = 0;
  /** Drops and closes by reason: `bad_hmac`, `malformed`, `rate_limited`, `idle_timeout`, … */
  readonly dropped = new Map<string, number>();
  readonly closed = new Map<string, number>();
  /** Anything else a protocol wants counted (`unimplemented_calls`, `cache_misses`, …). */
  readonly counters = new Map<string, number>();

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
      open: this.open,
      dropped: Object.fromEntries(this.dropped),
      closed: Object.fromEntries(this.closed),
      counters: Object.fromEntries(this.counters),
    };
  }
}

/** Exposes every protocol's counters to Prometheus through one registry. */
export function createRegistry(all: () => Iterable<ProtocolMetrics>): Registry {
  const registry = new Registry();
  new Counter({
    name: 'gamewire_messages_received_total',
    help: 'Datagrams or frames accepted',
    labelNames: ['protocol'],
    registers: [registry],
    collect() {
      this.reset();
      for (const m of all()) this.inc({ protocol: m.protocol }, m.received);
    },
  });
  const fromMaps = (
    name: string,
    help: string,
    pick: (m: ProtocolMetrics) => Map<string, number>,
    label: string,
  ) =>
    new Counter({
      name,
      help,
      labelNames: ['protocol', label],
      registers: [registry],
      collect() {
        this.reset();
        for (const m of all())
          for (const [k, v] of pick(m)) this.inc({ protocol: m.protocol, [label]: k }, v);
      },
    });
  fromMaps('gamewire_dropped_total', 'Input dropped, by reason', (m) => m.dropped, 'reason');
  fromMaps('gamewire_connections_closed_total', 'Connections closed, by reason', (m) => m.closed, 'reason');
  fromMaps('gamewire_events_total', 'Protocol-specific events', (m) => m.counters, 'event');
  new Gauge({
    name: 'gamewire_open',
    help: 'Open connections or live bindings',
    labelNames: ['protocol'],
    registers: [registry],
    collect() {
      for (const m of all()) this.set({ protocol: m.protocol }, m.open);
    },
  });
  return registry;
}
