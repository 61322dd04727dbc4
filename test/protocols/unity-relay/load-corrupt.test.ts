/**
 * `gamewire load unity-relay` catches a corrupted RELAY: a UDP proxy between the players and a
 * spawned `serve unity-relay` flips one bit of one relayed RELAY's payload (the datagram decoded
 * and re-encoded with the protocol's own codec: the header, the allocation ids and the length are
 * intact), and the run reports `corrupt_relay` and fails, in process and as the real CLI (exit 1).
 * The flips land where the byte pattern alone did not look: the send time and a high bit of the
 * sequence number, which only the payload's CRC-32 covers, and a pattern byte.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodeMessage, encodeMessage } from '../../../src/protocols/unity-relay/messages.js';
import { runCliAsync } from '../../helpers/cli.js';
import {
  bitDifference,
  type Corrupt,
  CorruptingUdpProxy,
  expectOneViolation,
  flipOneBit,
} from '../../helpers/corrupting-proxy.js';
import { runProtocolLoad } from '../../helpers/load.js';
import { type Served, startUnityRelayServe } from '../../helpers/serve.js';

let relay: Served;
let api: string;
let relayPort = 0;

beforeAll(async () => {
  const started = await startUnityRelayServe();
  relay = started.relay;
  relayPort = started.ports.udp;
  api = started.api;
});

afterAll(async () => {
  await relay?.stop();
});

/**
 * Flips bit `bit` of byte `at` of the payload of the first RELAY from the relay; `diffs` gets the
 * bits that differ between the datagram and its corrupted copy.
 */
function flipInRelay(at: number, bit: number, diffs: number[][]): Corrupt {
  return (datagram) => {
    const m = decodeMessage(datagram);
    if (m.type !== 'RELAY' || m.data.length <= at) return undefined;
    const out = encodeMessage({ ...m, data: flipOneBit(m.data, at, bit) });
    diffs.push(bitDifference(datagram, out));
    return out;
  };
}

const cases = [
  { at: 12, bit: 3, what: 'the send time' },
  { at: 1, bit: 1, what: 'bit 9 of the sequence number' },
] as const;

describe('load unity-relay through a link that flips one bit of one RELAY', () => {
  for (const { at, bit, what } of cases) {
    it(`a flipped bit in ${what} is corrupt_relay, and the run fails`, async () => {
      const diffs: number[][] = [];
      const proxy = await CorruptingUdpProxy.start(
        { host: '127.0.0.1', port: relayPort },
        { corrupt: flipInRelay(at, bit, diffs) },
      );
      try {
        const s = await runProtocolLoad(
          'unity-relay',
          { target: { host: '127.0.0.1', port: proxy.port }, clients: 2, durationS: 2 },
          { api: [api], transport: 'udp', relayRate: 20, relayBytes: 64 },
        );
        expect(proxy.stats.corrupted).toBe(1);
        expect(diffs.map((d) => d.length)).toEqual([1]);
        expect(s.sessions).toMatchObject({ joined: 2, failed: 0 });
        expect(s.violations).toEqual({ corrupt_relay: 1 });
        expect(s.violationSamples[0]).toMatch(/^corrupt_relay: the CRC of #\d+ from player \d+$/);
        expect(s.counters.relaysReceived).toBeGreaterThan(10);
        expect(s.ok).toBe(false);
      } finally {
        await proxy.close();
      }
    });
  }

  it('`gamewire load unity-relay` names the violation and exits 1 (a flipped pattern byte)', async () => {
    const diffs: number[][] = [];
    const proxy = await CorruptingUdpProxy.start(
      { host: '127.0.0.1', port: relayPort },
      { corrupt: flipInRelay(40, 6, diffs) },
    );
    try {
      const r = await runCliAsync([
        'load',
        'unity-relay',
        '--target',
        `127.0.0.1:${proxy.port}`,
        '--api',
        api,
        '--clients',
        '2',
        '--duration',
        '2',
        '--json',
      ]);
      expect(diffs.map((d) => d.length)).toEqual([1]);
      expectOneViolation(r, 'corrupt_relay');
    } finally {
      await proxy.close();
    }
  });
});
