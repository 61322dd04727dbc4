/**
 * The error model holds across src/: no bare `throw new Error(`, protocols never import the
 * CLI, every error class extends GamewireError, and every code used is listed in docs/errors.md.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ROOT } from '../helpers/cli.js';

function files(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const p = path.join(dir, name);
    return statSync(p).isDirectory() ? files(p) : p.endsWith('.ts') ? [p] : [];
  });
}

const SRC = path.join(ROOT, 'src');
const sources = files(SRC).map((file) => ({
  file: path.relative(ROOT, file),
  text: readFileSync(file, 'utf8'),
}));

/** Codes that belong to Node itself (checked for, never thrown by gamewire). */
const NODE_CODES = new Set(['ERR_BUFFER_TOO_LARGE', 'ERR_TLS_CERT_ALTNAME_INVALID']);

describe('the error model', () => {
  it('has no `throw new Error(` in src/', () => {
    const hits = sources.flatMap(({ file, text }) =>
      text
        .split('\n')
        .map((line, i) => ({ line, at: `${file}:${i + 1}` }))
        .filter(({ line }) => /throw new (Error|TypeError|RangeError)\(/.test(line))
        .map(({ at }) => at),
    );
    expect(
      hits,
      'throw a GamewireError subclass instead (src/wire/errors.ts, src/core/errors.ts; docs/errors.md)',
    ).toEqual([]);
  });

  it('protocols, core and wire never import the CLI', () => {
    const hits = sources
      .filter(({ file }) => !file.startsWith('src/cli/'))
      .filter(({ text }) => /from '(\.\.\/)+cli\//.test(text))
      .map(({ file }) => file);
    expect(hits, 'import errors from src/core/errors.ts, not src/cli').toEqual([]);
  });

  it('every error class extends a gamewire error', () => {
    const bad = sources.flatMap(({ file, text }) =>
      [...text.matchAll(/class (\w+) extends (\w+)/g)]
        .filter(([, , base]) => base === 'Error' || base === 'TypeError' || base === 'RangeError')
        .filter(([, name]) => name !== 'GamewireError')
        .map(([, name]) => `${file}: ${name}`),
    );
    expect(bad, 'extend GamewireError (src/wire/errors.ts) with a stable ERR_ code').toEqual([]);
  });

  it('lists every code used in src/ in docs/errors.md', () => {
    const doc = readFileSync(path.join(ROOT, 'docs/errors.md'), 'utf8');
    const used = new Set<string>();
    for (const { text } of sources)
      for (const m of text.matchAll(/['"`](ERR_[A-Z0-9_]+)['"`]/g)) used.add(m[1]!);
    const missing = [...used].filter((code) => !NODE_CODES.has(code) && !doc.includes(`\`${code}\``));
    expect(missing, 'add each code to docs/errors.md with what it means').toEqual([]);
  });
});
