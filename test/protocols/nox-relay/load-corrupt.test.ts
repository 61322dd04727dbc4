/**
 * `gamewire load nox-relay` catches a corrupted transform: a proxy between the players and a
 * spawned `serve nox-relay` flips one bit of one relayed transform's position or velocity (the
 * datagram decoded and re-encoded with the protocol's own codecs, so the packet's framing is
 * intact), and the run reports `corrupt_transform` and fails, in process and as the real CLI
 * (exit 1). Without the flip the same path reports nothing (load.test.ts runs it unproxied).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TransformType } from '../../../src/protocols/nox-relay/constants.js';
import {
  packetMeasure,
  readServerPacket,
  splitPackets,
  writeServerPacket,
} from '../../../src/protocols/nox-relay/packet.js';
import { WireReader, WireWriter } from '../../../src/wire/index.js';
import { runCliAsync } from '../../helpers/cli.js';
import {
  bitDifference,
  type Corrupt,
  CorruptingUdpProxy,
  expectOneViolation,
  flipFloat32Bit,
} from '../../helpers/corrupting-proxy.js';
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

const measure = packetMeasure();

/**
 * Flips bit `bit` of `vector.axis` (a float32) of the first player transform in a datagram from
 * the relay; the other packets of the datagram are re-encoded unchanged. `diffs` gets the bits
 * that differ between the datagram and its corrupted copy (one, in that float).
 */
function flipInTransform(
  vector: 'position' | 'velocity',
  axis: 'x' | 'y' | 'z',
  bit: number,
  diffs: number[][],
): Corrupt {
  return (datagram) => {
    const ranges = splitPackets(datagram, 0, datagram.length, measure, []);
    const w = new WireWriter({ initialCapacity: datagram.length });
    const reader = new WireReader();
    let hit = false;
    for (let i = 0; i < ranges.length; i += 2) {
      const { uid, message } = readServerPacket(reader.reset(datagram, ranges[i], ranges[i + 1]));
      if (!hit && message.type === 'Transform' && message.transformType === TransformType.OnPlayer) {
        const v = message[vector];
        if (v !== undefined) {
          v[axis] = flipFloat32Bit(v[axis], bit);
          hit = true;
        }
      }
      writeServerPacket(w, uid, message);
    }
    if (!hit) return undefined;
    const out = w.toBuffer();
    diffs.push(bitDifference(datagram, out));
    return out;
  };
}

describe('load nox-relay through a link that flips one bit of one transform', () => {
  it('a flipped low bit of a position (the send time) is corrupt_transform, and the run fails', async () => {
    const diffs: number[][] = [];
    // Bit 0 of position.y, the microseconds: changes the time by a fraction of a microsecond.
    const proxy = await CorruptingUdpProxy.start(target, {
      corrupt: flipInTransform('position', 'y', 0, diffs),
    });
    try {
      const s = await runProtocolLoad(
        'nox-relay',
        { target: { host: '127.0.0.1', port: proxy.port }, clients: 3, durationS: 2.5 },
        { tickRate: 10 },
      );
      expect(proxy.stats.corrupted).toBe(1);
      expect(diffs).toHaveLength(1);
      expect(diffs[0]).toHaveLength(1);
      expect(s.sessions).toMatchObject({ joined: 3, failed: 0 });
      expect(s.violations).toEqual({ corrupt_transform: 1 });
      expect(s.violationSamples[0]).toMatch(/^corrupt_transform: player \d+/);
      expect(s.counters.transformsReceived).toBeGreaterThan(10);
      expect(s.ok).toBe(false);
    } finally {
      await proxy.close();
    }
  });

  for (const [vector, axis, bit] of [
    ['velocity', 'x', 3], // the sequence number's mantissa
    ['velocity', 'y', 31], // the check value's sign
    ['position', 'x', 23], // the seconds' exponent
  ] as const) {
    it(`a flipped bit ${bit} of ${vector}.${axis} is caught too`, async () => {
      const diffs: number[][] = [];
      const proxy = await CorruptingUdpProxy.start(target, {
        corrupt: flipInTransform(vector, axis, bit, diffs),
      });
      try {
        const s = await runProtocolLoad(
          'nox-relay',
          { target: { host: '127.0.0.1', port: proxy.port }, clients: 2, durationS: 1.5 },
          { tickRate: 10 },
        );
        expect(proxy.stats.corrupted).toBe(1);
        expect(diffs.map((d) => d.length)).toEqual([1]);
        expect(s.sessions.failed).toBe(0);
        expect(s.violations).toEqual({ corrupt_transform: 1 });
        expect(s.ok).toBe(false);
      } finally {
        await proxy.close();
      }
    });
  }

  it('`gamewire load nox-relay` names the violation and exits 1', async () => {
    const diffs: number[][] = [];
    // Bit 1 of velocity.z, the sender's session number (an integer: its mantissa's low bits are 0).
    const proxy = await CorruptingUdpProxy.start(target, {
      corrupt: flipInTransform('velocity', 'z', 1, diffs),
    });
    try {
      const r = await runCliAsync([
        'load',
        'nox-relay',
        '--target',
        `127.0.0.1:${proxy.port}`,
        '--clients',
        '3',
        '--duration',
        '2.5',
        '--json',
      ]);
      expect(proxy.stats.corrupted).toBe(1);
      expect(diffs.map((d) => d.length)).toEqual([1]);
      expectOneViolation(r, 'corrupt_transform');
    } finally {
      await proxy.close();
    }
  });
});
