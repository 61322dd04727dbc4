import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT } from '../helpers/cli.js';

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

  it('has no source file over 1,000 lines (a file that long holds more than one thing)', () => {
    const long: string[] = [];
    const files = readdirSync(path.join(ROOT, 'src'), { recursive: true, encoding: 'utf8' }).filter((f) =>
      f.endsWith('.ts'),
    );
    expect(files.length).toBeGreaterThan(100);
    for (const f of files) {
      const lines = readFileSync(path.join(ROOT, 'src', f), 'utf8').split('\n').length;
      if (lines > 1000) long.push(`src/${f}: ${lines} lines`);
    }
    expect(long).toEqual([]);
  });
});
