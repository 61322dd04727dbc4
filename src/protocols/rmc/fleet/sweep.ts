/**
 * The background sweep of an RMC fleet node: drops the records of dead nodes that no script meets
 * (an account that never logs in again, a session nobody joins).
 *
 * It never holds Redis for long: a pass is a series of steps, each one script that scans at most
 * about `count` entries from a cursor (HSCAN over `logins`, SSCAN over `sessions`), drops the dead
 * ones and answers only the next cursor and two counts; steps are `pauseMs` apart, so other
 * clients' commands (heartbeats, logins) run between them. A pass that meets an outage stops; the
 * next one starts from the beginning.
 */
import { RmcError } from '../errors.js';

/** What one step did: where the next one starts (`'0'`: the pass is over) and how much it did. */
export interface SweepStep {
  cursor: string;
  /** Entries the step looked at. */
  scanned: number;
  /** Entries it dropped (dead nodes'). */
  dropped: number;
}

/** A store that can be swept in steps. */
export interface Sweepable {
  sweepStep(cursor: string, count: number): Promise<SweepStep>;
}

export interface SweepOptions {
  /** Entries asked of each step (the SCAN COUNT hint). Default 200. */
  count?: number;
  /** Pause between two steps, in ms. Default 20. */
  pauseMs?: number;
  /** Called after every step (tests, metrics). */
  onStep?: (step: SweepStep) => void;
  /** Stops the pass between two steps when it returns true. */
  stopped?: () => boolean;
}

export interface SweepResult {
  steps: number;
  scanned: number;
  dropped: number;
  /** The most entries one step looked at. */
  maxScanned: number;
  /** True when the pass reached the end of the keyspace. */
  complete: boolean;
}

export const DEFAULT_SWEEP_COUNT = 200;
export const DEFAULT_SWEEP_PAUSE_MS = 20;

/** One full pass over `target`, in bounded steps. A step that fails ends the pass (incomplete). */
export async function sweepPass(target: Sweepable, options: SweepOptions = {}): Promise<SweepResult> {
  const count = Math.max(1, options.count ?? DEFAULT_SWEEP_COUNT);
  const pauseMs = options.pauseMs ?? DEFAULT_SWEEP_PAUSE_MS;
  const result: SweepResult = { steps: 0, scanned: 0, dropped: 0, maxScanned: 0, complete: false };
  let cursor = '0';
  do {
    if (result.steps > 0 && pauseMs > 0) await new Promise((r) => setTimeout(r, pauseMs));
    if (options.stopped?.() === true) return result;
    let step: SweepStep;
    try {
      step = await target.sweepStep(cursor, count);
    } catch (err) {
      // Redis cannot answer now: the next pass starts over.
      if (err instanceof RmcError) return result;
      throw err;
    }
    result.steps++;
    result.scanned += step.scanned;
    result.dropped += step.dropped;
    result.maxScanned = Math.max(result.maxScanned, step.scanned);
    options.onStep?.(step);
    cursor = step.cursor;
  } while (cursor !== '0');
  result.complete = true;
  return result;
}

/**
 * Runs a pass over each target every `intervalMs` (plus up to half of it at random, so a fleet's
 * nodes do not sweep together); a pass still running when the next is due is not doubled.
 */
export class FleetSweeper {
  private readonly targets: readonly Sweepable[];
  private readonly intervalMs: number;
  private readonly options: SweepOptions;
  private timer: NodeJS.Timeout | undefined = undefined;
  private running: Promise<void> | undefined = undefined;
  private closed = false;

  constructor(targets: readonly Sweepable[], intervalMs: number, options: SweepOptions = {}) {
    this.targets = targets;
    this.intervalMs = intervalMs;
    this.options = options;
  }

  start(): void {
    if (this.closed || this.timer !== undefined) return;
    this.timer = setInterval(
      () => {
        void this.runOnce();
      },
      this.intervalMs + Math.floor(Math.random() * (this.intervalMs / 2)),
    );
    this.timer.unref();
  }

  /** One pass over every target (or the one already running). */
  runOnce(): Promise<void> {
    this.running ??= (async () => {
      try {
        for (const t of this.targets)
          await sweepPass(t, { ...this.options, stopped: () => this.closed }).catch(() => {});
      } finally {
        this.running = undefined;
      }
    })();
    return this.running;
  }

  /** Stops the timer; a pass in progress ends after its current step. */
  async close(): Promise<void> {
    this.closed = true;
    if (this.timer !== undefined) clearInterval(this.timer);
    this.timer = undefined;
    await this.running;
  }
}
