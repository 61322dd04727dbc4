/**
 * `npm run bench -- dashboard`: what the admin endpoint costs the relay. A real `gamewire serve
 * unity-relay` (spawned, each data plane) forwards RELAYs between UDP pairs at a fixed offered
 * rate, in four runs of the same process kind:
 *
 * - `--no-admin` (the baseline);
 * - admin on, nobody watching;
 * - one client streaming `/api/stream?protocol=unity-relay` (the overview and the state each second);
 * - one client streaming `/api/stream?wire=unity-relay` (the wire view armed).
 *
 * Figure: forwarded datagrams per second of relay CPU (user + system from /proc/<pid>/stat, so the
 * event stream's own cost is in it), and the ratio against the baseline. Goal: within 5 % for
 * the streaming overview.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import dgram from 'node:dgram';
import { readdirSync, readFileSync } from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import {
  createBind,
  encodeMessage,
  RelayApiClient,
  relayServerData,
} from '../src/protocols/unity-relay/index.js';
import {
  type BenchResult,
  type BenchRow,
  type BenchSuite,
  onForwarderCpu,
  PINNED,
  pinSelf,
} from './harness.js';

const here = path.dirname(fileURLToPath(import.meta.url));
/** bin/gamewire.js from dist/bench (npm run bench) or bench/ (tsx). */
const BIN = [path.resolve(here, '../../bin/gamewire.js'), path.resolve(here, '../bin/gamewire.js')].find(
  (p) => {
    try {
      readFileSync(p);
      return true;
    } catch {
      return false;
    }
  },
)!;
const PAIRS = 4;
const RATE = 20_000;
const SECONDS = 6;
const TICKS_PER_SECOND = 100; // USER_HZ of /proc/<pid>/stat on Linux

type Mode = 'off' | 'idle' | 'overview' | 'wire';

interface Served {
  child: ChildProcess;
  udpPort: number;
  apiUrl: string;
  adminPort: number | undefined;
}

function serve(dataplane: 'js' | 'native', admin: boolean): Promise<Served> {
  const [command, args] = onForwarderCpu(process.execPath, [
    BIN,
    'serve',
    'unity-relay',
    '--host',
    '127.0.0.1',
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
    '--dataplane',
    dataplane,
    '--unity-api-requests-per-minute',
    '0',
    '--data-dir',
    os.tmpdir(),
    '--log-level',
    'warn',
    ...(admin ? ['--admin-port', '0'] : ['--no-admin']),
  ]);
  // `taskset -c` execs the command: the child's pid is the relay's.
  const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'inherit'] });
  return new Promise((resolve, reject) => {
    let out = '';
    child.once('exit', (code) => reject(new Error(`serve exited ${code}: ${out}`)));
    child.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      const api = /unity-relay http (\S+):(\d+) /.exec(out);
      const udp = /unity-relay udp \S+:(\d+) /.exec(out);
      const adm = /gamewire: dashboard http:\/\/\S+:(\d+)\//.exec(out);
      if (api !== null && udp !== null && (!admin || adm !== null)) {
        resolve({
          child,
          udpPort: Number(udp[1]),
          apiUrl: `http://${api[1]}:${api[2]}`,
          adminPort: adm === null ? undefined : Number(adm[1]),
        });
      }
    });
  });
}

/**
 * CPU time of every thread of the process (the native plane's worker included), in seconds.
 * From each thread's schedstat (nanoseconds): /proc/<pid>/stat counts 10 ms ticks, and a run
 * that costs the relay under a second of CPU would then move by several per cent on rounding
 * alone. Falls back to the ticks where schedstat is missing.
 */
function cpuSeconds(pid: number): number {
  try {
    let ns = 0;
    for (const tid of readdirSync(`/proc/${pid}/task`))
      ns += Number(readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8').split(' ')[0]);
    if (Number.isFinite(ns) && ns > 0) return ns / 1e9;
  } catch {
    // no schedstat: the ticks below
  }
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / TICKS_PER_SECOND;
}

interface Peer {
  socket: dgram.Socket;
  id: Buffer;
}

async function openSocket(): Promise<dgram.Socket> {
  const s = dgram.createSocket('udp4');
  await new Promise<void>((r) => s.bind(0, '127.0.0.1', () => r()));
  try {
    s.setRecvBufferSize(4 << 20);
    s.setSendBufferSize(4 << 20);
  } catch {
    // capped by the kernel
  }
  return s;
}

function until(socket: dgram.Socket, type: number, resend: () => void): Promise<void> {
  return new Promise((resolve) => {
    const timer = setInterval(resend, 100);
    const on = (m: Buffer) => {
      if (m[3] !== type) return;
      clearInterval(timer);
      socket.off('message', on);
      resolve();
    };
    socket.on('message', on);
    resend();
  });
}

async function pair(s: Served): Promise<[Peer, Peer]> {
  const api = new RelayApiClient(s.apiUrl);
  const host = await api.allocate(2);
  const guest = await api.join(await api.joinCode(host.allocationId));
  const peers: Peer[] = [];
  for (const a of [host, guest]) {
    const data = relayServerData(a);
    const socket = await openSocket();
    const bind = createBind(0, data.connectionData, data.key);
    await until(socket, 1, () => socket.send(bind, s.udpPort, '127.0.0.1'));
    if (a === guest) {
      const req = encodeMessage({
        type: 'CONNECT_REQUEST',
        allocationId: data.allocationId,
        toConnectionDataLength: 255,
        toConnectionData: data.hostConnectionData,
      });
      await until(socket, 6, () => socket.send(req, s.udpPort, '127.0.0.1'));
    }
    peers.push({ socket, id: data.allocationId });
  }
  return [peers[0]!, peers[1]!];
}

/** Opens an event stream and reads it until `stop()`; resolves once the first event arrived. */
function stream(port: number, query: string): Promise<{ events: () => number; stop: () => void }> {
  return new Promise((resolve, reject) => {
    let events = 0;
    const req = http.get({ host: '127.0.0.1', port, path: `/api/stream?${query}` }, (res) => {
      res.on('data', (d: Buffer) => {
        const n = d.toString().split('\nevent: ').length - 1 + (d.toString().startsWith('event: ') ? 1 : 0);
        if (events === 0 && n > 0) resolve({ events: () => events, stop: () => req.destroy() });
        events += n;
      });
    });
    req.on('error', (err) => {
      if (events === 0) reject(err);
    });
  });
}

async function blast(peers: [Peer, Peer][], port: number): Promise<{ sent: number; received: number }> {
  const flows: { from: Peer; ring: Buffer[]; n: number }[] = [];
  for (const [a, b] of peers)
    for (const [from, to] of [
      [a, b],
      [b, a],
    ] as const)
      flows.push({
        from,
        n: 0,
        ring: Array.from({ length: 256 }, () =>
          encodeMessage({
            type: 'RELAY',
            fromAllocationId: from.id,
            toAllocationId: to.id,
            data: Buffer.alloc(100, 0x55),
          }),
        ),
      });
  let received = 0;
  const on = () => {
    received++;
  };
  for (const [a, b] of peers) {
    a.socket.on('message', on);
    b.socket.on('message', on);
  }
  let sent = 0;
  const start = performance.now();
  await new Promise<void>((resolve) => {
    const step = () => {
      const now = performance.now();
      if (now - start >= SECONDS * 1000) return resolve();
      const due = Math.floor(((now - start) / 1000) * RATE);
      while (sent < due) {
        const f = flows[sent % flows.length]!;
        f.from.socket.send(f.ring[f.n++ % f.ring.length]!, port, '127.0.0.1');
        sent++;
      }
      setTimeout(step, 1);
    };
    step();
  });
  await new Promise((r) => setTimeout(r, 300));
  for (const [a, b] of peers) {
    a.socket.off('message', on);
    b.socket.off('message', on);
  }
  return { sent, received };
}

async function runCase(
  dataplane: 'js' | 'native',
  mode: Mode,
): Promise<{ ppsPerCpu: number; loss: number; events: number }> {
  const s = await serve(dataplane, mode !== 'off');
  try {
    const peers: [Peer, Peer][] = [];
    for (let i = 0; i < PAIRS; i++) peers.push(await pair(s));
    let watcher: { events: () => number; stop: () => void } | undefined;
    if (mode === 'overview') watcher = await stream(s.adminPort!, 'protocol=unity-relay');
    if (mode === 'wire') watcher = await stream(s.adminPort!, 'wire=unity-relay');
    await blast(peers, s.udpPort); // warm-up
    const cpu0 = cpuSeconds(s.child.pid!);
    const r = await blast(peers, s.udpPort);
    const cpu = cpuSeconds(s.child.pid!) - cpu0;
    const events = watcher?.events() ?? 0;
    watcher?.stop();
    for (const [a, b] of peers) {
      a.socket.close();
      b.socket.close();
    }
    return { ppsPerCpu: r.received / Math.max(cpu, 0.01), loss: 1 - r.received / r.sent, events };
  } finally {
    s.child.kill('SIGTERM');
    await new Promise((r) => s.child.once('exit', r));
  }
}

const REPEATS = 5;

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)]!;
}

async function run(): Promise<BenchResult> {
  const rows: BenchRow[] = [];
  const notes: string[] = [];
  const modes: Mode[] = ['off', 'idle', 'overview', 'wire'];
  pinSelf('0');
  for (const dataplane of ['js', 'native'] as const) {
    // Interleaved repeats, medians: the machine's other load hits every mode alike.
    const results = new Map<Mode, Awaited<ReturnType<typeof runCase>>[]>(modes.map((m) => [m, []]));
    try {
      for (let i = 0; i < REPEATS; i++)
        for (const mode of modes) results.get(mode)!.push(await runCase(dataplane, mode));
    } catch (err) {
      notes.push(`${dataplane} data plane: ${(err as Error).message.split('\n')[0]}`);
      continue;
    }
    const pps = (m: Mode) => median(results.get(m)!.map((r) => r.ppsPerCpu));
    const base = pps('off');
    for (const mode of ['idle', 'overview', 'wire'] as const) {
      const rs = results.get(mode)!;
      rows.push({
        name: `relay ${dataplane}: admin ${mode} vs --no-admin`,
        subject: pps(mode),
        baseline: base,
        unit: 'pps/cpu-s',
        ratio: pps(mode) / base,
        extra: {
          loss: Math.max(...rs.map((r) => r.loss)),
          streamEvents: median(rs.map((r) => r.events)),
          runs: rs.map((r) => Math.round(r.ppsPerCpu)).join('/'),
          baselineRuns: results
            .get('off')!
            .map((r) => Math.round(r.ppsPerCpu))
            .join('/'),
        },
      });
    }
  }
  pinSelf('0-255');
  notes.push(
    `${PINNED ? 'relay pinned to CPU 1, load generator and event-stream client to CPU 0 (taskset); ' : ''}${PAIRS} UDP pairs, ${RATE} RELAY/s offered (100-byte payload) for ${SECONDS} s after a warm-up run; relay CPU from each thread's /proc schedstat (ns); one event-stream client where named; median of ${REPEATS} interleaved runs`,
  );
  return { suite: 'dashboard', rows, notes };
}

export const suite: BenchSuite = {
  name: 'dashboard',
  description: 'relay pps per CPU-second with the admin endpoint streaming, against --no-admin',
  run,
};
