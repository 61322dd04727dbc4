// Per-server rate history from successive /api/stream ticks: the page keeps the last five minutes
// (counters are cumulative; a rate is the difference of two samples over their time apart).

/** @typedef {import('../../src/core/admin/api-types.js').CountersJson} CountersJson */
/** @typedef {import('../../src/core/admin/api-types.js').TickJson} TickJson */

/**
 * The rates of one sample, per second.
 * @typedef {{ msgIn: number, msgOut: number, bytesIn: number, bytesOut: number }} Rates
 */

export const WINDOW_MS = 5 * 60 * 1000;

class Series {
  constructor() {
    /** @type {number[]} */
    this.t = []; // seconds (uPlot's x unit)
    /** @type {number[]} */
    this.msgIn = [];
    /** @type {number[]} */
    this.msgOut = [];
    /** @type {number[]} */
    this.bytesIn = [];
    /** @type {number[]} */
    this.bytesOut = [];
    /** @type {{ t: number, counters: CountersJson } | undefined} */
    this.last = undefined; // {t, counters}
    /** @type {Rates} */
    this.rates = { msgIn: 0, msgOut: 0, bytesIn: 0, bytesOut: 0 };
  }

  /**
   * Adds a sample (`t` in ms); returns whether it made a new point (a later time than the last).
   * @param {number} t
   * @param {CountersJson} c
   */
  add(t, c) {
    const prev = this.last;
    this.last = { t, counters: c };
    if (prev === undefined || t <= prev.t) return false;
    const dt = (t - prev.t) / 1000;
    // A counter that went down means the server restarted: start the rate from zero.
    const rate = (/** @type {number} */ a, /** @type {number} */ b) => (a >= b ? (a - b) / dt : 0);
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

/** @type {Map<string, Series>} */
const byProtocol = new Map();

/**
 * The rate history of a protocol (made empty on first use).
 * @param {string} protocol
 */
export function series(protocol) {
  let s = byProtocol.get(protocol);
  if (s === undefined) {
    s = new Series();
    byProtocol.set(protocol, s);
  }
  return s;
}

/**
 * Feeds one tick; returns the protocols whose series got a new point.
 * @param {TickJson} tick
 */
export function addTick(tick) {
  /** @type {string[]} */
  const updated = [];
  for (const server of tick.servers ?? []) {
    if (series(server.protocol).add(tick.t, server.counters)) updated.push(server.protocol);
  }
  return updated;
}

/**
 * The latest counters seen for a protocol (from ticks), or undefined.
 * @param {string} protocol
 */
export function latestCounters(protocol) {
  return byProtocol.get(protocol)?.last?.counters;
}
