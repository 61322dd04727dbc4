/**
 * Spawns `gamewire serve …` (the compiled CLI, as users run it) in a throwaway data folder and
 * waits for its IPC ready message, which lists every endpoint with its real port.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Endpoint } from '../../src/core/server.js';
import { BIN, cliEnv, ROOT } from './cli.js';
import { freePort } from './redis.js';

export interface Served {
  child: ChildProcess;
  endpoints: Endpoint[];
  dataDir: string;
  /** The first endpoint of `transport` whose description matches `what` (any, when omitted). */
  port(transport: Endpoint['transport'], what?: RegExp): number;
  /** What the server wrote to stderr so far (its logs). */
  stderr(): string;
  /** The admin endpoint's port, from its start-up line (undefined with --no-admin). */
  adminPort(): number | undefined;
  /** SIGTERM, then SIGKILL after 5 s; removes the data folder. */
  stop(): Promise<void>;
}

export async function startServe(
  args: readonly string[],
  options: { timeoutMs?: number; env?: NodeJS.ProcessEnv } = {},
): Promise<Served> {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'gamewire-serve-'));
  const child = spawn(process.execPath, [BIN, 'serve', ...args, '--data-dir', dataDir], {
    cwd: ROOT,
    env: cliEnv(options.env),
    stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
  });
  let err = '';
  child.stderr!.on('data', (d: Buffer) => {
    err += d.toString();
  });
  let out = '';
  child.stdout!.on('data', (d: Buffer) => {
    out += d.toString();
  });
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      const gone = new Promise<void>((resolve) => child.once('exit', () => resolve()));
      child.kill('SIGTERM');
      const hard = setTimeout(() => child.kill('SIGKILL'), 5000);
      await gone;
      clearTimeout(hard);
    }
    rmSync(dataDir, { recursive: true, force: true });
  };
  try {
    const endpoints = await new Promise<Endpoint[]>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`serve ${args.join(' ')} not ready: ${err}`)),
        options.timeoutMs ?? 60_000,
      );
      child.on('message', (m: { type?: string; endpoints?: Endpoint[] }) => {
        if (m.type === 'gamewire:ready') {
          clearTimeout(timer);
          resolve(m.endpoints ?? []);
        }
      });
      child.once('exit', (code) => {
        clearTimeout(timer);
        reject(new Error(`serve ${args.join(' ')} exited ${code}: ${err}`));
      });
    });
    return {
      child,
      endpoints,
      dataDir,
      port(transport, what) {
        const e = endpoints.find(
          (x) => x.transport === transport && (what === undefined || what.test(x.description)),
        );
        if (e === undefined)
          throw new Error(`no ${transport} endpoint ${what ?? ''} in ${JSON.stringify(endpoints)}`);
        return e.port;
      },
      stderr: () => err,
      adminPort: () => {
        const m = /gamewire: dashboard http:\/\/[^\s/]*:(\d+)\//.exec(out);
        return m === null ? undefined : Number(m[1]);
      },
      stop,
    };
  } catch (e) {
    await stop();
    throw e;
  }
}

/** The ports of a spawned unity-relay, one per transport, and its allocation API's. */
export interface RelayPorts {
  udp: number;
  dtls: number;
  ws: number;
  wss: number;
  api: number;
}

/**
 * `gamewire serve unity-relay` on 127.0.0.1 with each transport on a free port of its own (chosen
 * here: with port 0 the DTLS and WebSocket endpoints would follow the UDP port's number), no admin
 * endpoint, and `extra` flags. Returns the server, its ports and the allocation API's URL.
 */
export async function startUnityRelayServe(
  extra: readonly string[] = [],
): Promise<{ relay: Served; ports: RelayPorts; api: string }> {
  const dtls = await freePort();
  const ws = await freePort();
  const wss = await freePort();
  const relay = await startServe([
    'unity-relay',
    '--port',
    '0',
    '--api-port',
    '0',
    '--host',
    '127.0.0.1',
    '--dtls-port',
    String(dtls),
    '--ws-port',
    String(ws),
    '--wss-port',
    String(wss),
    '--no-admin',
    ...extra,
  ]);
  const ports = { udp: relay.port('udp', /Unity Relay \(/), dtls, ws, wss, api: relay.port('http') };
  return { relay, ports, api: `http://127.0.0.1:${ports.api}` };
}
