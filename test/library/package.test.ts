/**
 * The tarball holds exactly what an installed package needs: the compiled JavaScript and its
 * types, the CLI entry, the dashboard page, the prebuilt native data plane (with the SHA-256 of
 * each addon, which a clean rebuild from the shipped sources reproduces) and the sources of its
 * fallback build, the user documentation, README and LICENSE. Anything else (benches, test
 * helpers, source maps, stale files) fails; so does a missing part.
 */
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { cpSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { ROOT } from '../helpers/cli.js';
import { needProgram, type Packed, packedInstall } from './packed.js';

/** Every path the tarball may hold. */
const ALLOWED: readonly RegExp[] = [
  /^package\.json$/,
  /^README\.md$/,
  /^LICENSE$/,
  /^bin\/gamewire\.js$/,
  /^dist\/src\/(?:[\w.-]+\/)*[\w.-]+\.(?:js|d\.ts)$/,
  /^web\/dashboard\/[\w.-]+\.(?:html|js|css)$/,
  /^src\/protocols\/[\w-]+\/dashboard\/[\w.-]+\.js$/,
  /^prebuilds\/linux-(?:x64|arm64)\/relay_dataplane\.node(?:\.sha256)?$/,
  /^native\/[\w-]+\.[ch]$/,
  /^scripts\/build-native\.mjs$/,
  /^docs\/[\w-]+\.md$/,
];

const pkgJson = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as {
  version: string;
  license: string;
  files: string[];
  bin: Record<string, string>;
  exports: Record<string, string>;
};

function sha256(file: string): string {
  return createHash('sha256').update(readFileSync(file)).digest('hex');
}

/** The pinned Node's headers (node_modules/node/node_modules/node-<platform>-<arch>), as pack time used. */
function nodeHeaders(): string {
  return path.join(ROOT, 'node_modules', 'node', 'node_modules', `node-${process.platform}-${process.arch}`);
}

function sources(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const p = path.join(dir, name);
    return statSync(p).isDirectory() ? sources(p) : [p];
  });
}

let packed: Packed;
let files: Set<string>;
beforeAll(async () => {
  packed = await packedInstall();
  files = new Set(packed.files);
}, 900_000);

describe('the package tarball', () => {
  it('holds nothing outside the allowlist', () => {
    const stray = packed.files.filter((f) => !ALLOWED.some((re) => re.test(f)));
    expect(stray, 'files the tarball should not ship').toEqual([]);
    expect(packed.files.filter((f) => f.endsWith('.map'))).toEqual([]);
  });

  it('ships README, an MIT LICENSE naming gamewire contributors, and the CLI entry', () => {
    for (const f of ['README.md', 'LICENSE', 'package.json', ...Object.values(pkgJson.bin)])
      expect(files.has(f.replace(/^\.\//, '')), f).toBe(true);
    expect(pkgJson.license).toBe('MIT');
    const license = readFileSync(path.join(packed.pkg, 'LICENSE'), 'utf8');
    expect(license).toMatch(/^MIT License\n\nCopyright \(c\) 2026 gamewire contributors\n/);
    expect(license).toContain('THE SOFTWARE IS PROVIDED "AS IS"');
  });

  it('has every export and its types, and a .d.ts beside every module', () => {
    for (const [subpath, target] of Object.entries(pkgJson.exports)) {
      const file = target.replace(/^\.\//, '');
      expect(files.has(file), `${subpath} -> ${file}`).toBe(true);
      if (file.endsWith('.js'))
        expect(files.has(file.replace(/\.js$/, '.d.ts')), `${subpath} types`).toBe(true);
    }
    const js = packed.files.filter((f) => f.startsWith('dist/') && f.endsWith('.js'));
    expect(js.filter((f) => !files.has(f.replace(/\.js$/, '.d.ts')))).toEqual([]);
  });

  it('holds one compiled module per source file: nothing stale, nothing missing', () => {
    const expected = sources(path.join(ROOT, 'src'))
      .filter((f) => f.endsWith('.ts') && !f.endsWith('.d.ts'))
      .map((f) => `dist/${path.relative(ROOT, f).replace(/\.ts$/, '.js')}`)
      .sort();
    expect(packed.files.filter((f) => f.startsWith('dist/') && f.endsWith('.js'))).toEqual(expected);
  });

  it('ships JavaScript without source-map references (the maps are not in the package)', () => {
    const withMaps = packed.files
      .filter((f) => f.endsWith('.js'))
      .filter((f) => readFileSync(path.join(packed.pkg, f), 'utf8').includes('sourceMappingURL'));
    expect(withMaps).toEqual([]);
  });

  it('ships the dashboard page as it is in web/', () => {
    const page = sources(path.join(ROOT, 'web', 'dashboard'))
      .map((f) => path.relative(ROOT, f))
      .sort();
    expect(packed.files.filter((f) => f.startsWith('web/'))).toEqual(page);
  });

  it("ships each protocol's dashboard page from its folder, and nothing else of src/", () => {
    const pages = readdirSync(path.join(ROOT, 'src', 'protocols'))
      .flatMap((p) => {
        const dir = path.join(ROOT, 'src', 'protocols', p, 'dashboard');
        return existsSync(dir) ? readdirSync(dir).map((f) => `src/protocols/${p}/dashboard/${f}`) : [];
      })
      .sort();
    expect(pages.length).toBeGreaterThan(0);
    expect(packed.files.filter((f) => f.startsWith('src/'))).toEqual(pages);
  });

  it('ships the native data plane prebuilt for linux-x64, and linux-arm64 where the cross compiler exists', (ctx) => {
    expect(files.has('prebuilds/linux-x64/relay_dataplane.node')).toBe(true);
    if (needProgram('aarch64-linux-gnu-gcc'))
      expect(files.has('prebuilds/linux-arm64/relay_dataplane.node')).toBe(true);
    else ctx.annotate('no linux-arm64 addon: aarch64-linux-gnu-gcc is not installed');
  });

  it('ships the sources of the fallback build: every source of native/ and the build script (its recipe)', () => {
    const native = readdirSync(path.join(ROOT, 'native'))
      .filter((f) => /\.[ch]$/.test(f))
      .map((f) => `native/${f}`);
    expect(native.length).toBeGreaterThan(0);
    for (const f of ['scripts/build-native.mjs', ...native]) expect(files.has(f), f).toBe(true);
  });

  it("ships each prebuilt addon's SHA-256 beside it, and a clean rebuild from the shipped sources gives the same bytes", (ctx) => {
    const tags = ['linux-x64', ...(needProgram('aarch64-linux-gnu-gcc') ? ['linux-arm64'] : [])];
    if (!tags.includes('linux-arm64'))
      ctx.annotate('linux-arm64 not rebuilt: aarch64-linux-gnu-gcc is missing');
    for (const tag of tags) {
      const addon = `prebuilds/${tag}/relay_dataplane.node`;
      expect(files.has(`${addon}.sha256`), `${addon}.sha256`).toBe(true);
      const recorded = readFileSync(path.join(packed.pkg, `${addon}.sha256`), 'utf8');
      expect(recorded).toBe(`${sha256(path.join(packed.pkg, addon))}  relay_dataplane.node\n`);
    }
    // The tarball's own build script and sources, copied to a folder of another name and length,
    // built with the pinned Node's headers (as at pack time) and the same compilers.
    const copy = path.join(mkdtempSync(path.join(tmpdir(), 'gamewire-rebuild-')), 'elsewhere', 'pkg');
    for (const f of packed.files.filter((f) => f.startsWith('native/') || f === 'scripts/build-native.mjs'))
      cpSync(path.join(packed.pkg, f), path.join(copy, f));
    const out = path.join(copy, 'out');
    const r = spawnSync(
      process.execPath,
      [
        path.join(copy, 'scripts', 'build-native.mjs'),
        '--prebuild',
        ...tags,
        '--out',
        out,
        '--nodedir',
        nodeHeaders(),
      ],
      { encoding: 'utf8', timeout: 300_000 },
    );
    expect(r.status, r.stderr).toBe(0);
    for (const tag of tags) {
      const rebuilt = path.join(out, tag, 'relay_dataplane.node');
      const shipped = path.join(packed.pkg, 'prebuilds', tag, 'relay_dataplane.node');
      expect(sha256(rebuilt), tag).toBe(sha256(shipped));
      expect(readFileSync(rebuilt).equals(readFileSync(shipped)), tag).toBe(true);
      expect(r.stderr).toContain(`sha256 ${sha256(shipped)}`);
    }
    rmSync(path.dirname(path.dirname(copy)), { recursive: true, force: true });
  }, 300_000);

  it('ships the user documentation (every docs/*.md the README links to)', () => {
    const readme = readFileSync(path.join(ROOT, 'README.md'), 'utf8');
    const linked = [...readme.matchAll(/\]\((docs\/[\w-]+\.md)/g)].map((m) => m[1]!);
    expect(linked.length).toBeGreaterThan(5);
    for (const f of linked) expect(files.has(f), f).toBe(true);
  });

  it('matches every pattern of package.json "files" (no dead entry)', () => {
    for (const pattern of pkgJson.files) {
      const re = new RegExp(
        `^${pattern.replaceAll('.', '\\.').replaceAll('**/', '(?:.+/)?').replaceAll('*', '[^/]+')}(?:/.*)?$`,
      );
      expect(
        packed.files.some((f) => re.test(f)),
        `"${pattern}" matches nothing in the tarball`,
      ).toBe(true);
    }
  });
});
