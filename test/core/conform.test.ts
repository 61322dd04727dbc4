/**
 * The protocol-free conformance runner: order, prerequisites, deadlines, cleanup, selection.
 */
import { describe, expect, test } from 'vitest';
import {
  type CheckRun,
  type ConformCheck,
  type ConformSuite,
  runChecks,
  selectChecks,
} from '../../src/core/conform.js';
import { UsageError } from '../../src/core/errors.js';
import { elapse } from '../helpers/wait.js';

type Ctx = { log: string[] };

function suite(checks: ConformCheck<Ctx>[], concurrency = 1): ConformSuite<Ctx> {
  return {
    protocol: 'toy',
    options: [],
    concurrency,
    describe: () => 'toy',
    prepare: async () => ({ log: [] }),
    checks,
  };
}

function check(
  id: string,
  run: (ctx: Ctx, t: CheckRun) => Promise<string | undefined>,
  extra: Partial<ConformCheck<Ctx>> = {},
): ConformCheck<Ctx> {
  return {
    id,
    title: id,
    rule: 'r',
    sources: [{ repo: 'a/b', path: 'c' }],
    clientReaction: 'x',
    run,
    ...extra,
  };
}

describe('runChecks', () => {
  test('passes, fails with evidence, skips what needs a failed or skipped check (not an inapplicable one), in list order', async () => {
    const s = suite([
      check('a', async () => 'fine'),
      check('b', async (_c, t) => t.fail('broken', { sent: Buffer.from([1]), received: Buffer.alloc(0) })),
      check('c', async () => 'never', { requires: ['b'] }),
      check('d', async (_c, t) => t.skip('not here')),
      check('e', async () => 'never', { requires: ['d'] }),
      check('f', async () => 'n/a', { applies: () => 'not for this profile' }),
      check('g', async () => 'runs', { requires: ['f'] }),
    ]);
    const seen: string[] = [];
    const rs = await runChecks(s, { log: [] }, { onResult: (r) => seen.push(r.id) });
    expect(rs.map((r) => [r.id, r.status])).toEqual([
      ['a', 'pass'],
      ['b', 'fail'],
      ['c', 'skip'],
      ['d', 'skip'],
      ['e', 'skip'],
      ['f', 'skip'],
      ['g', 'pass'],
    ]);
    expect(seen).toEqual(['a', 'b', 'c', 'd', 'e', 'f', 'g']);
    expect(rs[0]!.message).toBe('fine');
    expect(rs[1]!.evidence?.sent).toEqual(Buffer.from([1]));
    expect(rs[1]!.clientReaction).toBe('x');
    expect(rs[2]!.message).toBe('needs b, which failed');
    expect(rs[4]!.message).toBe('needs d, which was skipped');
    expect(rs[5]!.message).toBe('not for this profile');
    // A check that does not apply (here) blocks nothing: it is not a failed prerequisite.
    expect(rs[5]!.notApplicable).toBe(true);
    expect(rs[6]!.message).toBe('runs');
  });

  test('a check past its deadline fails, its cleanups run, and the run goes on', async () => {
    let cleaned = false;
    const s = suite([
      check(
        'slow',
        async (_c, t) => {
          t.defer(() => {
            cleaned = true;
          });
          await new Promise((r) => t.signal.addEventListener('abort', r));
          return 'late';
        },
        { timeoutMs: 50 },
      ),
      check('next', async () => 'ran'),
    ]);
    const rs = await runChecks(s, { log: [] });
    expect(rs[0]!.status).toBe('fail');
    expect(rs[0]!.message).toMatch(/did not complete within 50 ms/);
    expect(cleaned).toBe(true);
    expect(rs[1]!.status).toBe('pass');
  });

  test('an error that is not a check failure is reported as a failure, not thrown', async () => {
    const rs = await runChecks(
      suite([
        check('boom', async () => {
          throw new Error('ECONNRESET');
        }),
      ]),
      { log: [] },
    );
    expect(rs[0]).toMatchObject({ status: 'fail', message: 'ECONNRESET' });
  });

  test('runs independent checks side by side up to the concurrency, exclusive ones alone', async () => {
    let running = 0;
    let most = 0;
    const during: number[] = [];
    const body =
      (exclusive = false) =>
      async () => {
        running++;
        most = Math.max(most, running);
        if (exclusive) during.push(running);
        await new Promise((r) => setImmediate(r));
        await new Promise((r) => setImmediate(r));
        running--;
        return undefined;
      };
    const s = suite(
      [
        check('a', body()),
        check('b', body()),
        check('c', body()),
        check('x', body(true), { exclusive: true }),
        check('d', body()),
        check('e', body()),
      ],
      3,
    );
    const rs = await runChecks(s, { log: [] });
    expect(rs.every((r) => r.status === 'pass')).toBe(true);
    expect(most).toBe(3);
    expect(during).toEqual([1]);
  });

  test('a check waits for what it requires even when it runs side by side', async () => {
    const order: string[] = [];
    const s = suite(
      [
        check('base', async () => {
          await elapse(20, 'base takes a while: a check run beside it, not after it, would finish first');
          order.push('base');
          return undefined;
        }),
        check(
          'after',
          async () => {
            order.push('after');
            return undefined;
          },
          { requires: ['base'] },
        ),
      ],
      4,
    );
    await runChecks(s, { log: [] });
    expect(order).toEqual(['base', 'after']);
  });
});

describe('selectChecks', () => {
  const checks = [
    check('handshake.ok', async () => undefined),
    check('handshake.full', async () => undefined, { requires: ['handshake.ok'] }),
    check('relay.length', async () => undefined, { requires: ['handshake.full'] }),
  ];
  test('prefixes select groups; requirements come along', () => {
    expect([...selectChecks(checks, ['handshake'])]).toEqual(['handshake.ok', 'handshake.full']);
    expect([...selectChecks(checks, ['relay.length'])].sort()).toEqual([
      'handshake.full',
      'handshake.ok',
      'relay.length',
    ]);
    expect(selectChecks(checks, undefined).size).toBe(3);
  });
  test('an unknown id is a usage error naming the checks', () => {
    expect(() => selectChecks(checks, ['nope'])).toThrow(UsageError);
    expect(() => selectChecks(checks, ['nope'])).toThrow(/handshake.ok, handshake.full, relay.length/);
  });
});
