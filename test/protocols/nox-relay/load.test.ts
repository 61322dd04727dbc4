/**
 * `gamewire load nox-relay` against a spawned `serve nox-relay`: players enter over UDP, TCP or
 * both, from several addresses, and every transform they receive is checked (sender, number,
 * check value); segmented transforms come back together.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runProtocolLoad } from '../../helpers/load.js';
import { type Served, startServe } from '../../helpers/serve.js';

let relay: Served;
let target: { host: string; port: number };

beforeAll(async () => {
  relay = await startServe(['nox-relay', '--port', '0', '--host', '127.0.0.1', '--no-admin']);
  target = { host: '127.0.0.1', port: relay.port('udp') };
});

afterAll(async () => {
  await relay?.stop();
});

describe('load nox-relay', () => {
  it('UDP players enter, exchange transforms and check every one', async () => {
    const s = await runProtocolLoad('nox-relay', { target, clients: 6, durationS: 2.5 }, { tickRate: 10 });
    expect(s.sessions).toMatchObject({ started: 6, joined: 6, failed: 0 });
    expect(s.violations).toEqual({});
    expect(s.counters.transformsSent).toBeGreaterThan(6);
    // Each transform fans out to the five others.
    expect(s.counters.transformsReceived).toBeGreaterThan(s.counters.transformsSent!);
    expect(s.latencyMs.join?.count).toBe(6);
    expect(s.latencyMs.relay?.count).toBe(s.counters.transformsReceived);
    expect(s.bytes.in).toBeGreaterThan(0);
    expect(s.ok).toBe(true);
  });

  it('TCP players send half their transforms as Segmentation packets, and all of them arrive whole', async () => {
    const s = await runProtocolLoad(
      'nox-relay',
      { target, clients: 4, durationS: 2.5 },
      { transport: 'tcp', tickRate: 10, segmentShare: 0.5, segments: 4 },
    );
    expect(s.sessions).toMatchObject({ joined: 4, failed: 0 });
    expect(s.counters.transformsSegmented).toBeGreaterThan(0);
    expect(s.violations).toEqual({});
    // TCP loses nothing; what the relay merged (updates closer than 1/tps) would show here.
    expect(s.derived.relayLossPercent).toBeLessThan(5);
  });

  it('mixes transports, spreads players over addresses and instances, and replaces leavers', async () => {
    const s = await runProtocolLoad(
      'nox-relay',
      { target, clients: 4, durationS: 2.5, churnS: 1, from: ['127.0.0.2', '127.0.0.3'] },
      { transport: 'mixed', tickRate: 10 },
    );
    expect(s.sessions.failed).toBe(0);
    expect(s.sessions.started).toBeGreaterThan(4);
    expect(s.violations).toEqual({});
  });

  it('a player the relay refuses fails with the reason (an instance that does not exist)', async () => {
    const s = await runProtocolLoad('nox-relay', { target, clients: 1, durationS: 3 }, { instances: ['9'] });
    expect(s.sessions.failed).toBe(1);
    expect(s.errors).toEqual({ ERR_NOX_ENTER: 1 });
    expect(s.errorMessages.ERR_NOX_ENTER).toMatch(/instance 9/);
    expect(s.ok).toBe(false);
  });
});
