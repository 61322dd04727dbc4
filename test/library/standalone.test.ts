/**
 * The project stands alone: nothing in README.md, docs/ or src/ points to a folder outside the
 * repository, and the package's metadata is importable as `gamewire/package.json`.
 */
import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { ROOT } from '../helpers/cli.js';

describe('the project stands alone', () => {
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
