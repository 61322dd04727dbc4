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
    // CI also writes a JSON report, from which .ci/run prints its closing "N passed, N failed" line.
    reporters: process.env.CI ? ['default', ['json', { outputFile: 'test-results.json' }]] : ['default'],
  },
});
