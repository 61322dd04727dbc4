/**
 * nox-relay bench: I instances × P players × 20 Hz transforms over UDP on 127.0.0.1.
 *
 * The relay runs in a worker thread (its event-loop utilisation is the "server CPU"); this thread
 * is the load generator. Each player sends a Transform whose position.x carries its send time;
 * receivers read it back for the delivery latency. The baseline is a minimal hand-written UDP
 * fan-out loop (copy the datagram, patch the player id, send it to the other members), run with
 * the same load in the same run. The same file is the worker's entry point.
 */
import dgram from 'node:dgram';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads';
import type { ClientMessage } from '../src/protocols/nox-relay/messages.js';
import { writeClientPacket } from '../src/protocols/nox-relay/packet.js';
import { NoxRelayServer } from '../src/protocols/nox-relay/server.js';
import { WireWriter } from '../src/wire/index.js';
import { type BenchResult, type BenchSuite, percentile } from './harness.js';

const INSTANCES = Number(process.env.NOX_BENCH_INSTANCES ?? 8);
const PLAYERS = Number(process.env.NOX_BENCH_PLAYERS ?? 16);
const HZ = 20;
const SECONDS = Number(process.env.NOX_BENCH_SECONDS ?? 3);
const WARMUP_MS = 700;

type Mode = 'gamewire' | 'baseline';

// ---- worker side ------------------------------------------------------------------------------

async function runBaseline(): Promise<{ port: number; close: () => Promise<void> }> {
  const sock = dgram.createSocket('udp4');
  await new Promise<void>((r) => sock.bind(0, '127.0.0.1', () => r()));
  try {
    sock.setSendBufferSize(4 << 20);
    sock.setRecvBufferSize(4 << 20);
  } catch {}
  // Membership: an Enter-typed datagram registers the source in instance payload[0].
  const members = new Map<number, { port: number; id: number }[]>();
  const byPort = new Map<number, { iid: number; id: number }>();
  sock.on('message', (msg, rinfo) => {
    const type = msg[4];
    if (type === 0x06) {
      const iid = msg[5]!;
      let list = members.get(iid);
      if (list === undefined) {
        list = [];
        members.set(iid, list);
      }
      const id = list.length;
      list.push({ port: rinfo.port, id });
      byPort.set(rinfo.port, { iid, id });
      sock.send(msg, rinfo.port, rinfo.address);
      return;
    }
    if (type !== 0x0b) return;
    const me = byPort.get(rinfo.port);
    if (me === undefined) return;
    const out = Buffer.from(msg);
    out.writeUInt16BE(0, 2);
    out.writeUInt16BE(me.id, 7);
    for (const m of members.get(me.iid)!) if (m.id !== me.id) sock.send(out, m.port, '127.0.0.1');
  });
  return {
    port: (sock.address() as { port: number }).port,
    close: () => new Promise((r) => sock.close(() => r())),
  };
}

async function workerMain(mode: Mode): Promise<void> {
  let port: number;
  let close: () => Promise<void>;
  if (mode === 'gamewire') {
    const relay = new NoxRelayServer({
      host: '127.0.0.1',
      port: 0,
      // TPS above the send rate, so the limiter never holds a 20 Hz stream back.
      instances: Array.from({ length: INSTANCES }, (_, id) => ({ id, capacity: 0, tps: 60 })),
      maxUdpPerIp: 100_000,
      congestion: { softBytes: 1 << 20 },
    });
    await relay.start();
    port = relay.port;
    close = () => relay.close();
  } else {
    ({ port, close } = await runBaseline());
  }
  let mark = performance.eventLoopUtilization();
  parentPort!.on('message', async (m: string) => {
    if (m === 'mark') mark = performance.eventLoopUtilization();
    if (m === 'stop') {
      const elu = performance.eventLoopUtilization(mark);
      await close();
      parentPort!.postMessage({ elu: elu.utilization });
      parentPort!.close();
    }
  });
  parentPort!.postMessage({ port });
}

if (!isMainThread && (workerData as { noxBench?: Mode } | undefined)?.noxBench !== undefined) {
  void workerMain((workerData as { noxBench: Mode }).noxBench);
}

// ---- load generator -----------------------------------------------------------------------

interface Phase {
  delivered: number;
  deliveredPerS: number;
  expectedPerS: number;
  p50: number;
  p99: number;
  serverCpu: number;
}

const CLOCK_MOD = 10_000;

function packet(w: WireWriter, uid: number, m: ClientMessage): Buffer {
  w.reset();
  writeClientPacket(w, uid, m);
  return w.toBuffer();
}

async function phase(mode: Mode): Promise<Phase> {
  const worker = new Worker(fileURLToPath(import.meta.url), { workerData: { noxBench: mode } });
  const port = await new Promise<number>((resolve, reject) => {
    worker.once('message', (m: { port: number }) => resolve(m.port));
    worker.once('error', reject);
  });
  const w = new WireWriter();
  const total = INSTANCES * PLAYERS;
  const sockets: dgram.Socket[] = [];
  const latencies = new Float64Array(4_000_000);
  let nLat = 0;
  let measuring = false;
  let delivered = 0;
  let ready = 0;
  /** Each player's address cookie, from its Handshake reply (gamewire's UDP address proof). */
  const cookies: (Buffer | undefined)[] = new Array(total);
  for (let i = 0; i < total; i++) {
    const s = dgram.createSocket('udp4');
    sockets.push(s);
    s.on('message', (msg) => {
      if (mode === 'gamewire' && cookies[i] === undefined && msg.length >= 13 && msg[4] === 0x01) {
        const len = msg.readUInt16BE(0);
        cookies[i] = Buffer.from(msg.subarray(len - 8, len));
      }
      let off = 0;
      while (off + 5 <= msg.length) {
        const len = msg.readUInt16BE(off);
        if (len < 5 || off + len > msg.length) break;
        const type = msg[off + 4];
        if (type === 0x0b) {
          if (measuring) {
            delivered++;
            const sent = msg.readFloatBE(off + 12);
            let d = (performance.now() % CLOCK_MOD) - sent;
            if (d < 0) d += CLOCK_MOD;
            if (nLat < latencies.length) latencies[nLat++] = d;
          }
        } else if ((type === 0x0a && msg[off + 6] === 0x10) || (mode === 'baseline' && type === 0x06)) {
          ready++;
        }
        off += len;
      }
    });
    await new Promise<void>((r) => s.bind(0, '127.0.0.1', () => r()));
    try {
      s.setRecvBufferSize(1 << 20);
    } catch {}
  }
  // Setup: the real protocol for gamewire, one registration datagram for the baseline.
  const send = (i: number, b: Buffer) => sockets[i]!.send(b, port, '127.0.0.1');
  for (let i = 0; i < total; i++) {
    const iid = i % INSTANCES;
    if (mode === 'baseline') {
      send(i, packet(w, 1, { type: 'Enter', instanceId: iid, flags: 0 }));
      continue;
    }
    send(
      i,
      packet(w, 1, {
        type: 'Handshake',
        protocol: 1,
        engine: 'bench',
        platform: 'node',
        addressCookie: null,
      }),
    );
  }
  if (mode === 'gamewire') {
    const until = performance.now() + 10_000;
    while (cookies.includes(undefined) && performance.now() < until)
      await new Promise((r) => setTimeout(r, 10));
  }
  for (let i = 0; i < total; i++) {
    const iid = i % INSTANCES;
    if (mode === 'baseline') continue;
    // Send the cookie back: the address is proven, so the fan-out is not held to 3x.
    send(
      i,
      packet(w, 6, {
        type: 'Handshake',
        protocol: 1,
        engine: 'bench',
        platform: 'node',
        addressCookie: cookies[i] ?? null,
      }),
    );
    send(i, packet(w, 2, { type: 'Authentification', flags: 0, accessToken: `bench-${i}` }));
    await new Promise((r) => setTimeout(r, 1));
    send(i, packet(w, 3, { type: 'Enter', instanceId: iid, flags: 0 }));
    send(i, packet(w, 4, { type: 'Traveling', instanceId: iid, action: 0 }));
    send(i, packet(w, 5, { type: 'Traveling', instanceId: iid, action: 1 }));
  }
  const deadline = performance.now() + 10_000;
  while (ready < total && performance.now() < deadline) await new Promise((r) => setTimeout(r, 20));
  if (ready < total) throw new Error(`${mode}: only ${ready}/${total} players ready`);

  // Load: players in 10 groups, one group every 5 ms, so each sends at 20 Hz without bursts.
  const groups = 10;
  const tmpl = packet(w, 0, {
    type: 'Transform',
    instanceId: 0,
    transformType: 1,
    playerId: 0xffff,
    rig: 0,
    flags: 1,
    position: { x: 0, y: 0, z: 0 },
  });
  const perPlayer = sockets.map((_, i) => {
    const b = Buffer.from(tmpl);
    b[5] = i % INSTANCES;
    return b;
  });
  let g = 0;
  const timer = setInterval(
    () => {
      const now = performance.now() % CLOCK_MOD;
      for (let i = g; i < total; i += groups) {
        // A fresh buffer per send: the socket holds it until it is out.
        const b = Buffer.from(perPlayer[i]!);
        b.writeFloatBE(now, 12);
        sockets[i]!.send(b, port, '127.0.0.1');
      }
      g = (g + 1) % groups;
    },
    1000 / HZ / groups,
  );
  await new Promise((r) => setTimeout(r, WARMUP_MS));
  measuring = true;
  worker.postMessage('mark');
  const t0 = performance.now();
  await new Promise((r) => setTimeout(r, SECONDS * 1000));
  measuring = false;
  const elapsed = (performance.now() - t0) / 1000;
  clearInterval(timer);
  const done = new Promise<{ elu: number }>((resolve) => worker.once('message', resolve));
  worker.postMessage('stop');
  const { elu } = await done;
  await worker.terminate();
  await Promise.all(sockets.map((s) => new Promise<void>((r) => s.close(() => r()))));
  const lat = latencies.subarray(0, nLat);
  return {
    delivered,
    deliveredPerS: delivered / elapsed,
    expectedPerS: total * HZ * (PLAYERS - 1),
    p50: percentile(lat, 50),
    p99: percentile(lat, 99),
    serverCpu: elu,
  };
}

export const suite: BenchSuite = {
  name: 'nox-relay',
  description: `${INSTANCES} instances × ${PLAYERS} players × ${HZ} Hz transforms over UDP (loopback), relay vs hand-written fan-out`,
  async run(): Promise<BenchResult> {
    const base = await phase('baseline');
    const gw = await phase('gamewire');
    const label = `${INSTANCES}×${PLAYERS} @${HZ}Hz`;
    const row = (p: Phase) => ({
      p99_ms: Number(p.p99.toFixed(3)),
      p50_ms: Number(p.p50.toFixed(3)),
      server_cpu_pct: Number((p.serverCpu * 100).toFixed(1)),
      loss_pct: Number((100 * (1 - p.deliveredPerS / p.expectedPerS)).toFixed(2)),
    });
    const g = row(gw);
    const b = row(base);
    const effG = gw.deliveredPerS / Math.max(1e-9, gw.serverCpu);
    const effB = base.deliveredPerS / Math.max(1e-9, base.serverCpu);
    return {
      suite: 'nox-relay',
      rows: [
        {
          name: `fan-out delivered ${label}`,
          subject: gw.deliveredPerS,
          baseline: base.deliveredPerS,
          unit: 'msg/s',
          ratio: gw.deliveredPerS / base.deliveredPerS,
          extra: {
            expected: gw.expectedPerS,
            p99_ms: g.p99_ms,
            p50_ms: g.p50_ms,
            server_cpu_pct: g.server_cpu_pct,
            loss_pct: g.loss_pct,
            base_p99_ms: b.p99_ms,
            base_cpu_pct: b.server_cpu_pct,
            base_loss_pct: b.loss_pct,
          },
        },
        {
          name: `fan-out per server CPU-second ${label}`,
          subject: effG,
          baseline: effB,
          unit: 'msg/cpu-s',
          ratio: effG / effB,
        },
      ],
      notes: [
        'server CPU = event-loop utilisation of the relay worker thread over the measured window (100% = one core)',
        'load generator and relay share the machine; scale with NOX_BENCH_INSTANCES / NOX_BENCH_PLAYERS / NOX_BENCH_SECONDS',
        'goal (issue 6): ≥ 70% of the baseline, p99 < 5 ms',
      ],
    };
  },
};
