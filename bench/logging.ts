/**
 * logging: lines per second from pino to stderr (a pipe this process reads and discards), through
 * gamewire's LogDestination against pino's own destination (sonic-boom) in the same run. Each
 * child logs 100 lines per turn of its event loop, as a busy server does, and the time includes
 * draining what is queued. Rounds are interleaved; medians are compared.
 */
import { spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { type BenchSuite, percentile } from './harness.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const LINES = 100_000;
const ROUNDS = 3;

function child(kind: 'gamewire' | 'sonic-boom'): string {
  const dest = pathToFileURL(path.join(ROOT, 'dist/src/core/log-destination.js')).href;
  return `
import { createRequire } from 'node:module';
const { pino } = createRequire(${JSON.stringify(path.join(ROOT, 'package.json'))})('pino');
const { LogDestination } = await import(${JSON.stringify(dest)});
const dest = ${kind === 'sonic-boom' ? 'pino.destination(2)' : 'new LogDestination(process.stderr, { maxBacklogBytes: 1 << 30 })'};
const log = pino({ base: undefined }, dest);
const t0 = process.hrtime.bigint();
for (let b = 0; b < ${LINES / 100}; b++) {
  for (let i = 0; i < 100; i++) log.info({ protocol: 'js5', remote: '127.0.0.1:5555', i }, 'connection closed');
  await new Promise((r) => setImmediate(r));
}
await new Promise((r) => dest.flush(r));
process.stdout.write(String(${LINES} / (Number(process.hrtime.bigint() - t0) / 1e9)));
`;
}

function linesPerSecond(kind: 'gamewire' | 'sonic-boom'): Promise<number> {
  return new Promise((resolve, reject) => {
    const c = spawn(process.execPath, ['--input-type=module', '-e', child(kind)], {
      cwd: ROOT,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    c.stdout.on('data', (d: Buffer) => {
      out += d.toString();
    });
    c.stderr.resume(); // the pipe's reader: takes everything, keeps nothing
    c.on('exit', (code) => (code === 0 ? resolve(Number(out)) : reject(new Error(`${kind} exited ${code}`))));
  });
}

export const suite: BenchSuite = {
  name: 'logging',
  description: `pino → stderr pipe, ${LINES} lines at 100 per turn (lines/s; baseline: pino.destination, sonic-boom)`,
  async run() {
    const ours: number[] = [];
    const theirs: number[] = [];
    for (let r = 0; r < ROUNDS; r++) {
      theirs.push(await linesPerSecond('sonic-boom'));
      ours.push(await linesPerSecond('gamewire'));
    }
    const subject = percentile(ours, 50);
    const baseline = percentile(theirs, 50);
    return {
      suite: 'logging',
      rows: [{ name: 'info lines to a pipe', subject, baseline, unit: 'lines/s', ratio: subject / baseline }],
      notes: [
        'LogDestination writes what one turn logged in one write; sonic-boom (async) writes as lines come and retries EAGAIN on a timer.',
      ],
    };
  },
};
