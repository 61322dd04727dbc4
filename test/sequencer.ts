/**
 * The order the test files start in: the longest first, whatever project they belong to, so that
 * no long file starts last and runs alone at the end (vitest's default puts projects one after the
 * other, sorted by name, which started unity-relay's second-plane conformance file last). A fresh
 * clone has no timing cache, so the long files are named here, by what makes them long; the rest
 * go largest first, as vitest does.
 */
import { stat } from 'node:fs/promises';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

/** Files that wait out protocol timers or run whole conformance suites: tens of seconds each. */
const LONG = [
  /\/conform\.test\.ts$/,
  /\/fleet(-cli|-load|-failover)?\.test\.ts$/,
  /\/transports\/dtls\/(server|openssl|gnutls)\.test\.ts$/,
  /\/client-targets\.test\.ts$/,
  /\/impaired-link\.test\.ts$/,
  /\/damaged-cache\.test\.ts$/,
  /\/prudp-cli\.test\.ts$/,
  /\/docs-examples\.test\.ts$/,
  /\/installed\.test\.ts$/,
  /\/chat-lifecycle\.test\.ts$/,
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
