/**
 * The README promises the native data plane prebuilt for linux-x64 and linux-arm64. A release
 * pack (CI=true, or GAMEWIRE_RELEASE=1) on a machine without the arm64 cross compiler fails,
 * before it touches the checkout, instead of shipping without the addon and a line in the log.
 */
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT } from '../helpers/cli.js';

/** `node scripts/pack.mjs prepack` with no aarch64-linux-gnu-gcc on the PATH. */
function prepackWithoutCrossCompiler(env: NodeJS.ProcessEnv) {
  const clean = { ...process.env };
  delete clean.GAMEWIRE_PREBUILDS;
  delete clean.CI;
  delete clean.GAMEWIRE_RELEASE;
  return spawnSync(process.execPath, [path.join(ROOT, 'scripts', 'pack.mjs'), 'prepack'], {
    cwd: ROOT,
    env: { ...clean, PATH: '/nonexistent', ...env },
    encoding: 'utf8',
    timeout: 30_000,
  });
}

describe.skipIf(process.arch === 'arm64')('a release pack without the arm64 addon', () => {
  for (const env of [{ CI: 'true' }, { GAMEWIRE_RELEASE: '1' }]) {
    it(`fails with ${Object.keys(env)[0]}, saying what to install, before touching dist/`, () => {
      const r = prepackWithoutCrossCompiler(env);
      expect(r.status).toBe(1);
      expect(r.stderr).toMatch(/no linux-arm64 addon, which the README promises/);
      expect(r.stderr).toMatch(/gcc-aarch64-linux-gnu/);
      // It stopped before the build: the checkout's dist/ is still there.
      expect(existsSync(path.join(ROOT, 'dist', 'src', 'cli', 'main.js'))).toBe(true);
    });
  }

  it('package.json has `npm run release:check`', async () => {
    const pkg = (await import(path.join(ROOT, 'package.json'), { with: { type: 'json' } })) as {
      default: { scripts: Record<string, string> };
    };
    expect(pkg.default.scripts['release:check']).toBe('node scripts/pack.mjs release-check');
  });
});
