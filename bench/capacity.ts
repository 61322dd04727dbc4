/**
 * `npm run bench -- capacity`: how many players (downloads, logins per second) one core of each
 * server holds at a stated quality bar, measured with `gamewire load` (docs/capacity.md).
 *
 * Each server is `gamewire serve` pinned to CPU 1; the generator is `gamewire load … --json`
 * pinned to CPU 0 (bench/harness.ts's pinning). For each server a search raises the load
 * (doubling, then halving the gap between the last load that met the bar and the first that did
 * not) within a time budget, and reports the highest load that met the bar, with the server's
 * CPU use there. The scaling row runs the same search against `unity-relay --workers 2`.
 *
 * The bars: relays p99 < 5 ms and loss < 0.1 %; js5 every download of the whole cache completes
 * within 60 s; rmc classic (Kerberos) login p99 < 250 ms. Any failed session or integrity
 * violation fails a step.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { LoadSummary } from '../src/core/load/index.js';
import type { Endpoint } from '../src/core/server.js';
import { type BenchResult, type BenchRow, type BenchSuite, FORWARDER_CPU, PINNED } from './harness.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const BIN = path.resolve(here, '../../bin/gamewire.js');
/** Each server's search stops starting new steps after this long. */
const BUDGET_MS = Number(process.env.GAMEWIRE_CAPACITY_BUDGET_MS ?? 150_000);
const CLK_TCK = 100;
/** The bars (docs/capacity.md); a shared machine can be measured against looser ones, stated with the figures. */
const RELAY_P99_MS = Number(process.env.GAMEWIRE_CAPACITY_P99_MS ?? 5);
const RELAY_LOSS_PERCENT = 0.1;
const LOGIN_P99_MS = Number(process.env.GAMEWIRE_CAPACITY_LOGIN_P99_MS ?? 250);
/** The load of the step past the bar that measures each server's CPU cost (players, pairs, logins/s). */
const COST_LOADS = { nox: 256, unity: 128, rmc: 4 };
const API_KEY = 'capacity-bench-key-0123456789';

interface Served {
  child: ChildProcess;
  endpoints: Endpoint[];
  dir: string;
  stop(): Promise<void>;
}

/** `gamewire serve …` on the server CPU, ready once it says so over IPC. */
async function serve(args: string[]): Promise<Served> {
  const dir = mkdtempSync(path.join(tmpdir(), 'gamewire-capacity-'));
  const full = [BIN, 'serve', ...args, '--no-admin', '--data-dir', dir, '--log-level', 'warn'];
  const child = PINNED
    ? spawn('taskset', ['-c', String(FORWARDER_CPU), process.execPath, ...full], {
        stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
      })
    : spawn(process.execPath, full, { stdio: ['ignore', 'ignore', 'inherit', 'ipc'] });
  const endpoints = await new Promise<Endpoint[]>((resolve, reject) => {
    child.on('message', (m: { type?: string; endpoints?: Endpoint[] }) => {
      if (m.type === 'gamewire:ready') resolve(m.endpoints ?? []);
    });
    child.once('exit', (code) => reject(new Error(`serve ${args.join(' ')} exited ${code}`)));
  });
  return {
    child,
    endpoints,
    dir,
    stop: async () => {
      const gone = new Promise<void>((r) => child.once('exit', () => r()));
      child.kill('SIGTERM');
      const hard = setTimeout(() => child.kill('SIGKILL'), 5000);
      await gone;
      clearTimeout(hard);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** CPU seconds used so far by a process and its descendants (Linux /proc). */
function cpuSeconds(rootPid: number): number {
  const parents = new Map<number, number>();
  const ticks = new Map<number, number>();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      parents.set(Number(name), Number(fields[1]));
      ticks.set(Number(name), Number(fields[11]) + Number(fields[12]));
    } catch {
      // Gone meanwhile.
    }
  }
  let total = 0;
  for (const [pid, t] of ticks) {
    for (let p: number | undefined = pid; p !== undefined && p > 1; p = parents.get(p)) {
      if (p === rootPid) {
        total += t;
        break;
      }
    }
  }
  return total / CLK_TCK;
}

/** `gamewire load <args> --json` on the generator CPU; resolves with its summary. */
function load(args: string[]): Promise<LoadSummary> {
  const full = [BIN, 'load', ...args, '--json'];
  const child = PINNED
    ? spawn('taskset', ['-c', '0', process.execPath, ...full], { stdio: ['ignore', 'pipe', 'pipe'] })
    : spawn(process.execPath, full, { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout!.on('data', (d: Buffer) => {
    out += d.toString();
  });
  child.stderr!.on('data', (d: Buffer) => {
    err += d.toString();
  });
  return new Promise((resolve, reject) => {
    child.on('close', () => {
      try {
        resolve(JSON.parse(out.trim().split('\n').at(-1) ?? '') as LoadSummary);
      } catch {
        reject(new Error(`gamewire load ${args.join(' ')}: no summary (${err.trim()})`));
      }
    });
  });
}

interface Step {
  pass: boolean;
  why: string;
  summary: LoadSummary;
  serverCpu: number;
}

interface Found {
  best: number;
  bestStep: Step | undefined;
  firstFail: number | undefined;
  steps: string[];
  /** The largest load that ran without a failed session or a violation, whatever its latency. */
  sound: { load: number; step: Step } | undefined;
}

/** Doubles from `start` until a step fails (or `max`), then bisects; bounded by BUDGET_MS. */
async function search(
  start: number,
  max: number,
  step: (x: number) => Promise<Step>,
  min = 1,
  /** A load past the bar, run once at the end to measure what the server spends there. */
  costLoad?: number,
): Promise<Found> {
  const t0 = performance.now();
  const found: Found = { best: 0, bestStep: undefined, firstFail: undefined, steps: [], sound: undefined };
  const record = (x: number, s: Step) => {
    const lat = Object.entries(s.summary.latencyMs)
      .map(([k, l]) => `${k} p99 ${l.p99.toFixed(1)}`)
      .join(', ');
    found.steps.push(
      `${x}: ${s.pass ? 'pass' : `FAIL ${s.why}`} [${lat}; loss ${s.summary.derived.relayLossPercent ?? '-'} %; server cpu ${s.serverCpu.toFixed(2)}]`,
    );
    const sound = s.summary.sessions.failed === 0 && Object.keys(s.summary.violations).length === 0;
    if (sound && (found.sound === undefined || x > found.sound.load)) found.sound = { load: x, step: s };
    if (s.pass && x > found.best) {
      found.best = x;
      found.bestStep = s;
    }
    if (!s.pass && (found.firstFail === undefined || x < found.firstFail)) found.firstFail = x;
  };
  let x = start;
  while (x <= max && performance.now() - t0 < BUDGET_MS) {
    const s = await step(x);
    record(x, s);
    if (!s.pass) break;
    x *= 2;
  }
  // The first load already missed the bar: look below it, down to `min`.
  for (
    x = Math.floor(start / 2);
    found.best === 0 && x >= min && performance.now() - t0 < BUDGET_MS;
    x = Math.floor(x / 2)
  ) {
    const s = await step(x);
    record(x, s);
  }
  while (
    found.best > 0 &&
    found.firstFail !== undefined &&
    found.firstFail - found.best > Math.max(1, found.best / 8) &&
    performance.now() - t0 < BUDGET_MS
  ) {
    const mid = Math.round((found.best + found.firstFail) / 2);
    record(mid, await step(mid));
  }
  // What happens past the bar, and a server busy enough for its CPU to be measured precisely
  // (/proc counts in 10 ms ticks): outside the time budget, one step.
  if (costLoad !== undefined && !found.steps.some((line) => line.startsWith(`${costLoad}:`)))
    record(costLoad, await step(costLoad));
  return found;
}

/** Runs one load step against a running server and measures the server's CPU meanwhile. */
async function measured(
  server: Served,
  args: string[],
  judge: (s: LoadSummary) => string | undefined,
): Promise<Step> {
  const cpu0 = cpuSeconds(server.child.pid!);
  const t0 = performance.now();
  const summary = await load(args);
  const wall = (performance.now() - t0) / 1000;
  const serverCpu = (cpuSeconds(server.child.pid!) - cpu0) / wall;
  const failed =
    summary.sessions.failed > 0
      ? `${summary.sessions.failed} failed (${Object.keys(summary.errors).join(',')})`
      : Object.keys(summary.violations).length > 0
        ? `violations ${Object.keys(summary.violations).join(',')}`
        : undefined;
  const why = failed ?? judge(summary);
  return { pass: why === undefined, why: why ?? '', summary, serverCpu };
}

const relayBar =
  (series: string) =>
  (s: LoadSummary): string | undefined => {
    const p99 = s.latencyMs[series]?.p99 ?? Number.POSITIVE_INFINITY;
    const loss = s.derived.relayLossPercent ?? 100;
    if (s.sessions.joined < s.clients) return `${s.sessions.joined}/${s.clients} joined`;
    if (p99 >= RELAY_P99_MS) return `p99 ${p99.toFixed(1)} ms`;
    if (loss >= RELAY_LOSS_PERCENT) return `loss ${loss.toFixed(2)} %`;
    return undefined;
  };

function row(
  name: string,
  unit: string,
  found: Found,
  extra: Record<string, number | string> = {},
  /** Players per unit of load (2 for host/join pairs). */
  scale = 1,
): BenchRow {
  const s = found.bestStep;
  return {
    name,
    subject: found.best,
    baseline: found.best,
    unit,
    ratio: 1,
    extra: {
      ...extra,
      ...(s === undefined
        ? {}
        : {
            serverCpu: Number(s.serverCpu.toFixed(2)),
            p99: Object.values(s.summary.latencyMs)
              .map((l) => l.p99.toFixed(2))
              .join('/'),
          }),
      firstFail: found.firstFail ?? 'none',
      // The server's CPU cost at the largest sound load: how many a whole core would hold if
      // CPU were the only limit (robust on a shared machine, where latency is not).
      ...(found.sound === undefined || found.sound.step.serverCpu <= 0
        ? {}
        : {
            cpuProjectedPerCore: Math.round((scale * found.sound.load) / found.sound.step.serverCpu),
            cpuMeasuredAt: scale * found.sound.load,
          }),
      steps: found.steps.join(' | '),
    },
  };
}

async function noxRelay(): Promise<BenchRow> {
  // Instances of 16 players, as a busy social VR world is split.
  const dir = mkdtempSync(path.join(tmpdir(), 'gamewire-capacity-nox-'));
  const instances = path.join(dir, 'instances.json');
  writeFileSync(instances, JSON.stringify(Array.from({ length: 256 }, (_, id) => ({ id, capacity: 16 }))));
  const server = await serve(['nox-relay', '--port', '0', '--host', '127.0.0.1', '--instances', instances]);
  const port = server.endpoints[0]!.port;
  try {
    const found = await search(
      16,
      4096,
      (players) =>
        measured(
          server,
          [
            'nox-relay',
            '--target',
            `127.0.0.1:${port}`,
            '--clients',
            String(players),
            '--arrival-rate',
            '200',
            '--duration',
            String(Math.max(8, players / 200 + 6)),
            '--instances',
            `0-${Math.min(255, Math.ceil(players / 16) - 1)}`,
            '--tick-rate',
            '10',
            '--from',
            '127.0.0.2-33',
          ],
          relayBar('relay'),
        ),
      2,
      COST_LOADS.nox,
    );
    return row('nox-relay: UDP players per core (16 per instance, 10 Hz)', 'players', found);
  } finally {
    await server.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

/** A throwaway redis-server for the `--workers` row (children share allocations through it). */
async function redisServer(): Promise<{ url: string; stop(): void }> {
  const port = await new Promise<number>((resolve, reject) => {
    const probe = net.createServer();
    probe.once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const p = (probe.address() as net.AddressInfo).port;
      probe.close(() => resolve(p));
    });
  });
  const dir = mkdtempSync(path.join(tmpdir(), 'gamewire-capacity-redis-'));
  const child = spawn(
    'redis-server',
    ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir],
    {
      stdio: ['ignore', 'pipe', 'inherit'],
    },
  );
  await new Promise<void>((resolve, reject) => {
    let out = '';
    child.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      if (/Ready to accept connections/.test(out)) resolve();
    });
    child.once('error', reject);
    child.once('exit', (code) => reject(new Error(`redis-server exited ${code}`)));
  });
  return {
    url: `redis://127.0.0.1:${port}`,
    stop: () => {
      child.kill('SIGTERM');
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

async function unityRelay(workers: number): Promise<BenchRow> {
  const redis = workers > 1 ? await redisServer() : undefined;
  const server = await serve([
    'unity-relay',
    '--port',
    '0',
    '--api-port',
    '0',
    '--host',
    '127.0.0.1',
    '--dtls-port',
    '0',
    '--ws-port',
    '0',
    '--wss-port',
    '0',
    // The generator allocates as a backend does, with the API key: per-address limits are for
    // callers without it (docs/unity-relay.md).
    '--api-key',
    API_KEY,
    ...(redis === undefined
      ? []
      : [
          '--workers',
          String(workers),
          '--redis',
          redis.url,
          '--relay-secret',
          'capacity-bench-relay-secret-0123456789abcdef',
        ]),
  ]);
  const api = server.endpoints.find((e) => e.transport === 'http')!;
  try {
    const found = await search(
      16,
      8192,
      (pairs) =>
        measured(
          server,
          [
            'unity-relay',
            '--api',
            `http://127.0.0.1:${api.port}`,
            '--api-key',
            API_KEY,
            '--clients',
            String(pairs),
            '--arrival-rate',
            '200',
            '--duration',
            String(Math.max(8, pairs / 200 + 6)),
            '--relay-rate',
            '20',
            '--relay-bytes',
            '64',
            '--from',
            '127.0.0.2-33',
          ],
          relayBar('relay'),
        ),
      1,
      COST_LOADS.unity,
    );
    return row(
      `unity-relay: UDP players per core, 20 Hz x 64 B${workers > 1 ? `, --workers ${workers}` : ''}`,
      'players',
      { ...found, best: found.best * 2 },
      { pairs: found.best, workers },
      2,
    );
  } finally {
    await server.stop();
    redis?.stop();
  }
}

async function js5(): Promise<BenchRow> {
  const server = await serve(['js5', '--port', '0', '--host', '127.0.0.1', '--js5-max-per-ip', '0']);
  const port = server.endpoints[0]!.port;
  try {
    const found = await search(4, 1024, (clients) =>
      measured(
        server,
        [
          'js5',
          '--target',
          `127.0.0.1:${port}`,
          '--clients',
          String(clients),
          '--arrival-rate',
          '0',
          '--duration',
          '60',
          '--from',
          '127.0.0.2-33',
        ],
        (s) =>
          s.sessions.succeeded < s.clients
            ? `${s.sessions.succeeded}/${s.clients} completed in 60 s`
            : undefined,
      ),
    );
    return row('js5: whole-cache downloads at once, all complete within 60 s (530 demo)', 'downloads', found);
  } finally {
    await server.stop();
  }
}

async function rmcClassic(): Promise<BenchRow> {
  const server = await serve(['rmc', '--port', '0', '--host', '127.0.0.1', '--prudp-profile', 'classic']);
  const port = server.endpoints.find((e) => e.transport === 'udp')!.port;
  try {
    const found = await search(
      1,
      512,
      (perSecond) =>
        measured(
          server,
          [
            'rmc',
            '--target',
            `127.0.0.1:${port}`,
            '--prudp-profile',
            'classic',
            '--clients',
            String(perSecond * 6),
            '--arrival-rate',
            String(perSecond),
            '--duration',
            '10',
            '--call-rate',
            '1',
            '--from',
            '127.0.0.2-33',
          ],
          (s) => {
            const p99 = s.latencyMs.join?.p99 ?? Number.POSITIVE_INFINITY;
            if (s.sessions.joined < Math.min(s.clients, s.sessions.started))
              return `${s.sessions.joined} joined`;
            return p99 >= LOGIN_P99_MS ? `login p99 ${p99.toFixed(0)} ms` : undefined;
          },
        ),
      1,
      COST_LOADS.rmc,
    );
    return row('rmc: classic Kerberos logins per second per core (PRUDP)', 'logins/s', found);
  } finally {
    await server.stop();
  }
}

export const suite: BenchSuite = {
  name: 'capacity',
  description:
    'players (downloads, logins/s) per core at the quality bar, gamewire load against serve pinned to one CPU',
  async run(): Promise<BenchResult> {
    const rows: BenchRow[] = [];
    const notes: string[] = [];
    const only = process.env.GAMEWIRE_CAPACITY_ONLY?.split(',');
    const want = (n: string) => only === undefined || only.includes(n);
    // Each row is printed as soon as it is measured; one that cannot run is a note, not the end.
    const add = async (name: string, measure: () => Promise<BenchRow>) => {
      if (!want(name)) return;
      try {
        const r = await measure();
        console.log(`  ${r.name}: ${r.subject} ${r.unit} ${JSON.stringify(r.extra)}`);
        rows.push(r);
      } catch (err) {
        notes.push(`${name}: not measured: ${(err as Error).message}`);
        console.log(`  ${name}: not measured: ${(err as Error).message}`);
      }
    };
    await add('nox-relay', noxRelay);
    await add('unity-relay', () => unityRelay(1));
    await add('unity-relay-workers', async () => {
      const two = await unityRelay(2);
      const one = rows.find((r) => r.name.startsWith('unity-relay'));
      if (one !== undefined) {
        two.baseline = one.subject;
        two.ratio = one.subject === 0 ? 0 : two.subject / one.subject;
      }
      return two;
    });
    await add('js5', js5);
    await add('rmc', rmcClassic);
    return {
      suite: 'capacity',
      rows,
      notes: [
        ...notes,
        PINNED
          ? `server pinned to CPU ${FORWARDER_CPU} (its children too), gamewire load to CPU 0`
          : 'not pinned (taskset or a second CPU missing): figures include the generator competing for the same CPUs',
        'subject = the highest load that met the bar; the --workers row compares with one process (ratio = scaling)',
        `each search stops starting steps after ${BUDGET_MS / 1000} s (GAMEWIRE_CAPACITY_BUDGET_MS); GAMEWIRE_CAPACITY_ONLY=nox-relay,unity-relay,unity-relay-workers,js5,rmc picks rows`,
      ],
    };
  },
};
