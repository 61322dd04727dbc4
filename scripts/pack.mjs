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
 *   postpack  removes prebuilds/ again, so a checkout keeps loading its own source build.
 */
import { spawnSync } from 'node:child_process';
import { rmSync } from 'node:fs';
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

function prepack() {
  rmSync(join(root, 'dist', 'src'), { recursive: true, force: true });
  if (!node([tsc, '-p', 'tsconfig.pack.json'])) {
    say('the TypeScript build failed');
    return 1;
  }
  rmSync(join(root, 'prebuilds'), { recursive: true, force: true });
  const asked = process.env.GAMEWIRE_PREBUILDS;
  const tags =
    asked !== undefined && asked !== ''
      ? asked.split(',').map((t) => t.trim())
      : [
          'linux-x64',
          ...(hasProgram('aarch64-linux-gnu-gcc') || process.arch === 'arm64' ? ['linux-arm64'] : []),
        ];
  if (!tags.includes('linux-arm64'))
    say(
      'no linux-arm64 addon in this package: aarch64-linux-gnu-gcc is missing (Debian: gcc-aarch64-linux-gnu libc6-dev-arm64-cross)',
    );
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

const steps = { prepare, prepack, postpack };
const step = steps[process.argv[2]];
if (step === undefined) {
  say('usage: node scripts/pack.mjs prepare|prepack|postpack');
  process.exitCode = 2;
} else {
  process.exitCode = step();
}
