/**
 * Waiting in tests: on a condition or an event, never on a guess of how long something takes.
 *
 * - `waitFor(cond, {what})` polls `cond` until it gives a truthy value and returns that value;
 *   after `timeoutMs` it fails with a message naming what it waited for (and the last error
 *   `cond` threw, with `retryErrors`). The timeout only bounds a failing test: a passing one
 *   ends as soon as the condition holds, however loaded the machine is.
 * - `waitForEvent(emitter, name, {what})` resolves with an event's arguments (the first that
 *   passes `filter`), or fails the same way.
 * - `elapse(ms, why)` is the one fixed wait left, for when time passing is the point: a window in
 *   which something must NOT happen, or a timer of the code under test being exercised. `why`
 *   says which, so a reader (and test/library/waits.test.ts) can tell it from a guess.
 */
import type { EventEmitter } from 'node:events';

export interface WaitOptions {
  /** What is awaited, for the failure message ("the echo at the client"). */
  what: string | (() => string);
  /** Fail after this long (default 10 s; a passing wait ends as soon as its condition holds). */
  timeoutMs?: number;
  /** Poll interval (default 10 ms). */
  intervalMs?: number;
  /** Treat an exception from the condition as "not yet" (and report the last one on timeout). */
  retryErrors?: boolean;
}

export const DEFAULT_WAIT_MS = 10_000;

type Truthy<T> = Exclude<T, false | 0 | 0n | '' | null | undefined>;

function describeWhat(what: string | (() => string)): string {
  return typeof what === 'string' ? what : what();
}

/** Polls `cond` until it returns a truthy value (sync or async) and returns that value. */
export async function waitFor<T>(cond: () => T | Promise<T>, options: WaitOptions): Promise<Truthy<T>> {
  const timeoutMs = options.timeoutMs ?? DEFAULT_WAIT_MS;
  const intervalMs = options.intervalMs ?? 10;
  const start = Date.now();
  let lastError: unknown;
  for (;;) {
    try {
      const v = await cond();
      if (v) return v as Truthy<T>;
    } catch (err) {
      if (options.retryErrors !== true) throw err;
      lastError = err;
    }
    if (Date.now() - start >= timeoutMs) {
      const cause = lastError === undefined ? '' : ` (last error: ${String(lastError)})`;
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${describeWhat(options.what)}${cause}`);
    }
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

export interface EventWaitOptions<A extends unknown[]> {
  what: string | (() => string);
  timeoutMs?: number;
  /** Only an event whose arguments pass this resolves the wait. */
  filter?: (...args: A) => boolean;
}

/** Resolves with the arguments of the next `event` (that passes `filter`); fails after `timeoutMs`. */
export function waitForEvent<A extends unknown[] = unknown[]>(
  emitter: EventEmitter,
  event: string,
  options: EventWaitOptions<A>,
): Promise<A> {
  const timeoutMs = options.timeoutMs ?? DEFAULT_WAIT_MS;
  return new Promise<A>((resolve, reject) => {
    const on = (...args: unknown[]) => {
      if (options.filter !== undefined && !options.filter(...(args as A))) return;
      clearTimeout(timer);
      emitter.off(event, on);
      resolve(args as A);
    };
    const timer = setTimeout(() => {
      emitter.off(event, on);
      reject(
        new Error(`timed out after ${timeoutMs} ms waiting for ${describeWhat(options.what)} ('${event}')`),
      );
    }, timeoutMs);
    emitter.on(event, on);
  });
}

/**
 * A fixed wait whose length is the point: a window in which something must not happen, or a
 * timer of the code under test being exercised (a TTL lapsing, a rate window passing). Never a
 * guess at how long something takes: wait for that with `waitFor`.
 */
export function elapse(ms: number, why: string): Promise<void> {
  if (why.trim() === '') throw new Error('elapse: say why the time must pass');
  return new Promise((r) => setTimeout(r, ms));
}
