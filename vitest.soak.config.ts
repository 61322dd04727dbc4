import { defineConfig } from 'vitest/config';

// `npm run soak`: the soak alone (test/soak/), out of `npm test`. GAMEWIRE_SOAK_SECONDS sets its
// length (600 by default from the npm script; .ci/run runs a short one as its own step).
process.env.GAMEWIRE_ADMIN_PORT ??= '0';

export default defineConfig({
  test: {
    include: ['test/soak/**/*.test.ts'],
    globalSetup: ['test/global-setup.ts'],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    pool: 'forks',
  },
});
