#!/usr/bin/env node
/**
 * Builds the unity-relay native data plane from the sources native/binding.gyp lists, against
 * the headers of the pinned Node in node_modules (or, in an installed package, of the Node that
 * runs this script). Nothing is downloaded.
 *
 *   node scripts/build-native.mjs                 source build (node-gyp): native/build/Release/relay_dataplane.node.
 *                                                 Never fails: without a compiler, on another
 *                                                 platform or on a build error it says why, and
 *                                                 the relay uses its JavaScript data plane.
 *   node scripts/build-native.mjs --sanitize      native/build-sanitize/relay_dataplane.node with
 *                                                 AddressSanitizer and UBSan (for the tests)
 *   node scripts/build-native.mjs --thread        native/build-tsan/relay_dataplane.node with
 *                                                 ThreadSanitizer (for the tests)
 *   node scripts/build-native.mjs --prebuild linux-x64 [linux-arm64 …] [--out DIR]
 *                                                 the addons shipped in the package (pack time):
 *                                                 DIR/<platform>-<arch>/relay_dataplane.node, DIR
 *                                                 defaulting to prebuilds/. Fails (exit 1) when one
 *                                                 cannot be built or would need a glibc newer than
 *                                                 Node 22 does (2.28).
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const native = join(root, 'native');
const TARGET = 'relay_dataplane';
/** Node 22's official Linux binaries need glibc 2.28; a prebuilt addon must not need more. */
export const GLIBC_FLOOR = '2.28';

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

// ---- binding.gyp ----------------------------------------------------------------------------

/** gyp files are Python literals: `#` comments, either quote, trailing commas. Returns JSON. */
export function parseGyp(text) {
  let out = '';
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === '#') {
      while (i < text.length && text[i] !== '\n') i++;
      out += '\n';
    } else if (c === '"' || c === "'") {
      let s = '';
      for (i++; i < text.length && text[i] !== c; i++) {
        if (text[i] === '\\') s += text[i++];
        s += text[i];
      }
      // Re-quote as JSON; the escapes gyp uses (\\, \", \n) mean the same in JSON.
      out += `"${s.replaceAll(/(?<!\\)"/g, '\\"')}"`;
    } else {
      out += c;
    }
  }
  out = out
    .replaceAll(/,(\s*[\]}])/g, '$1')
    .replaceAll(/\bTrue\b/g, 'true')
    .replaceAll(/\bFalse\b/g, 'false');
  return JSON.parse(out);
}

/** Evaluates a gyp condition made of `VAR=="v"`, `VAR!='v'`, `and`, `or` (what binding.gyp uses). */
function evalCondition(expr, vars) {
  return expr.split(/\s+or\s+/).some((alt) =>
    alt.split(/\s+and\s+/).every((term) => {
      const m = /^\s*\(?\s*(\w+)\s*(==|!=)\s*(["'])([^"']*)\3\s*\)?\s*$/.exec(term);
      if (m === null)
        throw new Error(`binding.gyp condition "${expr}" is beyond what scripts/build-native.mjs evaluates`);
      const value = vars[m[1]];
      if (value === undefined) throw new Error(`binding.gyp condition uses unknown variable ${m[1]}`);
      return m[2] === '==' ? value === m[4] : value !== m[4];
    }),
  );
}

const LIST_KEYS = ['sources', 'cflags', 'cflags_c', 'defines', 'include_dirs', 'libraries', 'ldflags'];
/** Keys that only matter on other platforms or to C++: ignored on Linux. */
const IGNORED_KEYS = [
  'target_name',
  'cflags_cc',
  'xcode_settings',
  'msvs_settings',
  'conditions',
  'variables',
];

function merge(into, part, vars) {
  for (const [key, value] of Object.entries(part)) {
    if (key === 'conditions') continue;
    if (key === 'link_settings') {
      merge(into, value, vars);
    } else if (LIST_KEYS.includes(key)) {
      into[key] = [...(into[key] ?? []), ...value];
    } else if (key === 'type') {
      into.type = value;
    } else if (!IGNORED_KEYS.includes(key)) {
      throw new Error(`binding.gyp key "${key}" is not understood by scripts/build-native.mjs: teach it`);
    }
  }
  for (const [expr, then, otherwise] of part.conditions ?? []) {
    const chosen = evalCondition(expr, vars) ? then : otherwise;
    if (chosen !== undefined) merge(into, chosen, vars);
  }
  return into;
}

/** The relay_dataplane target of native/binding.gyp, resolved for one platform and CPU. */
export function gypTarget(vars, file = join(native, 'binding.gyp')) {
  const gyp = parseGyp(readFileSync(file, 'utf8'));
  const target = (gyp.targets ?? []).find((t) => t.target_name === TARGET);
  if (target === undefined) throw new Error(`binding.gyp has no target ${TARGET}`);
  return merge({ type: 'loadable_module' }, target, vars);
}

/** The C sources binding.gyp lists, as absolute paths. */
export function nativeSources() {
  return (gypTarget({ OS: 'linux', target_arch: process.arch }).sources ?? []).map((s) => resolve(native, s));
}

// ---- compiling --------------------------------------------------------------------------------

const ARCHS = {
  x64: { gyp: 'x64', triplet: 'x86_64-linux-gnu', flags: ['-m64'] },
  arm64: { gyp: 'arm64', triplet: 'aarch64-linux-gnu', flags: [] },
};

/** The C compiler for a Linux CPU: the host's `cc` for its own CPU, Debian's cross gcc otherwise. */
export function compilerFor(arch) {
  if (arch === process.arch && process.platform === 'linux') return 'cc';
  return `${ARCHS[arch].triplet}-gcc`;
}

function run(cmd, args) {
  const r = spawnSync(cmd, args, { encoding: 'utf8' });
  if (r.error !== undefined) return { ok: false, out: `${cmd}: ${r.error.message}` };
  return { ok: r.status === 0, out: `${r.stdout}${r.stderr}` };
}

/** The arguments that compile and link the target into `output` (what node-gyp would pass on Linux). */
function compileArgs(target, nodedir, output, extra = []) {
  const sub = (s) => s.replaceAll('<(node_root_dir)', nodedir).replaceAll('<(module_root_dir)', native);
  return [
    '-shared',
    '-fPIC',
    '-pthread',
    '-Wall',
    '-Wextra',
    '-Wno-unused-parameter',
    '-O3',
    '-fno-omit-frame-pointer',
    ...extra,
    ...(target.cflags ?? []).map(sub),
    ...(target.cflags_c ?? []).map(sub),
    `-DNODE_GYP_MODULE_NAME=${TARGET}`,
    '-DUSING_UV_SHARED=1',
    '-DUSING_V8_SHARED=1',
    '-DV8_DEPRECATION_WARNINGS=1',
    '-D_FILE_OFFSET_BITS=64',
    '-D_LARGEFILE_SOURCE',
    '-DOPENSSL_NO_PINSHARED',
    '-DOPENSSL_THREADS',
    '-DBUILDING_NODE_EXTENSION',
    ...(target.defines ?? []).map((d) => `-D${sub(d)}`),
    `-I${join(nodedir, 'include', 'node')}`,
    ...(target.include_dirs ?? []).map((d) => `-I${resolve(native, sub(d))}`),
    ...(target.sources ?? []).map((s) => resolve(native, sub(s))),
    '-o',
    output,
    '-Wl,-z,noexecstack',
    ...(target.ldflags ?? []).map(sub),
    ...(target.libraries ?? []).map(sub),
  ];
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
 * Builds prebuilds/linux-<arch>/relay_dataplane.node. Symbols the build machine's glibc
 * versions above 2.28 (pthread_create@GLIBC_2.34 on glibc ≥ 2.34) are bound to their older
 * version with `.symver`, so the addon loads wherever Node 22 runs.
 */
function prebuild(tag, outRoot) {
  const [platform, arch] = tag.split('-');
  if (platform !== 'linux' || ARCHS[arch] === undefined)
    throw new Error(`no prebuilt for ${tag}: only linux-x64 and linux-arm64 are built`);
  const nodedir = nodeHeadersDir();
  if (nodedir === undefined) throw new Error("the pinned Node's headers are missing: run npm ci first");
  const cc = compilerFor(arch);
  if (!run(cc, ['--version']).ok) {
    const pkg = arch === 'arm64' ? 'gcc-aarch64-linux-gnu' : 'gcc-x86-64-linux-gnu';
    throw new Error(`no C compiler for ${tag} (${cc}; Debian: apt-get install ${pkg})`);
  }
  const target = gypTarget({ OS: 'linux', target_arch: ARCHS[arch].gyp });
  if (target.type === 'none') throw new Error(`binding.gyp builds nothing for ${tag}`);
  const dir = join(outRoot, tag);
  mkdirSync(dir, { recursive: true });
  const output = join(dir, `${TARGET}.node`);
  const tmp = mkdtempSync(join(tmpdir(), 'gamewire-prebuild-'));
  try {
    let extra = [...ARCHS[arch].flags];
    for (let attempt = 0; attempt < 2; attempt++) {
      const r = run(cc, compileArgs(target, nodedir, output, extra));
      if (!r.ok) throw new Error(`${cc} failed for ${tag}:\n${r.out}`);
      const tooNew = glibcImports(output).filter((s) => versionAbove(s.version, GLIBC_FLOOR));
      if (tooNew.length === 0) {
        const strip = cc === 'cc' ? 'strip' : `${ARCHS[arch].triplet}-strip`;
        run(strip, ['--strip-unneeded', output]);
        return output;
      }
      if (attempt === 1) break;
      const names = [...new Set(tooNew.map((s) => s.name))];
      const older = olderVersions(cc, names);
      const missing = names.filter((n) => !older.has(n));
      if (missing.length > 0)
        throw new Error(
          `${tag}: ${missing.join(', ')} exist only in glibc > ${GLIBC_FLOOR}; the addon must not use them`,
        );
      const header = join(tmp, 'glibc-compat.h');
      writeFileSync(
        header,
        [...older].map(([name, v]) => `__asm__(".symver ${name},${name}@GLIBC_${v}");\n`).join(''),
      );
      extra = [...ARCHS[arch].flags, '-include', header];
    }
    throw new Error(`${tag}: still needs glibc > ${GLIBC_FLOOR} after binding older symbol versions`);
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
}

// ---- the source build and the sanitizer build ------------------------------------------------

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

function sourceBuild() {
  if (process.platform !== 'linux') {
    say(`not built: ${process.platform} uses the JavaScript data plane (recvmmsg/sendmmsg are Linux-only)`);
    return 0;
  }
  if (!run('cc', ['--version']).ok) {
    say('not built: no C compiler (cc); the relay uses the JavaScript data plane');
    return 0;
  }
  const nodedir = nodeHeadersDir();
  if (nodedir === undefined) {
    say(
      'not built: no Node headers (neither the pinned Node in node_modules nor <prefix>/include/node); the relay uses the JavaScript data plane',
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

/** The sanitizer builds (tests only): a direct compile of the same sources and flags, at -O1. */
function sanitizeBuild(thread) {
  const nodedir = nodeHeadersDir();
  if (process.platform !== 'linux' || nodedir === undefined) {
    say('sanitizer builds need Linux and the pinned Node headers (npm ci)');
    return 1;
  }
  const out = join(native, thread ? 'build-tsan' : 'build-sanitize');
  mkdirSync(out, { recursive: true });
  const target = gypTarget({ OS: 'linux', target_arch: process.arch });
  const sanitizers = thread
    ? ['-fsanitize=thread']
    : ['-fsanitize=address,undefined', '-fno-sanitize-recover=undefined'];
  const args = compileArgs(target, nodedir, join(out, `${TARGET}.node`), ['-g', ...sanitizers]);
  // Every optimisation flag (the target's own come later and would win) gives way to -O1.
  const r = spawnSync('cc', [...args.filter((a) => !/^-O[0-3s]?$/.test(a)), '-O1'], { stdio: 'inherit' });
  const what = thread ? 'ThreadSanitizer' : 'AddressSanitizer and UBSan';
  if (r.status !== 0) {
    say(`build with ${what} failed`);
    return 1;
  }
  say(`built with ${what}: ${join(out, `${TARGET}.node`)}`);
  return 0;
}

function main(argv) {
  if (argv.includes('--sanitize')) return sanitizeBuild(false);
  if (argv.includes('--thread')) return sanitizeBuild(true);
  const at = argv.indexOf('--prebuild');
  if (at === -1) return sourceBuild();
  const outAt = argv.indexOf('--out');
  const outRoot = resolve(outAt === -1 ? join(root, 'prebuilds') : argv[outAt + 1]);
  const tags = argv.slice(at + 1).filter((a, i, all) => !a.startsWith('--') && all[i - 1] !== '--out');
  try {
    for (const tag of tags.length > 0 ? tags : [`${process.platform}-${process.arch}`]) {
      const file = prebuild(tag, outRoot);
      say(`built ${file}`);
    }
    return 0;
  } catch (err) {
    say(err.message);
    return 1;
  }
}

if (process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  process.exitCode = main(process.argv.slice(2));
}
