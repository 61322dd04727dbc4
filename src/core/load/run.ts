/**
 * The generic part of a load run: client slots, arrivals at a bounded rate, churn, the end of the
 * run (its duration, Ctrl-C, or every client done), a bounded grace for leaving, progress every
 * second, and the summary. It knows no protocol: a `LoadDefinition` brings the sessions.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { LatencySummary } from './histogram.js';
import { LoadStats, type SessionCounts } from './stats.js';
import type { TargetPolicy } from './target.js';
import {
  type LoadClient,
  type LoadDefinition,
  type LoadGenerator,
  type LoadRun,
  type LoadSettings,
  LoadUnfinished,
  type StopReason,
} from './types.js';

export interface RunLoadOptions {
  definition: LoadDefinition;
  settings: LoadSettings;
  /** The generator's own options, defaults filled in. */
  options: Record<string, unknown>;
  policy: TargetPolicy;
  /** Stops the run early (Ctrl-C): sessions leave as at the end. */
  signal?: AbortSignal;
  onProgress?(progress: LoadProgress): void;
  progressIntervalMs?: number;
  /** How long sessions get to leave once the run ends. Default 10 s. */
  graceMs?: number;
}

export interface LoadProgress {
  elapsedS: number;
  sessions: SessionCounts;
  /** Per second over the last interval, for the definition's `progress.rates` counters. */
  rates: Record<string, number>;
  /** p99 (ms) over the last interval, for the definition's `progress.latencies` series. */
  p99: Record<string, number>;
  bytesInPerS: number;
  /** Every counter so far. */
  counters: Record<string, number>;
  failures: number;
  violations: number;
}

export interface LoadSummary {
  target: string | null;
  clients: number;
  clientNoun: string;
  arrivalRate: number;
  durationS: number;
  churnS: number;
  from: string[];
  /** Seconds from the first arrival to the end of the run (leaving not included). */
  elapsedS: number;
  options: Record<string, unknown>;
  sessions: SessionCounts & {
    /** Sessions that had not left when the grace after the run ran out. */
    stuck: number;
  };
  /** Failed sessions and failed steps, by error code; `errorMessages` has the first message of each. */
  errors: Record<string, number>;
  errorMessages: Record<string, string>;
  /**
   * Sessions the end of the run (or churn) stopped before they got in, by the step they were at
   * ("bind over dtls to 127.0.0.1:37001"), for generators that name their steps.
   */
  waitingFor: Record<string, number>;
  /** True when the run was stopped (Ctrl-C, SIGTERM) before its duration. */
  interrupted: boolean;
  /** Work lost, duplicated or corrupted, by kind; `violationSamples` describes the first few. */
  violations: Record<string, number>;
  violationSamples: string[];
  latencyMs: Record<string, LatencySummary>;
  counters: Record<string, number>;
  /** Every counter divided by `elapsedS`. */
  perSecond: Record<string, number>;
  bytes: { in: number; out: number; inPerS: number; outPerS: number };
  /** The generator's own end figures (`relayLossPercent`, …). */
  derived: Record<string, number>;
  /** No session failed, nothing was lost, duplicated or corrupted, and at least one client got in. */
  ok: boolean;
}

const round = (n: number, places = 1) => Math.round(n * 10 ** places) / 10 ** places;

function errorCode(err: unknown): string {
  const code = (err as { code?: unknown } | undefined)?.code;
  return typeof code === 'string' && code !== '' ? code : 'ERR_INTERNAL';
}

export async function runLoad(o: RunLoadOptions): Promise<LoadSummary> {
  const { settings, definition } = o;
  const stats = new LoadStats();
  const runAbort = new AbortController();
  const onExternalAbort = () => runAbort.abort();
  o.signal?.addEventListener('abort', onExternalAbort);
  if (o.signal?.aborted === true) runAbort.abort();
  const run: LoadRun = {
    settings,
    options: o.options,
    stats,
    signal: runAbort.signal,
    allow: (host, what) => o.policy.allow(host, what),
  };
  const generator: LoadGenerator = await definition.prepare(run);

  const started = performance.now();
  const elapsedS = () => (performance.now() - started) / 1000;
  const active = new Map<number, { stop(reason: StopReason): void }>();
  let ending = false;
  let nextIndex = 0;
  let nextArrival = started;
  const spacingMs = settings.arrivalRate > 0 ? 1000 / settings.arrivalRate : 0;

  /** Waits for this arrival's turn; false when the run ended meanwhile. */
  const arrivalTurn = async (): Promise<boolean> => {
    const now = performance.now();
    const at = Math.max(now, nextArrival);
    nextArrival = at + spacingMs;
    if (at > now) {
      try {
        await sleep(at - now, undefined, { signal: runAbort.signal });
      } catch {
        return false;
      }
    }
    return !ending;
  };

  const runSession = async (slot: number): Promise<void> => {
    const index = nextIndex++;
    const control = new AbortController();
    let reason: StopReason | undefined;
    let joined = false;
    let step: string | undefined;
    const client: LoadClient = {
      index,
      slot,
      localAddress: settings.from.length === 0 ? undefined : settings.from[slot % settings.from.length],
      signal: control.signal,
      get stopReason() {
        return reason;
      },
      joined() {
        if (joined) return;
        joined = true;
        stats.sessions.joined++;
      },
      step(what: string) {
        step = what;
      },
    };
    const stalled = () => {
      if (!joined && step !== undefined) stats.waitingFor.set(step, (stats.waitingFor.get(step) ?? 0) + 1);
    };
    const stop = (why: StopReason) => {
      if (reason !== undefined) return;
      reason = why;
      control.abort(why);
    };
    active.set(index, { stop });
    stats.sessions.started++;
    stats.sessions.active++;
    if (stats.sessions.active > stats.sessions.peakActive) stats.sessions.peakActive = stats.sessions.active;
    // Each session's life is 0.5× to 1.5× the churn time, so departures spread out.
    const churn =
      settings.churnS > 0
        ? setTimeout(() => stop('churn'), settings.churnS * 1000 * (0.5 + Math.random()))
        : undefined;
    try {
      await generator.session(client);
      if (reason === 'end' && !joined) {
        stats.sessions.unfinished++;
        stalled();
      } else stats.sessions.succeeded++;
    } catch (err) {
      if (reason === undefined && !(err instanceof LoadUnfinished)) {
        stats.sessions.failed++;
        stats.error(errorCode(err), (err as Error)?.message ?? String(err));
      } else if (err instanceof LoadUnfinished || !joined) {
        // Stopped before its work was done (the end of the run, or churn before getting in).
        stats.sessions.unfinished++;
        stalled();
      } else {
        // An error while leaving on request: the client was done with its session.
        stats.sessions.succeeded++;
      }
    } finally {
      clearTimeout(churn);
      active.delete(index);
      stats.sessions.active--;
    }
  };

  const slotLoop = async (slot: number): Promise<void> => {
    while (!ending) {
      if (!(await arrivalTurn())) return;
      await runSession(slot);
      // Without churn a slot holds one session; with churn a session that ends is replaced.
      if (settings.churnS === 0) return;
    }
  };

  let lastCounters: Record<string, number> = {};
  let lastBytesIn = 0;
  let lastTick = started;
  const progress =
    o.onProgress === undefined
      ? undefined
      : setInterval(() => {
          const now = performance.now();
          const dt = Math.max(1e-3, (now - lastTick) / 1000);
          lastTick = now;
          const snap = stats.snapshot(elapsedS());
          const rates: Record<string, number> = {};
          for (const name of definition.progress?.rates ?? []) {
            rates[name] = ((snap.counters[name] ?? 0) - (lastCounters[name] ?? 0)) / dt;
          }
          const p99: Record<string, number> = {};
          for (const name of definition.progress?.latencies ?? []) {
            const w = stats.latency(name).window;
            if (w.count > 0) p99[name] = w.quantile(0.99);
          }
          let failures = 0;
          for (const n of Object.values(snap.errors)) failures += n;
          o.onProgress?.({
            elapsedS: snap.elapsedS,
            sessions: snap.sessions,
            rates,
            p99,
            bytesInPerS: (snap.bytesIn - lastBytesIn) / dt,
            counters: snap.counters,
            failures,
            violations: stats.violationCount,
          });
          lastCounters = snap.counters;
          lastBytesIn = snap.bytesIn;
          stats.resetWindows();
        }, o.progressIntervalMs ?? 1000);

  const slots = Array.from({ length: settings.clients }, (_, slot) => slotLoop(slot));
  const allSlotsDone = Promise.all(slots);
  let deadline: NodeJS.Timeout | undefined;
  await Promise.race([
    allSlotsDone,
    new Promise<void>((resolve) => {
      deadline = setTimeout(resolve, settings.durationS * 1000);
      runAbort.signal.addEventListener('abort', () => resolve(), { once: true });
    }),
  ]);
  clearTimeout(deadline);
  const elapsed = elapsedS();
  ending = true;
  runAbort.abort();
  for (const s of active.values()) s.stop('end');
  let grace: NodeJS.Timeout | undefined;
  await Promise.race([allSlotsDone, new Promise<void>((r) => (grace = setTimeout(r, o.graceMs ?? 10_000)))]);
  clearTimeout(grace);
  if (progress !== undefined) clearInterval(progress);
  o.signal?.removeEventListener('abort', onExternalAbort);
  const stuck = active.size;
  await generator.close?.();
  const derived = generator.report?.() ?? {};

  const snap = stats.snapshot(elapsed);
  const perSecond: Record<string, number> = {};
  for (const [k, v] of Object.entries(snap.counters)) perSecond[k] = round(v / Math.max(elapsed, 1e-3));
  const errorMessages = Object.fromEntries(stats.errorSamples);
  const interrupted = o.signal?.aborted === true;
  const options: Record<string, unknown> = {};
  for (const opt of definition.options) {
    if (opt.secret !== true && o.options[opt.key] !== undefined) options[opt.key] = o.options[opt.key];
  }
  const sessions = { ...snap.sessions, stuck };
  return {
    target: settings.target === undefined ? null : `${settings.target.host}:${settings.target.port}`,
    clients: settings.clients,
    clientNoun: definition.clientNoun,
    arrivalRate: settings.arrivalRate,
    durationS: settings.durationS,
    churnS: settings.churnS,
    from: [...settings.from],
    elapsedS: round(elapsed, 3),
    options,
    sessions,
    errors: snap.errors,
    errorMessages,
    waitingFor: Object.fromEntries(stats.waitingFor),
    interrupted,
    violations: snap.violations,
    violationSamples: [...stats.violationSamples],
    latencyMs: stats.latencySummaries(),
    counters: snap.counters,
    perSecond,
    bytes: {
      in: snap.bytesIn,
      out: snap.bytesOut,
      inPerS: round(snap.bytesIn / Math.max(elapsed, 1e-3), 0),
      outPerS: round(snap.bytesOut / Math.max(elapsed, 1e-3), 0),
    },
    derived,
    ok: sessions.failed === 0 && stats.violationCount === 0 && sessions.joined > 0,
  };
}
