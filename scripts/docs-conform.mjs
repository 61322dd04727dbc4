// Rewrites the generated check lists in docs/conform.md (between `<!-- conform:NAME -->` and
// `<!-- /conform:NAME -->`) from the suites' declarations. Run after `npm run build`:
// `npm run docs:conform`. test/cli/conform.test.ts fails when the file is out of date.
import { readFileSync, writeFileSync } from 'node:fs';

const { conformSections } = await import('../dist/src/cli/conform.js');
const file = new URL('../docs/conform.md', import.meta.url);
let doc = readFileSync(file, 'utf8');
for (const [name, text] of await conformSections()) {
  const start = `<!-- conform:${name} -->\n`;
  const end = `<!-- /conform:${name} -->`;
  const a = doc.indexOf(start);
  const b = doc.indexOf(end);
  if (a < 0 || b < a) throw new Error(`docs/conform.md has no section for ${name}`);
  doc = doc.slice(0, a + start.length) + text + doc.slice(b);
}
writeFileSync(file, doc);
