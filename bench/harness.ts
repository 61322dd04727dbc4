/**
 * Bench helpers shared by every suite. A suite compares gamewire against a baseline measured in
 * the same run (a minimal hand-written loop doing the same job) and reports the ratio.
 */
import { execFileSync } from 'node:child_process';
import { performance } from 'node:perf_hooks';

export interface BenchRow {
  /** What was measured, e.g. `decode print("Hello")`. */
  name: string;
  /** gamewire's figure. */
  subject: number;
  /** The hand-written baseline's figure, measured in the same run. */
  baseline: number;
  /** Unit of both figures, e.g. `msg/s`, `MB/s`, `pps/cpu-s`. */
  unit: string;
  /** subject / baseline (for rates; higher is better). */
  ratio: number;
  /** Any other figures (latency percentiles, loss, CPU). */
  extra?: Record<string, number | string>;
}

export interface BenchResult {
  suite: string;
  rows: BenchRow[];
  notes?: string[];
}

export interface BenchSuite {
  name: string;
  description: string;
  run(): Promise<BenchResult>;
}

/** Runs `fn` repeatedly for at least `minMs` and returns calls per second. */
export function opsPerSecond(fn: () => unknown, minMs = 250): number {
  let sink: unknown;
  // Warm up so both sides are optimised before timing.
  for (let i = 0; i < 2000; i++) sink = fn();
  let n = 0;
  const start = performance.now();
  let now = start;
  while (now - start < minMs) {
    for (let i = 0; i < 1000; i++) sink = fn();
    n += 1000;
    now = performance.now();
  }
  if (sink === Symbol.for('never')) console.log(sink);
  return (n * 1000) / (now - start);
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

/** Interleaves subject and baseline for several rounds and compares the medians. */
export function compareOps(
  name: string,
  subject: () => unknown,
  baseline: () => unknown,
  options: { rounds?: number; minMs?: number; unit?: string } = {},
): BenchRow {
  const rounds = options.rounds ?? 5;
  const s: number[] = [];
  const b: number[] = [];
  for (let r = 0; r < rounds; r++) {
    b.push(opsPerSecond(baseline, options.minMs));
    s.push(opsPerSecond(subject, options.minMs));
  }
  const subjectOps = median(s);
  const baselineOps = median(b);
  return {
    name,
    subject: subjectOps,
    baseline: baselineOps,
    unit: options.unit ?? 'msg/s',
    ratio: subjectOps / baselineOps,
  };
}

/** Percentile of a list of numbers (p in 0..100). */
export function percentile(values: ArrayLike<number>, p: number): number {
  const s = Array.from(values).sort((a, b) => a - b);
  if (s.length === 0) return Number.NaN;
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]!;
}

export function formatNumber(n: number): string {
  if (!Number.isFinite(n)) return String(n);
  if (Math.abs(n) >= 1e6) return `${(n / 1e6).toFixed(2)}M`;
  if (Math.abs(n) >= 1e3) return `${(n / 1e3).toFixed(1)}k`;
  return n.toFixed(2);
}

/**
 * "One pinned core" for relay benches: the process under test runs pinned to CPU 1 and the load
 * generator (this process) to CPU 0, when `taskset` exists and there are two CPUs, so that the
 * two never take turns on one core. GAMEWIRE_BENCH_PIN=0 turns it off.
 */
export const FORWARDER_CPU = 1;
function canPin(): boolean {
  if (process.env.GAMEWIRE_BENCH_PIN === '0' || process.platform !== 'linux') return false;
  try {
    execFileSync('taskset', ['-p', String(process.pid)], { stdio: 'ignore' });
    return Number(execFileSync('nproc', { encoding: 'utf8' }).trim()) >= 2;
  } catch {
    return false;
  }
}
export const PINNED = canPin();

/** Pins this process (the load generator) to `cpus` ("0", "0-255"), when pinning is on. */
export function pinSelf(cpus: string): void {
  if (PINNED) execFileSync('taskset', ['-p', '-c', cpus, String(process.pid)], { stdio: 'ignore' });
}

/** The command and arguments that run `args` on the forwarder's CPU when pinning is on. */
export function onForwarderCpu(command: string, args: string[]): [string, string[]] {
  return PINNED ? ['taskset', ['-c', String(FORWARDER_CPU), command, ...args]] : [command, args];
}
