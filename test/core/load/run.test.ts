/**
 * The protocol-free runner: arrivals at a bounded rate, churn, the end of the run, outcomes, the
 * grace for leaving, and what the summary says. A toy generator stands in for a protocol.
 */
import { describe, expect, it } from 'vitest';
import { untilStopped } from '../../../src/core/load/helpers.js';
import { runLoad } from '../../../src/core/load/run.js';
import { TargetPolicy } from '../../../src/core/load/target.js';
import {
  type LoadClient,
  type LoadDefinition,
  type LoadRun,
  type LoadSettings,
  LoadUnfinished,
} from '../../../src/core/load/types.js';
import { GamewireError } from '../../../src/wire/errors.js';

function toy(
  session: (client: LoadClient, run: LoadRun) => Promise<void>,
  extra: Partial<LoadDefinition> = {},
) {
  const def: LoadDefinition = {
    summary: 'toy',
    clientNoun: 'toy',
    defaultPort: 1,
    options: [{ flag: '--secret <s>', key: 'secret', description: '', type: 'string', secret: true }],
    prepare: async (run) => ({ session: (c) => session(c, run) }),
    ...extra,
  };
  return def;
}

function settings(s: Partial<LoadSettings>): LoadSettings {
  return {
    target: { host: '127.0.0.1', port: 1 },
    clients: 1,
    arrivalRate: 0,
    durationS: 5,
    churnS: 0,
    from: [],
    ...s,
  };
}

const policy = new TargetPolicy({ owned: false });

describe('runLoad', () => {
  it('spaces arrivals at the rate and ends when every client is done', async () => {
    const starts: number[] = [];
    let prepared = 0;
    const def: LoadDefinition = {
      ...toy(async () => {}),
      prepare: async () => {
        prepared = performance.now();
        return {
          session: async (c) => {
            starts.push(performance.now());
            c.joined();
          },
        };
      },
    };
    const t0 = performance.now();
    const s = await runLoad({
      definition: def,
      settings: settings({ clients: 5, arrivalRate: 20 }),
      options: {},
      policy,
    });
    expect(s.sessions).toMatchObject({
      started: 5,
      joined: 5,
      succeeded: 5,
      failed: 0,
      unfinished: 0,
      stuck: 0,
    });
    // 20 per second from the start of the run: the fifth arrival comes 200 ms in, not earlier (a
    // late timer is caught up, so one gap may be shorter; the rate holds over the run).
    expect(starts.at(-1)! - prepared).toBeGreaterThanOrEqual(199);
    // It did not wait out the 5-second duration.
    expect(performance.now() - t0).toBeLessThan(4500);
    expect(s.ok).toBe(true);
  });

  it('replaces clients that leave with churn, and stops the rest at the end', async () => {
    const reasons: (string | undefined)[] = [];
    const def = toy(async (c) => {
      c.joined();
      await untilStopped(c.signal);
      reasons.push(c.stopReason);
    });
    const s = await runLoad({
      definition: def,
      settings: settings({ clients: 2, churnS: 0.1, durationS: 1 }),
      options: {},
      policy,
    });
    expect(s.sessions.started).toBeGreaterThan(2);
    expect(s.sessions.succeeded).toBe(s.sessions.started);
    expect(reasons).toContain('churn');
    expect(reasons.filter((r) => r === 'end')).toHaveLength(2);
    expect(s.sessions.active).toBe(0);
  });

  it('counts a failed session by its code, keeps its message, and does not replace it without churn', async () => {
    const def = toy(async (c) => {
      if (c.slot === 1) throw new GamewireError('ERR_TOY', 'the toy broke');
      c.joined();
    });
    const s = await runLoad({ definition: def, settings: settings({ clients: 3 }), options: {}, policy });
    expect(s.sessions).toMatchObject({ started: 3, joined: 2, succeeded: 2, failed: 1 });
    expect(s.errors).toEqual({ ERR_TOY: 1 });
    expect(s.errorMessages.ERR_TOY).toBe('the toy broke');
    expect(s.ok).toBe(false);
  });

  it('counts sessions the end stopped before they got in or finished as unfinished, not failed', async () => {
    const def = toy(async (c) => {
      if (c.slot === 0) {
        c.joined();
        await untilStopped(c.signal);
        throw new LoadUnfinished();
      }
      await untilStopped(c.signal); // never got in
      throw new Error('closed while joining');
    });
    const s = await runLoad({
      definition: def,
      settings: settings({ clients: 2, durationS: 0.2 }),
      options: {},
      policy,
    });
    expect(s.sessions).toMatchObject({ started: 2, joined: 1, succeeded: 0, failed: 0, unfinished: 2 });
    expect(s.ok).toBe(true);
  });

  it('fails the run on an integrity violation and reports the first ones', async () => {
    const def = toy(async (c, run) => {
      c.joined();
      run.stats.violation('corrupt', 'byte 3 of #7');
    });
    const s = await runLoad({ definition: def, settings: settings({ clients: 2 }), options: {}, policy });
    expect(s.violations).toEqual({ corrupt: 2 });
    expect(s.violationSamples[0]).toBe('corrupt: byte 3 of #7');
    expect(s.ok).toBe(false);
  });

  it('is not ok when nobody got in', async () => {
    const def = toy(async () => {});
    const s = await runLoad({ definition: def, settings: settings({ clients: 2 }), options: {}, policy });
    expect(s.sessions.joined).toBe(0);
    expect(s.ok).toBe(false);
  });

  it('gives each slot its --from address in turn', async () => {
    const seen = new Map<number, string | undefined>();
    const def = toy(async (c) => {
      seen.set(c.slot, c.localAddress);
      c.joined();
    });
    await runLoad({
      definition: def,
      settings: settings({ clients: 5, from: ['127.0.0.2', '127.0.0.3'] }),
      options: {},
      policy,
    });
    expect([...seen.entries()].sort((a, b) => a[0] - b[0]).map(([, a]) => a)).toEqual([
      '127.0.0.2',
      '127.0.0.3',
      '127.0.0.2',
      '127.0.0.3',
      '127.0.0.2',
    ]);
  });

  it('gives up on a session that ignores the end after the grace, and says so', async () => {
    let release: () => void = () => {};
    const def = toy(async (c) => {
      c.joined();
      await new Promise<void>((r) => {
        release = r;
      });
    });
    const s = await runLoad({
      definition: def,
      settings: settings({ clients: 1, durationS: 0.1 }),
      options: {},
      policy,
      graceMs: 50,
    });
    release();
    expect(s.sessions.stuck).toBe(1);
  });

  it('stops early on its signal (Ctrl-C)', async () => {
    const abort = new AbortController();
    const def = toy(async (c) => {
      c.joined();
      setTimeout(() => abort.abort(), 20);
      await untilStopped(c.signal);
    });
    const t0 = performance.now();
    const s = await runLoad({
      definition: def,
      settings: settings({ clients: 1, durationS: 60 }),
      options: {},
      policy,
      signal: abort.signal,
    });
    expect(performance.now() - t0).toBeLessThan(30_000);
    expect(s.sessions.succeeded).toBe(1);
  });

  it('reports the generator derived figures and keeps secret options out', async () => {
    const def: LoadDefinition = {
      ...toy(async (c) => c.joined()),
      prepare: async (run) => ({
        session: async (c) => {
          run.stats.counter('lost').add(1);
          run.stats.counter('expected').add(4);
          run.stats.latency('join').record(12);
          c.joined();
        },
        report: () => ({ lossPercent: 25 }),
      }),
    };
    const s = await runLoad({
      definition: def,
      settings: settings({ clients: 1 }),
      options: { secret: 'hunter2' },
      policy,
    });
    expect(s.derived).toEqual({ lossPercent: 25 });
    expect(s.counters).toMatchObject({ lost: 1, expected: 4 });
    expect(s.latencyMs.join?.count).toBe(1);
    expect(JSON.stringify(s)).not.toContain('hunter2');
  });

  it('calls progress every interval with rates and window percentiles', async () => {
    const lines: { rates: Record<string, number>; p99: Record<string, number> }[] = [];
    const def = toy(
      async (c, run) => {
        c.joined();
        const n = run.stats.counter('ticks');
        const lat = run.stats.latency('lag');
        const t = setInterval(() => {
          n.add();
          lat.record(3);
        }, 5);
        await untilStopped(c.signal);
        clearInterval(t);
      },
      { progress: { rates: ['ticks'], latencies: ['lag'] } },
    );
    await runLoad({
      definition: def,
      settings: settings({ clients: 1, durationS: 0.5 }),
      options: {},
      policy,
      progressIntervalMs: 100,
      onProgress: (p) => lines.push(p),
    });
    const withTicks = lines.filter((l) => (l.rates.ticks ?? 0) > 0);
    expect(withTicks.length).toBeGreaterThan(0);
    expect(withTicks[0]!.p99.lag).toBeCloseTo(3, 1);
  });
});
