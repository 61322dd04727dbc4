/**
 * cli: start-up time of the quick commands (`--version`, `--help`, `decode`), median of several
 * runs, against a bare `node -e ''` measured in the same run (the floor no CLI can beat).
 */
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { type BenchRow, type BenchSuite, percentile } from './harness.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const BIN = path.join(ROOT, 'bin/gamewire.js');
const RUNS = 15;

function medianMs(args: string[]): number {
  const times: number[] = [];
  for (let i = 0; i < RUNS; i++) {
    const start = performance.now();
    const r = spawnSync(process.execPath, args, { cwd: ROOT, stdio: 'ignore' });
    if (r.status !== 0) throw new Error(`${args.join(' ')} exited ${String(r.status)}`);
    times.push(performance.now() - start);
  }
  return percentile(times, 50);
}

export const suite: BenchSuite = {
  name: 'cli',
  description: 'start-up time of quick commands (ms, median of 15; baseline: node -e "")',
  async run() {
    const floor = medianMs(['-e', '']);
    const commands: [string, string[]][] = [
      ['--version', ['--version']],
      ['--help', ['--help']],
      [
        'decode vcmp-rpc',
        ['decode', 'vcmp-rpc', '--hex', '00000040460000000f00057072696e7473000548656c6c6f'],
      ],
      ['decode js5', ['decode', 'js5', '--from', 'client', '--hex', '0f00000212']],
    ];
    const rows: BenchRow[] = commands.map(([name, args]) => {
      const ms = medianMs([BIN, ...args]);
      // Lower is better for times, so the ratio is baseline / subject like the rate suites' subject / baseline.
      return {
        name,
        subject: ms,
        baseline: floor,
        unit: 'ms',
        ratio: floor / ms,
        extra: { overNode: ms - floor },
      };
    });
    return { suite: 'cli', rows, notes: ['target: every quick command under 150 ms'] };
  },
};
