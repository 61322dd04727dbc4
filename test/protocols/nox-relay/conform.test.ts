/**
 * `gamewire conform nox-relay`: every check passes against gamewire's relay over TCP and UDP,
 * and each rule broken on purpose (a packet-level proxy in front of the real relay) makes exactly
 * the check for that rule fail, with evidence that points at it.
 *
 * A conform run is mostly waiting (the connection timeout, kept and lapsing), and vitest runs at
 * most 5 tests at a time: so every run starts at once when the file does, each against a relay
 * (and a proxy) of its own, and each test awaits its own run and checks its results.
 */
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { type CheckResult, runChecks } from '../../../src/core/conform.js';
import { noxRelayConform } from '../../../src/protocols/nox-relay/conform/index.js';
import { type NoxRelayOptions, NoxRelayServer } from '../../../src/protocols/nox-relay/server.js';
import { failed, Runs } from '../../helpers/conform-runs.js';
import { type NoxMutation, NoxTcpProxy } from './conform-proxy.js';

/** Short timeouts so the keep-alive and timeout checks take seconds, not the default 15 s. */
const FAST: NoxRelayOptions = { connectionTimeoutMs: 3000, keepAliveIntervalMs: 1000 };

async function relay(options: NoxRelayOptions = {}): Promise<NoxRelayServer> {
  const s = new NoxRelayServer({ host: '127.0.0.1', port: 0, ...FAST, ...options });
  await s.start();
  return s;
}

async function conform(port: number, transport: 'tcp' | 'udp'): Promise<CheckResult[]> {
  const ctx = await noxRelayConform.prepare({ host: '127.0.0.1', port }, { transport });
  return runChecks(noxRelayConform, ctx);
}

/** A conform run against a relay of its own, through a proxy of its own when there is a mutation. */
async function conformRun(transport: 'tcp' | 'udp', mutation?: NoxMutation): Promise<CheckResult[]> {
  const s = await relay();
  try {
    if (mutation === undefined) return await conform(s.port, transport);
    const proxy = await NoxTcpProxy.start(s.port, mutation);
    try {
      return await conform(proxy.port, transport);
    } finally {
      await proxy.close();
    }
  } finally {
    await s.close();
  }
}

const detail = (rs: CheckResult[]) =>
  JSON.stringify(rs.filter((r) => r.status !== 'pass').map((r) => [r.id, r.message]));

const type = (p: Buffer) => p[4];
const withUid = (p: Buffer, uid: number) => {
  const out = Buffer.from(p);
  out.writeUInt16BE(uid, 2);
  return out;
};
/** When each player id last entered (from the Enter replies the proxy sees). */
const enteredAt = new Map<string, { at: number; conn: { closed: boolean } }>();
const enteredAs = new WeakMap<object, string>();

const cases: { rule: string; check: string; message: RegExp; mutation: NoxMutation }[] = [
  {
    rule: 'the Handshake reply without the request uid',
    check: 'handshake.fields',
    message: /has uid 0, not the request's 1/,
    mutation: { down: (p) => [type(p) === 0x01 ? withUid(p, 0) : p] },
  },
  {
    rule: 'a keep-alive interval equal to the timeout',
    check: 'keep-alive.advertised',
    message: /is not shorter than the \d+ s timeout/,
    mutation: {
      down: (p) => {
        if (type(p) !== 0x01) return [p];
        const out = Buffer.from(p);
        out.writeUInt16BE(p.readUInt16BE(18), 20);
        return [out];
      },
    },
  },
  {
    rule: 'the Latency client timestamp changed',
    check: 'latency',
    message: /client timestamp is \d+, not \d+/,
    mutation: {
      down: (p) => {
        if (type(p) !== 0x04) return [p];
        const out = Buffer.from(p);
        out[12]! ^= 0x01;
        return [out];
      },
    },
  },
  {
    rule: 'the Authentification reply without the request uid',
    check: 'auth',
    message: /no Authentification reply \(uid \d+\)/,
    mutation: { down: (p) => [type(p) === 0x05 ? withUid(p, 0) : p] },
  },
  {
    rule: 'the Enter reply without the request uid',
    check: 'enter',
    message: /no Enter reply \(uid \d+\)/,
    mutation: { down: (p) => [type(p) === 0x06 ? withUid(p, 0) : p] },
  },
  {
    rule: 'no Leave when a player quits',
    check: 'join-leave',
    message: /no Leave for player \d+/,
    mutation: { down: (p) => (type(p) === 0x11 ? [] : [p]) },
  },
  {
    rule: 'no Join for the players already there',
    check: 'join.catch-up',
    message: /no Join for player \d+ \(already in the instance\)/,
    mutation: {
      down: (p, conn) => {
        // Keyed by instance and player id: a player id is only unique within its instance
        // (byte 5 of Enter and of Join).
        // A Join is a catch-up when the joined player's Enter passed a proxy connection that
        // is still open before this connection's own Enter (an id's earlier holder, gone since,
        // does not count).
        if (type(p) === 0x06 && p[6] === 0) {
          const key = `${p[5]}:${p.readUInt16BE(11)}`;
          enteredAt.set(key, { at: performance.now(), conn });
          enteredAs.set(conn, key);
        }
        const me = enteredAs.get(conn);
        if (type(p) !== 0x10 || me === undefined) return [p];
        const joined = enteredAt.get(`${p[5]}:${p.readUInt16BE(10)}`);
        const mine = enteredAt.get(me);
        if (joined === undefined || mine === undefined || joined.conn.closed) return [p];
        return joined.at < mine.at ? [] : [p];
      },
    },
  },
  {
    rule: 'a relayed transform that loses its position',
    check: 'transform.relay',
    message: /does not carry the position sent/,
    mutation: {
      down: (p) => {
        if (type(p) !== 0x0b || p.readUInt16BE(9) !== 0 || (p[11]! & 0x01) === 0) return [p];
        const out = Buffer.from(p);
        out.writeFloatBE(0, 12);
        return [out];
      },
    },
  },
  {
    rule: 'every move relayed, however small',
    check: 'transform.threshold',
    message: /was relayed/,
    // The relay under the proxy keeps its threshold: make the small move big on the way in.
    mutation: {
      up: (p) => {
        if (type(p) !== 0x0b || p.readUInt16BE(9) !== 0 || (p[11]! & 0x01) === 0) return [p];
        const x = p.readFloatBE(12);
        if (x === 0 || Math.abs(x) >= 0.01) return [p];
        const out = Buffer.from(p);
        out.writeFloatBE(x * 1000, 12);
        return [out];
      },
    },
  },
  {
    rule: 'Segmentation ignored',
    check: 'segmentation',
    message: /reassembled request/,
    mutation: { up: (p) => (type(p) === 0x02 ? [] : [p]) },
  },
  {
    rule: 'Reliable entries handled last first',
    check: 'reliable',
    message: /out of order/,
    mutation: {
      up: (p) => {
        if (type(p) !== 0x03) return [p];
        const entries: Buffer[] = [];
        let off = 6;
        for (let i = 0; i < p[5]!; i++) {
          const len = p.readUInt16BE(off);
          entries.push(p.subarray(off, off + 2 + len));
          off += 2 + len;
        }
        return [Buffer.concat([p.subarray(0, 6), ...entries.reverse()])];
      },
    },
  },
  {
    rule: 'Latency does not count as activity',
    check: 'keep-alive.kept',
    message: /disconnected although it sent Latency every \d+ s/,
    // The proxy answers Latency itself, so the relay never hears of it.
    mutation: {
      up: (p, conn) => {
        if (type(p) !== 0x04) return [p];
        const reply = Buffer.alloc(21);
        reply.writeUInt16BE(21, 0);
        p.copy(reply, 2, 2, 4);
        reply[4] = 0x04;
        p.copy(reply, 5, 5, 13);
        reply.writeBigInt64BE(BigInt(Date.now()), 13);
        conn.toClient(reply);
        return [];
      },
    },
  },
  {
    rule: 'silent clients never timed out',
    check: 'keep-alive.timeout',
    message: /no Leave for player \d+ \d+ s after it went silent/,
    // The proxy pings the relay for a client that has gone quiet.
    mutation: {
      tick: (conn) => {
        if (performance.now() - conn.lastFromClient < 800) return;
        const ping = Buffer.alloc(13);
        ping.writeUInt16BE(13, 0);
        ping.writeUInt16BE(0xfffe, 2);
        ping[4] = 0x04;
        ping.writeBigInt64BE(BigInt(Date.now()), 5);
        conn.toServer(ping);
      },
      down: (p) => (type(p) === 0x04 && p.readUInt16BE(2) === 0xfffe ? [] : [p]),
    },
  },
  {
    rule: 'no Disconnect confirmation',
    check: 'disconnect',
    message: /no Disconnect confirmation/,
    mutation: { down: (p) => (type(p) === 0x00 ? [] : [p]) },
  },
];

const runs = new Runs();

beforeAll(() => {
  runs.start('tcp', () => conformRun('tcp'));
  runs.start('udp', () => conformRun('udp'));
  runs.start('no mutation', () => conformRun('tcp', {}));
  for (const c of cases) runs.start(c.rule, () => conformRun('tcp', c.mutation));
});
afterAll(() => runs.settled());

describe('against gamewire nox-relay', () => {
  test('tcp: every check passes', async () => {
    const results = await runs.get('tcp');
    expect(failed(results), detail(results)).toEqual([]);
    expect(results.filter((r) => r.status === 'skip')).toEqual([]);
  }, 60_000);

  // The checks behave like the reference v1 client: no address cookie over UDP. Its player id
  // echoed in its own transforms proves its address, so the Joins it waits for are not held back
  // by the reply budget of unproven sources.
  test('udp: every check passes (as a reference v1 client, no cookie)', async () => {
    const results = await runs.get('udp');
    expect(failed(results), detail(results)).toEqual([]);
    expect(results.filter((r) => r.status === 'skip')).toEqual([]);
  }, 60_000);
});

describe('against a relay that breaks one rule', () => {
  test('the proxy alone changes nothing', async () => {
    const results = await runs.get('no mutation');
    expect(failed(results), detail(results)).toEqual([]);
  }, 60_000);

  test.each(cases)(
    '$rule: only $check fails',
    async ({ rule, check, message }) => {
      const results = await runs.get(rule);
      expect(failed(results), detail(results)).toEqual([check]);
      const f = results.find((r) => r.id === check)!;
      expect(f.message).toMatch(message);
      expect(f.clientReaction).toBeTruthy();
    },
    90_000,
  );
});
