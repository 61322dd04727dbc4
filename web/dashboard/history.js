// Per-server rate history from successive /api/stream ticks: the page keeps the last five minutes
// (counters are cumulative; a rate is the difference of two samples over their time apart).

export const WINDOW_MS = 5 * 60 * 1000;

class Series {
  constructor() {
    this.t = []; // seconds (uPlot's x unit)
    this.msgIn = [];
    this.msgOut = [];
    this.bytesIn = [];
    this.bytesOut = [];
    this.last = undefined; // {t, counters}
    this.rates = { msgIn: 0, msgOut: 0, bytesIn: 0, bytesOut: 0 };
  }

  add(t, c) {
    const prev = this.last;
    this.last = { t, counters: c };
    if (prev === undefined || t <= prev.t) return false;
    const dt = (t - prev.t) / 1000;
    // A counter that went down means the server restarted: start the rate from zero.
    const rate = (a, b) => (a >= b ? (a - b) / dt : 0);
    this.rates = {
      msgIn: rate(c.received, prev.counters.received),
      msgOut: rate(c.sent, prev.counters.sent),
      bytesIn: rate(c.bytesReceived ?? 0, prev.counters.bytesReceived ?? 0),
      bytesOut: rate(c.bytesSent ?? 0, prev.counters.bytesSent ?? 0),
    };
    this.t.push(t / 1000);
    this.msgIn.push(this.rates.msgIn);
    this.msgOut.push(this.rates.msgOut);
    this.bytesIn.push(this.rates.bytesIn);
    this.bytesOut.push(this.rates.bytesOut);
    const oldest = (t - WINDOW_MS) / 1000;
    let drop = 0;
    while (drop < this.t.length && this.t[drop] < oldest) drop++;
    if (drop > 0)
      for (const a of [this.t, this.msgIn, this.msgOut, this.bytesIn, this.bytesOut]) a.splice(0, drop);
    return true;
  }
}

const byProtocol = new Map();

export function series(protocol) {
  let s = byProtocol.get(protocol);
  if (s === undefined) {
    s = new Series();
    byProtocol.set(protocol, s);
  }
  return s;
}

/** Feeds one tick; returns the protocols whose series got a new point. */
export function addTick(tick) {
  const updated = [];
  for (const server of tick.servers ?? []) {
    if (series(server.protocol).add(tick.t, server.counters)) updated.push(server.protocol);
  }
  return updated;
}

/** The latest counters seen for a protocol (from ticks), or undefined. */
export function latestCounters(protocol) {
  return byProtocol.get(protocol)?.last?.counters;
}
