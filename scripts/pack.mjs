#!/usr/bin/env node
/**
 * The package's lifecycle scripts (package.json "scripts"):
 *
 *   prepare   `npm ci` in a checkout: the development build (dist/, with source maps and the
 *             benches) and the native addon from source (native/build/Release). Skipped when npm
 *             runs it as part of `npm pack`/`npm publish`, which `prepack` has built for.
 *   prepack   what the tarball ships: a clean dist/src (JavaScript and .d.ts, no source maps) and
 *             the prebuilt addons, prebuilds/<platform>-<arch>/relay_dataplane.node with its SHA-256
 *             beside it (relay_dataplane.node.sha256, printed too), for linux-x64 (required) and
 *             linux-arm64 (when Debian's cross compiler is installed; required when
 *             GAMEWIRE_PREBUILDS names it). GAMEWIRE_PREBUILDS=linux-x64,linux-arm64 sets the list.
 *             They are built by scripts/build-native.mjs with the same recipe as the checkout
 *             build, so the linux-x64 one is byte for byte what `npm ci` built and the tests ran.
 *             With CI=true (or GAMEWIRE_RELEASE=1) every addon the README promises is required:
 *             a package without the linux-arm64 one fails here instead of shipping with a line
 *             in the log.
 *   postpack  removes prebuilds/ again, so a checkout keeps loading its own source build.
 *   release-check  (`npm run release:check`) packs the package as a release would (every
 *             promised addon required) and fails unless the tarball's file list has each of them.
 */
import { spawnSync } from 'node:child_process';
import { readFileSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const tsc = join(root, 'node_modules', 'typescript', 'bin', 'tsc');

function say(text) {
  process.stderr.write(`gamewire ${process.argv[2]}: ${text}\n`);
}

function node(args) {
  return spawnSync(process.execPath, args, { cwd: root, stdio: 'inherit' }).status === 0;
}

function hasProgram(cmd) {
  return spawnSync(cmd, ['--version'], { stdio: 'ignore' }).status === 0;
}

function prepare() {
  const command = process.env.npm_command;
  if (command === 'pack' || command === 'publish') {
    say(`skipped under npm ${command} (prepack built the package)`);
    return 0;
  }
  if (!node([tsc, '-p', 'tsconfig.build.json'])) return 1;
  return node([join(root, 'scripts', 'build-native.mjs')]) ? 0 : 1;
}

/** The addons the README promises ("prebuilt for Linux x64 and arm64"). */
const PROMISED = ['linux-x64', 'linux-arm64'];

/** A release build (CI, or asked for): a promised addon that cannot be built fails the pack. */
function releaseBuild() {
  return process.env.CI === 'true' || process.env.GAMEWIRE_RELEASE === '1';
}

function prepack() {
  // Which addons, and whether a promised one is missing, first: a release that cannot ship them
  // fails before anything in the checkout is touched.
  const asked = process.env.GAMEWIRE_PREBUILDS;
  const tags =
    asked !== undefined && asked !== ''
      ? asked.split(',').map((t) => t.trim())
      : [
          'linux-x64',
          ...(hasProgram('aarch64-linux-gnu-gcc') || process.arch === 'arm64' ? ['linux-arm64'] : []),
        ];
  const missing = PROMISED.filter((t) => !tags.includes(t));
  if (missing.length > 0 && releaseBuild() && (asked === undefined || asked === '')) {
    say(
      `no ${missing.join(', ')} addon, which the README promises: aarch64-linux-gnu-gcc is missing ` +
        '(Debian: apt-get install gcc-aarch64-linux-gnu libc6-dev-arm64-cross; .ci/run installs it). ' +
        'A release (CI=true or GAMEWIRE_RELEASE=1) does not ship without it; GAMEWIRE_PREBUILDS=linux-x64 packs without it on purpose',
    );
    return 1;
  }
  if (!tags.includes('linux-arm64'))
    say(
      'no linux-arm64 addon in this package: aarch64-linux-gnu-gcc is missing (Debian: gcc-aarch64-linux-gnu libc6-dev-arm64-cross)',
    );
  rmSync(join(root, 'dist', 'src'), { recursive: true, force: true });
  if (!node([tsc, '-p', 'tsconfig.pack.json'])) {
    say('the TypeScript build failed');
    return 1;
  }
  rmSync(join(root, 'prebuilds'), { recursive: true, force: true });
  if (!node([join(root, 'scripts', 'build-native.mjs'), '--prebuild', ...tags])) {
    say('the prebuilt native addon could not be built: the package would have no native data plane');
    return 1;
  }
  return 0;
}

function postpack() {
  rmSync(join(root, 'prebuilds'), { recursive: true, force: true });
  return 0;
}

/**
 * `npm run release:check`: `npm pack --dry-run` as a release (prepack requires every promised
 * addon), then the tarball's file list must hold each promised addon.
 */
function releaseCheck() {
  const npm = process.env.npm_execpath;
  const args = ['pack', '--dry-run', '--json'];
  const r = npm?.endsWith('.js')
    ? spawnSync(process.execPath, [npm, ...args], {
        cwd: root,
        env: { ...process.env, GAMEWIRE_RELEASE: '1' },
        stdio: ['ignore', 'pipe', 'inherit'],
        encoding: 'utf8',
      })
    : spawnSync('npm', args, {
        cwd: root,
        env: { ...process.env, GAMEWIRE_RELEASE: '1' },
        stdio: ['ignore', 'pipe', 'inherit'],
        encoding: 'utf8',
      });
  if (r.status !== 0) {
    say('npm pack failed: the package is not releasable (see above)');
    return 1;
  }
  let files;
  try {
    files = JSON.parse(r.stdout)[0].files.map((f) => f.path);
  } catch {
    say(`cannot read npm pack's file list: ${r.stdout.slice(0, 200)}`);
    return 1;
  }
  const version = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')).version;
  const absent = PROMISED.filter((t) => !files.includes(`prebuilds/${t}/relay_dataplane.node`));
  if (absent.length > 0) {
    say(`gamewire ${version} would ship without the ${absent.join(', ')} addon the README promises`);
    return 1;
  }
  say(`gamewire ${version}: ${files.length} files, addons for ${PROMISED.join(', ')}`);
  return 0;
}

const steps = { prepare, prepack, postpack, 'release-check': releaseCheck };
const step = steps[process.argv[2]];
if (step === undefined) {
  say('usage: node scripts/pack.mjs prepare|prepack|postpack|release-check');
  process.exitCode = 2;
} else {
  process.exitCode = step();
}
