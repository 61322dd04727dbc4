import { defineConfig } from 'vitest/config';
import LongestFirst from './test/sequencer.js';

// Every `gamewire serve` a test spawns gets its admin endpoint on a free port, never 9100 (tests run
// in parallel); a test that needs a given port sets GAMEWIRE_ADMIN_PORT itself.
process.env.GAMEWIRE_ADMIN_PORT ??= '0';

/**
 * The files whose servers carry relayed traffic, which the unity-relay data plane moves: they run
 * a second time on the other plane (GAMEWIRE_DATAPLANE=js; the default, `auto`, is the native
 * plane on Linux). What the plane does not touch (the allocation API, stores, codecs, limiters,
 * WebSocket, which is always JavaScript) and the files that pick a plane themselves run once.
 */
const RELAY_PLANE_FILES = [
  'client',
  'conform',
  'crowd',
  'crowd-attack',
  'dataplane',
  'dtls',
  'fleet',
  'fleet-load',
  'hardening',
  'impaired-link',
  'load',
  'load-corrupt',
  'relay',
  'seam',
  'transport-limits',
].map((f) => `test/protocols/unity-relay/${f}.test.ts`);

export default defineConfig({
  test: {
    globalSetup: ['test/global-setup.ts'],
    setupFiles: ['test/setup.ts'],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    pool: 'forks',
    // A worker runs file after file in one module graph instead of a fresh process per file: each
    // file no longer loads vitest and gamewire's modules again (528 against 457 CPU-seconds for the
    // suite). A file restores what it changes in the process; test/setup.ts enforces it for the
    // environment.
    isolate: false,
    sequence: { sequencer: LongestFirst },
    // Most test files wait on sockets, child processes and timers rather than compute: vitest's
    // default (one worker fewer than the CPUs: a single worker on a 2-core runner) left CI's CPUs
    // mostly idle. Five files at a time keep both cores busy: on the 2-core development machine,
    // 1.66 cores on average and 256 s, against 1.54 and 278 s with four, for the same CPU time
    // (workers that share their processes cost little more each; see docs/decisions.md).
    maxWorkers: Number(process.env.GAMEWIRE_TEST_WORKERS ?? 5),
    // CI also writes a JSON report, from which .ci/run prints its closing "N passed, N failed" line.
    reporters: process.env.CI ? ['default', ['json', { outputFile: 'test-results.json' }]] : ['default'],
    // Both data planes run the same tests, as projects of this one run (never a nested vitest):
    // every test of each counts, and a program a test needs is required under CI in both.
    projects: [
      {
        extends: true,
        test: {
          name: 'main',
          include: ['test/**/*.test.ts'],
          // The soak has its own command (`npm run soak`, vitest.soak.config.ts).
          exclude: ['test/soak/**'],
        },
      },
      {
        extends: true,
        test: {
          name: 'unity-relay on the JavaScript data plane',
          include: RELAY_PLANE_FILES,
          env: { GAMEWIRE_DATAPLANE: 'js' },
        },
      },
      {
        extends: true,
        test: {
          name: 'DTLS on the native record layer',
          include: ['test/transports/dtls/**/*.test.ts'],
          env: { GAMEWIRE_DATAPLANE: 'native' },
        },
      },
    ],
  },
});
