/**
 * The project stands alone: nothing in README.md, docs/, src/, test/ or bench/ points to a
 * folder outside the repository, and the package's metadata is importable as
 * `gamewire/package.json`.
 */
import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { ROOT } from '../helpers/cli.js';

function files(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const p = path.join(dir, name);
    return statSync(p).isDirectory() ? files(p) : [p];
  });
}

describe('the project stands alone', () => {
  it('README.md, docs/, src/, test/ and bench/ never point to ../shared', () => {
    // This file has to name what it looks for: it is the one file left out.
    const self = path.resolve(fileURLToPath(import.meta.url));
    const hits = [
      path.join(ROOT, 'README.md'),
      ...files(path.join(ROOT, 'docs')),
      ...files(path.join(ROOT, 'src')),
      ...files(path.join(ROOT, 'test')),
      ...files(path.join(ROOT, 'bench')),
    ]
      .filter((file) => path.resolve(file) !== self)
      .filter((file) => /\.\.\/shared|shared\/specs/.test(readFileSync(file, 'utf8')))
      .map((file) => path.relative(ROOT, file));
    expect(hits).toEqual([]);
  });

  it('exports gamewire/package.json', () => {
    const r = spawnSync(
      process.execPath,
      [
        '--input-type=module',
        '-e',
        "import pkg from 'gamewire/package.json' with { type: 'json' }; console.log(pkg.name, pkg.version);",
      ],
      { cwd: ROOT, encoding: 'utf8' },
    );
    expect(r.stderr).toBe('');
    expect(r.stdout.trim()).toMatch(/^gamewire \d+\.\d+\.\d+$/);
  });
});
