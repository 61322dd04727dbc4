/**
 * Soak: every server in one `gamewire serve` process (as `npm start` runs them) under steady
 * churn from `gamewire load` generators (JS5 downloads, RMC logins and calls over PRUDP and TCP,
 * Unity Relay games over UDP, DTLS and WebSocket, NoxVR players over UDP and TCP), with the
 * server's own memory and handle figures sampled from its admin endpoint's /metrics.
 *
 * It shows flat memory and no leaked handles:
 * - resident memory, fitted by least squares over the second half of the load, grows less than
 *   40 MiB over the window and, when that half is 10 minutes or more, less than 1 MiB a minute
 *   (a leak of 1 MiB a minute fails `npm run soak`). The first half is the warm-up: a fresh
 *   process's resident memory grows for about ten minutes of churn while the allocator's arenas,
 *   V8's code and the caches fill (2.9 MiB a minute over minutes 2.5–10, then 0.5 MiB a minute
 *   over minutes 5–20 of a 20-minute run, the JavaScript heap flat), so a fit over it would
 *   measure the warm-up, not a leak;
 * - once the clients have left, open file descriptors and active resources (sockets, timers,
 *   requests: process.getActiveResourcesInfo()) come back to within 16 of what they were before
 *   the load, after a warm-up (every socket, timer and session released).
 *
 * Not part of `npm test`: `npm run soak` runs it for 20 minutes (GAMEWIRE_SOAK_SECONDS), and
 * .ci/run runs a 60 s one as a step of its own (vitest.soak.config.ts).
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import type { LoadSummary } from '../../src/core/load/index.js';
import { runProtocolLoad } from '../helpers/load.js';
import { freePort } from '../helpers/redis.js';
import { type Served, startServe } from '../helpers/serve.js';
import { elapse, waitFor } from '../helpers/wait.js';

const SECONDS = Number(process.env.GAMEWIRE_SOAK_SECONDS ?? 60);
const MiB = 1024 * 1024;

interface Sample {
  t: number;
  rss: number;
  heap: number;
  fds: number;
  handles: number;
}

async function sample(adminPort: number, t0: number): Promise<Sample> {
  const text = await (await fetch(`http://127.0.0.1:${adminPort}/metrics`)).text();
  const metric = (name: string) => {
    const m = new RegExp(`^${name}(?:\\{[^}]*\\})? ([0-9.e+]+)$`, 'm').exec(text);
    if (m === null) throw new Error(`no ${name} in /metrics`);
    return Number(m[1]);
  };
  return {
    t: (performance.now() - t0) / 1000,
    rss: metric('gamewire_process_resident_memory_bytes'),
    heap: metric('gamewire_nodejs_heap_size_used_bytes'),
    fds: metric('gamewire_process_open_fds'),
    handles: metric('gamewire_nodejs_active_resources_total'),
  };
}

/** Least-squares slope of y over t (units of y per second). */
function slope(points: { t: number; y: number }[]): number {
  const n = points.length;
  const mt = points.reduce((a, p) => a + p.t, 0) / n;
  const my = points.reduce((a, p) => a + p.y, 0) / n;
  let num = 0;
  let den = 0;
  for (const p of points) {
    num += (p.t - mt) * (p.y - my);
    den += (p.t - mt) ** 2;
  }
  return den === 0 ? 0 : num / den;
}

let server: Served | undefined;
const dir = mkdtempSync(path.join(tmpdir(), 'gamewire-soak-'));

afterAll(async () => {
  await server?.stop();
  rmSync(dir, { recursive: true, force: true });
});

describe(`soak: every server under churn for ${SECONDS} s`, () => {
  it(
    'keeps memory flat and gives every handle back',
    async () => {
      const ports = { dtls: await freePort(), ws: await freePort() };
      const config = path.join(dir, 'gamewire.json');
      writeFileSync(
        config,
        JSON.stringify({
          serve: { host: '127.0.0.1', logLevel: 'warn' },
          js5: { port: 0, maxPerIp: 0 },
          rmc: { port: 0 },
          'unity-relay': { port: 0, apiPort: 0, dtlsPort: ports.dtls, wsPort: ports.ws, wssPort: 0 },
          'nox-relay': { port: 0 },
        }),
      );
      server = await startServe(['js5', 'rmc', 'unity-relay', 'nox-relay', '--config', config]);
      const s = server;
      const admin = await waitFor(() => s.adminPort(), { what: 'the admin port in the log' });
      const port = (transport: 'tcp' | 'udp' | 'http', what: RegExp) => s.port(transport, what);
      const t0 = performance.now();
      const from = Array.from({ length: 24 }, (_, i) => `127.0.2.${i + 1}`);
      const api = `http://127.0.0.1:${port('http', /allocation API/)}`;

      // Warm-up: every server once, so what is opened on first use and kept (the JS5 cache's
      // files, compiled code) is in the baseline rather than counted as growth.
      await Promise.all([
        runProtocolLoad('js5', {
          target: { host: '127.0.0.1', port: port('tcp', /JS5/) },
          clients: 1,
          durationS: 30,
        }),
        runProtocolLoad('rmc', {
          target: { host: '127.0.0.1', port: port('udp', /PRUDP/) },
          clients: 1,
          durationS: 2,
        }),
        runProtocolLoad(
          'unity-relay',
          { target: { host: '127.0.0.1', port: ports.dtls }, clients: 1, durationS: 2 },
          { api: [api], transport: 'dtls' },
        ),
        runProtocolLoad('nox-relay', {
          target: { host: '127.0.0.1', port: port('udp', /NoxVR/) },
          clients: 1,
          durationS: 2,
        }),
      ]);
      await elapse(2000, 'the warm-up load runs its two seconds before the first sample');
      const before = await sample(admin!, t0);
      const loadStart = (performance.now() - t0) / 1000;

      const runs: [string, Promise<LoadSummary>][] = [
        [
          'js5',
          runProtocolLoad(
            'js5',
            {
              target: { host: '127.0.0.1', port: port('tcp', /JS5/) },
              clients: 3,
              arrivalRate: 2,
              durationS: SECONDS,
              churnS: 8,
              from,
            },
            { urgentRate: 5 },
          ),
        ],
        [
          'rmc prudp',
          runProtocolLoad(
            'rmc',
            {
              target: { host: '127.0.0.1', port: port('udp', /PRUDP/) },
              clients: 6,
              arrivalRate: 5,
              durationS: SECONDS,
              churnS: 5,
              from,
            },
            { callRate: 5 },
          ),
        ],
        [
          'rmc tcp',
          runProtocolLoad(
            'rmc',
            {
              target: { host: '127.0.0.1', port: port('tcp', /RMC/) },
              clients: 3,
              arrivalRate: 5,
              durationS: SECONDS,
              churnS: 5,
              from,
            },
            { transport: 'tcp', callRate: 5, userPrefix: 'soak-tcp-' },
          ),
        ],
        ...(['udp', 'dtls', 'ws'] as const).map(
          (transport) =>
            [
              `unity-relay ${transport}`,
              runProtocolLoad(
                'unity-relay',
                {
                  target: {
                    host: '127.0.0.1',
                    port: transport === 'udp' ? port('udp', /Unity Relay/) : ports[transport],
                  },
                  clients: transport === 'udp' ? 4 : 2,
                  arrivalRate: 2,
                  durationS: SECONDS,
                  churnS: 6,
                  from,
                },
                { api: [api], transport, relayRate: 10 },
              ),
            ] as [string, Promise<LoadSummary>],
        ),
        [
          'nox-relay',
          runProtocolLoad(
            'nox-relay',
            {
              target: { host: '127.0.0.1', port: port('udp', /NoxVR/) },
              clients: 8,
              arrivalRate: 5,
              durationS: SECONDS,
              churnS: 5,
              from,
            },
            { transport: 'mixed', tickRate: 10, segmentShare: 0.1 },
          ),
        ],
      ];

      const samples: Sample[] = [];
      const sampler = setInterval(
        () => {
          sample(admin!, t0).then(
            (x) => samples.push(x),
            () => {},
          );
        },
        Math.max(1000, (SECONDS * 1000) / 40),
      );
      const results = await Promise.all(runs.map(([, p]) => p));
      clearInterval(sampler);

      results.forEach((r, i) => {
        const name = runs[i]![0];
        expect(r.violations, name).toEqual({});
        expect(r.sessions.failed, `${name}: ${JSON.stringify(r.errorMessages)}`).toBe(0);
        // Churn happened: more sessions than slots came and went.
        expect(r.sessions.started, name).toBeGreaterThan(r.clients);
      });

      // Memory: flat over the load once warmed up.
      const steady = samples.filter((x) => x.t >= loadStart + SECONDS / 2);
      expect(steady.length).toBeGreaterThanOrEqual(5);
      const rssPerSecond = slope(steady.map((x) => ({ t: x.t, y: x.rss })));
      const window = steady.at(-1)!.t - steady[0]!.t;
      // The JavaScript heap's slope too: a leak of objects shows there, native memory only in rss.
      const heapPerSecond = slope(steady.map((x) => ({ t: x.t, y: x.heap })));
      const report = `rss ${(before.rss / MiB).toFixed(0)} -> ${(steady.at(-1)!.rss / MiB).toFixed(0)} MiB, slope ${((rssPerSecond * 60) / MiB).toFixed(2)} MiB/min (heap used ${((heapPerSecond * 60) / MiB).toFixed(2)} MiB/min) over ${window.toFixed(0)} s; fds ${before.fds} -> max ${Math.max(...samples.map((x) => x.fds))}, resources ${before.handles} -> max ${Math.max(...samples.map((x) => x.handles))}`;
      console.log(`soak: ${report}`);
      expect(rssPerSecond * window, report).toBeLessThan(40 * MiB);
      if (window >= 570) expect(rssPerSecond * 60, report).toBeLessThan(1 * MiB);

      // Handles: every session's sockets and timers are released once its client has left.
      let after = await sample(admin!, t0);
      await waitFor(
        async () => {
          after = await sample(admin!, t0);
          return after.fds <= before.fds + 16 && after.handles <= before.handles + 16;
        },
        { what: 'the sockets and timers of the sessions released', timeoutMs: 30_000, intervalMs: 500 },
      ).catch(() => undefined);
      const left = `${report}; after the clients left: fds ${after.fds}, resources ${after.handles}`;
      expect(after.fds, left).toBeLessThanOrEqual(before.fds + 16);
      expect(after.handles, left).toBeLessThanOrEqual(before.handles + 16);
    },
    (SECONDS + 150) * 1000,
  );
});
