/**
 * `gamewire conform rmc`: every check passes against `gamewire serve rmc` (both PRUDP profiles,
 * TCP in every variant), and each rule broken on purpose (a PRUDP proxy in front of the classic
 * server that rewrites one thing, or a TCP proxy) makes exactly the check for that rule fail.
 */
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { type CheckResult, runChecks } from '../../../src/core/conform.js';
import { silentLogger } from '../../../src/core/logger.js';
import { rmcConform } from '../../../src/protocols/rmc/conform/index.js';
import { registerBuiltins } from '../../../src/protocols/rmc/protocols/index.js';
import { Flag, PacketType } from '../../../src/protocols/rmc/prudp/constants.js';
import { RmcServer } from '../../../src/protocols/rmc/server.js';
import { type Served, startServe } from '../../helpers/serve.js';
import { classic, type ProxyPacket, type PrudpMutation, PrudpProxy, rewrite } from './conform-proxy.js';

const KEY = 'yl4NG7qZ';
/**
 * Loopback, and room for many conform runs at once from one address (each check opens its own
 * PRUDP connection; the default cap of 64 per address is for one client machine).
 */
const COMMON = ['--host', '127.0.0.1', '--port', '0', '--no-admin', '--prudp-max-connections-per-ip', '1000'];

async function conform(port: number, options: Record<string, string>): Promise<CheckResult[]> {
  const ctx = await rmcConform.prepare({ host: '127.0.0.1', port }, { accessKey: KEY, ...options });
  return runChecks(rmcConform, ctx);
}

const failed = (rs: CheckResult[]) => rs.filter((r) => r.status === 'fail').map((r) => r.id);
const ran = (rs: CheckResult[]) => rs.filter((r) => r.status !== 'skip').map((r) => r.id);
const detail = (rs: CheckResult[]) =>
  JSON.stringify(
    rs
      .filter((r) => r.status === 'fail')
      .map((r) => [
        r.id,
        r.message,
        r.evidence?.received ? Buffer.from(r.evidence.received).toString('hex') : undefined,
        r.evidence?.sent ? Buffer.from(r.evidence.sent).toString('hex') : undefined,
      ]),
  );

const PRUDP_CHECKS = [
  'prudp.syn',
  'prudp.connect',
  'rmc.call',
  'rmc.error',
  'prudp.ack',
  'prudp.checksum',
  'prudp.compression',
  'prudp.fragments-in',
  'prudp.fragments-out',
  'prudp.retransmit',
  'prudp.duplicate',
  'prudp.ping',
  'prudp.disconnect',
];

/**
 * Two pairs of servers: one for the runs that must pass, one behind the mutating proxies. The
 * tests run concurrently; a run that must pass shares its server with no proxied run, whose
 * load could delay an ACK past a retransmission.
 */
let hyperscape: Served;
let classicServer: Served;
let proxiedHyperscape: Served;
let proxiedClassic: Served;
beforeAll(async () => {
  const hyperscapeArgs = ['rmc', ...COMMON];
  const classicArgs = ['rmc', ...COMMON, '--prudp-profile', 'classic', '--prudp-access-key', KEY];
  [hyperscape, classicServer, proxiedHyperscape, proxiedClassic] = await Promise.all([
    startServe(hyperscapeArgs),
    startServe(classicArgs),
    startServe(hyperscapeArgs),
    startServe(classicArgs),
  ]);
}, 60_000);
afterAll(async () => {
  await Promise.all([
    hyperscape?.stop(),
    classicServer?.stop(),
    proxiedHyperscape?.stop(),
    proxiedClassic?.stop(),
  ]);
});

// Every test below is a conform run of its own (its own PRUDP connections, its own proxy): they
// run concurrently, against servers that admit 1000 connections per address.
describe.concurrent('against gamewire serve rmc', () => {
  test('PRUDP, hyperscape (ECDH, AES, the access key learned from the SYN): every check passes', async () => {
    const results = await conform(hyperscape.port('udp'), { variant: 'hyperscape' });
    expect(failed(results), detail(results)).toEqual([]);
    expect(ran(results)).toEqual(PRUDP_CHECKS);
  }, 90_000);

  test('PRUDP, classic (RC4, Kerberos to the secure server): every check passes', async () => {
    const results = await conform(classicServer.port('udp'), { variant: 'classic' });
    expect(failed(results), detail(results)).toEqual([]);
    expect(ran(results)).toEqual([...PRUDP_CHECKS.slice(0, 8), 'kerberos.secure', ...PRUDP_CHECKS.slice(8)]);
  }, 90_000);

  test.each([
    ['hyperscape', () => hyperscape],
    ['classic', () => classicServer],
  ] as const)(
    'TCP, %s: every check passes',
    async (variant, server) => {
      const results = await conform(server().port('tcp'), { transport: 'tcp', variant });
      expect(failed(results), detail(results)).toEqual([]);
      expect(ran(results)).toEqual(['rmc.call', 'rmc.error', 'tcp.framing']);
    },
    60_000,
  );

  test('TCP, nex-verbose: every check passes', async () => {
    const server = new RmcServer({ variant: 'nex-verbose', log: silentLogger() });
    registerBuiltins(server);
    const listening = await server.listen({ host: '127.0.0.1', port: 0 });
    try {
      const results = await conform(listening.port, { transport: 'tcp', variant: 'nex-verbose' });
      expect(failed(results), detail(results)).toEqual([]);
      expect(ran(results)).toEqual(['rmc.call', 'rmc.error', 'tcp.framing']);
    } finally {
      await listening.close();
    }
  }, 60_000);
});

/** The plaintext RMC message of a classic packet, or undefined. */
function plain(p: ProxyPacket): Buffer | undefined {
  if (p.payload.length === 0) return undefined;
  try {
    return classic.decode(p.payload, 1 << 20);
  } catch {
    return undefined;
  }
}

const isServerData = (p: ProxyPacket) =>
  p.fields.type === PacketType.DATA && (p.fields.flags & Flag.ACK) === 0;
const isAckOf = (type: number) => (p: ProxyPacket) =>
  p.fields.type === type && (p.fields.flags & Flag.ACK) !== 0;

describe.concurrent('against a classic server that breaks one rule', () => {
  const cases: {
    rule: string;
    check: string;
    message: RegExp;
    on?: 'classic';
    mutation: (proxy: () => PrudpProxy) => PrudpMutation;
  }[] = [
    {
      rule: 'a SYN-ACK without a connection signature',
      check: 'prudp.syn',
      message: /connection signature 0/,
      mutation: () => ({
        down: (p) => [isAckOf(PacketType.SYN)(p) ? rewrite(p, { connectionSignature: 0 }) : p],
      }),
    },
    {
      rule: "a CONNECT-ACK not signed with the client's signature",
      check: 'prudp.connect',
      message: /not with the client's/,
      mutation: () => ({
        down: (p) => [
          isAckOf(PacketType.CONNECT)(p)
            ? rewrite(p, { packetSignature: (p.fields.packetSignature + 1) >>> 0 })
            : p,
        ],
      }),
    },
    {
      rule: 'a response without the 0x8000 method bit',
      on: 'classic',
      check: 'rmc.call',
      message: /0x8000/,
      mutation: () => ({
        down: (p) => {
          const m = isServerData(p) && p.fields.fragmentId === 0 ? plain(p) : undefined;
          if (m === undefined || m.length < 14 || m[5] !== 1) return [p];
          const out = Buffer.from(m);
          out.writeUInt32LE(out.readUInt32LE(10) & 0x7fff, 10);
          return [rewrite(p, {}, classic.encode(out))];
        },
      }),
    },
    {
      rule: 'unknown methods left unanswered',
      on: 'classic',
      check: 'rmc.error',
      message: /no reliable DATA from the server/,
      mutation: () => ({
        down: (p) => {
          const m = isServerData(p) ? plain(p) : undefined;
          return m !== undefined && m.length >= 6 && m[5] === 0 ? [] : [p];
        },
      }),
    },
    {
      rule: 'ACKs not signed with the client’s signature',
      check: 'prudp.ack',
      message: /not signed with the client/,
      mutation: () => ({
        down: (p) => [isAckOf(PacketType.DATA)(p) ? rewrite(p, { packetSignature: 0 }) : p],
      }),
    },
    {
      rule: 'checksums not checked',
      check: 'prudp.checksum',
      message: /wrong checksum was acknowledged/,
      mutation: (proxy) => ({ upBad: (raw) => proxy().fix(raw) }),
    },
    {
      rule: 'compressed payloads not understood',
      on: 'classic',
      check: 'prudp.compression',
      message: /zlib-compressed \(ratio byte\) was not answered/,
      mutation: () => ({
        up: (p) => {
          if (p.fields.type !== PacketType.DATA || p.payload.length === 0) return [p];
          // The compression byte is the first plaintext byte; RC4("CD&ML") turns a 00 into 0f.
          const first = p.payload[0]! ^ 0x0f;
          return first === 0 ? [p] : [];
        },
      }),
    },
    {
      rule: 'fragments 1, 2, … ignored',
      check: 'prudp.fragments-in',
      message: /no reliable DATA from the server/,
      mutation: () => ({
        up: (p) => (p.fields.type === PacketType.DATA && (p.fields.fragmentId ?? 0) > 0 ? [] : [p]),
      }),
    },
    {
      rule: 'the secure CONNECT-ACK answers another check value',
      on: 'classic',
      check: 'kerberos.secure',
      message: /does not answer the ticket’s check/,
      mutation: () => ({
        down: (p) => {
          if (!isAckOf(PacketType.CONNECT)(p) || p.payload.length === 0) return [p];
          const m = plain(p);
          if (m === undefined || m.length !== 8) return [p];
          const out = Buffer.from(m);
          out.writeUInt32LE((out.readUInt32LE(4) + 1) >>> 0, 4);
          return [rewrite(p, {}, classic.encode(out))];
        },
      }),
    },
    {
      rule: 'answer fragments numbered 2, 1, 0',
      check: 'prudp.fragments-out',
      message: /numbered 2, 1, .*, not 1, 2, /,
      mutation: () => ({
        down: (p) => {
          if (!isServerData(p)) return [p];
          const f = p.fields.fragmentId ?? 0;
          return [f === 1 ? rewrite(p, { fragmentId: 2 }) : f === 2 ? rewrite(p, { fragmentId: 1 }) : p];
        },
      }),
    },
    {
      rule: 'unacknowledged answers never resent',
      check: 'prudp.retransmit',
      message: /answer sent again .* while unacknowledged/,
      mutation: () => ({
        down: (p, peer) => {
          if (!isServerData(p)) return [p];
          peer.state.seen ??= new Set<number>();
          const seen = peer.state.seen as Set<number>;
          if (seen.has(p.fields.sequenceId)) return [];
          seen.add(p.fields.sequenceId);
          return [p];
        },
      }),
    },
    {
      rule: 'an acknowledged answer resent on and on',
      check: 'prudp.retransmit',
      message: /sent again after it was acknowledged \(twice\)/,
      // The proxy plays a server that does not stop resending once acknowledged: an answer the
      // server resends (only the retransmission check withholds its ACK) comes again 0.6 s and
      // 1.2 s later, after the check has acknowledged it.
      mutation: () => ({
        down: (p, peer) => {
          if (!isServerData(p)) return [p];
          peer.state.answers ??= new Set<number>();
          const seen = peer.state.answers as Set<number>;
          if (seen.has(p.fields.sequenceId)) {
            for (const ms of [600, 1200])
              setTimeout(() => {
                try {
                  peer.toClient([p]);
                } catch {
                  // The run has ended and closed the proxy: nothing left to resend to.
                }
              }, ms).unref();
          }
          seen.add(p.fields.sequenceId);
          return [p];
        },
      }),
    },
    {
      rule: 'a repeated request run again',
      check: 'prudp.duplicate',
      message: /answered again, as a new message/,
      // The proxy plays a server without duplicate detection: a repeated request gets the last
      // answer again under a new sequence id, as if the call had run twice.
      mutation: () => ({
        up: (p, peer) => {
          if (p.fields.type !== PacketType.DATA || (p.fields.flags & Flag.ACK) !== 0) return [p];
          peer.state.requests ??= new Set<number>();
          const seen = peer.state.requests as Set<number>;
          const last = peer.state.lastAnswer as ProxyPacket | undefined;
          if (seen.has(p.fields.sequenceId) && last !== undefined) {
            const next = ((peer.state.lastSeq as number) + 1) & 0xffff;
            peer.state.lastSeq = next;
            peer.toClient([rewrite(last, { sequenceId: next })]);
          }
          seen.add(p.fields.sequenceId);
          return [p];
        },
        down: (p, peer) => {
          if (isServerData(p)) {
            peer.state.lastAnswer = p;
            peer.state.lastSeq = Math.max(
              (peer.state.lastSeq as number | undefined) ?? 0,
              p.fields.sequenceId,
            );
          }
          return [p];
        },
      }),
    },
    {
      rule: 'PING not acknowledged',
      check: 'prudp.ping',
      message: /no ACK of PING/,
      mutation: () => ({ down: (p) => (isAckOf(PacketType.PING)(p) ? [] : [p]) }),
    },
    {
      rule: 'DISCONNECT not acknowledged',
      check: 'prudp.disconnect',
      message: /no ACK of DISCONNECT/,
      mutation: () => ({ down: (p) => (isAckOf(PacketType.DISCONNECT)(p) ? [] : [p]) }),
    },
  ];

  const run = async (
    on: 'classic' | 'hyperscape',
    check: string,
    message: RegExp,
    mutation: (proxy: () => PrudpProxy) => PrudpMutation,
  ) => {
    const server = on === 'classic' ? proxiedClassic : proxiedHyperscape;
    let proxy: PrudpProxy | undefined;
    proxy = await PrudpProxy.start(
      server.port('udp'),
      KEY,
      mutation(() => proxy!),
    );
    try {
      const results = await conform(proxy.port, { variant: on, secureTarget: `127.0.0.1:${proxy.port}` });
      // The server's refusals, if any, say why a connect check failed under load.
      const refusals = server
        .stderr()
        .split('\n')
        .filter((l) => /refus|full|limit/i.test(l))
        .slice(-5)
        .join('\n');
      expect(failed(results), `${detail(results)}\n${refusals}`).toEqual([check]);
      const f = results.find((r) => r.id === check)!;
      expect(f.message).toMatch(message);
      expect(f.clientReaction).toBeTruthy();
    } finally {
      await proxy.close();
    }
  };

  // tcp.framing fails by waiting out its window: first, so that the other cases overlap it.
  test('a TCP server that reads one call per read: only tcp.framing fails', async () => {
    const upstream = proxiedClassic.port('tcp');
    const server = net.createServer((client) => {
      const up = net.connect(upstream, '127.0.0.1');
      client.on('error', () => up.destroy());
      up.on('error', () => client.destroy());
      client.on('close', () => up.destroy());
      up.pipe(client);
      // Each read: forward the first whole call in it (with what was held), drop the rest.
      let held = Buffer.alloc(0);
      client.on('data', (d: Buffer) => {
        held = Buffer.concat([held, d]);
        if (held.length < 4) return;
        const n = held.readUInt32LE(0) + 4;
        if (held.length < n) return;
        up.write(held.subarray(0, n));
        held = Buffer.alloc(0);
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const results = await conform((server.address() as net.AddressInfo).port, {
        transport: 'tcp',
        variant: 'classic',
      });
      expect(failed(results), detail(results)).toEqual(['tcp.framing']);
      expect(results.find((r) => r.id === 'tcp.framing')!.message).toMatch(
        /no second answer|answered call ids/,
      );
    } finally {
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  }, 60_000);

  test.each(['classic', 'hyperscape'] as const)(
    'the proxy alone changes nothing (%s)',
    async (on) => {
      const server = on === 'classic' ? proxiedClassic : proxiedHyperscape;
      const proxy = await PrudpProxy.start(server.port('udp'), KEY);
      try {
        const results = await conform(proxy.port, { variant: on });
        expect(failed(results), detail(results)).toEqual([]);
      } finally {
        await proxy.close();
      }
    },
    90_000,
  );

  // The cases whose check fails by waiting out its 8 s for a packet that never comes start
  // first, so that the quick cases run alongside them.
  const waitsOut = new Set([
    'rmc.error',
    'prudp.compression',
    'prudp.fragments-in',
    'prudp.retransmit',
    'prudp.ping',
    'prudp.disconnect',
  ]);
  const slowFirst = (list: typeof cases) =>
    [...list].sort((a, b) => Number(waitsOut.has(b.check)) - Number(waitsOut.has(a.check)));

  // A classic login's key comes from the server's key table, derived off its event loop at start
  // (prudp/serve.ts): classic runs go at once like the others.
  test.each(slowFirst(cases.filter((c) => c.on === 'classic')))(
    '$rule: only $check fails',
    // Retried: on a loaded CI runner a later check's SYN has gone unanswered within its 6 s. One
    // cause is fixed in the server (a SYN from the address and port of a connection it still
    // held was dropped, and the system can give a new socket, or the proxy's upstream, that
    // port); CPU starvation of the shared server remains. The rule's own check must fail every
    // time, so a broken rule still fails all three tries.
    { timeout: 120_000, retry: 2 },
    async ({ check, message, mutation }) => {
      await run('classic', check, message, mutation);
    },
  );

  test.each(slowFirst(cases.filter((c) => c.on === undefined)))(
    '$rule: only $check fails',
    async ({ check, message, mutation }) => {
      await run('hyperscape', check, message, mutation);
    },
    120_000,
  );
});
