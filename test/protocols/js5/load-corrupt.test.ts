/**
 * `gamewire load js5` catches a corrupted group: a JS5 proxy (conform-proxy.ts: it unframes each
 * response, XOR and block markers included, and frames what it is given) between the downloads
 * and a spawned `serve js5` flips one bit inside one group's data, past its first 0xFF block
 * marker, and re-frames it, so the markers and the header are intact and only the container's
 * bytes changed. The download reports `crc_mismatch`, reconnects (with a random XOR key, as the
 * 530 client does) and still completes, and the run fails: in process and as the real CLI
 * (exit 1). Without the flip the same downloads report nothing (load.test.ts).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCliAsync } from '../../helpers/cli.js';
import { bitDifference, expectOneViolation, flipOneBit } from '../../helpers/corrupting-proxy.js';
import { runProtocolLoad } from '../../helpers/load.js';
import { type Served, startServe } from '../../helpers/serve.js';
import { Js5Proxy, reframe } from './conform-proxy.js';

let server: Served;
let groups = 0;

beforeAll(async () => {
  server = await startServe(['js5', '--port', '0', '--host', '127.0.0.1', '--no-admin']);
  groups = Number(/(\d+) groups/.exec(server.endpoints[0]!.description)?.[1]);
  expect(groups).toBeGreaterThan(100);
});

afterAll(async () => {
  await server?.stop();
});

interface Flipped {
  group: string;
  /** Bits that differ between the framed response and its corrupted copy. */
  framedDiff: number[];
}

/**
 * A proxy that flips bit 5 of byte 700 of the first group response (not an index: archive 255)
 * big enough for that byte to sit in its container data after the first block marker.
 */
async function corruptingProxy(flipped: Flipped[]): Promise<Js5Proxy> {
  return Js5Proxy.start(server.port('tcp'), {
    response(plain) {
      // archive u8, group u16, compression u8 (0x80: prefetch), length i32, [decompressed i32], data.
      const head = (plain[3]! & 0x7f) === 0 ? 8 : 12;
      if (flipped.length > 0 || plain[0] === 255 || plain.length < 1200) return [plain];
      const at = 700;
      expect(at).toBeGreaterThan(head);
      const corrupted = flipOneBit(plain, at, 5);
      flipped.push({
        group: `${plain[0]}/${plain.readUInt16BE(1)}`,
        framedDiff: bitDifference(reframe(plain), reframe(corrupted)),
      });
      return [corrupted];
    },
  });
}

describe('load js5 through a link that flips one bit of one group', () => {
  it('the download reports crc_mismatch, reconnects and completes; the run fails', async () => {
    const flipped: Flipped[] = [];
    const proxy = await corruptingProxy(flipped);
    try {
      const s = await runProtocolLoad(
        'js5',
        { target: { host: '127.0.0.1', port: proxy.port }, clients: 1, durationS: 60 },
        { urgentRate: 5 },
      );
      expect(flipped).toHaveLength(1);
      // One bit of the framed response: not a marker (those are 0xFF every 512 bytes), not the header.
      expect(flipped[0]!.framedDiff).toHaveLength(1);
      expect(s.violations).toEqual({ crc_mismatch: 1 });
      expect(s.violationSamples[0]).toBe(`crc_mismatch: group ${flipped[0]!.group} from session 0`);
      expect(s.errors).toEqual({ ERR_JS5_CRC: 1 });
      expect(s.counters.reconnects).toBe(1);
      expect(s.sessions).toMatchObject({ started: 1, succeeded: 1, failed: 0 });
      expect(s.counters.groups).toBe(groups);
      expect(s.ok).toBe(false);
    } finally {
      await proxy.close();
    }
  });

  it('`gamewire load js5` names the violation and exits 1', async () => {
    const flipped: Flipped[] = [];
    const proxy = await corruptingProxy(flipped);
    try {
      const r = await runCliAsync(
        [
          'load',
          'js5',
          '--target',
          `127.0.0.1:${proxy.port}`,
          '--clients',
          '1',
          '--duration',
          '60',
          '--json',
        ],
        90_000,
      );
      expect(flipped.map((f) => f.framedDiff.length)).toEqual([1]);
      expectOneViolation(r, 'crc_mismatch', ` group ${flipped[0]!.group}`);
    } finally {
      await proxy.close();
    }
  }, 90_000);
});
