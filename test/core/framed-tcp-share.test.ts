/**
 * The framed TCP seam's per-address output share (`outputTurnsPerAddress`): a crowd of
 * connections behind one address is served, sharing that address's turns, and cannot outweigh a
 * single client of another address by its connection count. Real sockets on 127.0.0.x.
 */
import net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { type FramedTcpServer, listenFramedTcp } from '../../src/core/framed-tcp.js';
import { silentLogger } from '../../src/core/logger.js';
import { ProtocolMetrics } from '../../src/core/metrics.js';
import { fixedFrames } from '../../src/wire/framing.js';
import { waitFor } from '../helpers/wait.js';

const cleanup: (() => unknown)[] = [];
const CHUNK = Buffer.alloc(64 * 1024);
afterEach(async () => {
  while (cleanup.length > 0) await cleanup.pop()!();
});

/**
 * A server whose connections, once poked, produce 64 KiB per turn for `turns` turns (so that a
 * scheduler run, 4 MiB, holds about 64 turns and I/O comes between runs); turns counted per address.
 */
async function producer(turnsPerAddress: number | undefined, turns: number) {
  const perAddress = new Map<string, number>();
  const order: string[] = [];
  const server: FramedTcpServer = await listenFramedTcp({
    host: '127.0.0.1',
    port: 0,
    measure: fixedFrames(1),
    maxFrameBytes: 1,
    maxConnectionsPerIp: 0,
    // Enough output room that no connection waits for 'drain': the turns are the scheduler's alone.
    maxQueuedBytes: 64 * 1024 * 1024,
    metrics: new ProtocolMetrics('test'),
    log: silentLogger(),
    ...(turnsPerAddress === undefined ? {} : { outputTurnsPerAddress: turnsPerAddress }),
    onConnection: (c) => {
      let left = turns;
      return {
        onFrame: () => {
          c.produceLater();
          return true;
        },
        produce: () => {
          perAddress.set(c.addressKey, (perAddress.get(c.addressKey) ?? 0) + 1);
          order.push(c.addressKey);
          c.send(CHUNK);
          return --left > 0;
        },
      };
    },
  });
  cleanup.push(() => server.close());
  return { server, perAddress, order };
}

async function client(port: number, localAddress: string): Promise<net.Socket> {
  const s = net.connect({ host: '127.0.0.1', port, localAddress });
  cleanup.push(() => void s.destroy());
  await new Promise<void>((resolve, reject) => {
    s.once('connect', resolve);
    s.once('error', reject);
  });
  s.on('data', () => {});
  return s;
}

/** 20 connections from one address and 1 from another, all poked; `n` turns from the single's first. */
async function firstTurns(turnsPerAddress: number | undefined, n: number) {
  const p = await producer(turnsPerAddress, 1000);
  const crowd = await Promise.all(Array.from({ length: 20 }, () => client(p.server.port, '127.0.0.90')));
  const single = await client(p.server.port, '127.0.0.91');
  for (const s of [...crowd, single]) s.write(Buffer.from([1]));
  const from = () => p.order.indexOf('127.0.0.91');
  await waitFor(() => from() >= 0 && p.order.length >= from() + n, {
    what: `${n} turns from the single client's first`,
    timeoutMs: 20_000,
  });
  const first = p.order.slice(from(), from() + n);
  return {
    crowd: first.filter((a) => a === '127.0.0.90').length,
    single: first.filter((a) => a === '127.0.0.91').length,
  };
}

describe('framed TCP: output turns shared per address', () => {
  it('with 8 turns per address, 20 connections of one address get 8 turns to the other address 1', async () => {
    const t = await firstTurns(8, 450);
    // 9 turns a round once both addresses wait: the single client gets one in nine.
    expect(t.single).toBeGreaterThanOrEqual(45);
    expect(t.crowd / t.single).toBeLessThanOrEqual(9);
  });

  it('without it, each connection gets a turn: the crowd outweighs the single client twentyfold', async () => {
    const t = await firstTurns(undefined, 420);
    expect(t.single).toBeGreaterThan(0);
    expect(t.crowd / t.single).toBeGreaterThanOrEqual(15);
  });
});
