/**
 * RMC bench: pipelined calls per second through the full RMC server (frame, decode the
 * envelope and the arguments, look the method up, run a typed handler, encode the response),
 * over 1 and over 50 TCP connections on loopback, with p50/p99 latency.
 *
 * Baseline, measured in the same run with the same load generator: a minimal hand-written
 * server over the same framing (the wire core's StreamDeframer + u32 length) that echoes each
 * request frame back, one socket write per received chunk.
 *
 * The load generator runs in a worker thread (its own event loop), keeps a fixed window of calls
 * in flight per connection, and times each call from its send to its answer (answers come back
 * in order per connection for this handler, so a FIFO of send times per connection suffices).
 */
import net from 'node:net';
import { performance } from 'node:perf_hooks';
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads';
import { silentLogger } from '../src/core/logger.js';
import { packProtocols, validatePack } from '../src/protocols/rmc/ddl/pack.js';
import {
  defineProtocol,
  type HyperscapeMessage,
  hyperscapePacket,
  method,
  RmcServer,
  u32,
  u64,
} from '../src/protocols/rmc/index.js';
import { list, qResult, qString } from '../src/protocols/rmc/types.js';
import { type Codec, decode, encode, lengthPrefixed, StreamDeframer, struct } from '../src/wire/index.js';
import { type BenchResult, type BenchRow, type BenchSuite, compareOps, percentile } from './harness.js';
import { prudpRows } from './rmc-prudp.js';

const BenchProtocol = defineProtocol('BenchProtocol', 'bench', {
  Ping_V1: method({ args: { n: u32 }, results: { n: u32 }, layout: 'unknown', doc: 'returns its argument' }),
});

// ---- a pack-declared method against the same method declared by hand -------------------------

/** `LadderProtocol::GetScores`, as `gamewire rmc ddl import` writes it into a protocol pack. */
const LADDER_PACK = validatePack({
  format: 'gamewire-rmc-pack',
  version: 1,
  sources: ['bench'],
  types: {
    Data: { base: null, fields: [] },
    Score: {
      base: 'Data',
      fields: [
        { name: 'm_pid', type: 'u32' },
        { name: 'm_name', type: 'qString' },
        { name: 'm_points', type: 'u64' },
        { name: 'm_tags', type: { list: 'qString' } },
      ],
    },
  },
  protocols: [
    {
      name: 'LadderProtocol',
      id: 107,
      doc: '',
      methods: [
        {
          name: 'GetScores',
          id: 1,
          args: [
            { name: 'board', type: 'u32' },
            { name: 'pids', type: { list: 'u32' } },
          ],
          results: [
            { name: 'retval', type: 'qResult' },
            { name: 'scores', type: { list: { class: 'Score' } } },
          ],
        },
      ],
    },
  ],
  problems: [],
});

/** The same method declared by hand. */
const HandLadder = defineProtocol(
  'LadderProtocol',
  '',
  {
    GetScores: method({
      args: { board: u32, pids: list(u32) },
      results: {
        retval: qResult,
        scores: list(struct({ m_pid: u32, m_name: qString, m_points: u64, m_tags: list(qString) })),
      },
      layout: 'unknown',
      doc: '',
      id: 1,
    }),
  },
  { id: 107 },
);

/** Decode and encode of the pack's declaration against the hand-written one, in the same run. */
export function packRows(): BenchRow[] {
  const pack = packProtocols(LADDER_PACK)[0]!.byName.get('GetScores')!;
  const hand = HandLadder.methods.GetScores;
  const results = {
    retval: 0x10001,
    scores: Array.from({ length: 10 }, (_, i) => ({
      m_pid: 1000 + i,
      m_name: `player-${i}`,
      m_points: BigInt(i * 1000),
      m_tags: ['ranked', 'season-3'],
    })),
  };
  const args = { board: 21, pids: Array.from({ length: 10 }, (_, i) => 1000 + i) };
  const argBytes = encode(hand.args, args);
  const resultBytes = encode(hand.results, results);
  if (!encode(pack.results, results).equals(resultBytes) || !encode(pack.args, args).equals(argBytes))
    throw new Error('the pack and the hand-written declaration disagree on the bytes');
  const decodeRow = compareOps(
    `pack-declared LadderProtocol::GetScores decode (args + results, ${argBytes.length + resultBytes.length} B) vs hand-declared`,
    () => [decode(pack.args, argBytes), decode(pack.results, resultBytes)],
    () => [decode(hand.args, argBytes), decode(hand.results, resultBytes)],
    { unit: 'calls/s', rounds: 7 },
  );
  const encodeRow = compareOps(
    'pack-declared LadderProtocol::GetScores encode (args + results) vs hand-declared',
    () => [encode(pack.args, args), encode(pack.results, results)],
    () => [encode(hand.args, args), encode(hand.results, results)],
    { unit: 'calls/s', rounds: 7 },
  );
  return [decodeRow, encodeRow];
}

interface LoadJob {
  port: number;
  connections: number;
  window: number;
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

const MAX_FRAME = 1 << 20;

/** The load generator (runs inside the worker). */
async function generateLoad(job: LoadJob): Promise<LoadResult> {
  const frame = Buffer.from(job.frame);
  const burst = Buffer.concat(Array.from({ length: job.window }, () => frame));
  const latencies: number[] = [];
  let counting = false;
  let calls = 0;
  const sockets: net.Socket[] = [];
  await Promise.all(
    Array.from(
      { length: job.connections },
      () =>
        new Promise<void>((resolve, reject) => {
          const s = net.connect({ host: '127.0.0.1', port: job.port }, () => {
            s.setNoDelay(true);
            resolve();
          });
          s.once('error', reject);
          sockets.push(s);
        }),
    ),
  );
  let running = true;
  for (const s of sockets) {
    const sent: number[] = [];
    let head = 0;
    const deframer = new StreamDeframer(
      lengthPrefixed({ prefix: 'u32le', counts: 'rest', maxFrameBytes: MAX_FRAME }),
      {
        maxFrameBytes: MAX_FRAME,
      },
    );
    s.on('error', () => {});
    s.on('data', (chunk: Buffer) => {
      let n = 0;
      const now = performance.now();
      deframer.push(chunk, () => {
        n++;
        const t0 = sent[head++]!;
        if (counting) {
          calls++;
          latencies.push(now - t0);
        }
      });
      if (head > 4096) {
        sent.splice(0, head);
        head = 0;
      }
      if (!running || n === 0) return;
      for (let i = 0; i < n; i++) sent.push(now);
      s.write(n === job.window ? burst : Buffer.concat(Array.from({ length: n }, () => frame)));
    });
    const start = performance.now();
    for (let i = 0; i < job.window; i++) sent.push(start);
    s.write(burst);
  }
  await new Promise((r) => setTimeout(r, job.warmupMs));
  counting = true;
  const t0 = performance.now();
  await new Promise((r) => setTimeout(r, job.durationMs));
  counting = false;
  const seconds = (performance.now() - t0) / 1000;
  running = false;
  for (const s of sockets) s.destroy();
  return {
    calls,
    seconds,
    p50us: percentile(latencies, 50) * 1000,
    p99us: percentile(latencies, 99) * 1000,
  };
}

if (!isMainThread && (workerData as { rmcBench?: LoadJob } | null)?.rmcBench !== undefined) {
  const job = (workerData as { rmcBench: LoadJob }).rmcBench;
  void generateLoad(job).then((r) => parentPort!.postMessage(r));
}

export function runLoad(job: LoadJob): Promise<LoadResult> {
  return new Promise((resolve, reject) => {
    const w = new Worker(new URL(import.meta.url), { workerData: { rmcBench: job } });
    w.once('message', (r: LoadResult) => {
      resolve(r);
      void w.terminate();
    });
    w.once('error', reject);
  });
}

/** The baseline: echo every frame back over the same framing, one write per chunk. */
export function startEchoBaseline(): Promise<{ port: number; close(): Promise<void> }> {
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    sockets.add(socket);
    socket.setNoDelay(true);
    const deframer = new StreamDeframer(
      lengthPrefixed({ prefix: 'u32le', counts: 'rest', maxFrameBytes: MAX_FRAME }),
      {
        maxFrameBytes: MAX_FRAME,
      },
    );
    // One reused output buffer per connection; one copy out per received chunk.
    let out = Buffer.allocUnsafe(64 * 1024);
    let n = 0;
    socket.on('data', (chunk: Buffer) => {
      try {
        deframer.push(chunk, (buf, start, end) => {
          const len = end - start;
          if (n + len > out.length) {
            const bigger = Buffer.allocUnsafe(Math.max(out.length * 2, n + len));
            out.copy(bigger, 0, 0, n);
            out = bigger;
          }
          buf.copy(out, n, start, end);
          n += len;
        });
      } catch {
        socket.destroy();
        return;
      }
      if (n > 0) {
        socket.write(Buffer.from(out.subarray(0, n)));
        n = 0;
      }
    });
    socket.on('error', () => {});
    socket.on('close', () => sockets.delete(socket));
  });
  return new Promise((resolve) => {
    server.listen(0, '127.0.0.1', () => {
      resolve({
        port: (server.address() as net.AddressInfo).port,
        close: () =>
          new Promise<void>((done) => {
            for (const s of sockets) s.destroy();
            server.close(() => done());
          }),
      });
    });
  });
}

export async function startRmc(): Promise<{ port: number; close(): Promise<void> }> {
  const server = new RmcServer({ log: silentLogger(), idleTimeoutMs: 0 });
  server.register(BenchProtocol, { Ping_V1: (_ctx, { n }) => ({ n }) });
  const l = await server.listen({ host: '127.0.0.1', port: 0 });
  return { port: l.port, close: () => l.close(100) };
}

export const requestFrame = encode(hyperscapePacket as Codec<HyperscapeMessage>, {
  type: 'request',
  protocol: 'BenchProtocol',
  callId: 1,
  method: 'BenchProtocol::Ping_V1',
  classVersions: [],
  args: encode(BenchProtocol.methods.Ping_V1.args, { n: 42 }),
});

async function measure(
  name: string,
  connections: number,
  window: number,
  durationMs: number,
  rounds: number,
): Promise<BenchRow> {
  const subject: LoadResult[] = [];
  const baseline: LoadResult[] = [];
  for (let r = 0; r < rounds; r++) {
    for (const [start, into] of [
      [startEchoBaseline, baseline],
      [startRmc, subject],
    ] as const) {
      const server = await start();
      try {
        into.push(
          await runLoad({
            port: server.port,
            connections,
            window,
            warmupMs: 300,
            durationMs,
            frame: requestFrame,
          }),
        );
      } finally {
        await server.close();
      }
    }
  }
  const best = (xs: LoadResult[]) => xs.reduce((a, b) => (b.calls / b.seconds > a.calls / a.seconds ? b : a));
  const s = best(subject);
  const b = best(baseline);
  const sRate = s.calls / s.seconds;
  const bRate = b.calls / b.seconds;
  return {
    name,
    subject: sRate,
    baseline: bRate,
    unit: 'calls/s',
    ratio: sRate / bRate,
    extra: {
      p50_us: Math.round(s.p50us),
      p99_us: Math.round(s.p99us),
      baseline_p99_us: Math.round(b.p99us),
      in_flight: connections * window,
    },
  };
}

export const suite: BenchSuite = {
  name: 'rmc',
  description:
    'pipelined RMC calls (BenchProtocol::Ping_V1) vs a hand-written echo over the same u32 framing',
  async run(): Promise<BenchResult> {
    const rows = [
      // Codec rows first (no sockets): a protocol pack's method against the same one by hand.
      ...packRows(),
      await measure('1 connection, 64 calls in flight', 1, 64, 2000, 2),
      await measure('50 connections, 16 calls in flight each', 50, 16, 2000, 2),
      // PRUDP (UDP) rows: see bench/rmc-prudp.ts.
      ...(await prudpRows(
        (s) => s.register(BenchProtocol, { Ping_V1: (_ctx, { n }) => ({ n }) }),
        requestFrame,
        async () => {
          const server = await startRmc();
          try {
            const r = await runLoad({
              port: server.port,
              connections: 1,
              window: 64,
              warmupMs: 300,
              durationMs: 2000,
              frame: requestFrame,
            });
            return r.calls / r.seconds;
          } finally {
            await server.close();
          }
        },
      )),
    ];
    return {
      suite: 'rmc',
      rows,
      notes: [
        `request frame ${requestFrame.length} bytes; the load generator runs in a worker thread on the same machine`,
        'figures are the best of 2 interleaved rounds of 2 s each (after 300 ms warm-up)',
      ],
    };
  },
};
