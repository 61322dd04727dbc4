/**
 * `gamewire serve unity-relay --workers N --redis URL`: one machine, many cores. Starts one
 * allocator and N relay nodes as child processes of the same command (`gamewire serve
 * unity-relay --role …`), each on its own ports, and stops them all with the parent.
 *
 * - Ports: the allocator takes the API port; relay i (from 0) takes each enabled transport port
 *   plus i × the span of the transport ports (defaults 37000–37003: relay 0 on 37000–37003, relay 1
 *   on 37004–37007, …). Port 0 stays 0 (a free port each).
 * - Secrets (the Redis URL, the relay secret, the API key) reach the children through their
 *   environment variables, never their command lines (which `ps` shows).
 * - Output: every line of a child is prefixed with its name (`[allocator]`, `[relay-1]`).
 * - A child that dies is logged (error) and NOT restarted: its node record lapses within its TTL,
 *   so allocators stop placing on it, and whoever supervises the parent (systemd, Kubernetes)
 *   decides what to do; restarting silently would hide a crash loop.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { envName, flagName } from '../../core/config.js';
import { ConfigError } from '../../core/errors.js';
import type { Logger } from '../../core/logger.js';
import type { ProtocolMetrics } from '../../core/metrics.js';
import type { Endpoint, RunningServer, ServeOption } from '../../core/server.js';

export interface WorkersOptions {
  /** Relay processes to start. */
  count: number;
  /** The command that runs `gamewire` (node and the CLI script). */
  command: readonly string[];
  /** The resolved `unity-relay` options of the parent (forwarded to the children). */
  options: Record<string, unknown>;
  /**
   * The parent's ports: the relay's and the API's, and each transport's (undefined: off, 0: a
   * free one), as resolved from `--port` and the transport flags.
   */
  ports: WorkerBasePorts;
  /** The option declarations, to turn values back into flags and environment variables. */
  definitions: readonly ServeOption[];
  log: Logger;
  metrics: ProtocolMetrics;
  dataDir: string;
  /** How long a child may take to start. Default 60 s. */
  startTimeoutMs?: number;
  /** How long a child may take to stop before it is killed. Default 10 s. */
  stopTimeoutMs?: number;
}

/** What a child reports over IPC once it serves (sent by `gamewire serve`). */
export interface WorkerReadyMessage {
  type: 'gamewire:ready';
  endpoints: Endpoint[];
}

/** Options the supervisor sets itself for each child (never forwarded as given). */
const OWN = new Set([
  'role',
  'workers',
  'host',
  'port',
  'apiPort',
  'apiHost',
  'dtlsPort',
  'wsPort',
  'wssPort',
  'nodeId',
]);

interface Worker {
  name: string;
  child: ChildProcess;
  exited: Promise<void>;
  stopping: boolean;
}

/** A relay's ports: its own, and each transport's (undefined: off; 0: a free one). */
export interface RelayPorts {
  port: number;
  dtlsPort: number | undefined;
  wsPort: number | undefined;
  wssPort: number | undefined;
}

export interface WorkerBasePorts extends RelayPorts {
  apiPort: number;
}

/** The ports of relay `index`: each fixed port shifted by `index` × the span of the fixed ones. */
export function workerPorts(base: RelayPorts, index: number): RelayPorts {
  const fixed = [base.port, base.dtlsPort, base.wsPort, base.wssPort].filter(
    (p): p is number => p !== undefined && p !== 0,
  );
  const span = fixed.length === 0 ? 1 : Math.max(...fixed) - Math.min(...fixed) + 1;
  const shift = (p: number | undefined) => (p === undefined || p === 0 ? p : p + index * span);
  return {
    port: shift(base.port)!,
    dtlsPort: shift(base.dtlsPort),
    wsPort: shift(base.wsPort),
    wssPort: shift(base.wssPort),
  };
}

/** A transport's flag for a child: 0 turns it off on the command line; a free port is its default there. */
function transportFlag(flag: string, port: number | undefined): string[] {
  if (port === undefined) return [flag, '0'];
  // Only derived from `--port 0`: the child derives a free one from its own `--port 0`.
  if (port === 0) return [];
  return [flag, String(port)];
}

export async function startWorkers(o: WorkersOptions): Promise<RunningServer> {
  const opts = o.options;
  const base = o.ports;
  const apiPort = base.apiPort;
  const last = workerPorts(base, o.count - 1);
  const fixed = (p: RelayPorts) =>
    [p.port, p.dtlsPort, p.wsPort, p.wssPort].filter((x): x is number => x !== undefined && x !== 0);
  const lowest = Math.min(...fixed(base));
  const highest = Math.max(...fixed(last));
  if (apiPort !== 0 && base.port !== 0 && apiPort >= lowest && apiPort <= highest)
    throw new ConfigError(
      `--workers ${o.count}: the relays use ports ${lowest}-${highest}, which include --api-port ${apiPort}; move one of them`,
      'unity-relay.workers',
    );

  // Flags and environment every child shares.
  const shared: string[] = ['--data-dir', o.dataDir, '--log-level', String(o.log.level ?? 'info')];
  const env: NodeJS.ProcessEnv = { ...process.env };
  // Each child serves its own admin endpoint on a free port (printed with its prefix): the
  // parent's port is the parent's.
  env.GAMEWIRE_ADMIN_PORT = '0';
  if (typeof opts.host === 'string') shared.push('--host', opts.host);
  for (const d of o.definitions) {
    if (OWN.has(d.key)) continue;
    const v = opts[d.key];
    if (v === undefined || v === d.default) continue;
    const variable = envName('unity-relay', d);
    if (variable !== undefined) {
      env[variable] = Array.isArray(v) ? v.join(',') : String(v);
      continue;
    }
    if (d.type === 'bool') {
      if (v === true) shared.push(flagName(d));
      continue;
    }
    shared.push(flagName(d), Array.isArray(v) ? v.join(',') : String(v));
  }

  const workers: Worker[] = [];
  const endpoints: Endpoint[] = [];
  const launch = (name: string, args: string[]): Promise<void> => {
    const [exe, ...pre] = o.command;
    const child = spawn(exe!, [...pre, 'serve', 'unity-relay', ...args, ...shared], {
      env,
      stdio: ['ignore', 'pipe', 'pipe', 'ipc'],
    });
    const worker: Worker = {
      name,
      child,
      stopping: false,
      // 'close': after its output has been copied out, so its last lines are not lost.
      exited: new Promise((resolve) => child.once('close', () => resolve())),
    };
    workers.push(worker);
    prefixLines(child.stdout!, process.stdout, name);
    prefixLines(child.stderr!, process.stderr, name);
    return new Promise<void>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`worker ${name} did not start within ${o.startTimeoutMs ?? 60_000} ms`)),
        o.startTimeoutMs ?? 60_000,
      );
      child.on('message', (m: unknown) => {
        const msg = m as WorkerReadyMessage;
        if (msg?.type !== 'gamewire:ready') return;
        clearTimeout(timer);
        for (const e of msg.endpoints) endpoints.push({ ...e, description: `[${name}] ${e.description}` });
        resolve();
      });
      child.once('exit', (code, signal) => {
        clearTimeout(timer);
        if (!worker.stopping) {
          o.metrics.count('worker_exits');
          o.log.error(
            { worker: name, code, signal },
            `worker ${name} exited (${signal ?? `code ${code}`}); it is not restarted`,
          );
        }
        reject(new Error(`worker ${name} exited during start-up (${signal ?? `code ${code}`})`));
      });
    }).catch((err: Error) => {
      throw new ConfigError(`--workers: ${err.message}`, 'unity-relay.workers');
    });
  };

  const stopAll = async () => {
    for (const w of workers) {
      w.stopping = true;
      if (w.child.exitCode === null && w.child.signalCode === null) w.child.kill('SIGTERM');
    }
    const deadline = setTimeout(() => {
      for (const w of workers)
        if (w.child.exitCode === null && w.child.signalCode === null) w.child.kill('SIGKILL');
    }, o.stopTimeoutMs ?? 10_000);
    await Promise.all(workers.map((w) => w.exited));
    clearTimeout(deadline);
  };

  try {
    const apiArgs = ['--role', 'allocator', '--api-port', String(apiPort)];
    if (typeof opts.apiHost === 'string') apiArgs.push('--api-host', opts.apiHost);
    const starts = [launch('allocator', apiArgs)];
    for (let i = 0; i < o.count; i++) {
      const p = workerPorts(base, i);
      const args = [
        '--role',
        'relay',
        '--port',
        String(p.port),
        ...transportFlag('--dtls-port', p.dtlsPort),
        ...transportFlag('--ws-port', p.wsPort),
        ...transportFlag('--wss-port', p.wssPort),
      ];
      if (typeof opts.nodeId === 'string') args.push('--node-id', `${opts.nodeId}-${i + 1}`);
      starts.push(launch(`relay-${i + 1}`, args));
    }
    await Promise.all(starts);
  } catch (err) {
    await stopAll();
    throw err;
  }
  o.log.info({ workers: o.count }, `started one allocator and ${o.count} relay processes`);
  let closing: Promise<void> | undefined;
  return {
    endpoints,
    close() {
      closing ??= stopAll();
      return closing;
    },
  };
}

/** Copies `from` to `to` line by line, each line prefixed with `[name] `. */
function prefixLines(from: NodeJS.ReadableStream, to: NodeJS.WritableStream, name: string): void {
  let pending = '';
  from.setEncoding('utf8');
  from.on('data', (chunk: string) => {
    pending += chunk;
    let nl = pending.indexOf('\n');
    while (nl !== -1) {
      to.write(`[${name}] ${pending.slice(0, nl + 1)}`);
      pending = pending.slice(nl + 1);
      nl = pending.indexOf('\n');
    }
  });
  from.on('end', () => {
    if (pending !== '') to.write(`[${name}] ${pending}\n`);
  });
}
