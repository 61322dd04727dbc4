import { defineConfig } from 'vitest/config';

// Every `gamewire serve` a test spawns gets its admin endpoint on a free port, never 9100 (tests run
// in parallel); a test that needs a given port sets GAMEWIRE_ADMIN_PORT itself.
process.env.GAMEWIRE_ADMIN_PORT ??= '0';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    globalSetup: ['test/global-setup.ts'],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    pool: 'forks',
    // Most test files wait on sockets, child processes and timers rather than compute: vitest's
    // default (one worker fewer than the CPUs: a single worker on a 2-core runner) left CI's CPUs
    // mostly idle and took over half an hour. Three files at a time keep both cores busy.
    maxWorkers: Number(process.env.GAMEWIRE_TEST_WORKERS ?? 3),
    // CI also writes a JSON report, from which .ci/run prints its closing "N passed, N failed" line.
    reporters: process.env.CI ? ['default', ['json', { outputFile: 'test-results.json' }]] : ['default'],
  },
});
