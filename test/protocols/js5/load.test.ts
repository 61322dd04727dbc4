/**
 * `gamewire load js5` against a spawned `serve js5` (the 530 demo cache): clients download the
 * whole cache with prefetches and urgent upgrades, every index and group CRC-checked; the
 * reconnect logic itself is exercised through a lossy path in impaired-link.test.ts.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runProtocolLoad } from '../../helpers/load.js';
import { type Served, startServe } from '../../helpers/serve.js';

let server: Served;
let target: { host: string; port: number };
/** Groups in the demo cache, from the serve line ("… 212 groups"). */
let groups = 0;

beforeAll(async () => {
  server = await startServe(['js5', '--port', '0', '--host', '127.0.0.1', '--no-admin']);
  target = { host: '127.0.0.1', port: server.port('tcp') };
  groups = Number(/(\d+) groups/.exec(server.endpoints[0]!.description)?.[1]);
  expect(groups).toBeGreaterThan(100);
});

afterAll(async () => {
  await server?.stop();
});

describe('load js5', () => {
  it('every client downloads every group, CRC-checked, and the run ends when they are done', async () => {
    const t0 = performance.now();
    const s = await runProtocolLoad(
      'js5',
      { target, clients: 4, arrivalRate: 10, durationS: 120, from: ['127.0.0.2', '127.0.0.3'] },
      { urgentRate: 20 },
    );
    expect(s.sessions).toMatchObject({ started: 4, joined: 4, succeeded: 4, failed: 0, unfinished: 0 });
    expect(s.counters.downloads).toBe(4);
    expect(s.counters.groups).toBe(4 * groups);
    // Each download asks for one group urgently before its prefetch list, whatever the timing.
    expect(s.counters.upgrades).toBeGreaterThanOrEqual(4);
    expect(s.violations).toEqual({});
    expect(s.latencyMs.download?.count).toBe(4);
    expect(s.bytes.in).toBeGreaterThan(4 * 1_000_000);
    // It stopped by itself, long before its two minutes.
    expect(performance.now() - t0).toBeLessThan(110_000);
  });

  it('a download the end of the run interrupts is unfinished, not failed', async () => {
    const s = await runProtocolLoad('js5', { target, clients: 2, durationS: 0.2 }, { urgentRate: 0 });
    expect(s.sessions.failed).toBe(0);
    expect(s.sessions.started).toBe(2);
    expect(s.sessions.unfinished + s.sessions.succeeded).toBe(2);
    expect(s.violations).toEqual({});
    // --urgent-rate 0: no urgent upgrade at all.
    expect(s.counters.upgrades ?? 0).toBe(0);
  });

  it('a build the server refuses stops the run before any client starts, with the server reason', async () => {
    const s = await runProtocolLoad(
      'js5',
      { target, clients: 1, durationS: 30 },
      { build: 1, maxErrors: 1 },
    ).catch((e: unknown) => e);
    // The generator reads the cache's indexes first: with a refused build that fails at once.
    expect(s).toMatchObject({ code: 'ERR_JS5_OUT_OF_DATE' });
  });
});
