/**
 * The attacks of the hardening review, reproduced at a bounded scale: each one comes from
 * 127.0.0.1 while a legitimate client on 127.0.0.2 must still be served.
 */
import diagnosticsChannel from 'node:diagnostics_channel';
import net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { CloseReason, type ConnectionEvent } from '../../../src/core/tcp.js';
import {
  CloudServersProtocol,
  defineProtocol,
  LoginProtocol,
  method,
  qString,
  SessionProtocol,
  SessionRegistry,
} from '../../../src/protocols/rmc/index.js';
import { elapse, waitFor } from '../../helpers/wait.js';
import { RawPeer, requestFrame, startServer, type TestServer, typedRequestFrame } from './helpers.js';

let cleanup: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const f of cleanup.reverse()) await f();
  cleanup = [];
});

async function setup(...args: Parameters<typeof startServer>): Promise<TestServer> {
  const s = await startServer(...args);
  cleanup.push(() => s.listening.close(100));
  return s;
}

async function peer(port: number, from = '127.0.0.1'): Promise<RawPeer> {
  const p = await RawPeer.connect(port, from);
  cleanup.push(() => p.destroy());
  return p;
}

/** A socket that connects and then does whatever the attack needs (never reads). */
function attacker(port: number, from = '127.0.0.1'): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const s = net.connect({ host: '127.0.0.1', port, localAddress: from }, () => resolve(s));
    s.on('error', () => {});
    s.once('error', reject);
    cleanup.push(() => void s.destroy());
  });
}

const loginArgs = (token: string) => ({
  token,
  clientVersionInfo: { major: 1, minor: 0, patch: 0, build: 0, custom: '' },
  connectionData: { urlRegularProtocols: 'prudp:/', lstSpecialProtocols: [], urlSpecialProtocols: 'prudp:/' },
});
const LoginWithToken = LoginProtocol.byName.get('LoginWithToken_V1')!;
const CreateSession = SessionProtocol.byName.get('CreateSession_V1')!;
const GetDatacenters = CloudServersProtocol.byName.values().next().value!;

let nextCall = 1;
async function login(p: RawPeer, token: string) {
  const id = nextCall++;
  return p.call(typedRequestFrame(LoginWithToken, id, loginArgs(token)), id);
}

function failureName(m: Awaited<ReturnType<RawPeer['call']>>): string | undefined {
  if (m === undefined) return 'no answer';
  return m.type === 'error' ? `${m.namespace}:${m.code}` : undefined;
}

/** Subscribes to the connection channels for the test's duration. */
function watchConnections(): ConnectionEvent[] {
  const seen: ConnectionEvent[] = [];
  const names = ['open', 'close', 'drop'] as const;
  for (const n of names) {
    const f = (msg: unknown) => seen.push({ ...(msg as ConnectionEvent), kind: n } as ConnectionEvent);
    diagnosticsChannel.subscribe(`gamewire:connection:${n}`, f);
    cleanup.push(() => void diagnosticsChannel.unsubscribe(`gamewire:connection:${n}`, f));
  }
  return seen;
}

describe('rmc attack: one address holds every connection slot', () => {
  it('a per-address cap at accept keeps slots for a second address', async () => {
    const events = watchConnections();
    // The declaration's derived cap, max(64, 40 / 4), would let one address take every slot: 32.
    const s = await setup({ maxConnections: 40, maxConnectionsPerIp: 32 });
    // The attacker opens more silent connections than the server has slots.
    const held: net.Socket[] = [];
    for (let i = 0; i < 45; i++) held.push(await attacker(s.port));
    await waitFor(() => s.metrics.closed.get(CloseReason.PerIpLimit) === 13, {
      what: '13 refused at accept',
    });
    // 32 (the per-address cap) are kept, the other 13 refused at accept.
    expect(s.listening.port).toBe(s.port);
    expect(s.server.connectionStats()).toHaveLength(32);
    expect(s.metrics.closed.get(CloseReason.PerIpLimit)).toBe(13);
    expect(held).toHaveLength(45);
    // A player from another address still gets in and logs in.
    const player = await peer(s.port, '127.0.0.2');
    const answer = await login(player, 'player-one');
    expect(answer?.type).toBe('response');
    const drops = events.filter((e) => (e as { kind?: string }).kind === 'drop');
    expect(drops.length).toBeGreaterThanOrEqual(13);
    expect(drops[0]).toMatchObject({ protocol: 'rmc', transport: 'tcp', reason: 'per_ip_limit' });
    expect(drops[0]!.remote).toMatch(/^127\.0\.0\.1:\d+$/);
  });
});

describe('rmc attack: slowloris (silent connections, partial frames)', () => {
  it('closes a connection whose first frame, or a begun frame, does not complete in time', async () => {
    const events = watchConnections();
    const s = await setup({ frameTimeoutMs: 300, idleTimeoutMs: 0 });
    const silent = await peer(s.port);
    const partial = await peer(s.port);
    // Half a frame: a length announcing 1000 bytes, then 10 of them, then nothing.
    const head = Buffer.alloc(14);
    head.writeUInt32LE(1000, 0);
    partial.write(head);
    // A well-behaved client that keeps completing frames is never cut off.
    const good = await peer(s.port, '127.0.0.2');
    for (let i = 0; i < 6; i++) {
      const id = nextCall++;
      const m = await good.call(typedRequestFrame(GetDatacenters, id, {}), id);
      expect(m?.type).toBe('response');
      await elapse(100, 'the good client spreads its calls over several frame deadlines');
    }
    expect(await silent.waitClosed(5000)).toBe(true);
    expect(await partial.waitClosed(5000)).toBe(true);
    expect(good.closed).toBe(false);
    expect(s.metrics.closed.get(CloseReason.FrameTimeout)).toBe(2);
    const closes = () => events.filter((e) => (e as { kind?: string }).kind === 'close');
    await waitFor(() => closes().filter((e) => e.reason === 'frame_timeout').length === 2, {
      what: 'two frame_timeout close events',
    });
    expect(events.filter((e) => (e as { kind?: string }).kind === 'open').length).toBeGreaterThanOrEqual(3);
  });

  it('holds partial frames within the input budgets, and a second address is still served', async () => {
    const s = await setup({
      maxBufferedBytes: 4 * 1024 * 1024,
      maxBufferedBytesPerIp: 2 * 1024 * 1024,
      maxConnectionsPerIp: 0,
      frameTimeoutMs: 4000,
    });
    // 16 connections, each sending 900 kB of a frame announced as ~1 MiB and never finishing it.
    const body = Buffer.alloc(900_000, 0x41);
    body.writeUInt32LE(1024 * 1024 - 4, 0);
    const socks: net.Socket[] = [];
    for (let i = 0; i < 16; i++) {
      const a = await attacker(s.port);
      a.write(body);
      socks.push(a);
    }
    // Let the server read what it will: each connection holds its 900 kB, or is not read.
    await waitFor(
      () => {
        const stats = s.server.connectionStats();
        return (
          stats.length === 16 && stats.every((c) => c.readingPaused || c.bufferedInputBytes === body.length)
        );
      },
      { what: 'every partial frame held or its connection paused' },
    );
    const held = s.server.connectionStats().reduce((n, c) => n + c.bufferedInputBytes, 0);
    // One address may hold its budget plus at most one read (64 KiB) per connection.
    expect(held).toBeLessThanOrEqual(2 * 1024 * 1024 + 16 * 65_536 + 1024 * 1024);
    expect(held).toBeGreaterThan(0);
    expect(s.metrics.counters.get('input_budget_pauses')).toBeGreaterThan(0);
    // A player from another address gets answers.
    const player = await peer(s.port, '127.0.0.2');
    expect((await login(player, 'budget-player'))?.type).toBe('response');
    // Paused connections cannot see their peer leave; the frame deadline ends them all and
    // releases their memory.
    for (const a of socks) a.destroy();
    await waitFor(() => s.server.connectionStats().length <= 1, {
      what: 'the frame deadline ending them',
      timeoutMs: 15_000,
    });
    expect(s.server.connectionStats().reduce((n, c) => n + c.bufferedInputBytes, 0)).toBe(0);
  }, 30_000);
});

const FloodProtocol = defineProtocol('FloodProtocol', 'test', {
  Echo_V1: method({ args: { text: qString }, results: { text: qString }, layout: 'unknown', doc: 'echo' }),
  Never_V1: method({ args: {}, results: {}, layout: 'unknown', doc: 'never answers' }),
});

describe('rmc attack: connections that pipeline calls and never read', () => {
  it.each([
    ['never read their answers', false],
    ['read their answers and keep flooding', true],
  ])(
    'serves a second address within about one turn per flooder when flooders %s',
    async (_name, reading) => {
      const s = await setup({ maxConnectionsPerIp: 0 });
      s.server.register(FloodProtocol, {
        Echo_V1: (_ctx, { text }) => ({ text }),
        Never_V1: () => new Promise<Record<string, never>>(() => {}),
      });
      const FLOODERS = 40;
      const one = requestFrame('FloodProtocol', 'FloodProtocol::Echo_V1', 1, Buffer.from([1, 0, 0]));
      const burst = Buffer.concat(new Array<Buffer>(2000).fill(one));
      const flooders: net.Socket[] = [];
      let flooding = true;
      for (let i = 0; i < FLOODERS; i++) {
        const a = await attacker(s.port);
        if (reading) a.on('data', () => {});
        else a.pause(); // never reads
        const pump = () => {
          while (flooding && a.write(burst)) {}
        };
        a.on('drain', pump);
        pump();
        flooders.push(a);
      }
      cleanup.push(() => {
        flooding = false;
      });
      await waitFor(() => s.metrics.received > 100, { what: 'the flood under way' });
      // A player on another address makes sequential calls; count what others got meanwhile.
      const player = await peer(s.port, '127.0.0.2');
      const servedMeanwhile: number[] = [];
      const latencies: number[] = [];
      for (let i = 0; i < 20; i++) {
        const id = nextCall++;
        const before = s.metrics.received;
        const t0 = performance.now();
        const m = await player.call(typedRequestFrame(GetDatacenters, id, {}), id, 30_000);
        latencies.push(performance.now() - t0);
        servedMeanwhile.push(s.metrics.received - before - 1);
        expect(m?.type).toBe('response');
      }
      flooding = false;
      // Round-robin: about one turn (16 calls, 64 on a connection's own data when nobody waits)
      // per flooder between arrival and answer, plus slack for the scheduler and the test's own
      // event loop; never a whole backlog (over 130 000 before).
      const bound = 6 * FLOODERS * 16 + 2 * FLOODERS * 64;
      const worst = Math.max(...servedMeanwhile);
      expect(worst).toBeLessThanOrEqual(bound);
      latencies.sort((a, b) => a - b);
      process.stdout.write(
        `rmc fairness (${reading ? 'reading' : 'not reading'}): ${FLOODERS} flooders; calls served to others during one player call: max ${worst} (bound ${bound}); player latency max ${latencies.at(-1)!.toFixed(1)} ms\n`,
      );
    },
    60_000,
  );

  it('holds delivery at maxInFlight unanswered calls per connection', async () => {
    const s = await setup({ maxInFlight: 8 });
    s.server.register(FloodProtocol, {
      Echo_V1: (_ctx, { text }) => ({ text }),
      Never_V1: () => new Promise<Record<string, never>>(() => {}),
    });
    const a = await attacker(s.port);
    const frames: Buffer[] = [];
    for (let i = 0; i < 100; i++)
      frames.push(requestFrame('FloodProtocol', 'FloodProtocol::Never_V1', i + 1));
    a.write(Buffer.concat(frames));
    await waitFor(() => s.server.connectionStats()[0]?.readingPaused, {
      what: 'reading paused at the in-flight cap',
    });
    const stats = s.server.connectionStats()[0]!;
    expect(stats.inFlight).toBe(8);
    expect(stats.readingPaused).toBe(true);
    expect(s.metrics.received).toBe(8);
  });
});

describe('rmc attack: mass registration', () => {
  it('limits new accounts per address; another address can still register; existing accounts log in', async () => {
    const s = await setup({}, { registration: { perIpPerHour: 5 } });
    const p = await peer(s.port);
    const outcomes: (string | undefined)[] = [];
    for (let i = 0; i < 8; i++) outcomes.push(failureName(await login(p, `flood-${i}`)));
    expect(outcomes.slice(0, 5)).toEqual([undefined, undefined, undefined, undefined, undefined]);
    // RendezVous::LimitExceeded
    expect(outcomes.slice(5)).toEqual(['RendezVous:223', 'RendezVous:223', 'RendezVous:223']);
    expect(s.builtins.store.accountCount()).toBe(5);
    // An existing account is not a registration.
    expect(failureName(await login(p, 'flood-0'))).toBeUndefined();
    const other = await peer(s.port, '127.0.0.2');
    expect(failureName(await login(other, 'someone-else'))).toBeUndefined();
    expect(s.metrics.counters.get('registrations_refused')).toBe(3);
  });

  it('limits new accounts per server across addresses', async () => {
    const s = await setup({}, { registration: { perIpPerHour: 0, perHour: 3 } });
    const results: (string | undefined)[] = [];
    for (let i = 0; i < 5; i++) {
      const p = await peer(s.port, `127.0.0.${10 + i}`);
      results.push(failureName(await login(p, `many-${i}`)));
    }
    expect(results).toEqual([undefined, undefined, undefined, 'RendezVous:223', 'RendezVous:223']);
  });
});

describe('rmc attack: filling the session registry', () => {
  const createArgs = (n: number) => ({
    sessionType: 'PartySession',
    sessionId: Buffer.from(n.toString(16).padStart(32, '0'), 'hex'),
    reserved: Buffer.alloc(9),
    sessionKey: 'k',
  });

  async function createSessions(p: RawPeer, from: number, count: number): Promise<(string | undefined)[]> {
    const out: (string | undefined)[] = [];
    for (let i = 0; i < count; i++) {
      const id = nextCall++;
      out.push(failureName(await p.call(typedRequestFrame(CreateSession, id, createArgs(from + i)), id)));
    }
    return out;
  }

  it('caps session memberships per address, leaves no empty session behind, and frees them on disconnect', async () => {
    const s = await setup({}, { sessions: new SessionRegistry({ maxSessionsPerIp: 6 }) });
    const registry = s.builtins.sessions;
    const a = await peer(s.port);
    const b = await peer(s.port);
    await login(a, 'sess-a');
    await login(b, 'sess-b');
    const ra = await createSessions(a, 0, 4);
    const rb = await createSessions(b, 100, 4);
    expect(ra.every((r) => r === undefined)).toBe(true);
    expect(rb.slice(0, 2)).toEqual([undefined, undefined]);
    expect(rb.slice(2)).toEqual(['RendezVous:223', 'RendezVous:223']);
    expect(registry.sessions.size).toBe(6);
    // Another address is not affected.
    const c = await peer(s.port, '127.0.0.2');
    await login(c, 'sess-c');
    expect(await createSessions(c, 200, 2)).toEqual([undefined, undefined]);
    a.destroy();
    await waitFor(() => registry.sessions.size === 4, { what: 'the sessions of the closed connection gone' });
    expect(await createSessions(b, 300, 2)).toEqual([undefined, undefined]);
  });

  it('caps session memberships per account over all its connections', async () => {
    const s = await setup({}, { sessions: new SessionRegistry({ maxSessionsPerAccount: 3 }) });
    const a = await peer(s.port);
    const b = await peer(s.port, '127.0.0.3');
    await login(a, 'same-account');
    await login(b, 'same-account');
    expect(await createSessions(a, 1000, 2)).toEqual([undefined, undefined]);
    expect(await createSessions(b, 2000, 2)).toEqual([undefined, 'RendezVous:223']);
  });

  it('caps login sessions per account (ConcurrentLoginDenied)', async () => {
    const s = await setup();
    const peers: RawPeer[] = [];
    for (let i = 0; i < 10; i++) peers.push(await peer(s.port, `127.0.1.${i + 1}`));
    const results: (string | undefined)[] = [];
    for (const p of peers) results.push(failureName(await login(p, 'popular')));
    expect(results.filter((r) => r === undefined)).toHaveLength(8);
    expect(results.slice(8)).toEqual(['RendezVous:105', 'RendezVous:105']);
    // Logging in again on the same connection replaces, it does not add.
    expect(failureName(await login(peers[0]!, 'popular'))).toBeUndefined();
    peers[1]!.destroy();
    await waitFor(() => s.server.connectionStats().length === 9, {
      what: 'the server to see the connection go',
    });
    expect(failureName(await login(peers[9]!, 'popular'))).toBeUndefined();
  });
});
