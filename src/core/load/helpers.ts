/** Small pieces every load generator needs. */
import { UsageError } from '../errors.js';

/**
 * Resolves when `signal` aborts, or rejects with the error `failed` delivers first: a session
 * waits in this while its client plays.
 */
export function untilStopped(
  signal: AbortSignal,
  failed?: (reject: (err: Error) => void) => void,
): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    if (signal.aborted) return resolve();
    let done = false;
    const onAbort = () => {
      if (done) return;
      done = true;
      resolve();
    };
    signal.addEventListener('abort', onAbort, { once: true });
    failed?.((err) => {
      if (done) return;
      done = true;
      signal.removeEventListener('abort', onAbort);
      reject(err);
    });
  });
}

/** Waits `ms`, or less when `signal` aborts first (never rejects). */
export function pause(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise<void>((resolve) => {
    if (signal?.aborted === true) return resolve();
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    }
    signal?.addEventListener('abort', done, { once: true });
  });
}

/** Parses ids and ranges (`0,2,5-9`) within `min..max`; `what` names the flag in errors. */
export function parseIdList(values: readonly string[], what: string, min: number, max: number): number[] {
  const out: number[] = [];
  for (const value of values) {
    for (const part of value.split(',')) {
      const item = part.trim();
      if (item === '') continue;
      const m = /^(\d+)(?:-(\d+))?$/.exec(item);
      if (m === null) throw new UsageError(`${what}: "${item}" is not an id or a range like 0-7`);
      const a = Number(m[1]);
      const b = m[2] === undefined ? a : Number(m[2]);
      if (a < min || b > max || b < a)
        throw new UsageError(`${what}: "${item}" is not within ${min}..${max}`);
      for (let i = a; i <= b; i++) out.push(i);
    }
  }
  if (out.length === 0) throw new UsageError(`${what}: give at least one id`);
  return out;
}

/** The `code` of an error (a GamewireError's, a system error's), or ERR_INTERNAL. */
export function codeOf(err: unknown): string {
  const code = (err as { code?: unknown } | undefined)?.code;
  return typeof code === 'string' && code !== '' ? code : 'ERR_INTERNAL';
}
