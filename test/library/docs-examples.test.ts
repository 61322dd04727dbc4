/**
 * Every ```js block of docs/library.md, run as written: as an ES module inside the package, so
 * `import … from 'gamewire/…'` resolves through package.json "exports" to the built files,
 * exactly as it does for a user.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT } from '../helpers/cli.js';

const doc = readFileSync(path.join(ROOT, 'docs/library.md'), 'utf8');
const blocks = [...doc.matchAll(/^## (.+)$|^```js\n([\s\S]*?)^```$/gm)];
const examples: { section: string; code: string }[] = [];
let section = '';
for (const m of blocks) {
  if (m[1] !== undefined) section = m[1];
  else examples.push({ section, code: m[2]! });
}
// Inside the package directory, so the package's own name resolves (self-reference).
const dir = mkdtempSync(path.join(ROOT, 'dist', 'docs-examples-'));

/** The `// comment` after each console.log: what the example promises to print. */
function promised(code: string): string[] {
  return [...code.matchAll(/console\.log\(.*\); \/\/ (.+)$/gm)].map((m) => m[1]!);
}

describe('docs/library.md examples', () => {
  it('has one per protocol, plus the root and the wire core', () => {
    expect(examples.map((e) => e.section)).toEqual([
      'Any protocol, by name',
      'Declaring a message with the wire core',
      'rmc',
      'js5',
      'unity-relay',
      'vcmp-rpc',
      'nox-relay',
    ]);
  });

  for (const [i, { section, code }] of examples.entries()) {
    it(`${section}: runs and prints what its comments say`, () => {
      const file = path.join(dir, `example-${i}.mjs`);
      writeFileSync(file, code);
      const r = spawnSync(process.execPath, [file], { cwd: ROOT, encoding: 'utf8', timeout: 60_000 });
      expect(r.stderr).toBe('');
      expect(r.status).toBe(0);
      const lines = r.stdout.trim().split('\n');
      for (const expected of promised(code)) {
        // The comment is the literal output, optionally followed by an explanation in parentheses.
        const literal = expected.replace(/ \(.*\)$/, '').trim();
        expect(
          lines.some((l) => l.includes(literal)),
          `${section}: "${literal}" in ${r.stdout}`,
        ).toBe(true);
      }
    });
  }
});
