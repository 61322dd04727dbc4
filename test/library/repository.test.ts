import { execFileSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';

function tracked(path: string): string[] {
  try {
    return execFileSync('git', ['ls-files', '--', path], { encoding: 'utf8' }).split('\n').filter(Boolean);
  } catch {
    return []; // not a git checkout (an unpacked tarball): nothing can be tracked
  }
}

describe('repository hygiene', () => {
  it('tracks nothing under node_modules, dist or data', () => {
    // A tracked node_modules (a symlink a worktree made, added by `git add -A`) makes every
    // checkout of that commit replace the installed node_modules directory with it.
    for (const path of ['node_modules', 'dist', 'data']) {
      expect(
        tracked(path),
        `${path} is tracked by git; untrack it with \`git rm -r --cached ${path}\` and commit`,
      ).toEqual([]);
    }
  });
});
