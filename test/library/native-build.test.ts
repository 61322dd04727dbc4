/**
 * The native addon's one build recipe (scripts/build-native.mjs) is reproducible: a clean build
 * of native/'s sources in a scratch folder of another name and depth gives the same bytes as the
 * checkout's own build (what `npm ci` built, rebuilt by the global setup when native/ changed),
 * and that checkout build is byte for byte the prebuilt the package ships for this platform; each
 * release build records its SHA-256 beside it; no path of the build machine is in the addon. The
 * linux-arm64 prebuilt (Debian's cross compiler, always under CI) is rebuilt from the packed
 * tarball's own sources in another folder and compared in package.test.ts; here it is built and
 * checked for its recorded hash and for paths.
 */
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { cpSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ROOT } from '../helpers/cli.js';
import { needProgram } from './packed.js';

const linux = process.platform === 'linux' && (process.arch === 'x64' || process.arch === 'arm64');
const HEADERS = path.join(
  ROOT,
  'node_modules',
  'node',
  'node_modules',
  `node-${process.platform}-${process.arch}`,
);

function sha256(file: string): string {
  return createHash('sha256').update(readFileSync(file)).digest('hex');
}

/** A copy of the build script and native/'s sources: what a clean checkout has of them. */
function copyTree(from: string, to: string): void {
  mkdirSync(path.join(to, 'native'), { recursive: true });
  for (const f of readdirSync(path.join(from, 'native')).filter((n) => /\.[ch]$/.test(n)))
    cpSync(path.join(from, 'native', f), path.join(to, 'native', f));
  cpSync(path.join(from, 'scripts', 'build-native.mjs'), path.join(to, 'scripts', 'build-native.mjs'));
}

function build(tree: string, args: string[]): string {
  const r = spawnSync(
    process.execPath,
    [path.join(tree, 'scripts', 'build-native.mjs'), ...args, '--nodedir', HEADERS],
    { encoding: 'utf8', timeout: 300_000 },
  );
  if (r.status !== 0) throw new Error(`build-native.mjs ${args.join(' ')} failed:\n${r.stderr}`);
  return r.stderr;
}

describe.runIf(linux)('the native addon build is reproducible', () => {
  const scratch = mkdtempSync(path.join(tmpdir(), 'gamewire-native-build-'));
  // A clean tree of another name and depth than the checkout's.
  const tree = path.join(scratch, 'another', 'tree', 'of', 'another', 'length');
  const checkoutAddon = path.join(ROOT, 'native', 'build', 'Release', 'relay_dataplane.node');
  const tags = ['linux-x64'];
  let log = '';

  beforeAll(() => {
    if (needProgram('aarch64-linux-gnu-gcc')) tags.push('linux-arm64');
    copyTree(ROOT, tree);
    log = build(tree, ['--prebuild', ...tags, '--out', path.join(tree, 'prebuilds')]);
  }, 600_000);
  afterAll(() => rmSync(scratch, { recursive: true, force: true }));

  it("a clean build in another folder is byte for byte the checkout's build (npm ci's), which is the prebuilt for this platform", (ctx) => {
    const prebuilt = path.join(tree, 'prebuilds', `linux-${process.arch}`, 'relay_dataplane.node');
    expect(
      readFileSync(prebuilt).equals(readFileSync(checkoutAddon)),
      `${sha256(prebuilt)} vs the checkout's ${sha256(checkoutAddon)}`,
    ).toBe(true);
    ctx.annotate(`linux-${process.arch} sha256 ${sha256(prebuilt)}`);
  });

  it('records the SHA-256 beside each addon (sha256sum format) and prints it', (ctx) => {
    if (!tags.includes('linux-arm64'))
      ctx.annotate('linux-arm64 not built: aarch64-linux-gnu-gcc is missing');
    for (const tag of tags) {
      const file = path.join(tree, 'prebuilds', tag, 'relay_dataplane.node');
      const hash = sha256(file);
      expect(readFileSync(`${file}.sha256`, 'utf8')).toBe(`${hash}  relay_dataplane.node\n`);
      expect(log).toContain(`built ${file} sha256 ${hash} (`);
    }
  });

  it('holds no path of the machine that built it', () => {
    for (const file of [
      ...tags.map((tag) => path.join(tree, 'prebuilds', tag, 'relay_dataplane.node')),
      checkoutAddon,
    ]) {
      const bytes = readFileSync(file).toString('latin1');
      for (const leak of [scratch, ROOT, HEADERS, tmpdir(), '/home/', '/root/'])
        expect(bytes.includes(leak), `${file} holds ${leak}`).toBe(false);
    }
  });
});
