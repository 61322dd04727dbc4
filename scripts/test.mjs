#!/usr/bin/env node
/**
 * `npm test`: the static checks (`npm run check`: tsc, the dashboard's tsc, Biome) and the suite
 * (`vitest run`, with any arguments given) side by side, failing when either fails. The checks
 * run mostly on one core for about 15 s; the suite's first seconds (building, starting its
 * workers) leave the other core idle, so running them together saves most of that time. The
 * checks' output is printed when they end, after the suite's if they end later.
 */
import { spawn } from 'node:child_process';

const bin = (name) => new URL(`../node_modules/.bin/${name}`, import.meta.url).pathname;

const check = new Promise((resolve) => {
  const child = spawn('npm', ['run', '--silent', 'check'], { stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout.on('data', (d) => {
    output += d;
  });
  child.stderr.on('data', (d) => {
    output += d;
  });
  child.on('error', (err) => resolve({ code: 1, output: `${output}${err.message}\n` }));
  child.on('close', (code, signal) => resolve({ code: code ?? (signal ? 1 : 0), output }));
});

const suite = new Promise((resolve) => {
  const child = spawn(bin('vitest'), ['run', ...process.argv.slice(2)], { stdio: 'inherit' });
  child.on('error', (err) => {
    process.stderr.write(`${err.message}\n`);
    resolve(1);
  });
  child.on('close', (code, signal) => resolve(code ?? (signal ? 1 : 0)));
});

const [checked, tested] = await Promise.all([check, suite]);
process.stdout.write(`\nnpm run check: ${checked.code === 0 ? 'passed' : 'FAILED'}\n${checked.output}`);
process.exitCode = checked.code !== 0 || tested !== 0 ? 1 : 0;
