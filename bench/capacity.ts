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
}

/** Doubles from `start` until a step fails (or `max`), then bisects; bounded by BUDGET_MS. */
async function search(start: number, max: number, step: (x: number) => Promise<Step>): Promise<Found> {
  const t0 = performance.now();
  const found: Found = { best: 0, bestStep: undefined, firstFail: undefined, steps: [] };
  const record = (x: number, s: Step) => {
    found.steps.push(`${x}:${s.pass ? 'pass' : `fail(${s.why})`}`);
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
  while (
    found.firstFail !== undefined &&
    found.firstFail - found.best > Math.max(1, found.best / 8) &&
    performance.now() - t0 < BUDGET_MS
  ) {
    const mid = Math.round((found.best + found.firstFail) / 2);
    record(mid, await step(mid));
  }
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
    if (p99 >= 5) return `p99 ${p99.toFixed(1)} ms`;
    if (loss >= 0.1) return `loss ${loss.toFixed(2)} %`;
    return undefined;
  };

function row(
  name: string,
  unit: string,
  found: Found,
  extra: Record<string, number | string> = {},
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
      steps: found.steps.join(' '),
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
    const found = await search(16, 4096, (players) =>
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
    );
    return row('nox-relay: UDP players per core (16 per instance, 10 Hz)', 'players', found);
  } finally {
    await server.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

async function unityRelay(workers: number): Promise<BenchRow> {
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
    ...(workers > 1 ? ['--workers', String(workers)] : []),
  ]);
  const api = server.endpoints.find((e) => e.transport === 'http')!;
  try {
    const found = await search(16, 8192, (pairs) =>
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
    );
    return row(
      `unity-relay: UDP players per core, 20 Hz x 64 B${workers > 1 ? `, --workers ${workers}` : ''}`,
      'players',
      { ...found, best: found.best * 2 },
      { pairs: found.best, workers },
    );
  } finally {
    await server.stop();
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
    const found = await search(1, 512, (perSecond) =>
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
          return p99 >= 250 ? `login p99 ${p99.toFixed(0)} ms` : undefined;
        },
      ),
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
    const only = process.env.GAMEWIRE_CAPACITY_ONLY?.split(',');
    const want = (n: string) => only === undefined || only.includes(n);
    if (want('nox-relay')) rows.push(await noxRelay());
    if (want('unity-relay')) rows.push(await unityRelay(1));
    if (want('unity-relay-workers')) {
      const two = await unityRelay(2);
      const one = rows.find((r) => r.name.startsWith('unity-relay'));
      if (one !== undefined) {
        two.baseline = one.subject;
        two.ratio = one.subject === 0 ? 0 : two.subject / one.subject;
      }
      rows.push(two);
    }
    if (want('js5')) rows.push(await js5());
    if (want('rmc')) rows.push(await rmcClassic());
    return {
      suite: 'capacity',
      rows,
      notes: [
        PINNED
          ? `server pinned to CPU ${FORWARDER_CPU} (its children too), gamewire load to CPU 0`
          : 'not pinned (taskset or a second CPU missing): figures include the generator competing for the same CPUs',
        'subject = the highest load that met the bar; the --workers row compares with one process (ratio = scaling)',
        `each search stops starting steps after ${BUDGET_MS / 1000} s (GAMEWIRE_CAPACITY_BUDGET_MS); GAMEWIRE_CAPACITY_ONLY=nox-relay,unity-relay,unity-relay-workers,js5,rmc picks rows`,
      ],
    };
  },
};
