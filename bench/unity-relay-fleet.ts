/**
 * Unity Relay as a fleet on Redis, through the real command (`bin/gamewire.js serve unity-relay
 * --role …`, so build first) and a real `redis-server` on a free port:
 *
 * 1. allocations per second through one allocator, then through two (requests spread over both),
 *    with two relay nodes behind them; 32 requests in flight, 3 s per round, 3 interleaved rounds;
 * 2. relay packets per second on a relay node with Redis configured (`--role relay`) next to one
 *    without (`--role all`), same run, same JavaScript data plane, interleaved rounds: a host and
 *    a client bound on each, the client sends RELAYs paced at a fixed rate and the host counts
 *    what arrives; also the relay process's CPU per packet (from /proc). They must match within
 *    noise: Redis is never on the datapath.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { RelayApiClient, relayServerData, UnityRelayClient } from '../src/protocols/unity-relay/index.js';
import { type RedisServer, startRedis } from '../test/helpers/redis.js';
import type { BenchResult, BenchRow, BenchSuite } from './harness.js';

/** The package root, whether this runs from bench/ or from the compiled dist/bench/. */
function packageRoot(): string {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  while (!existsSync(path.join(dir, 'package.json'))) dir = path.dirname(dir);
  return dir;
}
const ROOT = packageRoot();
const BIN = path.join(ROOT, 'bin', 'gamewire.js');
const SECRET = 'bench-fleet-secret-0123456789abcdef0123456789';

interface Served {
  child: ChildProcess;
  stdout: string;
  api: string;
  udpPort: number;
}

function serve(redis: RedisServer | undefined, dir: string, args: string[]): Promise<Served> {
  const fleet =
    redis === undefined ? [] : ['--redis', redis.url, '--relay-secret-file', path.join(dir, 'secret')];
  const child = spawn(
    process.execPath,
    [
      BIN,
      'serve',
      'unity-relay',
      '--host',
      '127.0.0.1',
      '--data-dir',
      dir,
      '--log-level',
      'warn',
      '--dataplane',
      'js',
      '--port',
      '0',
      '--api-port',
      '0',
      '--dtls-port',
      '0',
      '--ws-port',
      '0',
      '--wss-port',
      '0',
      '--unity-api-requests-per-minute',
      '0',
      '--unity-allocations-per-minute-per-address',
      '0',
      '--unity-max-allocations-per-address',
      '10000000',
      // Placements not yet bound reserve capacity for their bind window (60 s): room for the run.
      '--unity-max-allocations',
      '10000000',
      '--unity-allocations-per-second',
      '0',
      ...fleet,
      ...args,
    ],
    { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'], env: { ...process.env, GAMEWIRE_ADMIN_PORT: '0' } },
  );
  const s: Served = { child, stdout: '', api: '', udpPort: 0 };
  return new Promise((resolve, reject) => {
    child.stdout!.on('data', (d: Buffer) => {
      s.stdout += d.toString();
      const http = s.stdout.match(/gamewire: unity-relay http [\d.]+:(\d+)/);
      const udp = s.stdout.match(/gamewire: unity-relay udp [\d.]+:(\d+)/);
      if (http !== null) s.api = `http://127.0.0.1:${http[1]}`;
      if (udp !== null) s.udpPort = Number(udp[1]);
      const wantsApi = !args.includes('relay');
      const wantsUdp = !args.includes('allocator');
      if ((!wantsApi || s.api !== '') && (!wantsUdp || s.udpPort !== 0)) resolve(s);
    });
    child.once('exit', (code) => reject(new Error(`serve ${args.join(' ')} exited with ${code}`)));
  });
}

async function stop(s: Served): Promise<void> {
  if (s.child.exitCode !== null) return;
  const exited = new Promise((r) => s.child.once('exit', r));
  s.child.kill('SIGTERM');
  await exited;
}

/** Allocations per second with `inFlight` requests outstanding, spread over `apis`, for `ms`. */
async function allocationsPerSecond(apis: string[], ms: number, inFlight = 32): Promise<number> {
  let done = 0;
  let failed = 0;
  let lastFailure = '';
  const deadline = performance.now() + ms;
  const start = performance.now();
  let next = 0;
  const worker = async () => {
    while (performance.now() < deadline) {
      const api = apis[next++ % apis.length]!;
      const res = await fetch(`${api}/v1/allocate`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: '{"maxConnections":2}',
      });
      await res.arrayBuffer();
      if (res.status === 201) done++;
      else {
        failed++;
        lastFailure = `${res.status}`;
      }
    }
  };
  await Promise.all(Array.from({ length: inFlight }, worker));
  if (failed > 0) throw new Error(`${failed} allocations failed (last: HTTP ${lastFailure})`);
  return (done * 1000) / (performance.now() - start);
}

/** user + system CPU seconds of a process so far (Linux /proc). */
function cpuSeconds(pid: number): number {
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
    return (Number(fields[11]) + Number(fields[12])) / 100;
  } catch {
    return Number.NaN;
  }
}

interface Pair {
  host: UnityRelayClient;
  client: UnityRelayClient;
  received: number;
}

async function pair(api: string): Promise<Pair> {
  const fast = { retryMs: 100, pingIntervalMs: 1000 };
  const { client: host, joinCode } = await UnityRelayClient.host(new RelayApiClient(api), 2, fast);
  const client = new UnityRelayClient(relayServerData(await new RelayApiClient(api).join(joinCode)), fast);
  await client.bind();
  await client.connect();
  const p: Pair = { host, client, received: 0 };
  host.on('message', () => {
    p.received++;
  });
  return p;
}

/** Sends RELAYs at `rate` per second for `ms`; returns packets forwarded per second and CPU per packet. */
async function relayRound(
  p: Pair,
  pid: number,
  rate: number,
  ms: number,
): Promise<{ pps: number; cpuMicrosPerPacket: number; loss: number }> {
  const payload = Buffer.alloc(100, 7);
  p.received = 0;
  const cpu0 = cpuSeconds(pid);
  const start = performance.now();
  let sent = 0;
  while (performance.now() - start < ms) {
    const due = Math.floor(((performance.now() - start) * rate) / 1000);
    while (sent < due) {
      p.client.send(payload);
      sent++;
    }
    await new Promise((r) => setImmediate(r));
  }
  await new Promise((r) => setTimeout(r, 200));
  const elapsed = (performance.now() - start - 200) / 1000;
  const cpu = cpuSeconds(pid) - cpu0;
  return {
    pps: p.received / elapsed,
    cpuMicrosPerPacket: (cpu * 1e6) / Math.max(1, p.received),
    loss: 1 - p.received / Math.max(1, sent),
  };
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

async function run(): Promise<BenchResult> {
  const redis = await startRedis();
  if (redis === undefined)
    return { suite: 'unity-relay-fleet', rows: [], notes: ['redis-server is not installed'] };
  const dir = mkdtempSync(path.join(tmpdir(), 'gamewire-bench-fleet-'));
  writeFileSync(path.join(dir, 'secret'), SECRET);
  const started: Served[] = [];
  const clients: UnityRelayClient[] = [];
  try {
    const nodeA = await serve(redis, dir, ['--role', 'relay', '--node-id', 'bench-a']);
    const nodeB = await serve(redis, dir, ['--role', 'relay', '--node-id', 'bench-b']);
    const alloc1 = await serve(redis, dir, ['--role', 'allocator']);
    const alloc2 = await serve(redis, dir, ['--role', 'allocator']);
    const single = await serve(undefined, dir, ['--role', 'all']);
    started.push(nodeA, nodeB, alloc1, alloc2, single);

    const one: number[] = [];
    const two: number[] = [];
    await allocationsPerSecond([alloc1.api], 1000); // warm-up
    for (let r = 0; r < 3; r++) {
      one.push(await allocationsPerSecond([alloc1.api], 3000));
      two.push(await allocationsPerSecond([alloc1.api, alloc2.api], 3000));
    }
    const rows: BenchRow[] = [
      {
        name: 'allocations/s: two allocators (subject) vs one (baseline), Redis, 32 in flight',
        subject: median(two),
        baseline: median(one),
        unit: 'alloc/s',
        ratio: median(two) / median(one),
      },
    ];

    // Relay pps: a pair on a relay node with Redis (through the fleet) and one on --role all.
    const fleetPair = await pair(alloc1.api);
    const singlePair = await pair(single.api);
    clients.push(fleetPair.host, fleetPair.client, singlePair.host, singlePair.client);
    const fleetPort = fleetPair.host.data.port;
    const fleetNode = fleetPort === nodeB.udpPort ? nodeB : nodeA;
    for (const rate of [5000, 20_000]) {
      const withRedis: { pps: number; cpuMicrosPerPacket: number; loss: number }[] = [];
      const without: { pps: number; cpuMicrosPerPacket: number; loss: number }[] = [];
      for (let r = 0; r < 3; r++) {
        without.push(await relayRound(singlePair, single.child.pid!, rate, 2000));
        withRedis.push(await relayRound(fleetPair, fleetNode.child.pid!, rate, 2000));
      }
      const pick = (xs: typeof without, k: 'pps' | 'cpuMicrosPerPacket' | 'loss') =>
        median(xs.map((x) => x[k]));
      rows.push({
        name: `relay pps at ${rate / 1000}k pps offered: node with Redis (subject) vs --role all (baseline), js data plane`,
        subject: pick(withRedis, 'pps'),
        baseline: pick(without, 'pps'),
        unit: 'pps',
        ratio: pick(withRedis, 'pps') / pick(without, 'pps'),
        extra: {
          cpuMicrosPerPacketWithRedis: Number(pick(withRedis, 'cpuMicrosPerPacket').toFixed(2)),
          cpuMicrosPerPacketWithout: Number(pick(without, 'cpuMicrosPerPacket').toFixed(2)),
          lossWithRedis: Number(pick(withRedis, 'loss').toFixed(4)),
          lossWithout: Number(pick(without, 'loss').toFixed(4)),
        },
      });
    }
    return {
      suite: 'unity-relay-fleet',
      rows,
      notes: [
        'Allocators, relay nodes and redis-server are separate processes started from the CLI on this machine; the load generator runs here too, so two allocators on a 2-core machine share the cores with everything else.',
        'Relay rows: medians of 3 interleaved 2 s rounds; cpuMicrosPerPacket = user+system CPU of the relay process per packet received by the host.',
      ],
    };
  } finally {
    await Promise.all(clients.map((c) => c.close().catch(() => {})));
    await Promise.all(started.map(stop));
    await redis.dispose();
    rmSync(dir, { recursive: true, force: true });
  }
}

export const suite: BenchSuite = {
  name: 'unity-relay-fleet',
  description:
    'Unity Relay on Redis: allocations/s through one and two allocators; relay pps with and without Redis',
  run,
};
