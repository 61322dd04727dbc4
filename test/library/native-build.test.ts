/**
 * The native addon's one build recipe (scripts/build-native.mjs) is reproducible: a clean build
 * of the same sources with the same compiler, in another folder, gives the same bytes, for
 * linux-x64 and (with Debian's cross compiler, always under CI) linux-arm64; the checkout build
 * (`npm ci`) is byte for byte the prebuilt the package ships for this platform; each release build
 * records its SHA-256 beside it; no path of the build machine is in the addon.
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
  // Two trees of different names and depths; the second is copied from the first, so both hold
  // the same sources even while someone edits native/ in the checkout.
  const first = path.join(scratch, 'a');
  const second = path.join(scratch, 'second', 'tree', 'of', 'another', 'length');
  const tags = ['linux-x64'];
  let firstLog = '';
  let secondLog = '';

  beforeAll(() => {
    if (needProgram('aarch64-linux-gnu-gcc')) tags.push('linux-arm64');
    copyTree(ROOT, first);
    copyTree(first, second);
    firstLog = build(first, ['--prebuild', ...tags, '--out', path.join(first, 'prebuilds')]);
    secondLog = build(second, ['--prebuild', ...tags, '--out', path.join(second, 'prebuilds')]);
  }, 600_000);
  afterAll(() => rmSync(scratch, { recursive: true, force: true }));

  it('two clean builds in different folders give the same bytes, for every platform built', (ctx) => {
    if (!tags.includes('linux-arm64'))
      ctx.annotate('linux-arm64 not built: aarch64-linux-gnu-gcc is missing');
    for (const tag of tags) {
      const a = path.join(first, 'prebuilds', tag, 'relay_dataplane.node');
      const b = path.join(second, 'prebuilds', tag, 'relay_dataplane.node');
      expect(readFileSync(a).equals(readFileSync(b)), `${tag}: ${sha256(a)} vs ${sha256(b)}`).toBe(true);
      ctx.annotate(`${tag} sha256 ${sha256(a)}`);
    }
  });

  it('records the SHA-256 beside each addon (sha256sum format) and prints it', () => {
    for (const tag of tags) {
      const file = path.join(first, 'prebuilds', tag, 'relay_dataplane.node');
      const hash = sha256(file);
      expect(readFileSync(`${file}.sha256`, 'utf8')).toBe(`${hash}  relay_dataplane.node\n`);
      expect(firstLog).toContain(`built ${file} sha256 ${hash} (`);
      expect(secondLog).toContain(`sha256 ${hash} (`);
    }
  });

  it('the checkout build (npm ci) is byte for byte the prebuilt for this platform', () => {
    const out = path.join(second, 'checkout');
    build(second, ['--out', out]);
    const prebuilt = path.join(first, 'prebuilds', `linux-${process.arch}`, 'relay_dataplane.node');
    expect(sha256(path.join(out, 'relay_dataplane.node'))).toBe(sha256(prebuilt));
  });

  it('holds no path of the machine that built it', () => {
    for (const tag of tags) {
      const bytes = readFileSync(path.join(second, 'prebuilds', tag, 'relay_dataplane.node')).toString(
        'latin1',
      );
      for (const leak of [scratch, ROOT, HEADERS, tmpdir(), '/home/', '/root/'])
        expect(bytes.includes(leak), `${tag} holds ${leak}`).toBe(false);
    }
  });
});
