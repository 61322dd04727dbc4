/** Conformance runs started together by a test file, and what their tests read of the results. */
import type { CheckResult } from '../../src/core/conform.js';

/**
 * Conform runs started together: `start` runs one now, `get` is what its test awaits (a failure
 * surfaces in that test, not as an unhandled rejection before it), `settled` lets afterAll wait
 * until every run has closed what it opened.
 */
export class Runs<K = string> {
  private readonly runs = new Map<K, Promise<CheckResult[]>>();

  start(key: K, run: () => Promise<CheckResult[]>): void {
    const p = run();
    p.catch(() => {});
    this.runs.set(key, p);
  }

  get(key: K): Promise<CheckResult[]> {
    const p = this.runs.get(key);
    if (p === undefined) throw new Error(`no run started for ${String(key)}`);
    return p;
  }

  async settled(): Promise<void> {
    await Promise.allSettled(this.runs.values());
  }
}

/** The ids of the checks that failed. */
export const failed = (rs: CheckResult[]): string[] => rs.filter((r) => r.status === 'fail').map((r) => r.id);
