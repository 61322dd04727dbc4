/**
 * The order the test files start in: the longest first, whatever project they belong to, so that
 * no long file starts last and runs alone at the end (vitest's default puts projects one after the
 * other, sorted by name, which started unity-relay's second-plane conformance file last). A fresh
 * clone has no timing cache, so the long files are named here, by what makes them long; the rest
 * go largest first, as vitest does.
 */
import { stat } from 'node:fs/promises';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

/**
 * Files that wait out protocol timers, spawn many CLI processes or run a real third-party program
 * through many cases: ten seconds and more each (measured, longest first).
 */
const LONG = [
  /\/cli\/(side-by-side|client-targets|operations|load-newcomer|docs-commands)\.test\.ts$/,
  /\/inspect\/tshark-prudp\.test\.ts$/,
  /\/native-dataplane\.test\.ts$/,
  /\/library\/(installed|docs-examples|package)\.test\.ts$/,
  /\/js5\/(cli|damaged-cache)\.test\.ts$/,
  /\/dashboard\/browser\.test\.ts$/,
  /\/conform\.test\.ts$/,
  /\/inspect\/record-replay\.test\.ts$/,
  /\/fleet(-cli|-load|-failover)?\.test\.ts$/,
  /\/(chat-lifecycle|crowd-attack|impaired-link|native-dtls|prudp-cli)\.test\.ts$/,
  /\/transports\/dtls\/(server|openssl|gnutls)\.test\.ts$/,
];

export default class LongestFirst extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const rank = (f: TestSpecification) => {
      const i = LONG.findIndex((re) => re.test(f.moduleId));
      return i === -1 ? LONG.length : i;
    };
    const size = new Map<string, number>();
    await Promise.all(
      files.map(async (f) => {
        size.set(f.moduleId, (await stat(f.moduleId).catch(() => ({ size: 0 }))).size);
      }),
    );
    return [...files].sort((a, b) => rank(a) - rank(b) || size.get(b.moduleId)! - size.get(a.moduleId)!);
  }
}
