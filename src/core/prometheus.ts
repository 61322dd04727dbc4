import { Counter, collectDefaultMetrics, Gauge, Registry } from 'prom-client';
import type { ProtocolMetrics, StoreState } from './metrics.js';

/** Per-node gauges of a scaled-out fleet (`ProtocolMetrics.nodeGauges`), as each protocol reports them. */
const NODE_GAUGES: readonly { name: string; help: string }[] = [
  { name: 'node_allocations', help: 'Allocations (or sessions) a fleet node holds, by node' },
  { name: 'node_load', help: 'Load a fleet node reports (bound allocations, players), by node' },
  { name: 'node_heartbeat_age_seconds', help: "Age of a fleet node's last heartbeat, by node" },
];

/** Every metric gamewire exposes, for docs/config.md and the test that keeps them documented. */
export const METRIC_DOCS: readonly { name: string; type: string; labels: string; help: string }[] = [
  {
    name: 'gamewire_messages_received_total',
    type: 'counter',
    labels: 'protocol',
    help: 'Datagrams or frames accepted',
  },
  {
    name: 'gamewire_messages_sent_total',
    type: 'counter',
    labels: 'protocol',
    help: 'Datagrams or frames sent',
  },
  {
    name: 'gamewire_bytes_received_total',
    type: 'counter',
    labels: 'protocol',
    help: 'Bytes of the datagrams or frames accepted',
  },
  {
    name: 'gamewire_bytes_sent_total',
    type: 'counter',
    labels: 'protocol',
    help: 'Bytes of the datagrams or frames sent',
  },
  {
    name: 'gamewire_dropped_total',
    type: 'counter',
    labels: 'protocol, reason',
    help: 'Input dropped, by reason',
  },
  {
    name: 'gamewire_connections_closed_total',
    type: 'counter',
    labels: 'protocol, reason',
    help: 'Connections closed, by reason',
  },
  {
    name: 'gamewire_events_total',
    type: 'counter',
    labels: 'protocol, event',
    help: 'Protocol-specific events',
  },
  { name: 'gamewire_open', type: 'gauge', labels: 'protocol', help: 'Open connections or live bindings' },
  {
    name: 'gamewire_gauge',
    type: 'gauge',
    labels: 'protocol, name',
    help: 'Protocol-specific current values (a fleet node: players, load, heartbeat_age_ms)',
  },
  {
    name: 'gamewire_up',
    type: 'gauge',
    labels: 'protocol',
    help: "1 while the protocol's server is running",
  },
  ...NODE_GAUGES.map((g) => ({
    name: `gamewire_${g.name}`,
    type: 'gauge',
    labels: 'protocol, node',
    help: g.help,
  })),
  {
    name: 'gamewire_store_up',
    type: 'gauge',
    labels: 'protocol',
    help: "A fleet process's Redis: 1 while commands can be sent, 0 while it is down or failing over",
  },
  {
    name: 'gamewire_store_primary_info',
    type: 'gauge',
    labels: 'protocol, mode, primary',
    help: 'Always 1: the Redis server a fleet process writes to (host:port) and how it found it (single or sentinel)',
  },
  {
    name: 'gamewire_store_failovers_total',
    type: 'counter',
    labels: 'protocol',
    help: 'Times a fleet process came back on another Redis primary than before (failovers it went through)',
  },
  {
    name: 'gamewire_store_last_failover_seconds',
    type: 'gauge',
    labels: 'protocol',
    help: 'How long a fleet process was without a Redis primary in the last failover it went through',
  },
  {
    name: 'gamewire_store_durable_writes_total',
    type: 'counter',
    labels: 'protocol',
    help: 'Writes acknowledged once enough Redis replicas held them (WAIT)',
  },
  {
    name: 'gamewire_store_durability_errors_total',
    type: 'counter',
    labels: 'protocol',
    help: "Writes refused (503, or the protocol's own error) because too few Redis replicas held them in time",
  },
  {
    name: 'gamewire_process_* and gamewire_nodejs_*',
    type: 'various',
    labels: '',
    help: "prom-client's default process and runtime metrics: CPU seconds (the process's total since it started, as ps shows), memory, open file descriptors, start time, heap, event-loop lag; the GC and event-loop-delay histograms count from when the admin endpoint started (just after the process)",
  },
];

/** prom-client's CPU counters, which it counts from when they are made; replaced by `processCpu`. */
const CPU_COUNTERS: readonly { name: string; help: string; pick: (u: NodeJS.CpuUsage) => number }[] = [
  {
    name: 'gamewire_process_cpu_user_seconds_total',
    help: 'Total user CPU time spent in seconds.',
    pick: (u) => u.user,
  },
  {
    name: 'gamewire_process_cpu_system_seconds_total',
    help: 'Total system CPU time spent in seconds.',
    pick: (u) => u.system,
  },
  {
    name: 'gamewire_process_cpu_seconds_total',
    help: 'Total user and system CPU time spent in seconds.',
    pick: (u) => u.user + u.system,
  },
];

/**
 * The process's CPU time since it started, read from `process.cpuUsage()` at each scrape.
 * prom-client's own counters add the difference since the previous read, starting from when the
 * registry was made, so a process that worked before its first scrape reported almost nothing.
 */
function processCpu(registry: Registry): void {
  for (const c of CPU_COUNTERS) {
    registry.removeSingleMetric(c.name);
    new Counter({
      name: c.name,
      help: c.help,
      registers: [registry],
      collect() {
        this.reset();
        this.inc(c.pick(process.cpuUsage()) / 1e6);
      },
    });
  }
}

/**
 * Exposes every protocol's counters to Prometheus through one registry, plus the process and
 * runtime metrics (prefixed `gamewire_`). The hot path only bumps plain numbers; they are read
 * here when scraped. CPU, memory, file descriptors and the start time are the process's own
 * totals whenever the registry is made; the GC and event-loop-delay histograms count from when it
 * is made (Node keeps no history of them), so `serve` makes it as its admin endpoint starts.
 */
export function createRegistry(
  all: () => Iterable<ProtocolMetrics>,
  up: () => Iterable<string> = () => [],
): Registry {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, prefix: 'gamewire_' });
  processCpu(registry);
  const plain = (name: string, help: string, pick: (m: ProtocolMetrics) => number) =>
    new Counter({
      name,
      help,
      labelNames: ['protocol'],
      registers: [registry],
      collect() {
        this.reset();
        for (const m of all()) this.inc({ protocol: m.protocol }, pick(m));
      },
    });
  plain('gamewire_messages_received_total', 'Datagrams or frames accepted', (m) => m.received);
  plain('gamewire_messages_sent_total', 'Datagrams or frames sent', (m) => m.sent);
  plain('gamewire_bytes_received_total', 'Bytes of the datagrams or frames accepted', (m) => m.bytesReceived);
  plain('gamewire_bytes_sent_total', 'Bytes of the datagrams or frames sent', (m) => m.bytesSent);
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
  new Gauge({
    name: 'gamewire_gauge',
    help: 'Protocol-specific current values (a fleet node: players, load, heartbeat_age_ms)',
    labelNames: ['protocol', 'name'],
    registers: [registry],
    collect() {
      this.reset();
      for (const m of all()) for (const [k, v] of m.gauges) this.set({ protocol: m.protocol, name: k }, v);
    },
  });
  new Gauge({
    name: 'gamewire_up',
    help: "1 while the protocol's server is running",
    labelNames: ['protocol'],
    registers: [registry],
    collect() {
      this.reset();
      for (const p of up()) this.set({ protocol: p }, 1);
    },
  });
  for (const g of NODE_GAUGES)
    new Gauge({
      name: `gamewire_${g.name}`,
      help: g.help,
      labelNames: ['protocol', 'node'],
      registers: [registry],
      collect() {
        this.reset();
        for (const m of all())
          for (const [node, v] of m.nodeGauges.get(g.name) ?? []) this.set({ protocol: m.protocol, node }, v);
      },
    });
  const stores = () => {
    const out: [string, StoreState][] = [];
    for (const m of all()) {
      const state = m.store?.();
      if (state !== undefined) out.push([m.protocol, state]);
    }
    return out;
  };
  const storeGauge = (name: string, help: string, pick: (s: StoreState) => number) =>
    new Gauge({
      name,
      help,
      labelNames: ['protocol'],
      registers: [registry],
      collect() {
        this.reset();
        for (const [protocol, s] of stores()) this.set({ protocol }, pick(s));
      },
    });
  const storeCounter = (name: string, help: string, pick: (s: StoreState) => number) =>
    new Counter({
      name,
      help,
      labelNames: ['protocol'],
      registers: [registry],
      collect() {
        this.reset();
        for (const [protocol, s] of stores()) this.inc({ protocol }, pick(s));
      },
    });
  const doc = (name: string) => METRIC_DOCS.find((d) => d.name === name)!.help;
  storeGauge('gamewire_store_up', doc('gamewire_store_up'), (s) => (s.up ? 1 : 0));
  new Gauge({
    name: 'gamewire_store_primary_info',
    help: doc('gamewire_store_primary_info'),
    labelNames: ['protocol', 'mode', 'primary'],
    registers: [registry],
    collect() {
      this.reset();
      for (const [protocol, s] of stores()) this.set({ protocol, mode: s.mode, primary: s.primary }, 1);
    },
  });
  storeCounter('gamewire_store_failovers_total', doc('gamewire_store_failovers_total'), (s) => s.failovers);
  storeGauge(
    'gamewire_store_last_failover_seconds',
    doc('gamewire_store_last_failover_seconds'),
    (s) => s.lastFailoverSeconds,
  );
  storeCounter(
    'gamewire_store_durable_writes_total',
    doc('gamewire_store_durable_writes_total'),
    (s) => s.durableWrites,
  );
  storeCounter(
    'gamewire_store_durability_errors_total',
    doc('gamewire_store_durability_errors_total'),
    (s) => s.durabilityErrors,
  );
  return registry;
}
