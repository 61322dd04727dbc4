/**
 * `npm run bench [-- suite…]`: runs every suite in bench/ (or the named ones), prints a summary
 * and writes it to bench-results/latest.json.
 */
import { mkdirSync, readdirSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { type BenchResult, type BenchSuite, formatNumber } from './harness.js';

const here = path.dirname(fileURLToPath(import.meta.url));

async function loadSuites(): Promise<BenchSuite[]> {
  const files = readdirSync(here).filter((f) => f.endsWith('.js') && !['harness.js', 'run.js'].includes(f));
  const suites: BenchSuite[] = [];
  for (const f of files.sort()) {
    const mod = (await import(pathToFileURL(path.join(here, f)).href)) as { suite?: BenchSuite };
    if (mod.suite !== undefined) suites.push(mod.suite);
  }
  return suites;
}

async function runAll(names: string[]): Promise<void> {
  const all = await loadSuites();
  const unknown = names.filter((n) => !all.some((s) => s.name === n));
  if (unknown.length > 0) {
    console.error(`unknown suite(s): ${unknown.join(', ')}; known: ${all.map((s) => s.name).join(', ')}`);
    process.exitCode = 2;
    return;
  }
  const chosen = names.length === 0 ? all : all.filter((s) => names.includes(s.name));
  const results: BenchResult[] = [];
  for (const s of chosen) {
    console.log(`\n== ${s.name}: ${s.description}`);
    const result = await s.run();
    results.push(result);
    for (const row of result.rows) {
      const extra = row.extra
        ? `  ${Object.entries(row.extra)
            .map(([k, v]) => `${k}=${typeof v === 'number' ? formatNumber(v) : v}`)
            .join(' ')}`
        : '';
      console.log(
        `${row.name.padEnd(44)} gamewire ${formatNumber(row.subject).padStart(9)} ${row.unit}  baseline ${formatNumber(row.baseline).padStart(9)}  ratio ${(row.ratio * 100).toFixed(1)}%${extra}`,
      );
    }
    for (const note of result.notes ?? []) console.log(`  note: ${note}`);
  }
  const out = path.resolve('bench-results');
  mkdirSync(out, { recursive: true });
  const summary = { date: new Date().toISOString(), node: process.version, results };
  writeFileSync(path.join(out, 'latest.json'), `${JSON.stringify(summary, null, 2)}\n`);
  console.log(`\nsummary written to ${path.join(out, 'latest.json')}`);
}

await runAll(process.argv.slice(2));
