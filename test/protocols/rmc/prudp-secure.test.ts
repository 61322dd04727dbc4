/**
 * The auth -> secure flows over PRUDP with RmcClient, through the same wiring `gamewire serve
 * rmc` uses: classic Kerberos (TicketGranting Login/LoginEx/RequestTicket, secure CONNECT,
 * SecureConnection Register/RegisterEx) and the HyperScape ECDH CONNECT with AES DATA.
 */
import { createPublicKey } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { completeOptions } from '../../../src/core/config.js';
import { silentLogger } from '../../../src/core/logger.js';
import { ProtocolMetrics } from '../../../src/core/metrics.js';
import {
  CloudServersProtocol,
  deriveUserKey,
  ecdhCredentials,
  kerberosCredentials,
  LoginProtocol,
  loadOrCreateSigningKey,
  MemoryStore,
  openUserTicket,
  RESULT_SUCCESS,
  RmcClient,
  RmcServer,
  registerBuiltins,
  rmcServer,
  SecureConnectionProtocol,
  startRmcTransports,
  TicketGrantingProtocol,
} from '../../../src/protocols/rmc/index.js';

const KEY = 'yl4NG7qZ';
let cleanup: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const f of cleanup.reverse()) await f();
  cleanup = [];
});

async function serve(profile: 'classic' | 'hyperscape', extra: Record<string, unknown> = {}) {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'gw-prudp-'));
  cleanup.push(() => rmSync(dataDir, { recursive: true, force: true }));
  const metrics = new ProtocolMetrics('rmc');
  const log = silentLogger();
  const server = new RmcServer({ log, metrics, variant: profile === 'classic' ? 'classic' : 'hyperscape' });
  const store = new MemoryStore();
  const t = await startRmcTransports(
    server,
    completeOptions('rmc', rmcServer, {
      host: '127.0.0.1',
      port: 0,
      prudpProfile: profile,
      prudpAccessKey: KEY,
      transport: 'prudp',
      ...extra,
    }),
    { log, metrics, dataDir },
    store,
    (secureUrl) => registerBuiltins(server, { store, secureUrl }),
  );
  cleanup.push(() => t.close());
  return { port: t.endpoints[0]!.port, metrics, store, dataDir };
}

async function connect(port: number, options: Partial<Parameters<typeof RmcClient.connect>[0]> = {}) {
  const c = await RmcClient.connect({
    host: '127.0.0.1',
    port,
    transport: 'prudp',
    accessKey: KEY,
    ...options,
  });
  cleanup.push(() => c.close());
  return c;
}

describe('classic Kerberos ladder over PRUDP', () => {
  it('Login -> ticket -> RequestTicket -> secure CONNECT -> Register, with accounts in the store', async () => {
    const s = await serve('classic');
    const auth = await connect(s.port, { variant: 'classic' });
    const login = await auth.call(TicketGrantingProtocol, 'Login', { strUserName: 'sam' });
    expect(login.retval).toBe(RESULT_SUCCESS);
    expect(login.pConnectionData.urlRegularProtocols).toBe(
      `prudps:/address=127.0.0.1;port=${s.port};CID=1;PID=2;sid=1;stream=3;type=2`,
    );
    expect(s.store.account('classic:sam')?.name).toBe('sam');
    const pid = login.pidPrincipal;
    const key = deriveUserKey(pid, 'gamewire');
    const first = openUserTicket(login.pbufResponse, key);
    expect(first?.targetPid).toBe(2);
    expect(openUserTicket(login.pbufResponse, deriveUserKey(pid, 'wrong'))).toBeUndefined();

    const ex = await auth.call(TicketGrantingProtocol, 'LoginEx', {
      strUserName: 'sam',
      oExtraData: { typeName: 'UbiAuthenticationLoginCustomData', data: Buffer.alloc(0) },
    });
    expect(ex.pidPrincipal).toBe(pid);
    const rt = await auth.call(TicketGrantingProtocol, 'RequestTicket', { idSource: pid, idTarget: 2 });
    const ticket = openUserTicket(rt.bufResponse, key)!;
    expect(ticket.sessionKey).toHaveLength(16);

    // Register is refused on the unauthenticated (auth) connection.
    await expect(
      auth.call(SecureConnectionProtocol, 'Register', {
        vecMyURLs: ['prudp:/address=10.0.0.2;port=3074;sid=15'],
      }),
    ).rejects.toMatchObject({ namespace: 'RendezVous', code: 0x02 });

    const secure = await connect(s.port, {
      variant: 'classic',
      prudp: {
        credentials: kerberosCredentials({ internal: ticket.internal, sessionKey: ticket.sessionKey, pid }),
      },
    });
    const reg = await secure.call(SecureConnectionProtocol, 'Register', {
      vecMyURLs: ['prudp:/address=10.0.0.2;port=3074;sid=15'],
    });
    expect(reg.retval).toBe(RESULT_SUCCESS);
    expect(reg.urlPublic).toMatch(/^prudp:\/address=127\.0\.0\.1;port=\d+;sid=15;type=3$/);
    const regEx = await secure.call(SecureConnectionProtocol, 'RegisterEx', {
      vecMyURLs: ['prudp:/address=10.0.0.2;port=3074;sid=15'],
      hCustomData: { typeName: 'x', data: Buffer.alloc(0) },
    });
    expect(regEx.pidConnectionID).toBe(reg.pidConnectionID);
  });

  it('a forged or tampered ticket is refused at CONNECT (dropped and counted)', async () => {
    const s = await serve('classic');
    const bogus = kerberosCredentials({
      internal: Buffer.alloc(56, 1),
      sessionKey: Buffer.alloc(16, 2),
      pid: 5000,
    });
    await expect(
      connect(s.port, {
        variant: 'classic',
        connectTimeoutMs: 1500,
        prudp: { credentials: bogus, retransmitMs: 200 },
      }),
    ).rejects.toMatchObject({ code: 'ERR_PRUDP_TIMEOUT' });
    expect(s.metrics.dropped.get('prudp_connect_refused') ?? 0).toBeGreaterThan(0);
  });

  it('RequestTicket needs a login and only for yourself', async () => {
    const s = await serve('classic');
    const auth = await connect(s.port, { variant: 'classic' });
    await expect(
      auth.call(TicketGrantingProtocol, 'RequestTicket', { idSource: 5000, idTarget: 2 }),
    ).rejects.toMatchObject({ namespace: 'RendezVous', code: 0x02 });
    const login = await auth.call(TicketGrantingProtocol, 'Login', { strUserName: 'ann' });
    await expect(
      auth.call(TicketGrantingProtocol, 'RequestTicket', { idSource: login.pidPrincipal + 1, idTarget: 2 }),
    ).rejects.toMatchObject({ namespace: 'RendezVous' });
  });
});

describe('HyperScape ECDH secure CONNECT over PRUDP', () => {
  it('completes the ECDH CONNECT (signature verified with the key from the data folder) and calls over AES DATA', async () => {
    const s = await serve('hyperscape');
    const trust = createPublicKey(loadOrCreateSigningKey(s.dataDir));
    const c = await connect(s.port, { prudp: { credentials: ecdhCredentials(trust) } });
    const r = await c.call(LoginProtocol, 'LoginWithToken_V1', {
      token: 'dummy',
      clientVersionInfo: { major: 1, minor: 0, patch: 0, build: 1, custom: '' },
      connectionData: {
        urlRegularProtocols: 'prudp:/',
        lstSpecialProtocols: [],
        urlSpecialProtocols: 'prudp:/',
      },
    });
    expect(r.userPid).toHaveLength(16);
    expect(r.connectionData.urlRegularProtocols).toContain(`port=${s.port}`);
    const dc = await c.call(CloudServersProtocol, 'GetDatacenters_V1', {});
    expect(dc.datacenters.length).toBeGreaterThan(0);
  });

  it('a client trusting another key refuses the server', async () => {
    const s = await serve('hyperscape');
    const other = mkdtempSync(path.join(os.tmpdir(), 'gw-prudp-other-'));
    cleanup.push(() => rmSync(other, { recursive: true, force: true }));
    const wrong = createPublicKey(loadOrCreateSigningKey(other));
    await expect(connect(s.port, { prudp: { credentials: ecdhCredentials(wrong) } })).rejects.toMatchObject({
      code: 'ERR_PRUDP_CONNECT_REFUSED',
    });
  });
});
