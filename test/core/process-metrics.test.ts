/**
 * Process metrics count from process start (issue 21 item 4): `gamewire_process_cpu_seconds_total`
 * read 0.0186 while `ps` showed 22 s, because prom-client counts CPU from when its collector is
 * made, and the registry was made at the first scrape.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { startAdminServer } from '../../src/core/admin/server.js';
import { ProtocolMetrics } from '../../src/core/metrics.js';
import { createRegistry } from '../../src/core/prometheus.js';
import { BIN, cliEnv, ROOT } from '../helpers/cli.js';
import { waitFor } from '../helpers/wait.js';

/** The value of one unlabelled metric in Prometheus text. */
function metric(text: string, name: string): number {
  const m = new RegExp(`^${name} (\\S+)$`, 'm').exec(text);
  if (m === null) throw new Error(`${name} missing from:\n${text.slice(0, 2000)}`);
  return Number(m[1]);
}

/** Spins the CPU for `ms` of CPU time (user time of this process). */
function burnCpu(ms: number): void {
  const start = process.cpuUsage();
  let x = 0;
  while ((process.cpuUsage(start).user + process.cpuUsage(start).system) / 1000 < ms) {
    for (let i = 0; i < 100_000; i++) x = (x * 31 + i) % 1_000_003;
  }
  expect(x).toBeGreaterThanOrEqual(0);
}

const dir = mkdtempSync(path.join(tmpdir(), 'gamewire-process-metrics-'));
const children: ChildProcess[] = [];
afterAll(() => {
  for (const c of children) if (c.exitCode === null) c.kill('SIGKILL');
  rmSync(dir, { recursive: true, force: true });
});

describe('process metrics', () => {
  it("CPU counters read the process's total from its start, whenever the registry is made", async () => {
    burnCpu(300);
    const registry = createRegistry(() => []);
    const before = process.cpuUsage();
    const text = await registry.metrics();
    const after = process.cpuUsage();
    const user = metric(text, 'gamewire_process_cpu_user_seconds_total');
    const system = metric(text, 'gamewire_process_cpu_system_seconds_total');
    const total = metric(text, 'gamewire_process_cpu_seconds_total');
    expect(user).toBeGreaterThanOrEqual(before.user / 1e6);
    expect(user).toBeLessThanOrEqual(after.user / 1e6);
    expect(system).toBeGreaterThanOrEqual(before.system / 1e6);
    expect(total).toBeGreaterThanOrEqual((before.user + before.system) / 1e6);
    expect(total).toBeGreaterThan(0.3);
    // A second scrape keeps counting from the same origin (a counter never goes down).
    burnCpu(50);
    const again = metric(await registry.metrics(), 'gamewire_process_cpu_seconds_total');
    expect(again).toBeGreaterThanOrEqual(total + 0.05);
    // One series each, no duplicate from prom-client's own collector.
    expect(text.match(/^gamewire_process_cpu_seconds_total /gm)).toHaveLength(1);
    expect(text.match(/^# TYPE gamewire_process_cpu_seconds_total counter$/gm)).toHaveLength(1);
  });

  it('the start time is the process start, and the other default metrics are present', async () => {
    const text = await createRegistry(() => [new ProtocolMetrics('js5')]).metrics();
    const started = Date.now() / 1000 - process.uptime();
    expect(Math.abs(metric(text, 'gamewire_process_start_time_seconds') - started)).toBeLessThanOrEqual(1);
    expect(metric(text, 'gamewire_process_resident_memory_bytes')).toBeGreaterThan(1e6);
    expect(metric(text, 'gamewire_process_open_fds')).toBeGreaterThan(0);
    expect(text).toMatch(/^gamewire_nodejs_heap_size_used_bytes \d/m);
    expect(text).toMatch(/^gamewire_nodejs_eventloop_lag_seconds \d/m);
  });

  it('the admin endpoint counts GC from when it starts, not from the first scrape', async () => {
    const admin = await startAdminServer({
      host: '127.0.0.1',
      port: 0,
      metrics: () => [],
      servers: () => [],
      state: () => 'ready',
    });
    try {
      // Garbage before anyone scrapes: a GC the histogram must have seen.
      let keep: unknown[] = [];
      for (let round = 0; round < 50; round++) {
        keep = [];
        for (let i = 0; i < 20_000; i++) keep.push({ i, s: `x${i}` });
      }
      expect(keep.length).toBe(20_000);
      // GC entries reach the observer asynchronously: wait until a scrape shows them.
      const gcCount = async () => {
        const text = await (await fetch(`http://127.0.0.1:${admin.port}/metrics`)).text();
        const counts = [...text.matchAll(/^gamewire_nodejs_gc_duration_seconds_count\{[^}]*\} (\d+)$/gm)].map(
          (m) => Number(m[1]),
        );
        return counts.reduce((a, b) => a + b, 0);
      };
      expect(await waitFor(gcCount, { what: 'a GC counted in the scrape' })).toBeGreaterThan(0);
    } finally {
      await admin.close();
    }
  });

  it('a served process reports at its first scrape at least the CPU ps would show (/proc/<pid>/stat)', async () => {
    // js5 generates its demo cache at start-up: real work before the first scrape.
    const child = spawn(
      process.execPath,
      [BIN, 'serve', 'js5', '--host', '127.0.0.1', '--port', '0', '--data-dir', dir, '--log-level', 'silent'],
      { cwd: ROOT, env: cliEnv({ GAMEWIRE_ADMIN_PORT: '0' }), stdio: ['ignore', 'pipe', 'pipe'] },
    );
    children.push(child);
    let out = '';
    const port = await new Promise<number>((resolve, reject) => {
      child.stdout!.on('data', (d: Buffer) => {
        out += d.toString();
        const m = /^gamewire: dashboard http:\/\/127\.0\.0\.1:(\d+)\//m.exec(out);
        if (m !== null) resolve(Number(m[1]));
      });
      child.once('exit', (code) => reject(new Error(`serve exited (${code}): ${out}`)));
    });
    // utime + stime, in clock ticks (USER_HZ, 100 on Linux), as ps reads them.
    const stat = readFileSync(`/proc/${child.pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    const psSeconds = (Number(fields[11]) + Number(fields[12])) / 100;
    expect(psSeconds).toBeGreaterThan(0.05);
    const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
    expect(metric(text, 'gamewire_process_cpu_seconds_total')).toBeGreaterThanOrEqual(psSeconds);
    child.kill('SIGTERM');
    await new Promise((r) => child.once('exit', r));
  }, 60_000);
});
