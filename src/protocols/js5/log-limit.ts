/**
 * Info-level logs for what operators must see (a wrong build, a missing group, a full server),
 * at most one line per reason per interval, so a misconfigured fleet or a flood cannot drown the
 * log. Lines held back are counted and reported (`suppressed`) with the next line of that reason.
 */
import type { Logger } from 'pino';

export class RateLimitedLog {
  private readonly last = new Map<string, number>();
  private readonly held = new Map<string, number>();
  private readonly log: Logger;
  private readonly intervalMs: number;
  private readonly now: () => number;

  constructor(log: Logger, intervalMs = 10_000, now: () => number = Date.now) {
    this.log = log;
    this.intervalMs = intervalMs;
    this.now = now;
  }

  /** Logs at info unless a line with the same `reason` was logged within the interval. */
  info(reason: string, fields: Record<string, unknown>, message: string): boolean {
    const t = this.now();
    const last = this.last.get(reason);
    if (last !== undefined && t - last < this.intervalMs) {
      this.held.set(reason, (this.held.get(reason) ?? 0) + 1);
      return false;
    }
    this.last.set(reason, t);
    const suppressed = this.held.get(reason) ?? 0;
    this.held.delete(reason);
    this.log.info(suppressed > 0 ? { reason, ...fields, suppressed } : { reason, ...fields }, message);
    return true;
  }
}
