/**
 * Finds and loads the native data plane's addon (native/relay_dataplane.c), in this order:
 *
 * 1. `GAMEWIRE_NATIVE_ADDON`, when set: that file and nothing else (the tests load the sanitizer
 *    build this way);
 * 2. the prebuilt addon shipped in the package for this platform and CPU:
 *    `prebuilds/<platform>-<arch>/relay_dataplane.node` (built at pack time; glibc only);
 * 3. a source build: `native/build/Release/relay_dataplane.node` (`npm ci` in a checkout, or
 *    `node scripts/build-native.mjs` in an installed package on a platform without a prebuilt);
 * 4. none: the caller uses the JavaScript data plane, and `reason` says why.
 *
 * A candidate that exists but fails to load (another libc, a damaged file) is skipped, and its
 * error is kept in the reason if nothing else loads.
 */
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { packageRoot } from '../../core/admin/static.js';

export const ADDON_FILE = 'relay_dataplane.node';

/** Where the loaded addon came from. */
export type AddonSource = 'GAMEWIRE_NATIVE_ADDON' | 'prebuilt' | 'source build';

export interface AddonLoad<T> {
  addon: T | undefined;
  /** 'loaded' with where from, or why nothing loaded. */
  reason: string;
  source?: AddonSource;
  file?: string;
}

/** `linux-x64`, `linux-arm64`, …: the name of this platform's folder under prebuilds/. */
export function platformTag(platform: string = process.platform, arch: string = process.arch): string {
  return `${platform}-${arch}`;
}

/** The C library's name and version as Node reports it; undefined where it is not glibc (musl). */
export function glibcVersion(): string | undefined {
  const reporter = process.report as NodeJS.ProcessReport & { excludeNetwork?: boolean };
  // The report would otherwise list (and resolve) every socket of the process: not needed here.
  const before = reporter.excludeNetwork;
  reporter.excludeNetwork = true;
  try {
    const report = reporter.getReport() as { header?: { glibcVersionRuntime?: string } };
    return report.header?.glibcVersionRuntime;
  } finally {
    reporter.excludeNetwork = before;
  }
}

/** The files to try, in order, each with where it comes from; skipped ones with why. */
export function addonCandidates(
  root: string | undefined,
  env: NodeJS.ProcessEnv = process.env,
  glibc: () => string | undefined = glibcVersion,
): { candidates: { file: string; source: AddonSource }[]; skipped: string[] } {
  const explicit = env.GAMEWIRE_NATIVE_ADDON;
  if (explicit !== undefined && explicit !== '')
    return { candidates: [{ file: explicit, source: 'GAMEWIRE_NATIVE_ADDON' }], skipped: [] };
  const skipped: string[] = [];
  const candidates: { file: string; source: AddonSource }[] = [];
  if (root === undefined) return { candidates, skipped: ['the gamewire package folder was not found'] };
  const prebuilt = path.join(root, 'prebuilds', platformTag(), ADDON_FILE);
  if (existsSync(prebuilt)) {
    // The prebuilt addons link against glibc; on musl (Alpine) they would not load cleanly.
    if (glibc() !== undefined) candidates.push({ file: prebuilt, source: 'prebuilt' });
    else skipped.push(`the prebuilt ${platformTag()} addon needs glibc (this C library is not glibc)`);
  } else {
    skipped.push(`no prebuilt addon for ${platformTag()}`);
  }
  const built = path.join(root, 'native', 'build', 'Release', ADDON_FILE);
  if (existsSync(built)) candidates.push({ file: built, source: 'source build' });
  else skipped.push('no source build (node scripts/build-native.mjs in the package builds one)');
  return { candidates, skipped };
}

/** Loads the first candidate that loads; never throws. */
export function loadAddon<T>(
  root: string | undefined = packageRoot(),
  env: NodeJS.ProcessEnv = process.env,
): AddonLoad<T> {
  const { candidates, skipped } = addonCandidates(root, env);
  const failures = [...skipped];
  const require = createRequire(import.meta.url);
  for (const { file, source } of candidates) {
    if (!existsSync(file)) {
      failures.push(`${source} ${file} does not exist`);
      continue;
    }
    try {
      return { addon: require(file) as T, reason: `loaded (${source})`, source, file };
    } catch (err) {
      failures.push(`${source} ${file} failed to load: ${(err as Error).message.split('\n')[0]}`);
    }
  }
  return { addon: undefined, reason: failures.join('; ') };
}
