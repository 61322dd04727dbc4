/**
 * The tarball holds exactly what an installed package needs: the compiled JavaScript and its
 * types, the CLI entry, the dashboard page, the prebuilt native data plane and the sources of its
 * fallback build, the user documentation, README and LICENSE. Anything else (benches, test
 * helpers, source maps, stale files) fails; so does a missing part.
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
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
  /^prebuilds\/linux-(?:x64|arm64)\/relay_dataplane\.node$/,
  /^native\/binding\.gyp$/,
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

  it('ships the sources of the fallback build: binding.gyp, every source of native/, the build script', () => {
    const gyp = readFileSync(path.join(ROOT, 'native', 'binding.gyp'), 'utf8');
    const listed = [...gyp.matchAll(/["']([\w./-]+\.[ch])["']/g)].map((m) => `native/${m[1]}`);
    expect(listed.length).toBeGreaterThan(0);
    const native = readdirSync(path.join(ROOT, 'native'))
      .filter((f) => /\.[ch]$/.test(f))
      .map((f) => `native/${f}`);
    for (const f of ['native/binding.gyp', 'scripts/build-native.mjs', ...listed, ...native])
      expect(files.has(f), f).toBe(true);
  });

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
