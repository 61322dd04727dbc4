/**
 * The store contract, run against both implementations: the embedded stores (MemoryStore,
 * SessionRegistry) and the fleet's Redis stores (a real redis-server), through a real RMC server
 * and RmcClient, with every limit. Then what only a fleet has: records of a dead node are
 * dropped, and while Redis is down control-plane calls fail with RendezVous::ConnectionFailure
 * while other calls on the same connection are answered.
 */
import { randomBytes } from 'node:crypto';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it, type TestContext } from 'vitest';
import { silentLogger } from '../../../src/core/logger.js';
import { ProtocolMetrics } from '../../../src/core/metrics.js';
import { type NodeAnnouncement, RedisNodeRegistry } from '../../../src/core/node-registry.js';
import { connectRedis, type RedisConnection } from '../../../src/core/redis.js';
import { RedisSessionStore } from '../../../src/protocols/rmc/fleet/redis-sessions.js';
import { FleetConnectionIds, RedisAccountStore } from '../../../src/protocols/rmc/fleet/redis-store.js';
import { FleetSweeper, type SweepStep, sweepPass } from '../../../src/protocols/rmc/fleet/sweep.js';
import {
  type AccountStore,
  CloudServersProtocol,
  cloudServersHandlers,
  DEFAULT_DATACENTERS,
  LoginProtocol,
  loginHandlers,
  MemoryStore,
  RmcClient,
  RmcError,
  RmcServer,
  SessionProtocol,
  SessionRegistry,
  type SessionStore,
  sessionHandlers,
} from '../../../src/protocols/rmc/index.js';
import { type RedisServer, rawRedis, startRedis } from '../../helpers/redis.js';
import { elapse, waitFor } from '../../helpers/wait.js';

interface Limits {
  maxAccounts?: number;
  maxLogins?: number;
  perIp?: number;
  perHour?: number;
  maxMembers?: number;
  maxSessions?: number;
  perConnection?: number;
  sessionsPerIp?: number;
  sessionsPerAccount?: number;
}

interface Built {
  store: AccountStore;
  sessions: SessionStore;
  close(): Promise<void>;
}

let redis: RedisServer | undefined;
beforeAll(async () => {
  redis = await startRedis();
}, 30_000);
afterAll(async () => {
  await redis?.dispose();
});

const sessionOptions = (l: Limits) => ({
  maxMembers: l.maxMembers ?? 100,
  maxSessions: l.maxSessions ?? 10_000,
  maxSessionsPerConnection: l.perConnection ?? 16,
  maxSessionsPerIp: l.sessionsPerIp ?? 64,
  maxSessionsPerAccount: l.sessionsPerAccount ?? 16,
});

/**
 * A Redis-backed node: its own key prefix, announced so its records count as alive (on the shared
 * Redis unless `url` says). Its TTL is long: a heartbeat held up on a busy machine (the tests run
 * concurrently, one writes 6000 records at once) must not pass the fleet's `beat-due`, which
 * would count as an outage and hold back the drops these tests check.
 */
async function redisNode(prefix: string, id: string, url = redis!.url) {
  const conn = await connectRedis(url, { prefix });
  const registry = new RedisNodeRegistry(conn, { ttlMs: 10_000 });
  const announcement = await registry.announce({
    id,
    kind: 'rmc-secure',
    region: 'test',
    endpoints: [],
    capacity: 100,
    load: 0,
    draining: false,
    startedAt: Date.now(),
    meta: { incarnation: 'i1' },
  });
  return {
    conn,
    registry,
    announcement,
    ctx: { redis: conn, nodeRef: `rmc-secure:${id}`, incarnation: 'i1', timeoutMs: 1000 },
  };
}

const backends: { name: string; build(l: Limits): Promise<Built> }[] = [
  {
    name: 'memory',
    async build(l) {
      const store = new MemoryStore(undefined, {
        maxAccounts: l.maxAccounts,
        maxSessionsPerAccount: l.maxLogins,
      });
      return { store, sessions: new SessionRegistry(sessionOptions(l)), close: () => store.close() };
    },
  },
  {
    name: 'redis',
    async build(l) {
      const node = await redisNode(`t${randomBytes(4).toString('hex')}:`, 'n1');
      return {
        store: new RedisAccountStore(node.ctx, {
          maxAccounts: l.maxAccounts,
          maxSessionsPerAccount: l.maxLogins,
          registrationsPerIpPerHour: l.perIp,
          registrationsPerHour: l.perHour,
        }),
        sessions: new RedisSessionStore(node.ctx, sessionOptions(l)),
        close: async () => {
          await node.registry.close();
          await node.conn.close();
        },
      };
    },
  },
];

const loginArgs = (token: string) => ({
  token,
  clientVersionInfo: { major: 1, minor: 0, patch: 0, build: 0, custom: '' },
  connectionData: { urlRegularProtocols: 'prudp:/', lstSpecialProtocols: [], urlSpecialProtocols: 'prudp:/' },
});
const jwt = (sub: string, name: string) =>
  `x.${Buffer.from(JSON.stringify({ sub, name })).toString('base64url')}.y`;
const sid = (n: number) => Buffer.from(n.toString(16).padStart(32, '0'), 'hex');
const createArgs = (n: number) => ({
  sessionType: 'PartySession',
  sessionId: sid(n),
  reserved: Buffer.alloc(9),
  sessionKey: `key-${n}`,
});

/**
 * What a test closes when it ends, last first. The tests run concurrently: each has its own
 * servers, connections and key prefix (or its own redis-server, where it stops, pauses or loads
 * one).
 */
function cleanupOf(ctx: TestContext): (() => Promise<void>)[] {
  const cleanup: (() => Promise<void>)[] = [];
  ctx.onTestFinished(async () => {
    for (const f of cleanup.reverse()) await f();
  });
  return cleanup;
}

/**
 * Two nodes of one fleet under `prefix`, made in the order of `ids`. On cleanup, closes the
 * registries `registries` names (a node whose registry the test closes itself, or leaves open as
 * a dead node's, is not named), then both connections.
 */
async function nodePair(
  cleanup: (() => Promise<void>)[],
  prefix: string,
  ids: [string, string],
  registries: 'first' | 'second' | 'both',
) {
  const first = await redisNode(prefix, ids[0]);
  const second = await redisNode(prefix, ids[1]);
  cleanup.push(async () => {
    if (registries !== 'second') await first.registry.close();
    if (registries !== 'first') await second.registry.close();
    await first.conn.close();
    await second.conn.close();
  });
  return [first, second] as const;
}

async function serve(cleanup: (() => Promise<void>)[], built: Built, l: Limits) {
  const server = new RmcServer({ log: silentLogger(), metrics: new ProtocolMetrics('rmc') });
  server.register(
    LoginProtocol,
    loginHandlers({
      store: built.store,
      registration: { perIpPerHour: l.perIp ?? 20, perHour: l.perHour ?? 10_000 },
    }),
  );
  server.register(SessionProtocol, sessionHandlers(built.sessions));
  server.register(CloudServersProtocol, cloudServersHandlers(DEFAULT_DATACENTERS));
  const listening = await server.listen({ host: '127.0.0.1', port: 0 });
  cleanup.push(async () => {
    await listening.close();
    await built.close();
  });
  const clients: RmcClient[] = [];
  cleanup.push(async () => {
    for (const c of clients) await c.close().catch(() => {});
  });
  const client = async (token?: string) => {
    const c = await RmcClient.connect({ host: '127.0.0.1', port: listening.port });
    clients.push(c);
    const pid =
      token === undefined
        ? undefined
        : (await c.call(LoginProtocol, 'LoginWithToken_V1', loginArgs(token))).userPid;
    return { c, pid };
  };
  return { client, built };
}

const until = async (f: () => Promise<boolean> | boolean, ms = 10_000) => {
  await waitFor(f, { what: String(f), timeoutMs: ms, intervalMs: 20 });
};

// First: it waits longest (an outage, then the grace), while the other tests run.
describe.concurrent('rmc fleet stores: a Redis outage longer than the node TTL', () => {
  it("Redis keeps its data and comes back after more than a TTL: a live node keeps its login sessions and session members through another node's first login, join and sweep; a dead node loses its records after the grace", async (ctx) => {
    if (redis === undefined) return ctx.skip();
    const cleanup = cleanupOf(ctx);
    const own = await startRedis({ persist: true });
    if (own === undefined) return ctx.skip();
    cleanup.push(() => own.dispose());
    const TTL = 1000;
    // The fleet counts as recovering for two TTLs after a gap, and at least the TTL plus this: a
    // reconnection's backoff and hooks (8 s by default; these connections back off 100 ms at most).
    const RECONNECT_ALLOWANCE = 3000;
    const prefix = `o${randomBytes(4).toString('hex')}:`;
    const node = async (id: string) => {
      const conn = await connectRedis(own.url, { prefix, maxBackoffMs: 100 });
      const registry = new RedisNodeRegistry(conn, { ttlMs: TTL, reconnectAllowanceMs: RECONNECT_ALLOWANCE });
      await registry.announce({
        id,
        kind: 'rmc-secure',
        region: 'test',
        endpoints: [],
        capacity: 100,
        load: 0,
        draining: false,
        startedAt: Date.now(),
        meta: { incarnation: `inc-${id}` },
      });
      const fleetCtx = {
        redis: conn,
        nodeRef: `rmc-secure:${id}`,
        incarnation: `inc-${id}`,
        timeoutMs: 1000,
      };
      cleanup.push(async () => {
        await registry.close();
        await conn.close();
      });
      return {
        conn,
        registry,
        store: new RedisAccountStore(fleetCtx),
        sessions: new RedisSessionStore(fleetCtx),
        ref: (connectionId: number) => `rmc-secure:${id}#inc-${id}#${connectionId}`,
      };
    };
    const a = await node('a');
    const b = await node('b');
    const c = await node('c');
    const pid = '55'.repeat(16);
    const spec = { id: 'ef'.repeat(16), type: 'PartySession', key: 'k', reserved: Buffer.alloc(9) };
    // A player on node a: logged in, in a session. One on node c, which will die in the outage.
    await a.store.login('acct', 'Ann');
    await a.store.startSession({ connectionId: 1, pid, accountId: 'acct', since: '' });
    await a.sessions.create(spec, { connectionId: 1, pid, name: 'Ann', address: '10.0.0.1' });
    await c.store.startSession({ connectionId: 3, pid: '66'.repeat(16), accountId: 'gone', since: '' });

    // Redis stops for more than a TTL; c dies meanwhile.
    await own.stop();
    await until(() => !a.conn.up && !b.conn.up);
    await c.registry.close();
    rawRedis(c.conn).disconnect();
    await elapse(TTL + 700, 'the outage must outlast the node TTL');
    // a is slow to come back (its reconnection backs off longer): b comes back first and acts.
    rawRedis(a.conn).disconnect();
    await own.start();
    await until(() => b.conn.up, 15_000);
    const admin = await connectRedis(own.url);
    cleanup.push(() => admin.close());
    const P = `${prefix}rmc:`;
    // The records of a and c survived the restart, their node records did not.
    expect(await rawRedis(admin).exists(`${prefix}node:rmc-secure:a`, `${prefix}node:rmc-secure:c`)).toBe(0);
    const present = async (ref: string) => ({
      login: await rawRedis(admin).hexists(`${P}logins`, ref),
      account: await rawRedis(admin).sismember(`${P}logins:acct:acct`, ref),
      member: await rawRedis(admin).hexists(`${P}session:${spec.id}:members`, ref),
    });
    const kept = { login: 1, account: 1, member: 1 };

    // b's first login of the same account (its per-account count meets a's login session), a join
    // of a's session, and a sweep.
    await b.store.startSession({ connectionId: 2, pid, accountId: 'acct', since: '' });
    const joined = await b.sessions.join(spec.id, {
      connectionId: 2,
      pid: '77'.repeat(16),
      name: 'Bo',
      address: '10.0.0.2',
    });
    expect(joined.members.sort()).toEqual([pid, '77'.repeat(16)].sort());
    await sweepPass(b.store, { pauseMs: 0 });
    await sweepPass(b.sessions, { pauseMs: 0 });
    expect(await present(a.ref(1))).toEqual(kept);
    // c is not known to be dead yet either.
    expect(await rawRedis(admin).hexists(`${P}logins`, c.ref(3))).toBe(1);

    // a comes back: its record is there the moment its connection is up.
    rawRedis(a.conn)
      .connect()
      .catch(() => {});
    await until(() => a.conn.up, 15_000);
    expect((await b.registry.live('rmc-secure')).map((n) => n.id).sort()).toEqual(['a', 'b']);
    // Past the grace (two TTLs, and at least a TTL plus the reconnect allowance, after beats
    // resumed; longer if a starved heartbeat on a busy machine looks like another gap), a sweep
    // drops c's records, and no sweep ever drops a's.
    await elapse(Math.max(2 * TTL, TTL + RECONNECT_ALLOWANCE) + 300, 'the sweep grace must pass');
    await waitFor(
      async () => {
        await sweepPass(b.store, { pauseMs: 0 });
        await sweepPass(b.sessions, { pauseMs: 0 });
        expect(await present(a.ref(1))).toEqual(kept);
        return (await rawRedis(admin).hexists(`${P}logins`, c.ref(3))) === 0;
      },
      { what: "a sweep dropping the dead node c's login session", timeoutMs: 30_000, intervalMs: 500 },
    );
  }, 90_000);
});

for (const backend of backends) {
  describe.concurrent(`rmc store contract: ${backend.name}`, () => {
    const setup = async (ctx: TestContext, l: Limits = {}) => {
      if (backend.name === 'redis' && redis === undefined) return undefined;
      return serve(cleanupOf(ctx), await backend.build(l), l);
    };

    it('creates an account on first login, keeps its PID, updates its name; PIDs differ', async (ctx) => {
      const s = await setup(ctx);
      if (s === undefined) return ctx.skip();
      const a = await s.client(jwt('ann', 'Ann'));
      const again = await s.client(jwt('ann', 'Annie'));
      const bob = await s.client(jwt('bob', 'Bob'));
      expect(again.pid!.equals(a.pid!)).toBe(true);
      expect(bob.pid!.equals(a.pid!)).toBe(false);
      expect((await s.built.store.account('ann'))?.name).toBe('Annie');
      expect(await s.built.store.accountCount()).toBe(2);
    });

    it('maxAccounts: one more new account is RendezVous::LimitExceeded, existing ones still log in', async (ctx) => {
      const s = await setup(ctx, { maxAccounts: 3 });
      if (s === undefined) return ctx.skip();
      for (let i = 0; i < 3; i++) await s.client(`acct-${i}`);
      const { c } = await s.client();
      await expect(c.call(LoginProtocol, 'LoginWithToken_V1', loginArgs('acct-3'))).rejects.toMatchObject({
        namespace: 'RendezVous',
        code: 0xdf,
      });
      expect((await c.call(LoginProtocol, 'LoginWithToken_V1', loginArgs('acct-1'))).userPid).toHaveLength(
        16,
      );
      expect(await s.built.store.accountCount()).toBe(3);
    });

    it('registration limits: per address per hour, and per server per hour', async (ctx) => {
      const s = await setup(ctx, { perIp: 2, perHour: 10 });
      if (s === undefined) return ctx.skip();
      const { c } = await s.client();
      for (let i = 0; i < 2; i++) await c.call(LoginProtocol, 'LoginWithToken_V1', loginArgs(`ip-${i}`));
      await expect(c.call(LoginProtocol, 'LoginWithToken_V1', loginArgs('ip-2'))).rejects.toMatchObject({
        code: 0xdf,
      });
      // An existing account is not a registration.
      await c.call(LoginProtocol, 'LoginWithToken_V1', loginArgs('ip-0'));
      const t = await setup(ctx, { perIp: 0, perHour: 3 });
      if (t === undefined) return ctx.skip();
      const d = (await t.client()).c;
      for (let i = 0; i < 3; i++) await d.call(LoginProtocol, 'LoginWithToken_V1', loginArgs(`all-${i}`));
      await expect(d.call(LoginProtocol, 'LoginWithToken_V1', loginArgs('all-3'))).rejects.toMatchObject({
        code: 0xdf,
      });
      expect(await t.built.store.accountCount()).toBe(3);
    });

    it('login sessions per account: one more is ConcurrentLoginDenied, a disconnect frees one', async (ctx) => {
      const s = await setup(ctx, { maxLogins: 2 });
      if (s === undefined) return ctx.skip();
      const first = await s.client('same');
      await s.client('same');
      const { c } = await s.client();
      await expect(c.call(LoginProtocol, 'LoginWithToken_V1', loginArgs('same'))).rejects.toMatchObject({
        namespace: 'RendezVous',
        code: 0x69,
      });
      expect((await s.built.store.sessions()).length).toBe(2);
      await first.c.close();
      await until(async () => (await s.built.store.sessions()).length === 1);
      await c.call(LoginProtocol, 'LoginWithToken_V1', loginArgs('same'));
    });

    it('sessions: create, duplicate, void, join (members with names), full, leave, cleanup on disconnect', async (ctx) => {
      const s = await setup(ctx, { maxMembers: 2 });
      if (s === undefined) return ctx.skip();
      const a = await s.client(jwt('a', 'Alice'));
      const b = await s.client(jwt('b', 'Bob'));
      const c = await s.client(jwt('c', 'Carol'));
      expect(await a.c.call(SessionProtocol, 'CreateSession_V1', createArgs(1))).toMatchObject({
        memberCount: 1,
      });
      // The creator repeating itself is no error; anyone else creating it is.
      expect(await a.c.call(SessionProtocol, 'CreateSession_V1', createArgs(1))).toMatchObject({
        memberCount: 1,
      });
      await expect(b.c.call(SessionProtocol, 'CreateSession_V1', createArgs(1))).rejects.toMatchObject({
        code: 0x70,
      });
      await expect(b.c.call(SessionProtocol, 'JoinSession_V1', { sessionId: sid(2) })).rejects.toMatchObject({
        code: 0x73,
      });
      const joined = await b.c.call(SessionProtocol, 'JoinSession_V1', { sessionId: sid(1) });
      expect(joined.sessionType).toBe('PartySession');
      expect(joined.members.map((m) => m.toString('hex')).sort()).toEqual(
        [a.pid!.toString('hex'), b.pid!.toString('hex')].sort(),
      );
      await expect(c.c.call(SessionProtocol, 'JoinSession_V1', { sessionId: sid(1) })).rejects.toMatchObject({
        code: 0xc8,
      });
      const listed = await s.built.sessions.listSessions();
      expect(listed).toHaveLength(1);
      expect(listed[0]!.members.map((m) => m.name).sort()).toEqual(['Alice', 'Bob']);
      expect(listed[0]).toMatchObject({
        type: 'PartySession',
        key: 'key-1',
        ownerPid: a.pid!.toString('hex'),
      });
      await b.c.call(SessionProtocol, 'LeaveSession_V1', { sessionId: sid(1) });
      await expect(b.c.call(SessionProtocol, 'LeaveSession_V1', { sessionId: sid(1) })).rejects.toMatchObject(
        {
          code: 0x73,
        },
      );
      await c.c.call(SessionProtocol, 'JoinSession_V1', { sessionId: sid(1) });
      await a.c.close();
      await c.c.close();
      await until(async () => (await s.built.sessions.listSessions()).length === 0);
      await expect(b.c.call(SessionProtocol, 'JoinSession_V1', { sessionId: sid(1) })).rejects.toMatchObject({
        code: 0x73,
      });
    });

    it('session limits: most sessions, per connection, per address, per account (LimitExceeded)', async (ctx) => {
      const s = await setup(ctx, {
        maxSessions: 3,
        perConnection: 2,
        sessionsPerIp: 4,
        sessionsPerAccount: 3,
      });
      if (s === undefined) return ctx.skip();
      const a = await s.client('p1');
      await a.c.call(SessionProtocol, 'CreateSession_V1', createArgs(1));
      await a.c.call(SessionProtocol, 'CreateSession_V1', createArgs(2));
      // Per connection: 2.
      await expect(a.c.call(SessionProtocol, 'CreateSession_V1', createArgs(3))).rejects.toMatchObject({
        code: 0xdf,
      });
      const a2 = await s.client('p1');
      await a2.c.call(SessionProtocol, 'CreateSession_V1', createArgs(3));
      // Most sessions: 3.
      await expect(a2.c.call(SessionProtocol, 'CreateSession_V1', createArgs(4))).rejects.toMatchObject({
        code: 0xdf,
      });
      // Per account: 3 memberships already.
      await expect(a2.c.call(SessionProtocol, 'JoinSession_V1', { sessionId: sid(1) })).rejects.toMatchObject(
        {
          code: 0xdf,
        },
      );
      // Per address: another account from the same address gets one more (4), then no more.
      const b = await s.client('p2');
      await b.c.call(SessionProtocol, 'JoinSession_V1', { sessionId: sid(1) });
      await expect(b.c.call(SessionProtocol, 'JoinSession_V1', { sessionId: sid(2) })).rejects.toMatchObject({
        code: 0xdf,
      });
      // Leaving frees room.
      await a.c.call(SessionProtocol, 'LeaveSession_V1', { sessionId: sid(2) });
      await b.c.call(SessionProtocol, 'JoinSession_V1', { sessionId: sid(3) });
    });
  });
}

describe.concurrent('rmc fleet stores: what only Redis has', () => {
  it('two nodes share sessions; a dead node (record expired) loses its memberships', async (ctx) => {
    if (redis === undefined) return ctx.skip();
    const cleanup = cleanupOf(ctx);
    const prefix = `t${randomBytes(4).toString('hex')}:`;
    const [n1, n2] = await nodePair(cleanup, prefix, ['n1', 'n2'], 'second');
    const s1 = new RedisSessionStore(n1.ctx, { maxMembers: 2 });
    const s2 = new RedisSessionStore(n2.ctx, { maxMembers: 2 });
    const spec = { id: 'ab'.repeat(16), type: 'PartySession', key: 'k', reserved: Buffer.alloc(9) };
    await s1.create(spec, { connectionId: 1, pid: '11'.repeat(16), name: 'one', address: '10.0.0.1' });
    const joined = await s2.join(spec.id, {
      connectionId: 1,
      pid: '22'.repeat(16),
      name: 'two',
      address: '10.0.0.2',
    });
    expect(joined.members.sort()).toEqual(['11'.repeat(16), '22'.repeat(16)]);
    // Full at 2; then node 1 dies (its record goes, as when its TTL runs out).
    await expect(
      s2.join(spec.id, { connectionId: 2, pid: '33'.repeat(16), name: 'three', address: '10.0.0.3' }),
    ).rejects.toMatchObject({ code: 0xc8 });
    await n1.registry.close();
    const after = await s2.join(spec.id, {
      connectionId: 2,
      pid: '33'.repeat(16),
      name: 'three',
      address: '10.0.0.3',
    });
    expect(after.members.sort()).toEqual(['22'.repeat(16), '33'.repeat(16)]);
    const listed = await s2.listSessions();
    expect(listed[0]!.members.map((m) => m.node)).toEqual(['rmc-secure:n2', 'rmc-secure:n2']);
  });

  it('a node restarted under the same id (new incarnation) neither inherits nor collides with its old records', async (ctx) => {
    if (redis === undefined) return ctx.skip();
    const cleanup = cleanupOf(ctx);
    const prefix = `t${randomBytes(4).toString('hex')}:`;
    const old = await redisNode(prefix, 'same');
    const spec = { id: 'cd'.repeat(16), type: 'PartySession', key: 'k', reserved: Buffer.alloc(9) };
    const member = { connectionId: 1, pid: '44'.repeat(16), name: 'ghost', address: '10.0.0.4' };
    await new RedisSessionStore(old.ctx).create(spec, member);
    await new RedisAccountStore(old.ctx, { maxSessionsPerAccount: 1 }).startSession({
      connectionId: 1,
      pid: member.pid,
      accountId: 'acct',
      since: '',
    });
    // The process goes; a new one announces the same id with another incarnation at once.
    await old.announcement.stop();
    const conn = await connectRedis(redis.url, { prefix });
    const registry = new RedisNodeRegistry(conn, { ttlMs: 10_000 });
    await registry.announce({
      id: 'same',
      kind: 'rmc-secure',
      region: 'test',
      endpoints: [],
      capacity: 100,
      load: 0,
      draining: false,
      startedAt: Date.now(),
      meta: { incarnation: 'i2' },
    });
    cleanup.push(async () => {
      await registry.close();
      await conn.close();
      await old.conn.close();
    });
    const storeCtx = { redis: conn, nodeRef: 'rmc-secure:same', incarnation: 'i2', timeoutMs: 1000 };
    const joined = await new RedisSessionStore(storeCtx)
      .join(spec.id, { ...member, name: 'new' })
      .catch((e) => e);
    // The old member was dropped with its session: the id is free again.
    expect(joined).toMatchObject({ code: 0x73 });
    // Its login session no longer holds the account's only slot.
    await new RedisAccountStore(storeCtx, { maxSessionsPerAccount: 1 }).startSession({
      connectionId: 1,
      pid: member.pid,
      accountId: 'acct',
      since: '',
    });
  });

  it('a disconnect while Redis does not answer is cleaned up once it does', async (ctx) => {
    if (redis === undefined) return ctx.skip();
    const cleanup = cleanupOf(ctx);
    // Its own redis-server: CLIENT PAUSE below would hold every other test's writes.
    const own = await startRedis();
    if (own === undefined) return ctx.skip();
    cleanup.push(() => own.dispose());
    const prefix = `t${randomBytes(4).toString('hex')}:`;
    const node = await redisNode(prefix, 'n1', own.url);
    const storeCtx = { ...node.ctx, timeoutMs: 300 };
    const sessions = new RedisSessionStore(storeCtx);
    const store = new RedisAccountStore(storeCtx);
    const s = await serve(
      cleanup,
      {
        store,
        sessions,
        close: async () => {
          await node.registry.close();
          await node.conn.close();
        },
      },
      {},
    );
    const a = await s.client(jwt('leaver', 'leaver'));
    const b = await s.client(jwt('stayer', 'stayer'));
    await a.c.call(SessionProtocol, 'CreateSession_V1', createArgs(1));
    await b.c.call(SessionProtocol, 'JoinSession_V1', { sessionId: sid(1) });
    const admin = await connectRedis(own.url);
    cleanup.push(() => admin.close());
    await admin.client.call('CLIENT', 'PAUSE', '1500', 'WRITE');
    await a.c.close();
    await until(() => sessions.cleanup.size === 1 && store.cleanup.size === 1);
    await until(() => sessions.cleanup.size === 0 && store.cleanup.size === 0, 15_000);
    const listed = await sessions.listSessions();
    expect(listed[0]!.members.map((m) => m.name)).toEqual(['stayer']);
    expect((await store.sessions()).map((x) => x.accountId)).toEqual(['stayer']);
  }, 30_000);

  it('fleet connection ids: blocks from two processes never overlap', async (ctx) => {
    if (redis === undefined) return ctx.skip();
    const cleanup = cleanupOf(ctx);
    const prefix = `t${randomBytes(4).toString('hex')}:`;
    const [n1, n2] = await nodePair(cleanup, prefix, ['n1', 'n2'], 'both');
    const a = new FleetConnectionIds(n1.ctx, 8);
    const b = new FleetConnectionIds(n2.ctx, 8);
    const ids = await Promise.all(Array.from({ length: 100 }, (_, i) => (i % 2 === 0 ? a : b).take()));
    expect(new Set(ids).size).toBe(100);
    expect(Math.min(...ids)).toBeGreaterThan(0);
  });

  it('Redis down: logins and session calls fail with RendezVous::ConnectionFailure, other calls on the connection are answered; recovery', async (ctx) => {
    if (redis === undefined) return ctx.skip();
    const cleanup = cleanupOf(ctx);
    // Its own redis-server, so stopping it does not disturb the other tests.
    const own = await startRedis();
    if (own === undefined) return ctx.skip();
    cleanup.push(() => own.dispose());
    const conn: RedisConnection = await connectRedis(own.url, { prefix: 'down:', maxBackoffMs: 200 });
    const registry = new RedisNodeRegistry(conn, { ttlMs: 2000 });
    const announcement: NodeAnnouncement = await registry.announce({
      id: 'n1',
      kind: 'rmc-secure',
      region: 'test',
      endpoints: [],
      capacity: 10,
      load: 0,
      draining: false,
      startedAt: Date.now(),
      meta: { incarnation: 'i1' },
    });
    const storeCtx = { redis: conn, nodeRef: 'rmc-secure:n1', incarnation: 'i1', timeoutMs: 1000 };
    const built: Built = {
      store: new RedisAccountStore(storeCtx),
      sessions: new RedisSessionStore(storeCtx),
      close: async () => {
        await announcement.stop();
        await conn.close();
      },
    };
    const s = await serve(cleanup, built, {});
    const a = await s.client('player');
    await a.c.call(SessionProtocol, 'CreateSession_V1', createArgs(1));
    await own.stop();
    await until(() => !conn.up);
    const failing = a.c.call(SessionProtocol, 'CreateSession_V1', createArgs(2));
    const joinFailing = a.c.call(SessionProtocol, 'JoinSession_V1', { sessionId: sid(1) });
    const other = a.c.call(CloudServersProtocol, 'GetDatacenters_V1', {} as never);
    await expect(failing).rejects.toMatchObject({ namespace: 'RendezVous', code: 0x01 });
    await expect(joinFailing).rejects.toMatchObject({ namespace: 'RendezVous', code: 0x01 });
    expect(await other).toBeDefined();
    const { c } = await s.client();
    await expect(c.call(LoginProtocol, 'LoginWithToken_V1', loginArgs('new-one'))).rejects.toMatchObject({
      namespace: 'RendezVous',
      code: 0x01,
    });
    await own.start();
    await until(() => conn.up, 15_000);
    await announcement.flush();
    // Back: logins and sessions work again (this Redis kept no data across the restart).
    await c.call(LoginProtocol, 'LoginWithToken_V1', loginArgs('new-one'));
    expect(await a.c.call(SessionProtocol, 'CreateSession_V1', createArgs(3))).toMatchObject({
      memberCount: 1,
    });
  }, 60_000);
});

describe.concurrent('rmc fleet sweeper', () => {
  it('a pass that meets an outage stops and the next starts over; close() ends a pass between steps', async () => {
    const seen: string[] = [];
    let failAt: string | undefined = '2';
    const target = {
      async sweepStep(cursor: string) {
        seen.push(cursor);
        if (cursor === failAt) throw RmcError.of('RendezVous::ConnectionFailure', 'down');
        const next = String((Number(cursor) + 1) % 4);
        return { cursor: next, scanned: 1, dropped: 0 };
      },
    };
    expect(await sweepPass(target, { pauseMs: 0 })).toMatchObject({ complete: false, steps: 2 });
    failAt = undefined;
    expect(await sweepPass(target, { pauseMs: 0 })).toMatchObject({ complete: true, steps: 4 });
    expect(seen).toEqual(['0', '1', '2', '0', '1', '2', '3']);
    seen.length = 0;
    const sweeper = new FleetSweeper([target], 60_000, { pauseMs: 50 });
    const pass = sweeper.runOnce();
    await until(() => seen.length === 1);
    await sweeper.close();
    await pass;
    expect(seen).toEqual(['0']);
  });
});

describe.concurrent('rmc session stores agree (model check)', () => {
  it('any sequence of create/join/leave/disconnect gives the same answers from SessionRegistry and RedisSessionStore', async (ctx) => {
    if (redis === undefined) return ctx.skip();
    // Small enough that every limit is met: 5 session ids for 3 sessions, 6 connections of 3
    // accounts from 2 addresses.
    const limits = {
      maxMembers: 3,
      maxSessions: 3,
      maxSessionsPerConnection: 2,
      maxSessionsPerIp: 4,
      maxSessionsPerAccount: 3,
    };
    // Connection c: account c % 3, address c % 2.
    const member = (c: number) => ({
      connectionId: c,
      pid: String(c % 3).repeat(32),
      name: `p${c}`,
      address: `10.0.0.${c % 2}`,
    });
    const op = fc.record({
      kind: fc.constantFrom('create', 'join', 'leave', 'leaveAll'),
      conn: fc.integer({ min: 1, max: 6 }),
      session: fc.integer({ min: 1, max: 5 }),
    });
    const outcome = async (f: () => unknown): Promise<unknown> => {
      try {
        const r = (await f()) as { members?: string[] } | boolean | undefined;
        if (typeof r === 'object' && r !== null && Array.isArray(r.members))
          return { ...r, members: [...r.members].sort() };
        return r ?? null;
      } catch (err) {
        return { error: (err as { code?: number }).code };
      }
    };
    let run = 0;
    await fc.assert(
      fc.asyncProperty(fc.array(op, { minLength: 20, maxLength: 60 }), async (ops) => {
        const node = await redisNode(`m${run++}${randomBytes(3).toString('hex')}:`, 'n1');
        try {
          const memory = new SessionRegistry(limits);
          const inRedis = new RedisSessionStore(node.ctx, limits);
          for (const o of ops) {
            const id = String(o.session).repeat(32);
            const spec = { id, type: 'T', key: 'k', reserved: Buffer.alloc(9) };
            const m = member(o.conn);
            const apply = (s: SessionStore) =>
              o.kind === 'create'
                ? s.create(spec, m)
                : o.kind === 'join'
                  ? s.join(id, m)
                  : o.kind === 'leave'
                    ? s.leave(id, m)
                    : s.leaveAll(o.conn);
            const a = await outcome(() => apply(memory));
            const b = await outcome(() => apply(inRedis));
            expect(b).toEqual(a);
          }
          const norm = (l: { id: string; members: { pid: string }[] }[]) =>
            l
              .map((s) => ({ id: s.id, members: s.members.map((x) => x.pid).sort() }))
              .sort((x, y) => (x.id < y.id ? -1 : 1));
          expect(norm(await inRedis.listSessions())).toEqual(norm(memory.listSessions()));
        } finally {
          await node.registry.close();
          await node.conn.close();
        }
      }),
      { numRuns: 50 },
    );
  }, 120_000);
});

describe.concurrent('rmc account stores agree (model check)', () => {
  it('any sequence of logins and login sessions gives the same answers from MemoryStore and RedisAccountStore', async (ctx) => {
    if (redis === undefined) return ctx.skip();
    const op = fc.record({
      kind: fc.constantFrom('login', 'start', 'end'),
      account: fc.integer({ min: 1, max: 5 }),
      conn: fc.integer({ min: 1, max: 6 }),
    });
    const outcome = async (f: () => unknown): Promise<unknown> => {
      try {
        const r = (await f()) as { accountId?: string; name?: string } | undefined;
        return r === undefined ? null : { accountId: r.accountId, name: r.name };
      } catch (err) {
        return { error: (err as { code?: number }).code };
      }
    };
    let run = 0;
    await fc.assert(
      fc.asyncProperty(fc.array(op, { minLength: 10, maxLength: 50 }), async (ops) => {
        const node = await redisNode(`a${run++}${randomBytes(3).toString('hex')}:`, 'n1');
        try {
          const memory = new MemoryStore(undefined, { maxAccounts: 3, maxSessionsPerAccount: 2 });
          const inRedis = new RedisAccountStore(node.ctx, {
            maxAccounts: 3,
            maxSessionsPerAccount: 2,
            registrationsPerIpPerHour: 0,
            registrationsPerHour: 0,
          });
          const pids = [new Map<string, string>(), new Map<string, string>()];
          for (const [step, o] of ops.entries()) {
            const accountId = `acct-${o.account}`;
            const results: unknown[] = [];
            for (const [i, s] of [memory, inRedis].entries()) {
              results.push(
                await outcome(async () => {
                  if (o.kind === 'login') {
                    const a = await s.login(accountId, `name-${step}`);
                    // A PID never changes once given.
                    const before = pids[i]!.get(accountId);
                    if (before !== undefined) expect(a.pid).toBe(before);
                    pids[i]!.set(accountId, a.pid);
                    return a;
                  }
                  if (o.kind === 'start') {
                    const a = await s.account(accountId);
                    if (a === undefined) return undefined;
                    await s.startSession({ connectionId: o.conn, pid: a.pid, accountId, since: '' });
                    return undefined;
                  }
                  await s.endSession(o.conn);
                  return undefined;
                }),
              );
            }
            expect(results[1]).toEqual(results[0]);
          }
          expect(await inRedis.accountCount()).toBe(memory.accountCount());
          const per = (l: { accountId: string; connectionId: number }[]) =>
            l.map((x) => `${x.accountId}/${x.connectionId}`).sort();
          expect(per(await inRedis.sessions())).toEqual(per(memory.sessions()));
          // PIDs are unique in both.
          for (const m of pids) expect(new Set(m.values()).size).toBe(m.size);
        } finally {
          await node.registry.close();
          await node.conn.close();
        }
      }),
      { numRuns: 40 },
    );
  }, 120_000);
});

// Not concurrent: 6000 writes at once keep the test process and Redis busy for a second or more;
// sharing that time with other tests put some past its stores' 1 s command timeout. It runs
// alone after them.
describe('rmc fleet sweep', () => {
  it("sweeps 5000 login sessions and 1000 sessions in bounded steps: dead nodes' records go, live ones stay, no step returns more than three numbers", async (ctx) => {
    if (redis === undefined) return ctx.skip();
    const cleanup = cleanupOf(ctx);
    const prefix = `s${randomBytes(4).toString('hex')}:`;
    const [live, dead] = await nodePair(cleanup, prefix, ['live', 'dead'], 'first');
    const LOGINS = 5000;
    const SESSIONS = 1000;
    const stores = [new RedisAccountStore(live.ctx), new RedisAccountStore(dead.ctx)];
    const sessionStores = [new RedisSessionStore(live.ctx), new RedisSessionStore(dead.ctx)];
    const hex = (n: number) => n.toString(16).padStart(32, '0');
    // Half of every kind of record on each node; the ids are unique so no limit is met.
    await Promise.all(
      Array.from({ length: LOGINS }, (_, i) =>
        stores[i % 2]!.startSession({ connectionId: i, pid: hex(i), accountId: `acct-${i}`, since: '' }),
      ),
    );
    await Promise.all(
      Array.from({ length: SESSIONS }, (_, i) =>
        sessionStores[i % 2]!.create(
          { id: hex(i), type: 'T', key: 'k', reserved: Buffer.alloc(9) },
          { connectionId: i, pid: hex(i), name: `p${i}`, address: `10.${i >> 8}.${i & 255}.1` },
        ),
      ),
    );
    // The dead node goes (its record with it).
    await dead.registry.close();
    const COUNT = 100;
    const steps: SweepStep[] = [];
    const onStep = (step: SweepStep) => {
      // Each step answers a cursor and two counts, nothing else.
      expect(Object.keys(step).sort()).toEqual(['cursor', 'dropped', 'scanned']);
      steps.push(step);
    };
    const logins = await sweepPass(stores[0]!, { count: COUNT, pauseMs: 0, onStep });
    // SCAN may hand an entry out twice (never a dropped one): scanned is at least the count.
    expect(logins).toMatchObject({ complete: true, dropped: LOGINS / 2 });
    expect(logins.scanned).toBeGreaterThanOrEqual(LOGINS);
    // Bounded work per call: about COUNT entries (SCAN's COUNT is a hint; chained buckets add a few).
    expect(logins.maxScanned).toBeLessThanOrEqual(2 * COUNT);
    expect(logins.steps).toBeGreaterThanOrEqual(LOGINS / (2 * COUNT));
    const sessions = await sweepPass(sessionStores[0]!, { count: COUNT, pauseMs: 0, onStep });
    expect(sessions).toMatchObject({ complete: true, dropped: SESSIONS / 2 });
    expect(sessions.scanned).toBeGreaterThanOrEqual(SESSIONS);
    expect(sessions.maxScanned).toBeLessThanOrEqual(2 * COUNT);
    expect(sessions.steps).toBeGreaterThanOrEqual(SESSIONS / (2 * COUNT));
    expect(steps).toHaveLength(logins.steps + sessions.steps);
    // What is left is the live node's, with its indexes.
    const admin = rawRedis(live.conn);
    const P = `${prefix}rmc:`;
    expect(await admin.hlen(`${P}logins`)).toBe(LOGINS / 2);
    expect(await admin.scard(`${P}sessions`)).toBe(SESSIONS / 2);
    expect(await admin.exists(`${P}logins:acct:acct-1`, `${P}session:${hex(1)}`)).toBe(0);
    expect(await admin.scard(`${P}logins:acct:acct-0`)).toBe(1);
    expect((await stores[0]!.sessions()).every((x) => x.node === 'rmc-secure:live')).toBe(true);
    // A second pass finds nothing more to drop.
    expect((await sweepPass(stores[0]!, { count: COUNT, pauseMs: 0 })).dropped).toBe(0);
  }, 120_000);
});
