#!/usr/bin/env node
/**
 * The one build recipe of the unity-relay native data plane: the checkout build (`npm ci`), the
 * addons shipped in the package (linux-x64, and linux-arm64 cross-compiled) and the sanitizer
 * builds of the tests all compile here, with the flags of RECIPE below, against the headers of
 * the pinned Node in node_modules (or, in an installed package, of the Node that runs this
 * script). Nothing is downloaded; no node-gyp, Python or make is needed, only a C compiler and
 * binutils. A release build is reproducible: the same sources, compiler and recipe give the same
 * bytes in any folder, and its SHA-256 is written beside it (`<file>.sha256`, sha256sum format).
 *
 *   node scripts/build-native.mjs                 checkout build: native/build/Release/relay_dataplane.node
 *                                                 (byte for byte the prebuilt for this platform).
 *                                                 Never fails: without a compiler, on another
 *                                                 platform or on a build error it says why, and
 *                                                 the relay uses its JavaScript data plane.
 *   node scripts/build-native.mjs --sanitize      native/build-sanitize/relay_dataplane.node with
 *                                                 AddressSanitizer and UBSan (for the tests)
 *   node scripts/build-native.mjs --thread        native/build-tsan/relay_dataplane.node with
 *                                                 ThreadSanitizer (for the tests)
 *   node scripts/build-native.mjs --prebuild linux-x64 [linux-arm64 …]
 *                                                 the addons shipped in the package (pack time):
 *                                                 DIR/<platform>-<arch>/relay_dataplane.node and
 *                                                 .sha256, DIR defaulting to prebuilds/. Fails
 *                                                 (exit 1) when one cannot be built or would need
 *                                                 a glibc newer than Node 22 does (2.28).
 *
 * Options: `--out DIR` (where the checkout, sanitizer or prebuilt builds go), `--nodedir DIR` (the
 * Node headers: DIR/include/node), and, for test builds only, `--with FILE.c` (one more source)
 * and `--wrap SYMBOL` (the linker's --wrap, so FILE.c can stand between the addon and SYMBOL).
 */
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const native = join(root, 'native');
const TARGET = 'relay_dataplane';
/** Node 22's official Linux binaries need glibc 2.28; a prebuilt addon must not need more. */
export const GLIBC_FLOOR = '2.28';

/**
 * Every flag of every build, in this one place. What distributions' compilers turn on by default
 * differs (Ubuntu's gcc adds stack protection, CET, --as-needed; Debian's does not), so each such
 * choice is stated here rather than inherited.
 */
export const RECIPE = {
  cflags: [
    '-std=gnu11',
    '-fPIC',
    '-pthread',
    '-fno-strict-aliasing',
    '-fno-omit-frame-pointer',
    '-fstack-protector-strong',
    '-fstack-clash-protection',
    '-Wall',
    '-Wextra',
    '-Wno-unused-parameter',
    // No __DATE__/__TIME__: a build must not depend on when it ran.
    '-Werror=date-time',
    // gcc's own random names (it uses them for some symbols) seeded by the target, not the clock.
    `-frandom-seed=${TARGET}`,
  ],
  /** What node-gyp defines for an addon; OPENSSL_* matter to the OpenSSL headers. */
  defines: [
    `NODE_GYP_MODULE_NAME=${TARGET}`,
    'USING_UV_SHARED=1',
    'USING_V8_SHARED=1',
    'V8_DEPRECATION_WARNINGS=1',
    '_FILE_OFFSET_BITS=64',
    '_LARGEFILE_SOURCE',
    'OPENSSL_NO_PINSHARED',
    'OPENSSL_THREADS',
    'BUILDING_NODE_EXTENSION',
  ],
  ldflags: [
    '-shared',
    '-Wl,-z,noexecstack',
    '-Wl,-z,relro',
    '-Wl,--hash-style=gnu',
    '-Wl,--no-as-needed',
    // A build id that is a hash of the linked bytes: fixed for fixed inputs, still useful to
    // debuggers (no random or time-based id).
    '-Wl,--build-id=sha1',
  ],
  libraries: ['-ldl', '-lpthread'],
  /** Per build kind: the shipped/checkout build, and the two sanitizer builds of the tests. */
  release: ['-O2', '-U_FORTIFY_SOURCE', '-D_FORTIFY_SOURCE=2'],
  sanitize: [
    '-O1',
    '-g',
    '-U_FORTIFY_SOURCE',
    '-fsanitize=address,undefined',
    '-fno-sanitize-recover=undefined',
  ],
  thread: ['-O1', '-g', '-U_FORTIFY_SOURCE', '-fsanitize=thread'],
  /**
   * Per CPU: the baseline instruction set (never the build machine's), no CET/PAC. A checkout
   * build on another Linux CPU uses its compiler's defaults (it is never shipped).
   */
  arch: {
    x64: ['-m64', '-march=x86-64', '-mtune=generic', '-fcf-protection=none'],
    arm64: ['-march=armv8-a', '-mtune=generic', '-mbranch-protection=none'],
  },
};

const TRIPLETS = { x64: 'x86_64-linux-gnu', arm64: 'aarch64-linux-gnu' };

/** Variables that would let the caller's environment change what gcc does. */
const COMPILER_ENV = [
  'CPATH',
  'C_INCLUDE_PATH',
  'LIBRARY_PATH',
  'GCC_EXEC_PREFIX',
  'COMPILER_PATH',
  'DEPENDENCIES_OUTPUT',
  'SUNPRO_DEPENDENCIES',
  'GCC_COMPARE_DEBUG',
];

function say(text) {
  process.stderr.write(`native data plane: ${text}\n`);
}

/**
 * The Node headers to build against: the pinned Node's (node_modules/node/node_modules/
 * node-<platform>-<arch>, a devDependency), else those next to the running Node
 * (<prefix>/include/node, as the official tarballs and Debian's nodejs-dev install them).
 */
export function nodeHeadersDir() {
  try {
    const require = createRequire(join(root, 'node_modules', 'node', 'package.json'));
    const dir = dirname(require.resolve(`node-${process.platform}-${process.arch}/package.json`));
    if (existsSync(join(dir, 'include', 'node', 'node_api.h'))) return dir;
  } catch {
    // not a checkout with its devDependencies: try the running Node
  }
  const prefix = resolve(dirname(process.execPath), '..');
  if (existsSync(join(prefix, 'include', 'node', 'node_api.h'))) return prefix;
  return undefined;
}

/** The C sources: every native/*.c, in name order (so a new file cannot be left out). */
export function nativeSources(dir = native) {
  return readdirSync(dir)
    .filter((f) => f.endsWith('.c'))
    .sort();
}

/** The C compiler for a Linux CPU: the host's `cc` for its own CPU, Debian's cross gcc otherwise. */
export function compilerFor(arch) {
  if (arch === process.arch && process.platform === 'linux') return 'cc';
  return `${TRIPLETS[arch]}-gcc`;
}

function binutil(cc, tool) {
  return cc === 'cc' ? tool : `${cc.slice(0, -'gcc'.length)}${tool}`;
}

function compilerEnv() {
  const env = { ...process.env, LC_ALL: 'C', SOURCE_DATE_EPOCH: '0' };
  for (const name of COMPILER_ENV) delete env[name];
  return env;
}

function run(cmd, args, cwd) {
  const r = spawnSync(cmd, args, { encoding: 'utf8', cwd, env: compilerEnv() });
  if (r.error !== undefined) return { ok: false, out: `${cmd}: ${r.error.message}` };
  return { ok: r.status === 0, out: `${r.stdout}${r.stderr}` };
}

export function sha256(file) {
  return createHash('sha256').update(readFileSync(file)).digest('hex');
}

function versionAbove(v, floor) {
  const a = v.split('.').map(Number);
  const b = floor.split('.').map(Number);
  for (let i = 0; i < Math.max(a.length, b.length); i++) {
    if ((a[i] ?? 0) !== (b[i] ?? 0)) return (a[i] ?? 0) > (b[i] ?? 0);
  }
  return false;
}

/** `name@GLIBC_x.y` of every undefined symbol of a shared object (readelf, any architecture). */
export function glibcImports(file) {
  const r = run('readelf', ['--dyn-syms', '--wide', file]);
  if (!r.ok) throw new Error(`readelf ${file}: ${r.out.trim()}`);
  const out = [];
  for (const line of r.out.split('\n')) {
    const m = /\sUND\s+(\w+)@GLIBC_([\d.]+)/.exec(line);
    if (m !== null) out.push({ name: m[1], version: m[2] });
  }
  return out;
}

/** For each symbol, the newest version at or below the floor that the target's libc.so.6 defines. */
function olderVersions(cc, names) {
  const libc = run(cc, ['-print-file-name=libc.so.6']).out.trim();
  const r = run('readelf', ['--dyn-syms', '--wide', libc]);
  if (!r.ok) throw new Error(`readelf ${libc}: ${r.out.trim()}`);
  const chosen = new Map();
  for (const line of r.out.split('\n')) {
    const m = /\s(\w+)@@?GLIBC_([\d.]+)/.exec(line);
    if (m === null || !names.includes(m[1]) || versionAbove(m[2], GLIBC_FLOOR)) continue;
    const best = chosen.get(m[1]);
    if (best === undefined || versionAbove(m[2], best)) chosen.set(m[1], m[2]);
  }
  return chosen;
}

/**
 * The compiler's arguments for one build, run in the sources' folder with their bare names, so
 * that no path of the build machine gets into the addon: the sources are `native/…`, the Node
 * headers `node/…`, generated files `build/…` wherever they really are.
 */
export function recipeArgs({
  arch,
  kind,
  nodedir,
  output,
  scratch,
  extra = [],
  withSources = [],
  wrap = [],
}) {
  // Another Linux CPU (a checkout build only, never shipped): the compiler's own baseline.
  const cflags = [...RECIPE.cflags, ...(RECIPE.arch[arch] ?? []), ...RECIPE[kind]];
  return [
    ...cflags,
    `-ffile-prefix-map=${native}=native`,
    `-ffile-prefix-map=${nodedir}=node`,
    `-ffile-prefix-map=${scratch}=build`,
    ...withSources.map((f) => `-ffile-prefix-map=${dirname(f)}=test`),
    ...extra,
    ...RECIPE.defines.map((d) => `-D${d}`),
    `-I${join(nodedir, 'include', 'node')}`,
    ...nativeSources(),
    ...withSources,
    '-o',
    output,
    ...RECIPE.ldflags,
    ...wrap.map((s) => `-Wl,--wrap=${s}`),
    ...RECIPE.libraries,
  ];
}

/**
 * Builds the addon into `output` with the recipe for `arch` and `kind` (release, sanitize,
 * thread). A release build binds every C library symbol versioned after 2.28 to its older version
 * (`.symver`), is stripped, and gets `<output>.sha256`. The file is written whole, then renamed
 * into place, so a process that has the previous one loaded is not disturbed. Returns its SHA-256.
 */
export function buildAddon({ arch, kind, output, nodedir, withSources = [], wrap = [] }) {
  if (RECIPE.arch[arch] === undefined && arch !== process.arch)
    throw new Error(`no recipe for CPU ${arch}: only x64 and arm64 are cross-compiled`);
  if (nodedir === undefined) throw new Error("the pinned Node's headers are missing: run npm ci first");
  const cc = compilerFor(arch);
  if (!run(cc, ['--version']).ok) {
    const pkg = arch === 'arm64' ? 'gcc-aarch64-linux-gnu' : 'gcc-x86-64-linux-gnu';
    throw new Error(`no C compiler for linux-${arch} (${cc}; Debian: apt-get install ${pkg})`);
  }
  mkdirSync(dirname(output), { recursive: true });
  const scratch = mkdtempSync(join(tmpdir(), 'gamewire-native-'));
  const partial = join(scratch, `${TARGET}.node`);
  try {
    let extra = [];
    for (let attempt = 0; ; attempt++) {
      const args = recipeArgs({ arch, kind, nodedir, output: partial, scratch, extra, withSources, wrap });
      const r = run(cc, args, native);
      if (!r.ok) throw new Error(`${cc} failed for linux-${arch}:\n${r.out}`);
      // Test builds with a hook (--with/--wrap) run only here: no floor (a versioned reference
      // would slip past --wrap).
      if (kind !== 'release' || wrap.length > 0) break;
      const tooNew = glibcImports(partial).filter((s) => versionAbove(s.version, GLIBC_FLOOR));
      if (tooNew.length === 0) break;
      if (attempt === 1)
        throw new Error(
          `linux-${arch}: still needs glibc > ${GLIBC_FLOOR} after binding older symbol versions`,
        );
      const names = [...new Set(tooNew.map((s) => s.name))].sort();
      const older = olderVersions(cc, names);
      const missing = names.filter((n) => !older.has(n));
      if (missing.length > 0)
        throw new Error(
          `linux-${arch}: ${missing.join(', ')} exist only in glibc > ${GLIBC_FLOOR}; the addon must not use them`,
        );
      const header = join(scratch, 'glibc-compat.h');
      writeFileSync(
        header,
        names.map((name) => `__asm__(".symver ${name},${name}@GLIBC_${older.get(name)}");\n`).join(''),
      );
      extra = ['-include', header];
    }
    if (kind === 'release') {
      const strip = run(binutil(cc, 'strip'), ['--strip-unneeded', partial]);
      if (!strip.ok) throw new Error(`strip failed for linux-${arch}: ${strip.out}`);
    }
    rmSync(`${output}.sha256`, { force: true });
    renameSync(partial, output);
    const hash = sha256(output);
    if (kind === 'release') writeFileSync(`${output}.sha256`, `${hash}  ${basename(output)}\n`);
    return hash;
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
}

/** The compiler that made a build, as it names itself (what reproducing the hash needs). */
function compilerVersion(arch) {
  return run(compilerFor(arch), ['--version']).out.split('\n')[0]?.trim() ?? '';
}

function option(argv, name) {
  const at = argv.indexOf(name);
  return at === -1 ? undefined : resolve(argv[at + 1]);
}

function options(argv, name) {
  return argv.flatMap((a, i) => (a === name && argv[i + 1] !== undefined ? [argv[i + 1]] : []));
}

/** What node-gyp left in native/build when it made the checkout build (before this recipe). */
function removeNodeGypLeftovers() {
  const build = join(native, 'build');
  for (const f of [
    'Makefile',
    'binding.Makefile',
    'config.gypi',
    `${TARGET}.target.mk`,
    'Release/obj.target',
    'Release/.deps',
  ])
    rmSync(join(build, f), { recursive: true, force: true });
}

/** The checkout build: never fails (the relay then runs its JavaScript data plane). */
function checkoutBuild(argv) {
  if (process.platform !== 'linux') {
    say(`not built: ${process.platform} uses the JavaScript data plane (recvmmsg/sendmmsg are Linux-only)`);
    return 0;
  }
  if (!run('cc', ['--version']).ok) {
    say('not built: no C compiler (cc); the relay uses the JavaScript data plane');
    return 0;
  }
  const nodedir = option(argv, '--nodedir') ?? nodeHeadersDir();
  if (nodedir === undefined) {
    say(
      'not built: no Node headers (neither the pinned Node in node_modules nor <prefix>/include/node); the relay uses the JavaScript data plane',
    );
    return 0;
  }
  const output = join(option(argv, '--out') ?? join(native, 'build', 'Release'), `${TARGET}.node`);
  if (option(argv, '--out') === undefined) removeNodeGypLeftovers();
  try {
    const hash = buildAddon({
      arch: process.arch,
      kind: 'release',
      output,
      nodedir,
      withSources: options(argv, '--with').map((f) => resolve(f)),
      wrap: options(argv, '--wrap'),
    });
    say(`built ${output} sha256 ${hash} (${compilerVersion(process.arch)})`);
  } catch (err) {
    say(`build failed; the relay uses the JavaScript data plane:\n${err.message}`);
  }
  return 0;
}

/** The sanitizer builds (tests only): the same recipe at -O1 with debug information. */
function sanitizeBuild(argv, thread) {
  const nodedir = option(argv, '--nodedir') ?? nodeHeadersDir();
  if (process.platform !== 'linux' || nodedir === undefined) {
    say('sanitizer builds need Linux and the pinned Node headers (npm ci)');
    return 1;
  }
  const dir = option(argv, '--out') ?? join(native, thread ? 'build-tsan' : 'build-sanitize');
  const output = join(dir, `${TARGET}.node`);
  const what = thread ? 'ThreadSanitizer' : 'AddressSanitizer and UBSan';
  try {
    buildAddon({ arch: process.arch, kind: thread ? 'thread' : 'sanitize', output, nodedir });
  } catch (err) {
    say(`build with ${what} failed: ${err.message}`);
    return 1;
  }
  say(`built with ${what}: ${output}`);
  return 0;
}

/** The prebuilt addons of the package: DIR/<platform>-<arch>/relay_dataplane.node (+ .sha256). */
function prebuild(argv) {
  const outRoot = option(argv, '--out') ?? join(root, 'prebuilds');
  const nodedir = option(argv, '--nodedir') ?? nodeHeadersDir();
  const at = argv.indexOf('--prebuild');
  const tags = [];
  for (let i = at + 1; i < argv.length && !argv[i].startsWith('--'); i++) tags.push(argv[i]);
  try {
    for (const tag of tags.length > 0 ? tags : [`${process.platform}-${process.arch}`]) {
      const [platform, arch] = tag.split('-');
      if (platform !== 'linux' || RECIPE.arch[arch] === undefined)
        throw new Error(`no prebuilt for ${tag}: only linux-x64 and linux-arm64 are built`);
      const output = join(outRoot, tag, `${TARGET}.node`);
      const hash = buildAddon({ arch, kind: 'release', output, nodedir });
      say(`built ${output} sha256 ${hash} (${compilerVersion(arch)})`);
    }
    return 0;
  } catch (err) {
    say(err.message);
    return 1;
  }
}

function main(argv) {
  if (argv.includes('--sanitize')) return sanitizeBuild(argv, false);
  if (argv.includes('--thread')) return sanitizeBuild(argv, true);
  if (argv.includes('--prebuild')) return prebuild(argv);
  return checkoutBuild(argv);
}

if (process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  process.exitCode = main(process.argv.slice(2));
}
