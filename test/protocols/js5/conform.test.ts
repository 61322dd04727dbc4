/**
 * `gamewire conform js5`: every check passes against gamewire's own server (each profile), and
 * each rule broken on purpose (a mutating proxy in front of the real server) makes exactly the
 * check for that rule fail, with evidence that points at the rule.
 */
import { beforeAll, describe, expect, test } from 'vitest';
import { type CheckResult, runChecks } from '../../../src/core/conform.js';
import { openStore } from '../../../src/protocols/js5/cache/store.js';
import { js5Conform } from '../../../src/protocols/js5/conform/index.js';
import type { Js5Profile } from '../../../src/protocols/js5/profiles.js';
import type { Js5Server } from '../../../src/protocols/js5/server.js';
import { runCliAsync } from '../../helpers/cli.js';
import { type Js5Mutation, Js5Proxy, withContainerData } from './conform-proxy.js';
import { demoCache, startServer } from './helpers.js';

/**
 * How long missing-group waits for the answer that must not come (2 s for users): a server on
 * loopback, or the proxy, that answers a missing group does so at once, well within this.
 */
const MISSING_GROUP_QUIET_MS = '500';

async function conform(port: number, profile: Js5Profile = '530', only?: string[]): Promise<CheckResult[]> {
  const ctx = await js5Conform.prepare(
    { host: '127.0.0.1', port },
    { profile, missingGroupQuietMs: MISSING_GROUP_QUIET_MS },
  );
  return runChecks(js5Conform, ctx, only === undefined ? {} : { only });
}

const failed = (rs: CheckResult[]) => rs.filter((r) => r.status === 'fail').map((r) => r.id);

/**
 * Every case gets its own server: the cases run concurrently, and handshake.full fills the
 * per-address cap (a server shared by concurrent runs would refuse the other runs' connections).
 */
async function withServer<T>(
  profile: Js5Profile,
  extra: Parameters<typeof startServer>[1],
  body: (server: Js5Server) => Promise<T>,
): Promise<T> {
  const { server } = await startServer(profile, extra);
  try {
    return await body(server);
  } finally {
    await server.close();
  }
}

/** A server (its own, see withServer) behind a proxy that applies `mutation`. */
async function withProxy<T>(
  profile: Js5Profile,
  mutation: Js5Mutation,
  body: (proxy: Js5Proxy) => Promise<T>,
): Promise<T> {
  // handshake.full needs a refusal within its 16 probe connections: a per-address cap of 8.
  return withServer(profile, { maxPerIp: 8 }, async (server) => {
    const proxy = await Js5Proxy.start(server.port, mutation);
    try {
      return await body(proxy);
    } finally {
      await proxy.close();
    }
  });
}

describe.concurrent('against gamewire js5', () => {
  test.each(['530', '435', 'osrs'] as Js5Profile[])(
    'profile %s: every check passes',
    async (profile) => {
      // handshake.full needs a refusal within its 16 probe connections: a per-address cap of 8
      // (the default, a quarter of the server, lets a crowd in).
      const { server } = await startServer(profile, { maxPerIp: 8 });
      try {
        const results = await conform(server.port, profile);
        expect(failed(results), JSON.stringify(results.filter((r) => r.status === 'fail'))).toEqual([]);
        const skipped = results.filter((r) => r.status === 'skip').map((r) => r.id);
        // Only the disconnect opcode is particular to one family (530).
        expect(skipped).toEqual(profile === '530' ? [] : ['disconnect']);
      } finally {
        await server.close();
      }
    },
    60_000,
  );
});

describe.concurrent('against a server that breaks one rule', () => {
  let exists: (archive: number, group: number) => boolean;
  beforeAll(() => {
    const s = openStore(demoCache());
    exists = (a, g) => s.read(a, g) !== undefined;
  });

  const isGroup = (plain: Buffer) => plain[0] !== 255;
  const isIndex = (plain: Buffer) => plain[0] === 255 && plain.readUInt16BE(1) !== 255;
  const flipLast = (plain: Buffer): Buffer => {
    const out = Buffer.from(plain);
    out[out.length - 1]! ^= 0x01;
    return out;
  };

  const cases: { rule: string; check: string; message: RegExp; mutation: Js5Mutation }[] = [
    {
      rule: 'a stray byte after the handshake reply',
      check: 'handshake.ok',
      message: /more than the one-byte reply/,
      mutation: { handshakeReply: (r) => (r === 0 ? Buffer.from([0, 0]) : Buffer.from([r])) },
    },
    {
      rule: 'any build accepted',
      check: 'handshake.out-of-date',
      message: /build 531 .* answered 0/,
      mutation: {
        clientHandshake: (b) => {
          b.writeUInt32BE(530, 1);
          return b;
        },
      },
    },
    {
      rule: 'a refused connection closed without 07/09',
      check: 'handshake.full',
      message: /closed without a reply/,
      mutation: { handshakeReply: (r) => (r === 9 || r === 7 ? 'close' : Buffer.from([r])) },
    },
    {
      rule: 'a master index shorter than the client needs',
      check: 'master-index',
      message: /20 entries; the 530 client creates 28/,
      mutation: {
        response: (p) => [
          p[0] === 255 && p.readUInt16BE(1) === 255 ? withContainerData(p, p.subarray(8, 8 + 160)) : p,
        ],
      },
    },
    {
      rule: 'markers counted from the container instead of the response',
      check: 'block-markers',
      message: /at offset 512/,
      mutation: {
        frame: (plain) => {
          const parts: Buffer[] = [plain.subarray(0, 3)];
          const c = plain.subarray(3);
          for (let i = 0; i < c.length; i += 512)
            parts.push(
              i === 0 ? c.subarray(0, 512) : Buffer.concat([Buffer.from([0xff]), c.subarray(i, i + 512)]),
            );
          return Buffer.concat(parts);
        },
      },
    },
    {
      rule: 'an index whose bytes differ from what the master index describes',
      check: 'index-crcs',
      message: /index \d+: CRC 0x[0-9a-f]{8} where the master index says/,
      mutation: { response: (p) => [isIndex(p) ? flipLast(p) : p] },
    },
    {
      rule: 'a group whose bytes differ from its index',
      check: 'groups.crc',
      message: /CRC 0x[0-9a-f]{8} where its index says/,
      mutation: { response: (p) => [isGroup(p) ? flipLast(p) : p] },
    },
    {
      rule: 'the version trailer sent inside the container',
      check: 'groups.crc',
      message: /carries its version trailer/,
      mutation: {
        response: (p) => {
          if (!isGroup(p)) return [p];
          const type = p[3]! & 0x7f;
          const data = p.subarray(type === 0 ? 8 : 12);
          return [withContainerData(p, Buffer.concat([data, Buffer.from([0, 1])]))];
        },
      },
    },
    {
      rule: 'no 0x80 flag on prefetch responses (530)',
      check: 'prefetch-flag',
      message: /prefetch response .* lacks the 0x80 flag/,
      mutation: {
        response: (p) => {
          const out = Buffer.from(p);
          out[3]! &= 0x7f;
          return [out];
        },
      },
    },
    {
      rule: 'an upgraded prefetch answered once',
      check: 'upgraded-prefetch',
      message: /1 of 2 responses read/,
      mutation: {
        request: (packet, conn) => {
          const k = `${packet[1]}/${packet.readUInt16BE(2)}`;
          return (packet[0] === 0 || packet[0] === 1) && conn.pending.includes(k) ? null : packet;
        },
      },
    },
    {
      rule: 'requests beyond 30 in flight ignored',
      check: 'in-flight',
      message: /\d+ of 40 requests answered/,
      mutation: {
        request: (packet, conn) =>
          (packet[0] === 0 || packet[0] === 1) && conn.pending.length >= 30 ? null : packet,
      },
    },
    {
      rule: 'logged-in/out packets treated as unknown opcodes',
      check: 'logged-in-out',
      message: /closed the connection/,
      mutation: { request: (packet) => (packet[0] === 2 || packet[0] === 3 ? 'close' : packet) },
    },
    {
      rule: 'the disconnect opcode ignored',
      check: 'disconnect',
      message: /stayed open 5 s after 07 000000/,
      mutation: { request: (packet) => (packet[0] === 7 ? null : packet) },
    },
    {
      rule: 'the rekey ignored',
      check: 'xor-rekey',
      message: /sent without XOR/,
      mutation: { request: (packet) => (packet[0] === 4 ? null : packet) },
    },
    {
      rule: 'a missing group answered with an empty container',
      check: 'missing-group',
      message: /\(not in its index\) was answered/,
      mutation: {
        request: (packet, conn) => {
          if (packet[0] !== 0 && packet[0] !== 1) return packet;
          const a = packet[1]!;
          const g = packet.readUInt16BE(2);
          if (a === 255 || exists(a, g)) return packet;
          conn.client.write(Buffer.from([a, g >>> 8, g & 0xff, 0, 0, 0, 0, 0]));
          return null;
        },
      },
    },
    {
      rule: 'one queue for every client, waiting on each socket',
      check: 'fairness',
      message: /not answered while the first client read nothing/,
      mutation: { globalFifo: true },
    },
  ];

  test('the proxy alone changes nothing', async () => {
    await withProxy('530', {}, async (proxy) => {
      expect(failed(await conform(proxy.port))).toEqual([]);
    });
  }, 60_000);

  // The checks that fail by waiting out the checker's window (5 s and so on) start first, so
  // that the quick cases run alongside them.
  const waitsOut = new Set(['disconnect', 'in-flight', 'fairness', 'upgraded-prefetch']);
  const slowFirst = [...cases].sort((a, b) => Number(waitsOut.has(b.check)) - Number(waitsOut.has(a.check)));

  test.each(slowFirst)(
    '$rule: only $check fails',
    async ({ check, message, mutation }) => {
      await withProxy('530', mutation, async (proxy) => {
        const results = await conform(proxy.port);
        expect(failed(results), JSON.stringify(results.filter((r) => r.status === 'fail'))).toEqual([check]);
        const f = results.find((r) => r.id === check)!;
        expect(f.message).toMatch(message);
        expect(f.clientReaction).toBeTruthy();
        expect(f.evidence?.sent ?? f.evidence?.received).toBeDefined();
      });
    },
    60_000,
  );
});

describe.concurrent('a failed check skips only what needs its result', () => {
  test('a (0, 0) hole in the master index fails master-index; the indexes and groups are still checked', async () => {
    // Archive 3's entry zeroed: the client would ask for that index forever; the others are fine.
    const hole: Js5Mutation = {
      response: (p) => {
        if (p[0] !== 255 || p.readUInt16BE(1) !== 255) return [p];
        const out = Buffer.from(p);
        out.fill(0, 8 + 3 * 8, 8 + 4 * 8);
        return [out];
      },
    };
    await withProxy('530', hole, async (proxy) => {
      const results = await conform(proxy.port);
      expect(failed(results)).toEqual(['master-index']);
      expect(results.find((r) => r.id === 'master-index')!.message).toMatch(/archive 3 has a \(0, 0\) entry/);
      const status = Object.fromEntries(results.map((r) => [r.id, r.status]));
      expect(status).toMatchObject({
        'block-markers': 'pass',
        'index-crcs': 'pass',
        'groups.crc': 'pass',
        'prefetch-flag': 'pass',
        'xor-rekey': 'pass',
        'missing-group': 'pass',
      });
      expect(results.find((r) => r.id === 'index-crcs')!.message).toMatch(/^27 indexes match/);
    });
  }, 60_000);
});

describe.concurrent("a 435 server like RuneJS's update server", () => {
  /**
   * runejs/update-server writes the idx255 file's length (6 × 13 = 78) as the master index's
   * length, then 13 CRCs and zeros: 78 bytes that are not a whole number of 4-byte entries. The
   * 435 client (UpdateServer.readJS5CRCTableResponse) reads CRC N at 5 + 4 × N and never checks
   * the length.
   */
  const runejsLength = (p: Buffer): Buffer[] => {
    if (p[0] !== 255 || p.readUInt16BE(1) !== 255) return [p];
    const crcs = p.subarray(8, 8 + 13 * 4);
    return [withContainerData(p, Buffer.concat([crcs, Buffer.alloc(6 * 13 - crcs.length)]))];
  };

  test('a master index whose length is 6 × 13 with 13 CRCs passes, with a warning', async () => {
    await withProxy('435', { response: runejsLength }, async (proxy) => {
      const results = await conform(proxy.port, '435');
      expect(failed(results), JSON.stringify(results.filter((r) => r.status === 'fail'))).toEqual([]);
      const m = results.find((r) => r.id === 'master-index')!;
      expect(m.status).toBe('pass');
      expect(m.message).toMatch(
        /^warning: the declared length 78 is not a multiple of 4 .*the 435 client never checks it.*; 13 archives read/,
      );
      // Every data check ran.
      const skipped = results.filter((r) => r.status === 'skip').map((r) => r.id);
      expect(skipped).toEqual(['disconnect']);
    });
  }, 60_000);

  test('the same server ignoring the rekey fails xor-rekey (master-index passes with its warning)', async () => {
    const noRekey: Js5Mutation = {
      response: runejsLength,
      request: (packet) => (packet[0] === 4 ? null : packet),
    };
    await withProxy('435', noRekey, async (proxy) => {
      const results = await conform(proxy.port, '435');
      expect(failed(results)).toEqual(['xor-rekey']);
      expect(results.find((r) => r.id === 'xor-rekey')!.message).toMatch(/sent without XOR/);
      expect(results.find((r) => r.id === 'master-index')).toMatchObject({
        status: 'pass',
        message: expect.stringMatching(/^warning: the declared length 78/),
      });
    });
  }, 60_000);
});

describe.concurrent('the command', () => {
  test('reports, exits 0 on a conforming server, 1 with the failed checks named otherwise', async () => {
    const { server } = await startServer('530');
    const proxy = await Js5Proxy.start(server.port, { request: (p) => (p[0] === 7 ? null : p) });
    try {
      // Both runs at once: the default per-address cap (250) admits both.
      const [ok, bad] = await Promise.all([
        runCliAsync(['conform', 'js5', '--target', `127.0.0.1:${server.port}`, '--json']),
        runCliAsync(['conform', 'js5', '--target', `127.0.0.1:${proxy.port}`, '--check', 'disconnect']),
      ]);
      expect(ok.code, ok.stderr).toBe(0);
      const report = JSON.parse(ok.stdout) as {
        ok: boolean;
        failed: number;
        checks: { id: string; status: string; sources: string[] }[];
      };
      expect(report.ok).toBe(true);
      expect(report.checks.map((c) => c.id)).toContain('upgraded-prefetch');
      expect(report.checks.every((c) => c.sources.length > 0)).toBe(true);

      expect(bad.code).toBe(1);
      expect(bad.stdout).toMatch(/^FAIL {2}disconnect/m);
      expect(bad.stdout).toMatch(/sent: {6}07000000/);
      expect(bad.stdout).toMatch(/a real client: /);
      expect(JSON.parse(bad.stderr).error.code).toBe('ERR_CONFORM_FAILED');
    } finally {
      await proxy.close();
      await server.close();
    }
  }, 60_000);

  test('--list names every check with its source; bad usage exits 2', async () => {
    const list = await runCliAsync(['conform', 'js5', '--list', '--profile', '435']);
    expect(list.code, list.stderr).toBe(0);
    expect(list.stdout).toMatch(/^disconnect: .*\[skipped here: the 435 client never sends opcode 7\]/m);
    expect(list.stdout).toMatch(
      /source: {3}Pazaz\/RT4-Client client\/src\/main\/java\/rt4\/Js5NetQueue.java \(loop\)/,
    );
    const noTarget = await runCliAsync(['conform', 'js5']);
    expect(noTarget.code).toBe(2);
    expect(JSON.parse(noTarget.stderr).error.message).toMatch(/--target/);
    const unknown = await runCliAsync(['conform', 'js5', '--target', '127.0.0.1:1', '--check', 'nope']);
    expect(unknown.code).toBe(2);
    const badProfile = await runCliAsync(['conform', 'js5', '--target', '127.0.0.1:1', '--profile', '999']);
    expect(badProfile.code).toBe(2);
  }, 60_000);
});
