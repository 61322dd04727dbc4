/**
 * NoxVR players through impaired paths (user-space proxies: this kernel has no netem; see
 * test/helpers/impaired-link.ts), half of their transforms sent as Segmentation packets:
 * - UDP with loss, duplication and reordering: segments arrive in any order and are put back
 *   together correctly (a wrong reassembly would change a check value), lost pieces lose only
 *   their own transform;
 * - TCP cut into small delayed pieces: nothing is lost.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ImpairedTcpProxy, ImpairedUdpProxy } from '../../helpers/impaired-link.js';
import { runProtocolLoad } from '../../helpers/load.js';
import { type Served, startServe } from '../../helpers/serve.js';

let relay: Served;
/**
 * The TCP test's own relay: players the UDP test leaves in its instance (a try that timed out, a
 * Disconnect the lossy path dropped) would otherwise introduce their stored transforms, numbered
 * by the same session indexes, to the TCP players, whose loss count then starts from them.
 */
let tcpRelay: Served;
let udp: ImpairedUdpProxy;
let tcp: ImpairedTcpProxy;

beforeAll(async () => {
  const serve = () => startServe(['nox-relay', '--port', '0', '--host', '127.0.0.1', '--no-admin']);
  [relay, tcpRelay] = await Promise.all([serve(), serve()]);
  udp = await ImpairedUdpProxy.start(
    { host: '127.0.0.1' },
    { host: '127.0.0.1', port: relay.port('udp') },
    { loss: 0.05, duplicate: 0.05, reorder: 0.2, jitterMs: 4, seed: 9 },
  );
  tcp = await ImpairedTcpProxy.start(
    { host: '127.0.0.1' },
    { host: '127.0.0.1', port: tcpRelay.port('tcp') },
    { maxPiece: 7, jitterMs: 1, seed: 9 },
  );
});

afterAll(async () => {
  await udp?.close();
  await tcp?.close();
  await Promise.all([relay?.stop(), tcpRelay?.stop()]);
});

describe('nox-relay through impaired paths', () => {
  // Retried once, for a loaded CI runner. Two causes of lost joins through this path are fixed in
  // the relay: a repeated Handshake was answered only three times per session (now three, then
  // one a second), and a repeated Authentification never (its lost reply left the player
  // waiting; 3 of 11 tries failed so, 0 of 10 since). A wrong reassembly fails every try.
  it('UDP: reordered segments reassemble correctly; only what the path lost is missing', {
    retry: 1,
    timeout: 60_000,
  }, async () => {
    const s = await runProtocolLoad(
      'nox-relay',
      {
        target: { host: '127.0.0.1', port: udp.port },
        clients: 4,
        durationS: 40,
        from: ['127.0.0.10', '127.0.0.11'],
      },
      { tickRate: 10, segmentShare: 0.5, segments: 3 },
      { stopWhen: (p) => p.sessions.joined === 4 && (p.counters.transformsReceived ?? 0) >= 300 },
    );
    // The reason first, should a session fail.
    expect(s.errorMessages, JSON.stringify(s.errorMessages)).toEqual({});
    expect(s.sessions).toMatchObject({ joined: 4, failed: 0 });
    expect(s.violations).toEqual({});
    expect(s.counters.transformsSegmented).toBeGreaterThan(20);
    expect(s.counters.transformsReceived).toBeGreaterThanOrEqual(300);
    expect(udp.stats.reordered).toBeGreaterThan(20);
  });

  it('TCP in 1..7-byte pieces: every transform arrives, segmented or not', async () => {
    const s = await runProtocolLoad(
      'nox-relay',
      { target: { host: '127.0.0.1', port: tcp.port }, clients: 4, durationS: 40 },
      { transport: 'tcp', tickRate: 10, segmentShare: 0.5, segments: 4 },
      { stopWhen: (p) => p.sessions.joined === 4 && (p.counters.transformsReceived ?? 0) >= 300 },
    );
    // The reason first, should a session fail.
    expect(s.errorMessages).toEqual({});
    expect(s.sessions).toMatchObject({ joined: 4, failed: 0 });
    expect(s.violations).toEqual({});
    expect(s.counters.transformsSegmented).toBeGreaterThan(20);
    expect(s.counters.duplicates).toBe(0);
    expect(s.derived.relayLossPercent).toBeLessThan(5);
    expect(tcp.stats.pieces).toBeGreaterThan(1000);
  }, 60_000);
});
