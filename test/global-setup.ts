/**
 * Builds the CLI once before any test file runs, so the tests that spawn `bin/gamewire.js` see
 * the current sources, and no test file rebuilds dist/ while another is running it. Also builds
 * the native data plane when it is missing (a checkout that skipped `npm ci`'s prepare step), as
 * `npm ci` would: its tests need it on Linux.
 */
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

export default function setup(): void {
  const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
  const tsc = path.join(root, 'node_modules', '.bin', 'tsc');
  const r = spawnSync(tsc, ['-p', 'tsconfig.build.json'], { cwd: root, encoding: 'utf8', timeout: 120_000 });
  // tsc still emits when it finds type errors; `npm test` fails on those in its check step, so
  // here only a build that produced no CLI at all stops the run.
  if (r.status !== 0 && !existsSync(path.join(root, 'dist', 'src', 'cli', 'main.js'))) {
    throw new Error(`build failed before the tests:\n${r.stdout}${r.stderr}`);
  }
  if (!existsSync(path.join(root, 'native', 'build', 'Release', 'relay_dataplane.node'))) {
    spawnSync(process.execPath, [path.join(root, 'scripts', 'build-native.mjs')], {
      cwd: root,
      stdio: 'inherit',
      timeout: 180_000,
    });
  }
}
