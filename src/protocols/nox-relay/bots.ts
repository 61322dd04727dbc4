/**
 * `gamewire nox-relay bots`: a swarm of NoxRelayClients that enter one instance and stream
 * transforms, to load a server and watch it. Prints one JSON line of figures per second and a
 * summary at the end; stops after `durationS` (0: never) or on SIGINT/SIGTERM.
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
  out: (line: string) => void;
  /** Aborts the run early (SIGINT in the CLI). */
  signal?: AbortSignal;
}

export interface BotStats {
  connected: number;
  entered: number;
  transformsSent: number;
  transformsReceived: number;
  joins: number;
  leaves: number;
  errors: number;
  seconds: number;
}

export async function runBots(o: BotOptions): Promise<BotStats> {
  const stats: BotStats = {
    connected: 0,
    entered: 0,
    transformsSent: 0,
    transformsReceived: 0,
    joins: 0,
    leaves: 0,
    errors: 0,
    seconds: 0,
  };
  const bots: NoxRelayClient[] = [];
  const active: NoxRelayClient[] = [];
  const started = performance.now();
  const startOne = async (i: number) => {
    const c = new NoxRelayClient({ host: o.host, port: o.port, transport: o.transport });
    c.on('transform', () => stats.transformsReceived++);
    c.on('join', () => stats.joins++);
    c.on('leave', () => stats.leaves++);
    c.on('error', () => stats.errors++);
    bots.push(c);
    await c.connect();
    await c.handshake('node', 'gamewire-bot');
    stats.connected++;
    const auth = await c.authenticate(`${o.tokenPrefix}${i}`);
    if (auth.result !== 0)
      throw new NoxRelayClientError('ERR_NOX_BOT', `bot ${i}: authentification result ${auth.result}`);
    const enter = await c.enter(o.instance, { asBot: o.asBot });
    if (enter.result !== 0)
      throw new NoxRelayClientError(
        'ERR_NOX_BOT',
        `bot ${i}: enter result ${enter.result} ${enter.reason ?? ''}`,
      );
    await c.travel(o.instance);
    stats.entered++;
    active.push(c);
  };
  const results = await Promise.allSettled(Array.from({ length: o.count }, (_, i) => startOne(i)));
  for (const r of results) {
    if (r.status === 'rejected') {
      stats.errors++;
      o.out(JSON.stringify({ error: String((r.reason as Error).message ?? r.reason) }));
    }
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
        bots: stats.entered,
        sentPerS: stats.transformsSent - last.transformsSent,
        receivedPerS: stats.transformsReceived - last.transformsReceived,
        joins: stats.joins,
        leaves: stats.leaves,
        errors: stats.errors,
      }),
    );
    last = { ...stats };
  }, 1000);
  await new Promise<void>((resolve) => {
    // 0: until the signal (Ctrl-C).
    const timer = o.durationS > 0 ? setTimeout(resolve, o.durationS * 1000) : undefined;
    o.signal?.addEventListener('abort', () => {
      clearTimeout(timer);
      resolve();
    });
    if (o.signal?.aborted === true) resolve();
  });
  clearInterval(sender);
  clearInterval(reporter);
  await Promise.allSettled(bots.map((b) => b.disconnect('bots done')));
  stats.seconds = (performance.now() - started) / 1000;
  return stats;
}
