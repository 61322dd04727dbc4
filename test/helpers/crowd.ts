/**
 * For the crowd-versus-attackers tests: spawns the real `gamewire serve` (the compiled bin) with
 * default limits in a throwaway data folder, reads its endpoints and its admin `/metrics` the way
 * an operator would, and runs the attackers (flood.mjs) in a process of their own.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { BIN, ROOT } from './cli.js';

export interface Endpoint {
  protocol: string;
  transport: string;
  host: string;
  port: number;
  /** The rest of the line (e.g. "Unity Relay over DTLS 1.2 …"). */
  description: string;
}

export interface Served {
  readonly child: ChildProcess;
  readonly dataDir: string;
  readonly endpoints: Endpoint[];
  /** The port of `protocol`'s endpoint over `transport`. */
  port(protocol: string, transport: string): number;
  /** The Prometheus text of the admin endpoint. */
  metrics(): Promise<string>;
  /** The value of one metric series (0 when absent), e.g. `gamewire_dropped_total{protocol="js5",reason="x"}`. */
  metric(name: string, labels?: Record<string, string>): Promise<number>;
  /** Everything the process wrote on stderr so far. */
  stderr(): string;
  /** SIGTERM, then the exit code. */
  stop(): Promise<number | null>;
}

/** `gamewire serve <args…>` on 127.0.0.1, admin on a free port; resolves once every endpoint is listed. */
export async function spawnServe(args: string[], options: { timeoutMs?: number } = {}): Promise<Served> {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'gamewire-crowd-'));
  const child = spawn(
    process.execPath,
    [BIN, 'serve', ...args, '--host', '127.0.0.1', '--data-dir', dataDir, '--log-level', 'warn'],
    {
      cwd: ROOT,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, GAMEWIRE_ADMIN_PORT: '0', NO_COLOR: '1' },
    },
  );
  let out = '';
  let err = '';
  child.stderr!.on('data', (d: Buffer) => {
    err += d.toString();
  });
  const endpoints: Endpoint[] = [];
  let adminPort = 0;
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`serve did not start: ${out} ${err}`));
    }, options.timeoutMs ?? 60_000);
    const onEarlyExit = (code: number | null) => {
      clearTimeout(timer);
      reject(new Error(`serve exited with ${code}: ${err}`));
    };
    child.once('exit', onEarlyExit);
    const onData = (d: Buffer) => {
      out += d.toString();
      // A protocol with a dashboard announces the admin endpoint as the dashboard's URL.
      const admin = /gamewire: (?:admin http |dashboard http:\/\/)[\d.]+:(\d+)/.exec(out);
      if (admin === null) return;
      child.stdout!.off('data', onData);
      child.stdout!.resume();
      adminPort = Number(admin[1]);
      for (const m of out.matchAll(/gamewire: (\S+) (tcp|udp|http|dtls|ws|wss) ([\d.]+):(\d+)(.*)/g)) {
        if (m[1] !== 'admin')
          endpoints.push({
            protocol: m[1]!,
            transport: m[2]!,
            host: m[3]!,
            port: Number(m[4]),
            description: m[5]!.trim(),
          });
      }
      clearTimeout(timer);
      child.off('exit', onEarlyExit);
      resolve();
    };
    child.stdout!.on('data', onData);
  });
  const metrics = async () => (await fetch(`http://127.0.0.1:${adminPort}/metrics`)).text();
  return {
    child,
    dataDir,
    endpoints,
    port(protocol, transport) {
      const e = endpoints.find((x) => x.protocol === protocol && x.transport === transport);
      if (e === undefined)
        throw new Error(`no ${protocol} ${transport} endpoint in ${JSON.stringify(endpoints)}`);
      return e.port;
    },
    metrics,
    async metric(name, labels = {}) {
      const text = await metrics();
      for (const line of text.split('\n')) {
        if (!line.startsWith(`${name}{`) && !line.startsWith(`${name} `)) continue;
        if (Object.entries(labels).every(([k, v]) => line.includes(`${k}="${v}"`)))
          return Number(line.slice(line.lastIndexOf(' ') + 1));
      }
      return 0;
    },
    stderr: () => err,
    stop() {
      return new Promise((resolve) => {
        if (child.exitCode !== null) {
          rmSync(dataDir, { recursive: true, force: true });
          resolve(child.exitCode);
          return;
        }
        const kill = setTimeout(() => child.kill('SIGKILL'), 10_000);
        child.once('exit', (code) => {
          clearTimeout(kill);
          rmSync(dataDir, { recursive: true, force: true });
          resolve(code);
        });
        child.kill('SIGTERM');
      });
    },
  };
}

export interface FloodConfig {
  host?: string;
  udpPort?: number;
  tcpPort?: number;
  httpPort?: number;
  addresses: string[];
  durationMs: number;
  intervalMs: number;
  udpFlood?: string[];
  udpSessions?: {
    rounds: number;
    packets: string[];
    gapMs?: number;
    patch?: { packet: number; offset: number; base: number; modulo: number };
  };
  tcpHold?: string;
  tcpHolds?: { hex: string; perAddress?: number; addresses?: number }[];
  tcpChurn?: string;
  http?: {
    method: string;
    path: string;
    body?: unknown;
    perRound?: number;
    headers?: Record<string, string>;
    /** The next round does not wait for this round's requests (all are awaited at the end). */
    overlap?: boolean;
  };
  /** Half-open DTLS handshakes (past the cookie), `perAddress` per address, `rounds` times. */
  dtlsHalfOpen?: { port: number; perAddress: number; rounds: number; gapMs?: number };
  perAddress?: boolean;
}

export interface FloodResult {
  rounds: number;
  udpSent: number;
  udpReceived: number;
  tcpConnected: number;
  tcpRefused: number;
  tcpClosedEarly: number;
  http: Record<string, number>;
  /** HelloVerifyRequests received and ServerHello flights received (handshakes the server kept). */
  dtlsCookies: number;
  dtlsServerHellos: number;
  /** Attacker addresses that were sent more than 3x the bytes they sent over UDP. */
  addressesOver3x: number;
  worstRatio: number;
  perAddress: Record<string, [out: number, received: number]>;
}

/** 1000 attacker addresses as 127.1.x.y (x 0..3, y 1..250). */
export const attackerAddresses = (n = 1000): string[] =>
  Array.from({ length: n }, (_, i) => `127.1.${Math.floor(i / 250)}.${(i % 250) + 1}`);

/** Runs test/helpers/flood.mjs in its own process; resolves with its report when it is done. */
export function flood(config: FloodConfig): Promise<FloodResult> {
  const child = spawn(process.execPath, [path.join(ROOT, 'test/helpers/flood.mjs'), JSON.stringify(config)], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  child.stdout!.on('data', (d: Buffer) => {
    out += d.toString();
  });
  child.stderr!.on('data', (d: Buffer) => {
    err += d.toString();
  });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => child.kill('SIGKILL'), config.durationMs + 60_000);
    child.once('exit', (code) => {
      clearTimeout(timer);
      if (code !== 0) reject(new Error(`flood exited with ${code}: ${err}`));
      else resolve(JSON.parse(out) as FloodResult);
    });
  });
}
