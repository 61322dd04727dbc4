/**
 * The one rate-limited logger (src/core/logger.ts): `serve`'s connection refusals and js5's
 * refusal lines both go through it.
 */
import { Writable } from 'node:stream';
import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { RateLimitedLog } from '../../src/core/logger.js';

function captureLog(): { log: pino.Logger; lines: Record<string, unknown>[] } {
  const lines: Record<string, unknown>[] = [];
  const stream = new Writable({
    write(chunk, _enc, done) {
      for (const l of String(chunk).split('\n')) if (l.trim() !== '') lines.push(JSON.parse(l));
      done();
    },
  });
  return { log: pino({ level: 'info' }, stream), lines };
}

describe('RateLimitedLog', () => {
  it('one line per key per interval (js5): the next line of a key reports how many were held back', () => {
    const { log, lines } = captureLog();
    let now = 0;
    const notice = new RateLimitedLog(log, { intervalMs: 10_000, perInterval: 1, now: () => now });
    expect(notice.info('out_of_date', { reason: 'out_of_date', clientBuild: 1 }, 'x')).toBe(true);
    now = 5_000;
    expect(notice.info('out_of_date', { reason: 'out_of_date', clientBuild: 2 }, 'x')).toBe(false);
    expect(notice.info('server_full', { reason: 'server_full' }, 'y')).toBe(true); // keys are limited apart
    expect(notice.info('out_of_date', { reason: 'out_of_date', clientBuild: 3 }, 'x')).toBe(false);
    now = 10_000;
    expect(notice.info('out_of_date', { reason: 'out_of_date', clientBuild: 4 }, 'x')).toBe(true);
    now = 20_000;
    // Nothing was held back in the last window: no count.
    expect(notice.info('out_of_date', { reason: 'out_of_date', clientBuild: 5 }, 'x')).toBe(true);
    expect(lines.map((l) => [l.reason, l.clientBuild, l.suppressed])).toEqual([
      ['out_of_date', 1, undefined],
      ['server_full', undefined, undefined],
      ['out_of_date', 4, 2],
      ['out_of_date', 5, undefined],
    ]);
  });

  it('by default, five lines per key per 10 s, at the level asked', () => {
    const { log, lines } = captureLog();
    let now = 0;
    const notice = new RateLimitedLog(log, { now: () => now });
    const logged = Array.from({ length: 8 }, (_, i) => notice.warn('full', { i }, 'full'));
    expect(logged).toEqual([true, true, true, true, true, false, false, false]);
    now = 9_999;
    expect(notice.warn('full', { i: 8 }, 'full')).toBe(false);
    now = 10_000;
    expect(notice.warn('full', { i: 9 }, 'full')).toBe(true);
    expect(lines.map((l) => [l.level, l.i, l.suppressed])).toEqual([
      [40, 0, undefined],
      [40, 1, undefined],
      [40, 2, undefined],
      [40, 3, undefined],
      [40, 4, undefined],
      [40, 9, 4],
    ]);
  });

  it('an interval of 0 logs every line (js5 --js5-log-interval-ms 0)', () => {
    const { log, lines } = captureLog();
    const notice = new RateLimitedLog(log, { intervalMs: 0, perInterval: 1, now: () => 0 });
    for (let i = 0; i < 5; i++) expect(notice.info('k', { i }, 'm')).toBe(true);
    expect(lines).toHaveLength(5);
  });

  it('remembers at most maxKeys keys: keys an attacker chooses cannot grow it, the oldest is forgotten', () => {
    const { log, lines } = captureLog();
    const notice = new RateLimitedLog(log, { perInterval: 1, maxKeys: 3, now: () => 0 });
    for (const k of ['a', 'b', 'c', 'd']) expect(notice.info(k, { k }, 'm')).toBe(true);
    // 'a' was forgotten to make room for 'd': it logs again; 'd' is remembered and held back.
    expect(notice.info('a', { k: 'a' }, 'm')).toBe(true);
    expect(notice.info('d', { k: 'd' }, 'm')).toBe(false);
    expect(lines.map((l) => l.k)).toEqual(['a', 'b', 'c', 'd', 'a']);
    expect((notice as unknown as { windows: Map<string, unknown> }).windows.size).toBe(3);
  });
});
