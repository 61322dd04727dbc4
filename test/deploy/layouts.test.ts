/**
 * The production layouts of docs/deploy.md ("Several `gamewire serve` processes on one machine"),
 * run as written: each `<!-- deploy-layout: … -->` block's commands, with loopback in place of
 * the documentation addresses, a throwaway redis-server and secret file, free ports in place of
 * the ones shown (`--port`, `--api-port`), `--host 127.0.0.1` where a command binds every
 * address, and the real default admin port (GAMEWIRE_ADMIN_PORT unset). The layouts run at once,
 * each on ports of its own (the first process up takes 9100, the others move, as on a machine
 * that runs several).
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import dgram from 'node:dgram';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it, type TestContext } from 'vitest';
import { probeServerBuild } from '../../src/protocols/js5/client.js';
import { NoxRelayClient } from '../../src/protocols/nox-relay/client.js';
import { RelayApiClient, relayServerData, UnityRelayClient } from '../../src/protocols/unity-relay/index.js';
import { BIN, ROOT } from '../helpers/cli.js';
import { freePort, type RedisServer, startRedis } from '../helpers/redis.js';
import { chat, fast } from '../protocols/unity-relay/fleet-helpers.js';

const doc = readFileSync(path.join(ROOT, 'docs/deploy.md'), 'utf8');
const cwd = mkdtempSync(path.join(tmpdir(), 'gamewire-layouts-'));
let redis: RedisServer | undefined;

beforeAll(async () => {
  redis = await startRedis();
});

/** The processes and clients of one case, stopped when it ends (the cases run at once). */
interface Owned {
  children: ChildProcess[];
  clients: UnityRelayClient[];
}

function owned(onTestFinished: TestContext['onTestFinished']): Owned {
  const o: Owned = { children: [], clients: [] };
  onTestFinished(async () => {
    await Promise.all(o.clients.map((c) => c.close()));
    await Promise.all(
      o.children.map(
        (c) =>
          new Promise<void>((resolve) => {
            if (c.exitCode !== null || c.signalCode !== null) return resolve();
            const timer = setTimeout(() => c.kill('SIGKILL'), 15_000);
            c.once('exit', () => {
              clearTimeout(timer);
              resolve();
            });
            c.kill('SIGTERM');
          }),
      ),
    );
  });
  return o;
}

afterAll(async () => {
  await redis?.dispose();
  rmSync(cwd, { recursive: true, force: true });
});

/** The shell lines of the block after `<!-- deploy-layout: name -->`. */
function layout(name: string): string[] {
  const m = new RegExp(`<!-- deploy-layout: ${name} -->\\n\`\`\`sh\\n([\\s\\S]*?)\`\`\``).exec(doc);
  if (m === null) throw new Error(`docs/deploy.md has no layout "${name}"`);
  return m[1]!.trim().split('\n');
}

function portFree(port: number, kind: 'tcp' | 'udp'): Promise<boolean> {
  return new Promise((resolve) => {
    if (kind === 'tcp') {
      const s = net.createServer();
      s.once('error', () => resolve(false));
      s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)));
    } else {
      const s = dgram.createSocket('udp4');
      s.once('error', () => resolve(false));
      s.bind(port, '127.0.0.1', () => s.close(() => resolve(true)));
    }
  });
}

/** Every relay base a layout took: the layouts run at once, each on ports of its own. */
const taken = new Set<number>();

/**
 * A port P with P..P+3 free (TCP and UDP) and P+80 free (TCP): a relay's derived ports. Below the
 * ephemeral range (32768 and up), so neither an outgoing connection nor another layout's free
 * port takes one meanwhile.
 */
async function relayBase(): Promise<number> {
  for (let attempt = 0; attempt < 200; attempt++) {
    const base = 20_000 + Math.floor(Math.random() * 12_000);
    if ([...taken].some((t) => Math.abs(t - base) < 100)) continue;
    taken.add(base);
    let ok = await portFree(base + 80, 'tcp');
    for (const p of [base, base + 1, base + 2, base + 3])
      ok = ok && (await portFree(p, 'tcp')) && (await portFree(p, 'udp'));
    if (ok) return base;
  }
  throw new Error('no free range of relay ports');
}

interface Ran {
  /** The port each documented port became. */
  ports: Map<number, number>;
  /** Each `gamewire serve` process's output once it printed its dashboard line. */
  served: { args: string[]; stdout: string; stderr: string; admin: number }[];
}

/**
 * Runs a layout's lines: `export K=V` sets the environment, `openssl …` runs in a shell,
 * `gamewire serve … &` starts a process (all at once, as a shell would). Resolves once every
 * process printed its dashboard line.
 */
let secrets = 0;

async function run(lines: string[], own: Owned): Promise<Ran> {
  const secretFile = path.join(cwd, `relay-secret-${++secrets}`);
  const sub = (text: string) =>
    text
      .replaceAll('203.0.113.10', '127.0.0.1')
      .replaceAll('redis://10.0.0.10:6379', redis?.url ?? 'redis://127.0.0.1:1')
      .replaceAll('/etc/gamewire/relay-secret', secretFile);
  const env: NodeJS.ProcessEnv = { ...process.env, NO_COLOR: '1' };
  // The real default admin port: as a user's shell has it.
  delete env.GAMEWIRE_ADMIN_PORT;
  const ports = new Map<number, number>();
  const starts: string[][] = [];
  for (const raw of lines) {
    const line = sub(raw).trim();
    if (line.startsWith('export ')) {
      const [k, ...v] = line.slice('export '.length).split('=');
      env[k!] = v.join('=');
    } else if (line.startsWith('openssl ')) {
      const r = spawnSync('sh', ['-c', line], { cwd, env, encoding: 'utf8' });
      expect(r.status, r.stderr).toBe(0);
    } else if (line.startsWith('gamewire serve ')) {
      const args = line.replace(/\s*&$/, '').split(/\s+/).slice(1);
      const relay = args[1] === 'unity-relay' && !args.includes('allocator');
      for (let i = 0; i < args.length - 1; i++) {
        if (args[i] !== '--port' && args[i] !== '--api-port') continue;
        const shown = Number(args[i + 1]);
        const real = relay && args[i] === '--port' ? await relayBase() : await freePort();
        ports.set(shown, real);
        args[i + 1] = String(real);
      }
      if (!args.includes('--host')) args.push('--host', '127.0.0.1');
      starts.push(args);
    } else throw new Error(`a layout line this test cannot run: ${raw}`);
  }
  const served = await Promise.all(
    starts.map(
      (args) =>
        new Promise<Ran['served'][number]>((resolve, reject) => {
          const child = spawn(process.execPath, [BIN, ...args], {
            cwd,
            env,
            stdio: ['ignore', 'pipe', 'pipe'],
          });
          own.children.push(child);
          let stdout = '';
          let stderr = '';
          const timer = setTimeout(
            () => reject(new Error(`${args.join(' ')} did not start: ${stdout}${stderr}`)),
            60_000,
          );
          child.stderr!.on('data', (d: Buffer) => {
            stderr += d.toString();
          });
          child.stdout!.on('data', (d: Buffer) => {
            stdout += d.toString();
            const m = /^gamewire: dashboard http:\/\/127\.0\.0\.1:(\d+)\/.*\n/m.exec(stdout);
            if (m !== null) {
              clearTimeout(timer);
              resolve({ args, stdout, stderr, admin: Number(m[1]) });
            }
          });
          child.once('exit', (code) => {
            clearTimeout(timer);
            reject(new Error(`${args.join(' ')} exited ${code}: ${stdout}${stderr}`));
          });
        }),
    ),
  );
  // Every dashboard is its own, and answers.
  expect(new Set(served.map((s) => s.admin)).size).toBe(served.length);
  for (const s of served) expect((await fetch(`http://127.0.0.1:${s.admin}/health`)).status).toBe(200);
  return { ports, served };
}

async function hostAndJoin(api: string, own: Owned): Promise<{ allocationPorts: number[] }> {
  const apiClient = new RelayApiClient(api);
  const { client: host, joinCode, allocation } = await UnityRelayClient.host(apiClient, 2, fast);
  own.clients.push(host);
  const joiner = new UnityRelayClient(relayServerData(await apiClient.join(joinCode)), fast);
  own.clients.push(joiner);
  await joiner.bind();
  await joiner.connect();
  await chat(host, joiner);
  expect(allocation.relayServer.ipV4).toBe('127.0.0.1');
  return { allocationPorts: allocation.serverEndpoints.map((e) => e.port) };
}

describe.concurrent('docs/deploy.md: several gamewire serve processes on one machine', () => {
  it('two services: js5 and nox-relay, each serving, each with its own dashboard', async ({
    onTestFinished,
  }) => {
    const { ports } = await run(layout('two-services'), owned(onTestFinished));
    expect(
      await probeServerBuild({ host: '127.0.0.1', port: ports.get(43594)!, timeoutMs: 10_000 }),
    ).toBeDefined();
    const nox = new NoxRelayClient({ host: '127.0.0.1', port: ports.get(23032)! });
    await nox.connect();
    try {
      expect((await nox.handshake()).type).toBe('Handshake');
    } finally {
      await nox.close();
    }
  }, 120_000);

  it('two Unity relays: ports derived from each --port, both relay', async ({ onTestFinished }) => {
    const own = owned(onTestFinished);
    const { ports } = await run(layout('two-relays'), own);
    await Promise.all(
      [37000, 38000].map(async (shown) => {
        const base = ports.get(shown)!;
        const { allocationPorts } = await hostAndJoin(`http://127.0.0.1:${base + 80}`, own);
        expect(allocationPorts).toEqual([base, base + 1, base + 2, base + 3]);
      }),
    );
  }, 180_000);

  it('an allocator next to a relay node on Redis: allocations land on the node and relay', async (ctx) => {
    if (redis === undefined) return ctx.skip();
    const own = owned(ctx.onTestFinished);
    const { ports } = await run(layout('allocator-and-relay'), own);
    const base = ports.get(37000)!;
    const { allocationPorts } = await hostAndJoin(`http://127.0.0.1:${ports.get(37080)!}`, own);
    expect(allocationPorts).toEqual([base, base + 1, base + 2, base + 3]);
  }, 180_000);
});
