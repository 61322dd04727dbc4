/**
 * Issue 24 item 4 (rmc): classic Kerberos user keys are derived once and never on the event loop
 * (prudp/user-keys.ts), and PRUDP acknowledges packets while a login's key is being derived.
 */
import type dgram from 'node:dgram';
import fc from 'fast-check';
import { describe, expect, it, type TestContext } from 'vitest';
import { silentLogger } from '../../../src/core/logger.js';
import { ProtocolMetrics } from '../../../src/core/metrics.js';
import {
  classicConnectHandler,
  classicPacket,
  deriveUserKey,
  Flag,
  KerberosAuthority,
  KeyDerivationBusyError,
  keyFromTable,
  Md5ChainPool,
  MemoryStore,
  md5Chain,
  openUserTicket,
  PacketType,
  PrudpClientConnection,
  type PrudpLink,
  PrudpServer,
  RmcClient,
  RmcServer,
  TicketGrantingProtocol,
  ticketGrantingHandlers,
  UserKeyCache,
  userKeyTable,
} from '../../../src/protocols/rmc/index.js';
import { encode } from '../../../src/wire/index.js';
import { waitFor } from '../../helpers/wait.js';

/**
 * Each test closes its own resources (`defer`: the test's onTestFinished), so that tests can run
 * concurrently. Only the UserKeyCache tests do: the others measure what happens while a worker
 * is busy (event-loop turns, a job still running, a queue still full), which another test's
 * derivation on the main thread would disturb.
 */
type Defer = TestContext['onTestFinished'];

function pool(defer: Defer, options: ConstructorParameters<typeof Md5ChainPool>[0] = {}): Md5ChainPool {
  const p = new Md5ChainPool(options);
  defer(() => p.close());
  return p;
}

describe('the MD5 chain and the key table', () => {
  it('md5Chain(seed, from, count) is links from … from+count-1 of the chain (fast-check)', () => {
    fc.assert(
      fc.property(
        fc.uint8Array({ maxLength: 40 }),
        fc.integer({ min: 1, max: 40 }),
        fc.integer({ min: 1, max: 8 }),
        (seed, from, count) => {
          const all = md5Chain(seed, from, count);
          expect(all.length).toBe(16 * count);
          for (let i = 0; i < count; i++)
            expect(all.subarray(16 * i, 16 * i + 16)).toEqual(md5Chain(seed, from + i, 1));
          // The chain continues from any link.
          if (count > 1) expect(md5Chain(all.subarray(0, 16), count - 1, 1)).toEqual(all.subarray(-16));
        },
      ),
      { numRuns: 60 },
    );
  });

  it("a password's table holds every pid's key, byte for byte deriveUserKey's", () => {
    const table = userKeyTable('gamewire');
    expect(table.length).toBe(1024 * 16);
    for (const pid of [0x1000, 0x1000 + 1023, 0x1400, 0xfffffffe, 77_777_777])
      expect(keyFromTable(table, pid)).toEqual(deriveUserKey(pid, 'gamewire'));
  });
});

describe('Md5ChainPool: worker threads, a bounded queue', () => {
  it('computes off the event loop: timers keep firing while a derivation runs', async ({
    onTestFinished,
  }) => {
    const p = pool(onTestFinished, { workers: 1 });
    let ticks = 0;
    let done = false;
    const job = p.run(Buffer.from('pw'), 65_000, 4).then((out) => {
      done = true;
      return out;
    });
    while (!done) {
      await new Promise((r) => setImmediate(r));
      ticks++;
    }
    expect(await job).toEqual(md5Chain(Buffer.from('pw'), 65_000, 4));
    // On the event loop the derivation would have run between two turns: not one turn in between.
    expect(ticks).toBeGreaterThan(1);
  });

  it('refuses a job past maxQueued instead of growing; the accepted ones complete', async ({
    onTestFinished,
  }) => {
    const p = pool(onTestFinished, { workers: 1, maxQueued: 2 });
    const seed = Buffer.from('x');
    const accepted = [p.run(seed, 20_000, 1), p.run(seed, 10, 1), p.run(seed, 11, 1)];
    await expect(p.run(seed, 12, 1)).rejects.toBeInstanceOf(KeyDerivationBusyError);
    expect(p.refused).toBe(1);
    expect(p.queued).toBe(2);
    const out = await Promise.all(accepted);
    expect(out[2]).toEqual(md5Chain(seed, 11, 1));
    expect(p.queued).toBe(0);
    // Room again once the queue drains.
    await expect(p.run(seed, 12, 1)).resolves.toEqual(md5Chain(seed, 12, 1));
  });

  it('a worker that dies fails its own job only; the queue goes on on a fresh thread', async ({
    onTestFinished,
  }) => {
    const p = pool(onTestFinished, { workers: 1 });
    const seed = Buffer.from('z');
    const running = p.run(seed, 300_000, 1);
    const queued = p.run(seed, 7, 1);
    await waitFor(() => p.running === 1, { what: 'the job to start' });
    const slots = (p as unknown as { slots: { worker: { terminate(): Promise<number> } }[] }).slots;
    await slots[0]!.worker.terminate();
    await expect(running).rejects.toThrow(/exited/);
    await expect(queued).resolves.toEqual(md5Chain(seed, 7, 1));
    await expect(p.run(seed, 8, 1)).resolves.toEqual(md5Chain(seed, 8, 1));
  });

  it('close() fails what waits and stops the threads', async () => {
    const p = new Md5ChainPool({ workers: 1 });
    const running = p.run(Buffer.from('y'), 200_000, 1);
    const waiting = p.run(Buffer.from('y'), 5, 1);
    const outcomes = Promise.allSettled([running, waiting]);
    await p.close();
    for (const o of await outcomes) {
      expect(o.status).toBe('rejected');
      expect((o as PromiseRejectedResult).reason).toBeInstanceOf(KeyDerivationBusyError);
    }
    await expect(p.run(Buffer.from('y'), 5, 1)).rejects.toBeInstanceOf(KeyDerivationBusyError);
  });
});

describe.concurrent('UserKeyCache', () => {
  it('equals deriveUserKey; a second account with the password costs a short job; a known key none', async ({
    onTestFinished,
  }) => {
    const p = pool(onTestFinished, { workers: 1 });
    const keys = new UserKeyCache(p);
    const pids = [
      0x1000 + 5,
      0x1000 + 1000,
      0x1400 /* % 1024 = 0 */,
      0x2000 + 5 /* same index as the first */,
    ];
    expect(await keys.key(pids[0]!, 'hunter2')).toEqual(deriveUserKey(pids[0]!, 'hunter2'));
    expect(keys.misses).toBe(1);
    expect(await keys.key(pids[1]!, 'hunter2')).toEqual(deriveUserKey(pids[1]!, 'hunter2'));
    expect(await keys.key(pids[2]!, 'hunter2')).toEqual(deriveUserKey(pids[2]!, 'hunter2'));
    const jobs = p.completed;
    // pid % 1024 == 0 is the chain base itself: no job; the fourth shares the first's key.
    expect(jobs).toBe(2);
    expect(await keys.key(pids[3]!, 'hunter2')).toEqual(deriveUserKey(pids[3]!, 'hunter2'));
    expect(await keys.key(pids[0]!, 'hunter2')).toEqual(deriveUserKey(pids[0]!, 'hunter2'));
    expect(p.completed).toBe(jobs);
    expect(keys.hits).toBe(2);
    // A password change is another key.
    expect(await keys.key(pids[0]!, 'hunter3')).toEqual(deriveUserKey(pids[0]!, 'hunter3'));
    expect(p.completed).toBe(jobs + 1);
  });

  it('concurrent asks for one key make one job; the cache stays within maxKeys', async ({
    onTestFinished,
  }) => {
    const p = pool(onTestFinished, { workers: 1 });
    const keys = new UserKeyCache(p, { maxKeys: 2 });
    const same = await Promise.all(Array.from({ length: 5 }, () => keys.key(0x1001, 'pw')));
    expect(p.completed).toBe(1);
    for (const k of same) expect(k).toEqual(same[0]);
    for (let i = 2; i < 6; i++) await keys.key(0x1000 + i, 'pw');
    expect(keys.size).toBe(2);
  });

  it('a warmed password answers every key from its table, without a job', async ({ onTestFinished }) => {
    const p = pool(onTestFinished, { workers: 1 });
    const keys = new UserKeyCache(p);
    await keys.warm('gamewire');
    expect(p.completed).toBe(1);
    for (const pid of [0x1000, 0x1234, 0xabcdef])
      expect(await keys.key(pid, 'gamewire')).toEqual(deriveUserKey(pid, 'gamewire'));
    expect(p.completed).toBe(1);
  });
});

/** A classic auth server (TicketGranting) over TCP and PRUDP with per-user passwords: every login derives. */
async function authServer(defer: Defer, userKeys: UserKeyCache) {
  const log = silentLogger();
  const metrics = new ProtocolMetrics('rmc');
  const rmc = new RmcServer({ log, metrics, variant: 'classic' });
  const authority = new KerberosAuthority();
  rmc.register(
    TicketGrantingProtocol,
    ticketGrantingHandlers({
      store: new MemoryStore(),
      authority,
      passwordFor: (name) => `pw-${name}`,
      secureUrl: 'prudps:/address=127.0.0.1;port=1;CID=1;PID=2;sid=1;stream=3;type=2',
      userKeys,
    }),
  );
  const tcp = await rmc.listen({ host: '127.0.0.1', port: 0 });
  defer(() => tcp.close());
  const prudp = new PrudpServer({
    dispatcher: rmc.dispatcher,
    log,
    metrics,
    profile: 'classic',
    onConnect: classicConnectHandler(authority),
  });
  const { port } = await prudp.listen({ host: '127.0.0.1', port: 0 });
  defer(() => prudp.close());
  return { tcpPort: tcp.port, prudpPort: port };
}

describe('TicketGranting with the key cache', () => {
  it('a login and a ticket open with the user key; a full derivation queue refuses with RendezVous::ConnectionFailure', async ({
    onTestFinished,
  }) => {
    const p = pool(onTestFinished, { workers: 1, maxQueued: 0 });
    const s = await authServer(onTestFinished, new UserKeyCache(p));
    const c = await RmcClient.connect({ host: '127.0.0.1', port: s.tcpPort, variant: 'classic' });
    onTestFinished(() => c.close());
    const login = await c.call(TicketGrantingProtocol, 'Login', { strUserName: 'ann' });
    const key = deriveUserKey(login.pidPrincipal, 'pw-ann');
    expect(openUserTicket(login.pbufResponse, key)).toBeDefined();
    const ticket = await c.call(TicketGrantingProtocol, 'RequestTicket', {
      idSource: login.pidPrincipal,
      idTarget: 2,
    });
    expect(openUserTicket(ticket.bufResponse, key)?.targetPid).toBe(2);
    // The only worker busy, no room to wait: the next login that needs a derivation is refused.
    const hog = p.run(Buffer.from('hog'), 150_000, 1);
    await expect(c.call(TicketGrantingProtocol, 'Login', { strUserName: 'bob' })).rejects.toMatchObject({
      namespace: 'RendezVous',
      code: 0x01,
    });
    await hog;
    // A known key needs no worker: ann logs in again while nothing could be queued.
    const hog2 = p.run(Buffer.from('hog'), 150_000, 1);
    expect((await c.call(TicketGrantingProtocol, 'Login', { strUserName: 'ann' })).pidPrincipal).toBe(
      login.pidPrincipal,
    );
    await hog2;
  });
});

describe('PRUDP acknowledges at once, whatever the application is doing', () => {
  it("while 8 logins' keys are being derived, each client's PING sent behind its Login is acked before the Login is answered", async ({
    onTestFinished,
  }) => {
    const s = await authServer(onTestFinished, new UserKeyCache(pool(onTestFinished)));
    const clients = await Promise.all(
      Array.from({ length: 8 }, async (_, i) => {
        const conn = await PrudpClientConnection.connect({
          host: '127.0.0.1',
          port: s.prudpPort,
          accessKey: 'yl4NG7qZ',
          pingIntervalMs: 0,
        });
        onTestFinished(() => conn.close());
        // What arrives, in order: the PING's ack, and the Login's answer (a whole message).
        const events: string[] = [];
        const socket = (conn as unknown as { socket: dgram.Socket }).socket;
        socket.on('message', (msg) => {
          // type_flags is byte 2; an ack of a PING is type 4 with the ACK flag.
          if ((msg[2]! & 0x07) === PacketType.PING && (msg[2]! & Flag.ACK) !== 0) events.push('ping-ack');
        });
        conn.onMessage = () => events.push('answer');
        return { conn, events, name: `user${i}` };
      }),
    );
    for (const c of clients) {
      const args = encode(TicketGrantingProtocol.methods.Login.args, { strUserName: c.name });
      c.conn.send(encode(classicPacket, { type: 'request', protocolId: 10, callId: 1, methodId: 1, args }));
      (c.conn as unknown as { link: PrudpLink }).link.sendPing();
    }
    await waitFor(() => clients.every((c) => c.events.includes('answer')), {
      what: 'every Login answered',
      timeoutMs: 30_000,
    });
    for (const c of clients) {
      expect(c.events.indexOf('ping-ack')).toBeGreaterThanOrEqual(0);
      expect(c.events.indexOf('ping-ack')).toBeLessThan(c.events.indexOf('answer'));
    }
  }, 60_000);
});
