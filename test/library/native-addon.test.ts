/**
 * The order in which the native data plane's addon is looked for (native-addon.ts): the
 * GAMEWIRE_NATIVE_ADDON override alone, else the package's prebuilt for this platform (glibc
 * only), else a source build, else none with the reason. Real addon files in throwaway package
 * folders; a damaged file is skipped with its error.
 */
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { addonCandidates, loadAddon, platformTag } from '../../src/protocols/unity-relay/native-addon.js';
import { ROOT } from '../helpers/cli.js';

const BUILT = path.join(ROOT, 'native', 'build', 'Release', 'relay_dataplane.node');
// The source build npm ci made: the native data plane is part of the product on Linux.
const linux = process.platform === 'linux';
if (linux && !existsSync(BUILT)) throw new Error(`${BUILT} is missing: npm ci builds it`);

function packageRoot(parts: { prebuilt?: 'real' | 'damaged'; source?: 'real' }): string {
  const root = mkdtempSync(path.join(tmpdir(), 'gamewire-addon-'));
  writeFileSync(path.join(root, 'package.json'), '{ "name": "gamewire" }\n');
  if (parts.prebuilt !== undefined) {
    const dir = path.join(root, 'prebuilds', platformTag());
    mkdirSync(dir, { recursive: true });
    if (parts.prebuilt === 'real') copyFileSync(BUILT, path.join(dir, 'relay_dataplane.node'));
    else writeFileSync(path.join(dir, 'relay_dataplane.node'), 'not an ELF file');
  }
  if (parts.source !== undefined) {
    const dir = path.join(root, 'native', 'build', 'Release');
    mkdirSync(dir, { recursive: true });
    copyFileSync(BUILT, path.join(dir, 'relay_dataplane.node'));
  }
  return root;
}

describe('which native addon loads', () => {
  it('names this platform as process.platform-process.arch', () => {
    expect(platformTag()).toBe(`${process.platform}-${process.arch}`);
    expect(platformTag('linux', 'arm64')).toBe('linux-arm64');
  });

  it('GAMEWIRE_NATIVE_ADDON alone, when set', () => {
    const root = packageRoot({ prebuilt: 'real', source: 'real' });
    const { candidates } = addonCandidates(root, { GAMEWIRE_NATIVE_ADDON: '/x/y.node' });
    expect(candidates).toEqual([{ file: '/x/y.node', source: 'GAMEWIRE_NATIVE_ADDON' }]);
    const r = loadAddon(root, { GAMEWIRE_NATIVE_ADDON: path.join(root, 'missing.node') });
    expect(r.addon).toBeUndefined();
    expect(r.reason).toContain('missing.node does not exist');
  });

  it('the prebuilt for this platform first, then the source build', () => {
    const root = packageRoot({ prebuilt: 'real', source: 'real' });
    expect(addonCandidates(root, {}, () => '2.36').candidates.map((c) => c.source)).toEqual([
      'prebuilt',
      'source build',
    ]);
  });

  it('skips the prebuilt where the C library is not glibc (musl), and says so', () => {
    const root = packageRoot({ prebuilt: 'real' });
    const { candidates, skipped } = addonCandidates(root, {}, () => undefined);
    expect(candidates).toEqual([]);
    expect(skipped.join('; ')).toMatch(/needs glibc/);
  });

  it('without a prebuilt for this platform, the source build', () => {
    const root = packageRoot({ source: 'real' });
    const { candidates, skipped } = addonCandidates(root, {}, () => '2.36');
    expect(candidates.map((c) => c.source)).toEqual(['source build']);
    expect(skipped).toEqual([`no prebuilt addon for ${platformTag()}`]);
  });

  it('none: no addon, and the reason lists what was tried', () => {
    const r = loadAddon(packageRoot({}), {});
    expect(r.addon).toBeUndefined();
    expect(r.reason).toContain(`no prebuilt addon for ${platformTag()}`);
    expect(r.reason).toContain('no source build');
  });

  it.runIf(linux)('loads the prebuilt when it loads', () => {
    const r = loadAddon<{ now(): number }>(packageRoot({ prebuilt: 'real', source: 'real' }), {});
    expect(r.source).toBe('prebuilt');
    expect(r.reason).toBe('loaded (prebuilt)');
    expect(typeof r.addon?.now()).toBe('number');
  });

  it.runIf(linux)('a prebuilt that fails to load is skipped for the source build, its error kept', () => {
    const r = loadAddon<{ now(): number }>(packageRoot({ prebuilt: 'damaged', source: 'real' }), {});
    expect(r.source).toBe('source build');
    expect(typeof r.addon?.now()).toBe('number');
    const none = loadAddon(packageRoot({ prebuilt: 'damaged' }), {});
    expect(none.addon).toBeUndefined();
    expect(none.reason).toMatch(/prebuilt .* failed to load: /);
  });
});
