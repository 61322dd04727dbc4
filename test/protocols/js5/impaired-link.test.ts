/**
 * JS5 downloads through a path that cuts the byte stream into small delayed pieces and resets
 * most connections mid-download (a user-space proxy: this kernel has no netem; see
 * test/helpers/impaired-link.ts). The clients reconnect as the 530 client does, ask again for
 * what was in flight, and every download completes with every group CRC-correct.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ImpairedTcpProxy } from '../../helpers/impaired-link.js';
import { runProtocolLoad } from '../../helpers/load.js';
import { type Served, startServe } from '../../helpers/serve.js';

let server: Served;
let proxy: ImpairedTcpProxy;
let groups = 0;

beforeAll(async () => {
  server = await startServe(['js5', '--port', '0', '--host', '127.0.0.1', '--no-admin']);
  groups = Number(/(\d+) groups/.exec(server.endpoints[0]!.description)?.[1]);
  proxy = await ImpairedTcpProxy.start(
    { host: '127.0.0.1' },
    { host: '127.0.0.1', port: server.port('tcp') },
    // Pieces of 1..8000 bytes, up to 1 ms apart; three connections in five cut within 600 KB.
    { maxPiece: 8000, jitterMs: 1, resetShare: 0.6, resetWithinBytes: 600_000, seed: 5 },
  );
});

afterAll(async () => {
  await proxy?.close();
  await server?.stop();
});

describe('js5 through an impaired path', () => {
  it('every download completes after reconnects, every group CRC-correct', async () => {
    const s = await runProtocolLoad(
      'js5',
      {
        target: { host: '127.0.0.1', port: proxy.port },
        clients: 3,
        durationS: 120,
        from: ['127.0.0.2', '127.0.0.3', '127.0.0.4'],
      },
      { urgentRate: 10, maxErrors: 50 },
    );
    // What the clients went through, for the record (a slow run says here why: back-offs, stalls).
    console.log(
      JSON.stringify({
        downloadMs: s.latencyMs.download,
        reconnects: s.counters.reconnects,
        errors: s.errors,
        errorMessages: s.errorMessages,
        proxy: proxy.stats,
      }),
    );
    // Errors the clients survived (the resets) are counted; a failed session would name its reason.
    expect(s.sessions.failed, JSON.stringify(s.errorMessages)).toBe(0);
    expect(s.sessions).toMatchObject({ started: 3, succeeded: 3, failed: 0, unfinished: 0 });
    expect(s.counters.downloads).toBe(3);
    expect(s.counters.groups).toBe(3 * groups);
    expect(s.violations).toEqual({});
    expect(proxy.stats.resets).toBeGreaterThan(0);
    expect(s.counters.reconnects).toBeGreaterThan(0);
  }, 150_000);
});
