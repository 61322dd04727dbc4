/**
 * Builds the CLI once before any test file runs, so the tests that spawn `bin/gamewire.js` see
 * the current sources, and no test file rebuilds dist/ while another is running it. Also builds
 * the native data plane when it is missing (a checkout that skipped `npm ci`'s prepare step) or
 * older than its sources, as `npm ci` would: its tests need it on Linux, and the reproducibility
 * test compares it with a clean build. Provides the run's scratch folder for the packed
 * package (test/library/packed.ts: packed and installed once per run, by the first test file that
 * needs it) and removes it at the end.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { TestProject } from 'vitest/node';

export default function setup(project: TestProject): () => void {
  const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
  // A nested run (a test that runs part of the suite again, on the other data plane) inherits this
  // variable and must not rebuild dist/: tsc rewriting it under the outer run's tests that spawn
  // the CLI made one of them import a half-written module.
  if (process.env.GAMEWIRE_TESTS_BUILT !== '1' && !builtFromSources(root)) {
    const tsc = path.join(root, 'node_modules', '.bin', 'tsc');
    const r = spawnSync(tsc, ['-p', 'tsconfig.build.json'], {
      cwd: root,
      encoding: 'utf8',
      timeout: 120_000,
    });
    // tsc still emits when it finds type errors; `npm test` fails on those in its check step, so
    // here only a build that produced no CLI at all stops the run.
    if (r.status !== 0 && !existsSync(path.join(root, 'dist', 'src', 'cli', 'main.js'))) {
      throw new Error(`build failed before the tests:\n${r.stdout}${r.stderr}`);
    }
  }
  process.env.GAMEWIRE_TESTS_BUILT = '1';
  if (!nativeBuiltFromSources(root)) {
    spawnSync(process.execPath, [path.join(root, 'scripts', 'build-native.mjs')], {
      cwd: root,
      stdio: 'inherit',
      timeout: 180_000,
    });
  }
  const packDir = mkdtempSync(path.join(tmpdir(), 'gamewire-pack-'));
  project.provide('packDir', packDir);
  return () => rmSync(packDir, { recursive: true, force: true });
}

/**
 * Whether dist/ already holds the build of every source file (each `.ts` of src/ and bench/ has its
 * `.js` in dist/, written after it): in CI, `npm ci`'s prepare step has just built it, and building
 * again cost about 5 CPU-seconds before any test could start.
 */
function builtFromSources(root: string): boolean {
  const fresh = (dir: string): boolean =>
    readdirSync(path.join(root, dir), { withFileTypes: true }).every((e) => {
      const rel = path.join(dir, e.name);
      if (e.isDirectory()) return fresh(rel);
      if (!e.name.endsWith('.ts') || e.name.endsWith('.d.ts')) return true;
      const js = path.join(root, 'dist', rel.replace(/\.ts$/, '.js'));
      return existsSync(js) && statSync(js).mtimeMs >= statSync(path.join(root, rel)).mtimeMs;
    });
  return fresh('src') && fresh('bench');
}

/** Whether the checkout's native addon exists and is newer than native/'s sources and its build script. */
function nativeBuiltFromSources(root: string): boolean {
  const addon = path.join(root, 'native', 'build', 'Release', 'relay_dataplane.node');
  if (!existsSync(addon)) return false;
  const built = statSync(addon).mtimeMs;
  const inputs = [
    path.join(root, 'scripts', 'build-native.mjs'),
    ...readdirSync(path.join(root, 'native'))
      .filter((n) => /\.[ch]$/.test(n))
      .map((n) => path.join(root, 'native', n)),
  ];
  return inputs.every((f) => statSync(f).mtimeMs <= built);
}
