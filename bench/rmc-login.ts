/**
 * Classic logins (issue 24 item 4): 64 players behind one address log in at once over PRUDP
 * (CONNECT, TicketGranting Login, RequestTicket), against the same server three ways, in one run:
 *
 * - `event loop`: each key derived on the event loop for every login (what the server did before
 *   UserKeyCache: MD5 65,000+ times per Login and again per RequestTicket), the baseline;
 * - `workers, cold`: UserKeyCache over the worker pool, nothing derived before the first login
 *   (the first login derives the password's chain base; the others at most 1023 more rounds);
 * - `workers, warmed`: what `serve rmc --prudp-profile classic` runs: the password's 1024 keys
 *   derived at start, every login a lookup.
 *
 * The players run in a worker thread (gamewire's PRUDP client), so the server's event loop is
 * the bench thread's alone; its delay (perf_hooks.monitorEventLoopDelay) is sampled during each
 * run. Figures are seconds for all 64 logins; the ratio is baseline time / gamewire time.
 */
import { monitorEventLoopDelay, performance } from 'node:perf_hooks';
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads';
import { silentLogger } from '../src/core/logger.js';
import { ProtocolMetrics } from '../src/core/metrics.js';
import {
  classicConnectHandler,
  deriveUserKey,
  KerberosAuthority,
  Md5ChainPool,
  MemoryStore,
  PrudpServer,
  RmcClient,
  RmcServer,
  TicketGrantingProtocol,
  ticketGrantingHandlers,
  UserKeyCache,
} from '../src/protocols/rmc/index.js';
import type { BenchResult, BenchRow, BenchSuite } from './harness.js';

const KEY = 'yl4NG7qZ';
const PLAYERS = 64;
const PASSWORD = 'gamewire';

interface Job {
  port: number;
  players: number;
  prefix: string;
}

/** The players: each connects, logs in and asks for a ticket; resolves with the seconds all took. */
async function players(job: Job): Promise<{ seconds: number; failed: number }> {
  const t0 = performance.now();
  let failed = 0;
  await Promise.all(
    Array.from({ length: job.players }, async (_, i) => {
      let c: RmcClient | undefined;
      try {
        c = await RmcClient.connect({
          host: '127.0.0.1',
          port: job.port,
          transport: 'prudp',
          accessKey: KEY,
          variant: 'classic',
          localAddress: '127.0.0.2',
          timeoutMs: 60_000,
          connectTimeoutMs: 60_000,
        });
        const login = await c.call(TicketGrantingProtocol, 'Login', { strUserName: `${job.prefix}${i}` });
        await c.call(TicketGrantingProtocol, 'RequestTicket', { idSource: login.pidPrincipal, idTarget: 2 });
      } catch {
        failed++;
      } finally {
        await c?.close();
      }
    }),
  );
  return { seconds: (performance.now() - t0) / 1000, failed };
}

if (!isMainThread && (workerData as { rmcLogin?: boolean } | null)?.rmcLogin) {
  parentPort!.on('message', (job: Job) => {
    void players(job).then((r) => parentPort!.postMessage(r));
  });
}

/** Keys as the server made them before: derived on the event loop, for every call. */
class OnTheLoop {
  key(pid: number, password: string): Promise<Buffer> {
    return Promise.resolve(deriveUserKey(pid, password));
  }
}

async function once(
  mode: 'loop' | 'cold' | 'warm',
  worker: Worker,
  round: number,
): Promise<{ seconds: number; failed: number; p99ms: number; maxms: number }> {
  const log = silentLogger();
  const metrics = new ProtocolMetrics('rmc');
  const rmc = new RmcServer({ log, metrics, variant: 'classic' });
  const authority = new KerberosAuthority();
  const pool = new Md5ChainPool();
  const keys = mode === 'loop' ? (new OnTheLoop() as unknown as UserKeyCache) : new UserKeyCache(pool);
  if (mode === 'warm') await keys.warm(PASSWORD);
  rmc.register(
    TicketGrantingProtocol,
    ticketGrantingHandlers({
      store: new MemoryStore(),
      authority,
      passwordFor: () => PASSWORD,
      secureUrl: 'prudps:/address=127.0.0.1;port=1;CID=1;PID=2;sid=1;stream=3;type=2',
      userKeys: keys,
    }),
  );
  const prudp = new PrudpServer({
    dispatcher: rmc.dispatcher,
    log,
    metrics,
    profile: 'classic',
    onConnect: classicConnectHandler(authority),
  });
  const { port } = await prudp.listen({ host: '127.0.0.1', port: 0 });
  const delay = monitorEventLoopDelay({ resolution: 5 });
  delay.enable();
  const r = await new Promise<{ seconds: number; failed: number }>((resolve) => {
    worker.once('message', resolve);
    worker.postMessage({ port, players: PLAYERS, prefix: `r${round}-${mode}-` } satisfies Job);
  });
  delay.disable();
  await prudp.close();
  await pool.close();
  return { ...r, p99ms: delay.percentile(99) / 1e6, maxms: delay.max / 1e6 };
}

export const suite: BenchSuite = {
  name: 'rmc-login',
  description: `${PLAYERS} classic logins (CONNECT, Login, RequestTicket) from one address over PRUDP: keys on the event loop vs the worker pool`,
  async run(): Promise<BenchResult> {
    const worker = new Worker(new URL(import.meta.url), { workerData: { rmcLogin: true } });
    try {
      const results: Record<string, Awaited<ReturnType<typeof once>>[]> = { loop: [], cold: [], warm: [] };
      // One round, back to back (the baseline alone takes 40-60 s on a loaded machine); more
      // rounds with GAMEWIRE_BENCH_ROUNDS, interleaved, the best of each quoted.
      const rounds = Math.max(1, Number(process.env.GAMEWIRE_BENCH_ROUNDS ?? 1) || 1);
      for (let round = 0; round < rounds; round++)
        for (const mode of ['loop', 'cold', 'warm'] as const)
          results[mode]!.push(await once(mode, worker, round));
      const best = (m: string) => results[m]!.reduce((a, b) => (b.seconds < a.seconds ? b : a));
      const loop = best('loop');
      const rows: BenchRow[] = (['cold', 'warm'] as const).map((mode) => {
        const r = best(mode);
        return {
          name: `${PLAYERS} logins, workers ${mode === 'cold' ? 'cold' : 'warmed (serve)'} vs on the loop`,
          subject: r.seconds,
          baseline: loop.seconds,
          unit: 's',
          ratio: loop.seconds / r.seconds,
          extra: {
            failed: r.failed,
            loopP99ms: Math.round(r.p99ms),
            loopMaxMs: Math.round(r.maxms),
            baselineFailed: loop.failed,
            baselineLoopP99ms: Math.round(loop.p99ms),
            baselineLoopMaxMs: Math.round(loop.maxms),
          },
        };
      });
      return {
        suite: 'rmc-login',
        rows,
        notes: [
          'seconds for all logins (lower is better; ratio = baseline s / gamewire s); loopP99ms/loopMaxMs: event-loop delay of the server during the run',
          `runs: ${JSON.stringify(results)}`,
        ],
      };
    } finally {
      await worker.terminate();
    }
  },
};
