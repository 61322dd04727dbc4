#!/usr/bin/env node
/**
 * Builds the unity-relay native data plane (native/relay_dataplane.c) with node-gyp, offline,
 * against the headers that ship with the pinned Node in node_modules (no header download).
 * Never fails the install: without a compiler, on another platform, or on any build error, it
 * says so and the relay uses its JavaScript data plane.
 *
 *   node scripts/build-native.mjs            build native/build/Release/relay_dataplane.node
 *   node scripts/build-native.mjs --sanitize build native/build-sanitize/relay_dataplane.node
 *                                            with AddressSanitizer and UBSan (for the tests)
 *   node scripts/build-native.mjs --thread   build native/build-tsan/relay_dataplane.node with
 *                                            ThreadSanitizer (for the tests)
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const native = join(root, 'native');
const sanitize = process.argv.includes('--sanitize');
const thread = process.argv.includes('--thread');

function say(text) {
  process.stderr.write(`native data plane: ${text}\n`);
}

/** The pinned Node's own headers: node_modules/node/node_modules/node-<platform>-<arch>. */
export function pinnedNodeDir() {
  const require = createRequire(join(root, 'node_modules', 'node', 'package.json'));
  try {
    const pkg = require.resolve(`node-${process.platform}-${process.arch}/package.json`);
    const dir = dirname(pkg);
    if (existsSync(join(dir, 'include', 'node', 'node_api.h'))) return dir;
  } catch {
    // fall through
  }
  return undefined;
}

function nodeGyp() {
  const candidates = [
    process.env.npm_config_node_gyp,
    join(
      dirname(process.execPath),
      '..',
      'lib',
      'node_modules',
      'npm',
      'node_modules',
      'node-gyp',
      'bin',
      'node-gyp.js',
    ),
    '/usr/lib/node_modules/npm/node_modules/node-gyp/bin/node-gyp.js',
    '/usr/local/lib/node_modules/npm/node_modules/node-gyp/bin/node-gyp.js',
  ];
  return candidates.find((c) => c !== undefined && existsSync(c));
}

/** The C sources binding.gyp lists (the sanitizer and thread-sanitizer builds compile the same). */
export function nativeSources() {
  const gyp = JSON.parse(readFileSync(join(native, 'binding.gyp'), 'utf8'));
  return gyp.targets[0].sources.map((s) => join(native, s));
}

function hasCompiler() {
  return spawnSync('cc', ['--version'], { stdio: 'ignore' }).status === 0;
}

function main() {
  if (process.platform !== 'linux') {
    say(`not built: ${process.platform} uses the JavaScript data plane (recvmmsg/sendmmsg are Linux-only)`);
    return 0;
  }
  if (!hasCompiler()) {
    say('not built: no C compiler (cc); the relay uses the JavaScript data plane');
    return 0;
  }
  const nodedir = pinnedNodeDir();
  if (nodedir === undefined) {
    say(
      "not built: the pinned Node's headers are missing from node_modules; the relay uses the JavaScript data plane",
    );
    return 0;
  }
  if (sanitize || thread) {
    // A direct compile: the sanitizer builds are for the tests only.
    const out = join(native, thread ? 'build-tsan' : 'build-sanitize');
    mkdirSync(out, { recursive: true });
    const flags = thread
      ? ['-fsanitize=thread']
      : ['-fsanitize=address,undefined', '-fno-sanitize-recover=undefined'];
    const r = spawnSync(
      'cc',
      [
        '-std=gnu11',
        '-g',
        '-O1',
        '-fno-omit-frame-pointer',
        ...flags,
        '-shared',
        '-fPIC',
        '-Wall',
        '-Wextra',
        '-Wno-unused-parameter',
        '-DNODE_GYP_MODULE_NAME=relay_dataplane',
        `-I${join(nodedir, 'include', 'node')}`,
        ...nativeSources(),
        '-o',
        join(out, 'relay_dataplane.node'),
        '-ldl',
        '-lpthread',
      ],
      { stdio: 'inherit' },
    );
    if (r.status !== 0) {
      say(`${thread ? 'thread-sanitizer' : 'sanitizer'} build failed`);
      return 1;
    }
    say(
      `built with ${thread ? 'ThreadSanitizer' : 'AddressSanitizer and UBSan'}: ${join(out, 'relay_dataplane.node')}`,
    );
    return 0;
  }
  const gyp = nodeGyp();
  if (gyp === undefined) {
    say('not built: node-gyp not found (it ships with npm); the relay uses the JavaScript data plane');
    return 0;
  }
  const r = spawnSync(process.execPath, [gyp, 'rebuild', `--nodedir=${nodedir}`], {
    cwd: native,
    stdio: ['ignore', 'ignore', 'pipe'],
    env: { ...process.env, npm_config_nodedir: nodedir },
    encoding: 'utf8',
  });
  if (r.status !== 0) {
    say('build failed; the relay uses the JavaScript data plane. node-gyp said:');
    process.stderr.write(r.stderr.split('\n').slice(-15).join('\n'));
    return 0;
  }
  say('built native/build/Release/relay_dataplane.node');
  return 0;
}

process.exitCode = main();
