/**
 * What a load run measures: sessions and their outcomes, named counters, latency histograms,
 * bytes, failed sessions by error code and integrity violations (a corrupt group, a lost or
 * duplicated call). Generators hold on to their counters and histograms, so the hot path is a
 * property add, never a lookup.
 */
import { Histogram, type LatencySummary } from './histogram.js';

export class Counter {
  n = 0;
  add(by = 1): void {
    this.n += by;
  }
}

/** A latency series: everything since the start, and the last progress interval. */
export class Latency {
  readonly total = new Histogram();
  readonly window = new Histogram();
  record(ms: number): void {
    this.total.record(ms);
    this.window.record(ms);
  }
}

export interface SessionCounts {
  /** Sessions begun. */
  started: number;
  /** Sessions that got in (the generator said so): connected, logged in, bound, entered. */
  joined: number;
  /** Sessions that ended well: left when asked, or finished their work. */
  succeeded: number;
  /** Sessions that ended with an error. */
  failed: number;
  /** Sessions the end of the run stopped before they got in or finished their work. */
  unfinished: number;
  /** Sessions under way now, and the most at once. */
  active: number;
  peakActive: number;
}

export interface LoadSnapshot {
  elapsedS: number;
  sessions: SessionCounts;
  counters: Record<string, number>;
  errors: Record<string, number>;
  violations: Record<string, number>;
  bytesIn: number;
  bytesOut: number;
}

export class LoadStats {
  readonly sessions: SessionCounts = {
    started: 0,
    joined: 0,
    succeeded: 0,
    failed: 0,
    unfinished: 0,
    active: 0,
    peakActive: 0,
  };
  readonly bytesIn = new Counter();
  readonly bytesOut = new Counter();
  private readonly counters = new Map<string, Counter>();
  private readonly latencies = new Map<string, Latency>();
  private readonly errors = new Map<string, number>();
  private readonly violations = new Map<string, number>();
  /** The first few violations in words, so a report can say what went wrong. */
  readonly violationSamples: string[] = [];
  /** The first message of each error code. */
  readonly errorSamples = new Map<string, string>();
  /** Sessions stopped before they got in, by the step they were at (`LoadClient.step`). */
  readonly waitingFor = new Map<string, number>();

  /** The counter `name`, created at zero on first use. */
  counter(name: string): Counter {
    let c = this.counters.get(name);
    if (c === undefined) {
      c = new Counter();
      this.counters.set(name, c);
    }
    return c;
  }

  /** The latency series `name` (milliseconds), created on first use. */
  latency(name: string): Latency {
    let h = this.latencies.get(name);
    if (h === undefined) {
      h = new Latency();
      this.latencies.set(name, h);
    }
    return h;
  }

  /** Counts a failure by code (a failed session, or a failed step the session survived). */
  error(code: string, message?: string): void {
    this.errors.set(code, (this.errors.get(code) ?? 0) + 1);
    if (message !== undefined && !this.errorSamples.has(code)) this.errorSamples.set(code, message);
  }

  /** Counts an integrity violation: work lost, duplicated or corrupted. Fails the run. */
  violation(kind: string, detail?: string): void {
    this.violations.set(kind, (this.violations.get(kind) ?? 0) + 1);
    if (detail !== undefined && this.violationSamples.length < 10)
      this.violationSamples.push(`${kind}: ${detail}`);
  }

  get violationCount(): number {
    let n = 0;
    for (const v of this.violations.values()) n += v;
    return n;
  }

  latencyNames(): string[] {
    return [...this.latencies.keys()];
  }

  latencySummaries(): Record<string, LatencySummary> {
    const out: Record<string, LatencySummary> = {};
    for (const [name, l] of this.latencies) if (l.total.count > 0) out[name] = l.total.summary();
    return out;
  }

  /** Closes the progress interval: the window histograms start again. */
  resetWindows(): void {
    for (const l of this.latencies.values()) l.window.reset();
  }

  snapshot(elapsedS: number): LoadSnapshot {
    return {
      elapsedS,
      sessions: { ...this.sessions },
      counters: Object.fromEntries([...this.counters].map(([k, c]) => [k, c.n])),
      errors: Object.fromEntries(this.errors),
      violations: Object.fromEntries(this.violations),
      bytesIn: this.bytesIn.n,
      bytesOut: this.bytesOut.n,
    };
  }
}
