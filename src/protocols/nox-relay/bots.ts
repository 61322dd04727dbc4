/**
 * `gamewire nox-relay bots`: a swarm of NoxRelayClients that enter one instance and stream
 * transforms, to load a server and watch it. Reports one line of figures per second and a
 * summary at the end.
 *
 * The run ends at `durationS` (0: never), when `signal` aborts it, or as soon as no bot is left
 * running (every bot failed to enter, or every bot that entered lost its connection). The
 * duration is a hard bound: bots still connecting then are abandoned, so a relay that does not
 * answer cannot stretch the run.
 */
import { NoxRelayClient } from './client.js';
import { NoxRelayClientError } from './errors.js';

export interface BotOptions {
  host: string;
  port: number;
  count: number;
  instance: number;
  transport: 'tcp' | 'udp';
  /** Transforms per second per bot. */
  rate: number;
  durationS: number;
  /** Offline tokens are `${tokenPrefix}${i}`. */
  tokenPrefix: string;
  asBot: boolean;
  /** One line of figures per second. */
  out: (line: string) => void;
  /** A bot that could not enter (connect, handshake, authentication, enter, travel). */
  onBotError?: (bot: number, err: Error) => void;
  /** Aborts the run early (SIGINT in the CLI). */
  signal?: AbortSignal;
  /** Per-request timeout of each bot (default the client's, 5000 ms). */
  requestTimeoutMs?: number;
}

export interface BotStats {
  /** Bots whose handshake completed. */
  connected: number;
  /** Bots that entered the instance. */
  entered: number;
  /** Bots that could not enter. */
  failed: number;
  /** Bots that entered and later lost their connection. */
  lost: number;
  transformsSent: number;
  transformsReceived: number;
  joins: number;
  leaves: number;
  /** Failures to enter plus socket errors. */
  errors: number;
  seconds: number;
  /** Why the run ended. */
  ended: 'duration' | 'signal' | 'all_failed' | 'all_lost';
}

export async function runBots(o: BotOptions): Promise<BotStats> {
  const stats: BotStats = {
    connected: 0,
    entered: 0,
    failed: 0,
    lost: 0,
    transformsSent: 0,
    transformsReceived: 0,
    joins: 0,
    leaves: 0,
    errors: 0,
    seconds: 0,
    ended: 'duration',
  };
  const bots: NoxRelayClient[] = [];
  const active: NoxRelayClient[] = [];
  const started = performance.now();
  let over = false;
  let finish: (why: BotStats['ended']) => void = () => {};
  const finished = new Promise<BotStats['ended']>((resolve) => {
    finish = (why) => {
      if (over) return;
      over = true;
      resolve(why);
    };
  });
  // Every bot has settled and none is running: nothing left to watch.
  let settled = 0;
  const checkLeft = () => {
    if (settled < o.count) return;
    const running = active.filter((b) => !b.isClosed).length;
    if (running > 0) return;
    finish(stats.entered === 0 ? 'all_failed' : 'all_lost');
  };

  const startOne = async (i: number) => {
    const c = new NoxRelayClient({
      host: o.host,
      port: o.port,
      transport: o.transport,
      ...(o.requestTimeoutMs === undefined ? {} : { requestTimeoutMs: o.requestTimeoutMs }),
    });
    c.on('transform', () => stats.transformsReceived++);
    c.on('join', () => stats.joins++);
    c.on('leave', () => stats.leaves++);
    c.on('error', () => stats.errors++);
    // The server's Disconnect ends this bot (over UDP nothing else would close it).
    c.on('disconnect', () => void c.close());
    bots.push(c);
    await c.connect();
    await c.handshake('node', 'gamewire-bot');
    stats.connected++;
    const auth = await c.authenticate(`${o.tokenPrefix}${i}`);
    if (auth.result !== 0)
      throw new NoxRelayClientError(
        'ERR_NOX_BOT',
        `bot ${i}: ${c.target} refused authentification (result ${auth.result})`,
      );
    const enter = await c.enter(o.instance, { asBot: o.asBot });
    if (enter.result !== 0)
      throw new NoxRelayClientError(
        'ERR_NOX_BOT',
        `bot ${i}: ${c.target} refused to enter instance ${o.instance} (result ${enter.result}${enter.reason ? `: ${enter.reason}` : ''})`,
      );
    await c.travel(o.instance);
    if (over) return; // the run ended while this bot was still on its way in
    stats.entered++;
    active.push(c);
    c.once('close', () => {
      if (!over) stats.lost++;
      checkLeft();
    });
  };
  for (let i = 0; i < o.count; i++) {
    startOne(i).then(
      () => {
        settled++;
        checkLeft();
      },
      (err: unknown) => {
        settled++;
        if (!over) {
          stats.failed++;
          stats.errors++;
          o.onBotError?.(i, err instanceof Error ? err : new Error(String(err)));
        }
        checkLeft();
      },
    );
  }

  let tick = 0;
  const period = 1000 / Math.max(1, o.rate);
  const sender = setInterval(() => {
    tick++;
    const t = tick * period;
    for (let i = 0; i < active.length; i++) {
      const b = active[i]!;
      if (b.isClosed) continue;
      const a = (t / 1000 + i) % (2 * Math.PI);
      b.sendTransform(o.instance, 5, {
        position: { x: Math.cos(a) * 3, y: 1.7, z: Math.sin(a) * 3 },
        rotation: { x: 0, y: Math.sin(a / 2), z: 0, w: Math.cos(a / 2) },
      });
      stats.transformsSent++;
    }
  }, period);
  let last = { ...stats };
  const reporter = setInterval(() => {
    stats.seconds = (performance.now() - started) / 1000;
    o.out(
      JSON.stringify({
        t: Number(stats.seconds.toFixed(1)),
        bots: stats.entered - stats.lost,
        sentPerS: stats.transformsSent - last.transformsSent,
        receivedPerS: stats.transformsReceived - last.transformsReceived,
        joins: stats.joins,
        leaves: stats.leaves,
        errors: stats.errors,
      }),
    );
    last = { ...stats };
  }, 1000);
  // 0: until the signal (Ctrl-C), or until no bot is left.
  const timer = o.durationS > 0 ? setTimeout(() => finish('duration'), o.durationS * 1000) : undefined;
  const onAbort = () => finish('signal');
  o.signal?.addEventListener('abort', onAbort);
  if (o.signal?.aborted === true) finish('signal');
  stats.ended = await finished;
  clearTimeout(timer);
  o.signal?.removeEventListener('abort', onAbort);
  clearInterval(sender);
  clearInterval(reporter);
  // Entered bots say goodbye (each waits at most 1 s for the confirmation); the others close.
  await Promise.allSettled(bots.map((b) => (active.includes(b) ? b.disconnect('bots done') : b.close())));
  stats.seconds = (performance.now() - started) / 1000;
  return stats;
}
