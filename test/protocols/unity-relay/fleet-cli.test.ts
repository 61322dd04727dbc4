/**
 * The "Done when", through the real command: one redis-server, two allocator processes
 * and two relay node processes (`gamewire serve unity-relay --role …`), then `--workers 2`.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it, type TestContext } from 'vitest';
import { RedisNodeRegistry } from '../../../src/core/node-registry.js';
import { connectRedis } from '../../../src/core/redis.js';
import { readIssued, type UnityRelayClient } from '../../../src/protocols/unity-relay/index.js';
import { BIN, ROOT } from '../../helpers/cli.js';
import { type RedisServer, startRedis } from '../../helpers/redis.js';
import { elapse } from '../../helpers/wait.js';
import { chat, hostAndJoin, SECRET, until } from './fleet-helpers.js';

interface Served {
  child: ChildProcess;
  stdout: string;
  stderr: string;
  /** `transport host:port` → port, from the lines `gamewire serve` prints. */
  ports: Map<string, number>;
}

/**
 * One test's fleet: its own redis-server, data directory (each relay writes its wss certificate
 * there) and secret file, its processes and clients, all stopped when the test ends. The tests
 * run concurrently.
 */
interface Fleet {
  redis: RedisServer;
  dir: string;
  secretFile: string;
  processes: Served[];
  clients: UnityRelayClient[];
}

async function startFleet(ctx: TestContext): Promise<Fleet | undefined> {
  const redis = await startRedis();
  if (redis === undefined) return undefined;
  const dir = mkdtempSync(path.join(tmpdir(), 'gamewire-fleet-'));
  const secretFile = path.join(dir, 'relay-secret');
  writeFileSync(secretFile, `${SECRET}\n`, { mode: 0o600 });
  const f: Fleet = { redis, dir, secretFile, processes: [], clients: [] };
  ctx.onTestFinished(async () => {
    await Promise.all(f.clients.splice(0).map((c) => c.close()));
    await Promise.all(f.processes.splice(0).map((p) => stop(p)));
    await redis.dispose();
    rmSync(dir, { recursive: true, force: true });
  });
  return f;
}

/** Starts `gamewire serve unity-relay …` and resolves once it printed `lines` endpoint lines. */
function serve(f: Fleet, args: string[], lines: number): Promise<Served> {
  const child = spawn(
    process.execPath,
    [
      BIN,
      'serve',
      'unity-relay',
      '--host',
      '127.0.0.1',
      '--data-dir',
      f.dir,
      '--log-level',
      'warn',
      '--redis',
      f.redis.url,
      '--relay-secret-file',
      f.secretFile,
      ...args,
    ],
    { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, GAMEWIRE_ADMIN_PORT: '0' } },
  );
  const served: Served = { child, stdout: '', stderr: '', ports: new Map() };
  f.processes.push(served);
  return new Promise((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`serve ${args.join(' ')} did not start: ${served.stdout} ${served.stderr}`)),
      60_000,
    );
    child.stdout!.on('data', (d: Buffer) => {
      served.stdout += d.toString();
      for (const m of served.stdout.matchAll(/gamewire: unity-relay (\w+) [\d.]+:(\d+) (\S*)/g))
        served.ports.set(`${m[1]} ${m[3]}`, Number(m[2]));
      const found = served.stdout.match(/gamewire: unity-relay /g)?.length ?? 0;
      if (found >= lines) {
        clearTimeout(timer);
        resolve(served);
      }
    });
    child.stderr!.on('data', (d: Buffer) => {
      served.stderr += d.toString();
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`serve ${args.join(' ')} exited with ${code}: ${served.stdout} ${served.stderr}`));
    });
  });
}

async function stop(p: Served): Promise<number | null> {
  if (p.child.exitCode !== null || p.child.signalCode !== null) return p.child.exitCode;
  const exited = new Promise<number | null>((r) => p.child.once('exit', (code) => r(code)));
  p.child.kill('SIGTERM');
  return exited;
}

/**
 * Waits until the fleet's Redis no longer lists `nodeId` as a live relay node (what an allocator
 * places on: its record expired, `ttlMs` after its last heartbeat at most), and checks that this
 * came at most `withinMs` after `killedAt`.
 */
async function expectGone(f: Fleet, nodeId: string, killedAt: number, withinMs: number): Promise<void> {
  const conn = await connectRedis(f.redis.url);
  try {
    const registry = new RedisNodeRegistry(conn);
    await until(`${nodeId} gone from the live relay nodes`, async () =>
      (await registry.live('unity-relay')).some((n) => n.id === nodeId) ? undefined : true,
    );
  } finally {
    await conn.close();
  }
  expect(Date.now() - killedAt).toBeLessThanOrEqual(withinMs);
}

const relayArgs = (id: string, ttl: string) => [
  '--role',
  'relay',
  '--node-id',
  id,
  '--port',
  '0',
  '--dtls-port',
  '0',
  '--ws-port',
  '0',
  '--wss-port',
  '0',
  '--heartbeat-ttl-ms',
  ttl,
];
const allocatorArgs = [
  '--role',
  'allocator',
  '--api-port',
  '0',
  '--unity-api-requests-per-minute',
  '0',
  '--unity-allocations-per-minute-per-address',
  '0',
];

const udpPort = (p: Served) => p.ports.get('udp Unity')!;
const apiUrl = (p: Served) => `http://127.0.0.1:${p.ports.get('http allocation')!}`;
const nodeOf = (a: { connectionData: string }) =>
  readIssued(Buffer.from(a.connectionData, 'base64'), 0).nodeId;

async function allocate(api: string): Promise<{ status: number; json: any }> {
  const res = await fetch(`${api}/v1/allocate`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ maxConnections: 2 }),
  });
  return { status: res.status, json: await res.json() };
}

describe('gamewire serve unity-relay as a fleet (spawned processes, real redis-server)', () => {
  it.concurrent('two allocators and two relay nodes: spread, shared join codes, relaying on both, kill -9, Redis outage', async (ctx) => {
    const f = await startFleet(ctx);
    if (f === undefined) return ctx.skip();
    const { redis, clients } = f;
    const ttl = '3000';
    const [n1, n2, a1, a2] = await Promise.all([
      serve(f, relayArgs('node-a', ttl), 1),
      serve(f, relayArgs('node-b', ttl), 1),
      serve(f, [...allocatorArgs, '--heartbeat-ttl-ms', ttl], 1),
      serve(f, [...allocatorArgs, '--heartbeat-ttl-ms', ttl], 1),
    ]);
    const portOf = new Map([
      ['node-a', udpPort(n1)],
      ['node-b', udpPort(n2)],
    ]);

    // 20 allocations from one allocator land on both nodes, each naming its node's endpoint.
    const count = new Map<string, number>();
    for (let i = 0; i < 20; i++) {
      const r = await allocate(apiUrl(a1));
      expect(r.status).toBe(201);
      const alloc = r.json.data.allocation;
      const id = nodeOf(alloc);
      expect(alloc.relayServer.port).toBe(portOf.get(id));
      count.set(id, (count.get(id) ?? 0) + 1);
    }
    expect(count.get('node-a')).toBeGreaterThanOrEqual(5);
    expect(count.get('node-b')).toBeGreaterThanOrEqual(5);

    // A join code made through one allocator joins through the other, onto the host's node;
    // BIND, CONNECT and RELAY work on both nodes.
    const pairs = new Map<number, Awaited<ReturnType<typeof hostAndJoin>>>();
    for (let i = 0; i < 10 && pairs.size < 2; i++) {
      const pair = await hostAndJoin(apiUrl(a1), apiUrl(a2), clients);
      expect(pair.joinAllocation.relayServer).toEqual(pair.hostAllocation.relayServer);
      await chat(pair.host, pair.client);
      pairs.set(pair.hostAllocation.relayServer.port, pair);
    }
    expect([...pairs.keys()].sort()).toEqual([udpPort(n1), udpPort(n2)].sort());

    // kill -9 node-b: once its TTL has passed, nothing new goes to it; node-a keeps relaying.
    const killedAt = Date.now();
    n2.child.kill('SIGKILL');
    // Its record lapses 3 s after its last heartbeat: within 5 s of the kill.
    await expectGone(f, 'node-b', killedAt, 5000);
    for (let i = 0; i < 10; i++) {
      const r = await allocate(apiUrl(i % 2 === 0 ? a1 : a2));
      expect(r.status).toBe(201);
      expect(nodeOf(r.json.data.allocation)).toBe('node-a');
    }
    const onA = pairs.get(udpPort(n1))!;
    await chat(onA.host, onA.client);

    // Redis stops: bound peers keep relaying, both allocators answer 503, then 200 again by themselves.
    await redis.stop();
    for (const a of [a1, a2]) {
      const r = await allocate(apiUrl(a));
      expect(r.status).toBe(503);
      expect(r.json.detail).toMatch(/Redis/);
    }
    await chat(onA.host, onA.client);
    // Three of node-a's heartbeats (every second) fail meanwhile: logged once, below.
    await elapse(3000, 'relaying must go on through a Redis outage of some seconds');
    await chat(onA.host, onA.client);
    await redis.start();
    for (const a of [a1, a2]) {
      const r = await until('the allocator to recover', async () => {
        const x = await allocate(apiUrl(a));
        return x.status === 201 ? x : undefined;
      });
      expect(nodeOf(r.json.data.allocation)).toBe('node-a');
    }
    await chat(onA.host, onA.client);
    // The outage was logged once (warn) by each survivor, not once per heartbeat.
    expect(
      n1.stderr.match(/Redis is unavailable/g)?.length ?? n1.stdout.match(/Redis is unavailable/g)?.length,
    ).toBe(1);
    for (const p of [n1, a1, a2]) expect(await stop(p)).toBe(0);
  }, 120_000);

  it.concurrent('at the default TTL, a killed node gets no new allocation 15 s later', async (ctx) => {
    const f = await startFleet(ctx);
    if (f === undefined) return ctx.skip();
    const [, n2, a] = await Promise.all([
      serve(f, relayArgs('node-a', '10000'), 1),
      serve(f, relayArgs('node-b', '10000'), 1),
      serve(f, allocatorArgs, 1),
    ]);
    const seen = new Set<string>();
    for (let i = 0; i < 10; i++) seen.add(nodeOf((await allocate(apiUrl(a))).json.data.allocation));
    expect(seen).toEqual(new Set(['node-a', 'node-b']));
    const killedAt = Date.now();
    n2.child.kill('SIGKILL');
    // Its record lapses 10 s (the default TTL) after its last heartbeat: within 15 s of the kill.
    await expectGone(f, 'node-b', killedAt, 15_000);
    for (let i = 0; i < 10; i++)
      expect(nodeOf((await allocate(apiUrl(a))).json.data.allocation)).toBe('node-a');
  }, 90_000);

  it.concurrent('--workers 2 serves allocations on both workers, prefixes their output, and stops them all on SIGTERM', async (ctx) => {
    const f = await startFleet(ctx);
    if (f === undefined) return ctx.skip();
    // One allocator line and one UDP line per relay, as the parent prints them.
    const parent = await serve(
      f,
      [
        '--workers',
        '2',
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
        '--unity-allocations-per-minute-per-address',
        '0',
      ],
      6,
    );
    expect(parent.stdout).toMatch(/\[allocator\] gamewire: unity-relay http/);
    expect(parent.stdout).toMatch(/\[relay-1\] gamewire: unity-relay udp/);
    expect(parent.stdout).toMatch(/\[relay-2\] gamewire: unity-relay udp/);
    const api = parent.stdout.match(/^gamewire: unity-relay http [\d.]+:(\d+) \[allocator\]/m);
    expect(api).not.toBeNull();
    const apiBase = `http://127.0.0.1:${api![1]}`;
    const relayPorts = [
      ...parent.stdout.matchAll(/^gamewire: unity-relay udp [\d.]+:(\d+) \[relay-\d\]/gm),
    ].map((m) => Number(m[1]));
    expect(relayPorts).toHaveLength(2);
    const used = new Set<number>();
    for (let i = 0; i < 10; i++) {
      const r = await allocate(apiBase);
      expect(r.status).toBe(201);
      used.add(r.json.data.allocation.relayServer.port);
    }
    expect([...used].sort()).toEqual([...relayPorts].sort());
    const pair = await hostAndJoin(apiBase, apiBase, f.clients);
    await chat(pair.host, pair.client);
    expect(await stop(parent)).toBe(0);
    // Every child is gone with it: the API no longer answers.
    await expect(fetch(`${apiBase}/v1/regions`)).rejects.toThrow();
  }, 120_000);

  it.concurrent('--workers children stop when their parent is killed with kill -9', async (ctx) => {
    const f = await startFleet(ctx);
    if (f === undefined) return ctx.skip();
    const parent = await serve(
      f,
      [
        '--workers',
        '1',
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
      ],
      4,
    );
    const api = parent.stdout.match(/^gamewire: unity-relay http [\d.]+:(\d+) \[allocator\]/m);
    expect(api).not.toBeNull();
    const regions = `http://127.0.0.1:${api![1]}/v1/regions`;
    expect((await fetch(regions)).status).toBe(200);
    parent.child.kill('SIGKILL');
    await until('the orphaned allocator to stop', async () =>
      (await fetch(regions).then(
        () => false,
        () => true,
      ))
        ? true
        : undefined,
    );
  }, 90_000);
});
