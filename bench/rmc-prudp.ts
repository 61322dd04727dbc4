/**
 * PRUDP rows of the rmc bench: pipelined RMC calls over PRUDP (RC4 payloads, acks, the RMC
 * dispatcher) at 0 % and 5 % datagram loss, next to the same calls over TCP, and next to a
 * hand-written PRUDP echo (handshake, per-packet acks, RC4 decode and re-encode of each
 * payload, no dispatcher) measured in the same run.
 *
 * The load generator runs in a worker thread: one gamewire PRUDP client connection keeping a
 * fixed window of calls in flight. For the lossy row a small proxy in the same worker drops 5 %
 * of the datagrams in each direction; both ends then retransmit after 50 ms.
 */
import dgram from 'node:dgram';
import { performance } from 'node:perf_hooks';
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads';
import { silentLogger } from '../src/core/logger.js';
import { ProtocolMetrics } from '../src/core/metrics.js';
import {
  accessKeyByte,
  ClassicPayloadCodec,
  Flag,
  newPacket,
  PacketType,
  PrudpClientConnection,
  PrudpServer,
  RmcServer,
  readPacket,
  writePacket,
} from '../src/protocols/rmc/index.js';
import { WireWriter } from '../src/wire/index.js';
import { type BenchRow, percentile } from './harness.js';

const KEY = 'yl4NG7qZ';
const RETRANSMIT_MS = 50;

interface PrudpLoadJob {
  port: number;
  window: number;
  loss: number;
  warmupMs: number;
  durationMs: number;
  frame: Uint8Array;
}

interface LoadResult {
  calls: number;
  seconds: number;
  p50us: number;
  p99us: number;
}

/** A proxy that drops `loss` of the datagrams each way (same thread as the generator). */
async function lossyProxy(target: number, loss: number): Promise<{ port: number; close(): void }> {
  const front = dgram.createSocket('udp4');
  const back = dgram.createSocket('udp4');
  await new Promise<void>((r) => front.bind(0, '127.0.0.1', r));
  await new Promise<void>((r) => back.bind(0, '127.0.0.1', r));
  let client: dgram.RemoteInfo | undefined;
  front.on('message', (m, rinfo) => {
    client = rinfo;
    if (Math.random() >= loss) back.send(m, target, '127.0.0.1');
  });
  back.on('message', (m) => {
    if (client !== undefined && Math.random() >= loss) front.send(m, client.port, client.address);
  });
  return {
    port: front.address().port,
    close: () => {
      front.close();
      back.close();
    },
  };
}

async function generatePrudpLoad(job: PrudpLoadJob): Promise<LoadResult> {
  const frame = Buffer.from(job.frame);
  let port = job.port;
  let proxy: { port: number; close(): void } | undefined;
  if (job.loss > 0) {
    proxy = await lossyProxy(job.port, job.loss);
    port = proxy.port;
  }
  const conn = await PrudpClientConnection.connect({
    host: '127.0.0.1',
    port,
    accessKey: KEY,
    retransmitMs: RETRANSMIT_MS,
    retransmitMaxMs: 200,
    maxRetransmits: 50,
    sendWindow: 256,
    pingIntervalMs: 0,
    idleTimeoutMs: 0,
  });
  const sent: number[] = [];
  let head = 0;
  let counting = false;
  let calls = 0;
  let running = true;
  const latencies: number[] = [];
  conn.onMessage = () => {
    const now = performance.now();
    const t0 = sent[head++]!;
    if (counting) {
      calls++;
      latencies.push(now - t0);
    }
    if (head > 4096) {
      sent.splice(0, head);
      head = 0;
    }
    if (!running) return;
    sent.push(now);
    conn.send(frame);
  };
  const start = performance.now();
  for (let i = 0; i < job.window; i++) {
    sent.push(start);
    conn.send(frame);
  }
  await new Promise((r) => setTimeout(r, job.warmupMs));
  counting = true;
  const t0 = performance.now();
  await new Promise((r) => setTimeout(r, job.durationMs));
  counting = false;
  const seconds = (performance.now() - t0) / 1000;
  running = false;
  await conn.close(500);
  proxy?.close();
  return { calls, seconds, p50us: percentile(latencies, 50) * 1000, p99us: percentile(latencies, 99) * 1000 };
}

if (!isMainThread && (workerData as { prudpBench?: PrudpLoadJob } | null)?.prudpBench !== undefined) {
  const job = (workerData as { prudpBench: PrudpLoadJob }).prudpBench;
  void generatePrudpLoad(job).then((r) => parentPort!.postMessage(r));
}

function runPrudpLoad(job: PrudpLoadJob): Promise<LoadResult> {
  return new Promise((resolve, reject) => {
    const w = new Worker(new URL(import.meta.url), { workerData: { prudpBench: job } });
    w.once('message', (r: LoadResult) => {
      resolve(r);
      void w.terminate();
    });
    w.once('error', reject);
  });
}

/** gamewire: PrudpServer + the RMC dispatcher, `handler` registered by the caller. */
async function startGamewirePrudp(
  register: (s: RmcServer) => void,
): Promise<{ port: number; close(): Promise<void> }> {
  const metrics = new ProtocolMetrics('rmc');
  const log = silentLogger();
  const rmc = new RmcServer({ log, metrics });
  register(rmc);
  const prudp = new PrudpServer({
    dispatcher: rmc.dispatcher,
    log,
    metrics,
    accessKey: KEY,
    retransmitMs: RETRANSMIT_MS,
    retransmitMaxMs: 200,
    maxRetransmits: 50,
    sendWindow: 256,
    tickMs: 10,
  });
  const { port } = await prudp.listen({ host: '127.0.0.1', port: 0 });
  return { port, close: () => prudp.close() };
}

/**
 * The hand-written baseline: the smallest PRUDP peer that answers the same load. It does the
 * handshake, acks every DATA, decodes each payload (RC4 + compression byte) and sends the same
 * message back as its own reliable DATA. It keeps no retransmission state (measured at 0 % loss).
 */
export async function startEchoPrudp(): Promise<{ port: number; close(): Promise<void> }> {
  const socket = dgram.createSocket('udp4');
  await new Promise<void>((r) => socket.bind(0, '127.0.0.1', r));
  socket.setRecvBufferSize(4 * 1024 * 1024); // as the gamewire server does
  const cfg = { width: 1 as const, keyByte: accessKeyByte(KEY) };
  const p = newPacket();
  const w = new WireWriter({ initialCapacity: 2048 });
  const codec = new ClassicPayloadCodec();
  let seq = 1;
  let clientSig = 0;
  let clientSession = 0;
  const serverSig = 0x12345678;
  socket.on('message', (msg, rinfo) => {
    try {
      readPacket(msg, 0, cfg, p);
    } catch {
      return;
    }
    const reply = (f: Parameters<typeof writePacket>[1], payload?: Buffer) => {
      w.reset();
      writePacket(w, f, payload, cfg);
      socket.send(Buffer.from(w.view()), rinfo.port, rinfo.address);
    };
    const base = {
      source: p.destination,
      destination: p.source,
      sessionId: 0x42,
      packetSignature: clientSig,
    };
    if ((p.flags & Flag.ACK) !== 0) return;
    if (p.type === PacketType.SYN) {
      reply({
        ...base,
        sessionId: 0,
        packetSignature: 0,
        type: 0,
        flags: 0x48,
        sequenceId: 0,
        connectionSignature: serverSig,
      });
    } else if (p.type === PacketType.CONNECT) {
      clientSig = p.connectionSignature;
      clientSession = p.sessionId;
      reply({
        ...base,
        packetSignature: clientSig,
        type: 1,
        flags: 0x48,
        sequenceId: p.sequenceId,
        connectionSignature: 0,
      });
    } else if (p.type === PacketType.DATA) {
      reply({ ...base, type: 2, flags: 0x48, sequenceId: p.sequenceId, fragmentId: p.fragmentId });
      const body = codec.decode(p.payload, 1 << 20);
      reply({ ...base, type: 2, flags: 0x70, sequenceId: seq++, fragmentId: 0 }, codec.encode(body));
    } else if (p.type === PacketType.DISCONNECT) {
      reply({ ...base, type: 3, flags: 0x48, sequenceId: p.sequenceId });
    }
    void clientSession;
  });
  return { port: socket.address().port, close: () => new Promise<void>((r) => socket.close(() => r())) };
}

const best = (xs: LoadResult[]) => xs.reduce((a, b) => (b.calls / b.seconds > a.calls / a.seconds ? b : a));
const rate = (r: LoadResult) => r.calls / r.seconds;

/**
 * The PRUDP rows. `register` adds the bench protocol to a server; `frame` is its request;
 * `tcpRate` measures the same calls over TCP (gamewire's TCP server) for comparison.
 */
export async function prudpRows(
  register: (s: RmcServer) => void,
  frame: Uint8Array,
  tcpRate: () => Promise<number>,
): Promise<BenchRow[]> {
  const window = 64;
  const job = (port: number, loss: number): PrudpLoadJob => ({
    port,
    window,
    loss,
    warmupMs: 300,
    durationMs: 2000,
    frame,
  });
  const subject: LoadResult[] = [];
  const lossy: LoadResult[] = [];
  const echo: LoadResult[] = [];
  const tcp: number[] = [];
  for (let round = 0; round < 2; round++) {
    const e = await startEchoPrudp();
    try {
      echo.push(await runPrudpLoad(job(e.port, 0)));
    } finally {
      await e.close();
    }
    for (const [loss, into] of [
      [0, subject],
      [0.05, lossy],
    ] as const) {
      const g = await startGamewirePrudp(register);
      try {
        into.push(await runPrudpLoad(job(g.port, loss)));
      } finally {
        await g.close();
      }
    }
    tcp.push(await tcpRate());
  }
  const s = best(subject);
  const l = best(lossy);
  const b = best(echo);
  const t = Math.max(...tcp);
  return [
    {
      name: `PRUDP, ${window} calls in flight`,
      subject: rate(s),
      baseline: rate(b),
      unit: 'calls/s',
      ratio: rate(s) / rate(b),
      extra: {
        p50_us: Math.round(s.p50us),
        p99_us: Math.round(s.p99us),
        baseline_p99_us: Math.round(b.p99us),
        tcp_calls_s: Math.round(t),
        vs_tcp: `${((rate(s) / t) * 100).toFixed(1)}%`,
      },
    },
    {
      name: `PRUDP, 5% loss each way, ${window} in flight`,
      subject: rate(l),
      baseline: rate(b),
      unit: 'calls/s',
      ratio: rate(l) / rate(b),
      extra: {
        p50_us: Math.round(l.p50us),
        p99_us: Math.round(l.p99us),
        vs_prudp_no_loss: `${((rate(l) / rate(s)) * 100).toFixed(1)}%`,
        note: 'baseline = hand-written echo at 0% loss',
      },
    },
  ];
}
