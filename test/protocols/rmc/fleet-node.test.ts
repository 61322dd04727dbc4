/**
 * A fleet node in process (the `serve rmc` start function with --redis): what it announces, how
 * drain() takes it out of the choice, its gauges in Prometheus, role checks; and the bounded wait
 * of a control-plane call while Redis does not answer (other calls on the connection go on).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { completeOptions } from '../../../src/core/config.js';
import { silentLogger } from '../../../src/core/logger.js';
import { ProtocolMetrics } from '../../../src/core/metrics.js';
import { RedisNodeRegistry } from '../../../src/core/node-registry.js';
import { createRegistry } from '../../../src/core/prometheus.js';
import { connectRedis } from '../../../src/core/redis.js';
import type { RmcFleetServer } from '../../../src/protocols/rmc/fleet/start.js';
import {
  CloudServersProtocol,
  deriveUserKey,
  kerberosCredentials,
  LoginProtocol,
  openUserTicket,
  RESULT_SUCCESS,
  RmcClient,
  rmc,
  SecureConnectionProtocol,
  SessionProtocol,
  TicketGrantingProtocol,
} from '../../../src/protocols/rmc/index.js';

const KEY = 'yl4NG7qZ';

import { type RedisServer, startRedis } from '../../helpers/redis.js';
import { elapse, waitFor } from '../../helpers/wait.js';

let redis: RedisServer | undefined;
const dirs: string[] = [];
let cleanup: (() => Promise<void>)[] = [];

beforeAll(async () => {
  redis = await startRedis();
}, 30_000);
afterEach(async () => {
  for (const f of cleanup.reverse()) await f();
  cleanup = [];
});
afterAll(async () => {
  await redis?.dispose();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

const loginArgs = (token: string) => ({
  token,
  clientVersionInfo: { major: 1, minor: 0, patch: 0, build: 0, custom: '' },
  connectionData: { urlRegularProtocols: 'prudp:/', lstSpecialProtocols: [], urlSpecialProtocols: 'prudp:/' },
});

async function start(
  extra: Record<string, unknown>,
  sharedDataDir?: string,
): Promise<{ server: RmcFleetServer; metrics: ProtocolMetrics }> {
  const def = rmc.server!;
  // What `gamewire serve` gives start(): checked, every default filled.
  const options = completeOptions('rmc', def, { host: '127.0.0.1', port: 0, ...extra });
  const dataDir = sharedDataDir ?? mkdtempSync(path.join(os.tmpdir(), 'gw-rmc-node-'));
  if (sharedDataDir === undefined) dirs.push(dataDir);
  const metrics = new ProtocolMetrics('rmc');
  const server = (await def.start(options, {
    log: silentLogger(),
    metrics,
    dataDir,
  })) as unknown as RmcFleetServer;
  cleanup.push(() => server.close());
  return { server, metrics };
}

const portOf = (s: RmcFleetServer) => s.endpoints.find((e) => e.transport === 'tcp')!.port;

describe('rmc fleet node', () => {
  it('--role auth|secure without --redis, or an unknown role, is a usage error naming the choices', async () => {
    await expect(start({ role: 'secure' })).rejects.toMatchObject({
      code: 'ERR_CONFIG',
      message: expect.stringMatching(/--role \(config rmc\.role\) needs --redis/),
    });
    await expect(start({ role: 'relay' })).rejects.toThrow(/"relay" is not one of auth, secure, all/);
    // A library caller's options meet the same refusal: the rule is the declaration's (`requires`).
    expect(() => completeOptions('rmc', rmc.server!, { host: '127.0.0.1', port: 0, role: 'auth' })).toThrow(
      /needs --redis/,
    );
    await expect(
      start({ role: 'secure', redis: 'redis://127.0.0.1:1', store: '/tmp/x.log' }),
    ).rejects.toMatchObject({
      code: 'ERR_USAGE',
    });
  });

  it('announces itself (endpoints, StationURL, capacity, players), counts players, drains', async (ctx) => {
    if (redis === undefined) return ctx.skip();
    const prefix = 'node1:';
    const { server, metrics } = await start({
      role: 'secure',
      redis: redis.url,
      redisPrefix: prefix,
      nodeId: 'sec-a',
      region: 'eu',
      maxConnections: 50,
    });
    expect(server.node).toBe('rmc-secure:sec-a');
    const conn = await connectRedis(redis.url, { prefix });
    cleanup.push(() => conn.close());
    const registry = new RedisNodeRegistry(conn);
    const [node] = await registry.live('rmc-secure');
    const port = portOf(server);
    expect(node).toMatchObject({
      id: 'sec-a',
      region: 'eu',
      capacity: 50,
      load: 0,
      draining: false,
      endpoints: [
        { transport: 'tcp', host: '127.0.0.1', port },
        { transport: 'prudp', host: '127.0.0.1', port },
      ],
    });
    expect(node!.meta?.stationUrl).toBe(
      `prudps:/address=127.0.0.1;port=${port};CID=1;PID=2;sid=1;stream=3;type=2`,
    );

    const c = await RmcClient.connect({ host: '127.0.0.1', port });
    await c.call(LoginProtocol, 'LoginWithToken_V1', loginArgs('p1'));
    expect(server.players()).toBe(1);
    expect(metrics.gauges.get('players')).toBe(1);
    expect(metrics.gauges.get('heartbeat_age_ms')).toBeGreaterThanOrEqual(0);
    const text = await createRegistry(() => [metrics]).metrics();
    expect(text).toMatch(/gamewire_gauge\{protocol="rmc",name="players"\} 1/);
    expect(text).toMatch(/gamewire_gauge\{protocol="rmc",name="heartbeat_age_ms"\} \d+/);
    expect(text).toMatch(/gamewire_node_load\{protocol="rmc",node="sec-a"\} 1/);
    expect(text).toMatch(/gamewire_node_heartbeat_age_seconds\{protocol="rmc",node="sec-a"\} [\d.]+/);
    expect((await server.loginSessions()).map((s) => s.node)).toEqual(['rmc-secure:sec-a']);

    await server.drain();
    expect((await registry.live('rmc-secure'))[0]).toMatchObject({ draining: true, load: 1 });
    await c.close();
    await waitFor(() => server.players() === 0, { what: 'the player gone' });
  });

  it('a draining secure server gets no logins from the auth server; with none left, logins fail with ConnectionFailure', async (ctx) => {
    if (redis === undefined) return ctx.skip();
    const prefix = 'node2:';
    const base = { redis: redis.url, redisPrefix: prefix };
    const a = await start({ ...base, role: 'secure', nodeId: 'a' });
    const b = await start({ ...base, role: 'secure', nodeId: 'b' });
    const auth = await start({ ...base, role: 'auth', nodeId: 'auth' });
    await a.server.drain();
    const c = await RmcClient.connect({ host: '127.0.0.1', port: portOf(auth.server) });
    cleanup.push(() => c.close());
    for (let i = 0; i < 4; i++) {
      const r = await c.call(LoginProtocol, 'LoginWithToken_V1', loginArgs(`d-${i}`));
      expect(r.connectionData.urlRegularProtocols).toContain(`port=${portOf(b.server)};`);
    }
    await b.server.drain();
    await expect(c.call(LoginProtocol, 'LoginWithToken_V1', loginArgs('nowhere'))).rejects.toMatchObject({
      namespace: 'RendezVous',
      code: 0x01,
    });
  });

  it('classic profile: TicketGranting on the auth server hands out a secure server, whose Kerberos CONNECT and Register work', async (ctx) => {
    if (redis === undefined) return ctx.skip();
    // Auth and secure processes share the Kerberos server key through their data folder.
    const shared = mkdtempSync(path.join(os.tmpdir(), 'gw-rmc-node-'));
    dirs.push(shared);
    const base = {
      redis: redis.url,
      redisPrefix: 'classic:',
      prudpProfile: 'classic',
      prudpAccessKey: KEY,
      transport: 'prudp',
    };
    const sec = await start({ ...base, role: 'secure', nodeId: 'c-sec' }, shared);
    const auth = await start({ ...base, role: 'auth', nodeId: 'c-auth' }, shared);
    const udp = (s: RmcFleetServer) => s.endpoints.find((e) => e.transport === 'udp')!.port;
    const a = await RmcClient.connect({
      host: '127.0.0.1',
      port: udp(auth.server),
      transport: 'prudp',
      accessKey: KEY,
      variant: 'classic',
    });
    cleanup.push(() => a.close());
    const login = await a.call(TicketGrantingProtocol, 'Login', { strUserName: 'sam' });
    expect(login.pConnectionData.urlRegularProtocols).toBe(
      `prudps:/address=127.0.0.1;port=${udp(sec.server)};CID=1;PID=2;sid=1;stream=3;type=2`,
    );
    // SecureConnection is the secure server's, not the auth server's.
    await expect(
      a.call(SecureConnectionProtocol, 'Register', { vecMyURLs: ['prudp:/sid=15'] }),
    ).rejects.toMatchObject({ namespace: 'Core', code: 0x02 });
    const ticket = openUserTicket(login.pbufResponse, deriveUserKey(login.pidPrincipal, 'gamewire'))!;
    const s = await RmcClient.connect({
      host: '127.0.0.1',
      port: udp(sec.server),
      transport: 'prudp',
      accessKey: KEY,
      variant: 'classic',
      prudp: {
        credentials: kerberosCredentials({
          internal: ticket.internal,
          sessionKey: ticket.sessionKey,
          pid: login.pidPrincipal,
        }),
      },
    });
    cleanup.push(() => s.close());
    const reg = await s.call(SecureConnectionProtocol, 'Register', { vecMyURLs: ['prudp:/sid=15'] });
    expect(reg.retval).toBe(RESULT_SUCCESS);
    expect(reg.pidConnectionID).toBeGreaterThan(0);
    expect(sec.server.players()).toBe(1);
  }, 30_000);

  it('Redis not answering: a session call fails after --rmc-store-timeout-ms, and calls behind it are answered first', async (ctx) => {
    if (redis === undefined) return ctx.skip();
    const prefix = 'node3:';
    const { server } = await start({
      role: 'secure',
      redis: redis.url,
      redisPrefix: prefix,
      nodeId: 'slow',
      storeTimeoutMs: 300,
    });
    const c = await RmcClient.connect({ host: '127.0.0.1', port: portOf(server) });
    cleanup.push(() => c.close());
    await c.call(LoginProtocol, 'LoginWithToken_V1', loginArgs('waiter'));
    const admin = await connectRedis(redis.url);
    cleanup.push(() => admin.close());
    // Redis holds every client's commands for 1.5 s (the server is alive, just not answering).
    await admin.client.call('CLIENT', 'PAUSE', '1500', 'ALL');
    const order: string[] = [];
    const session = c
      .call(SessionProtocol, 'CreateSession_V1', {
        sessionType: 'PartySession',
        sessionId: Buffer.alloc(16, 1),
        reserved: Buffer.alloc(9),
        sessionKey: 'k',
      })
      .then(
        () => order.push('session ok'),
        (err: { namespace?: string; code?: number }) => order.push(`session ${err.namespace}:${err.code}`),
      );
    const other = c.call(CloudServersProtocol, 'GetDatacenters_V1', {}).then(() => order.push('datacenters'));
    await Promise.all([session, other]);
    expect(order).toEqual(['datacenters', 'session RendezVous:1']);
    // After the pause, the store answers again.
    await elapse(1500, 'the Redis CLIENT PAUSE (1.5 s) must end');
    await c.call(SessionProtocol, 'CreateSession_V1', {
      sessionType: 'PartySession',
      sessionId: Buffer.alloc(16, 2),
      reserved: Buffer.alloc(9),
      sessionKey: 'k',
    });
  }, 30_000);
});
