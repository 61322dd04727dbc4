/**
 * The admin API over a real RMC server (built-in protocols) with real TCP clients: connections
 * with who logged in, sessions, recent calls with latency and result, the wire view (token
 * masked), and the disconnect action.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { rmcAdmin } from '../../src/protocols/rmc/admin.js';
import { LoginProtocol, rmc, SessionProtocol } from '../../src/protocols/rmc/index.js';
import {
  RawPeer,
  requestFrame,
  startServer,
  type TestServer,
  typedRequestFrame,
} from '../protocols/rmc/helpers.js';
import { type Admin, entry, eventually, startAdmin } from './helpers.js';

let s: TestServer | undefined;
let admin: Admin | undefined;
const peers: RawPeer[] = [];

afterEach(async () => {
  for (const p of peers.splice(0)) p.destroy();
  await admin?.admin.close();
  await s?.listening.close();
  admin = undefined;
  s = undefined;
});

const LoginWithToken = LoginProtocol.byName.get('LoginWithToken_V1')!;
const CreateSession = SessionProtocol.byName.get('CreateSession_V1')!;
const TOKEN = 'secret-login-token-alice';
let nextCall = 1;

const loginArgs = (token: string) => ({
  token,
  clientVersionInfo: { major: 1, minor: 0, patch: 0, build: 0, custom: '' },
  connectionData: { urlRegularProtocols: 'prudp:/', lstSpecialProtocols: [], urlSpecialProtocols: 'prudp:/' },
});

async function setup() {
  s = await startServer();
  const source = rmcAdmin({
    dispatcher: s.server.dispatcher,
    variant: 'hyperscape',
    listSessions: () => s!.builtins.sessions.listSessions(),
  });
  const running = { endpoints: s.listening.endpoints, admin: source, close: () => s!.listening.close() };
  admin = await startAdmin([entry(rmc, running, s.metrics)]);
  return { s, admin };
}

async function loggedIn(port: number, token: string): Promise<RawPeer> {
  const p = await RawPeer.connect(port);
  peers.push(p);
  const id = nextCall++;
  const m = await p.call(typedRequestFrame(LoginWithToken, id, loginArgs(token)), id);
  expect(m?.type).toBe('response');
  return p;
}

describe('the admin API over rmc', () => {
  it('shows connections with their user, sessions, and recent calls newest first', async () => {
    const { s, admin } = await setup();
    const alice = await loggedIn(s.port, TOKEN);
    await loggedIn(s.port, 'secret-login-token-bob');
    const sessionId = Buffer.from('00112233445566778899aabbccddeeff', 'hex');
    const id = nextCall++;
    const created = await alice.call(
      typedRequestFrame(CreateSession, id, {
        sessionType: 'PartySession',
        sessionId,
        reserved: Buffer.alloc(9),
        sessionKey: 'party-session-key',
      }),
      id,
    );
    expect(created?.type).toBe('response');
    const unknown = nextCall++;
    expect(
      (await alice.call(requestFrame('NoSuchProtocol', 'NoSuchProtocol::Nope', unknown), unknown))?.type,
    ).toBe('error');

    const d = await admin.json<any>('/api/servers/rmc');
    expect(d.counters.open).toBe(2);
    expect(d.counters.bytesReceived).toBeGreaterThan(0);
    expect(d.counters.bytesSent).toBeGreaterThan(0);
    const { connections, sessions, recentCalls } = d.state;
    expect(connections).toHaveLength(2);
    for (const c of connections) {
      expect(c).toMatchObject({
        transport: 'tcp',
        secure: false,
        remote: expect.stringMatching(/^127\.0\.0\.1:\d+$/),
      });
      expect(c.pid).not.toBeNull();
      expect(c.user).toEqual(expect.any(String));
      expect(c.since).toBeGreaterThan(Date.now() - 60_000);
    }
    expect(sessions).toHaveLength(1);
    expect(sessions[0].id).toMatch(/00112233/);
    expect(sessions[0].members).toEqual([sessions[0].host]);
    expect(connections.map((c: any) => c.pid)).toContain(sessions[0].host);
    // Newest first: the failed call, the session, then the logins.
    expect(recentCalls.map((c: any) => c.method)).toEqual([
      'NoSuchProtocol::Nope',
      'SessionProtocol::CreateSession_V1',
      'LoginProtocol::LoginWithToken_V1',
      'LoginProtocol::LoginWithToken_V1',
    ]);
    expect(recentCalls[0].result).toMatch(/^Core::/);
    expect(recentCalls[1]).toMatchObject({ protocol: 'SessionProtocol', result: 'ok' });
    for (const c of recentCalls) {
      expect(c.latencyMs).toBeGreaterThanOrEqual(0);
      expect(c.at).toBeGreaterThan(Date.now() - 60_000);
      expect(connections.map((x: any) => x.id)).toContain(c.connection);
    }
    const text = JSON.stringify(d);
    expect(text).not.toContain(TOKEN);
    expect(text).not.toContain('party-session-key');
  });

  it('keeps only the last 200 calls', async () => {
    const { s, admin } = await setup();
    const p = await RawPeer.connect(s.port);
    peers.push(p);
    for (let i = 0; i < 230; i++) {
      const id = nextCall++;
      await p.call(requestFrame('NoSuchProtocol', `NoSuchProtocol::M${i}`, id), id);
    }
    const calls = (await admin.json<any>('/api/servers/rmc')).state.recentCalls;
    expect(calls).toHaveLength(200);
    expect(calls[0].method).toBe('NoSuchProtocol::M229');
    expect(calls[199].method).toBe('NoSuchProtocol::M30');
  });

  it('the wire view shows a just-sent call decoded, with its token masked', async () => {
    const { s, admin } = await setup();
    await admin.json('/api/wire/rmc');
    await loggedIn(s.port, TOKEN);
    const page = await eventually(async () => {
      const w = await admin.json<any>('/api/wire/rmc?limit=500');
      return w.messages.length >= 2 ? w : undefined;
    });
    const call = page.messages.find((m: any) => m.direction === 'client');
    expect(call.transport).toBe('tcp');
    expect(call.error).toBeNull();
    expect(call.fields).toMatchObject({ type: 'request', method: 'LoginProtocol::LoginWithToken_V1' });
    expect(call.name).toBe('request');
    expect(JSON.stringify(call.fields)).toContain('<redacted>');
    const answer = page.messages.find((m: any) => m.direction === 'server');
    expect(answer.fields).toMatchObject({ type: 'response', method: 'LoginProtocol::LoginWithToken_V1*' });
    const text = JSON.stringify(page);
    expect(text).not.toContain(TOKEN);
    expect(text).not.toContain(Buffer.from(TOKEN).toString('hex'));
  });

  it('disconnect closes that connection only', async () => {
    const { s, admin } = await setup();
    const a = await loggedIn(s.port, TOKEN);
    const b = await loggedIn(s.port, 'secret-login-token-bob');
    const [first, second] = (await admin.json<any>('/api/servers/rmc')).state.connections;
    expect((await admin.post(`/api/servers/rmc/connections/${first.id}/disconnect`)).status).toBe(200);
    await eventually(() => (a.closed || b.closed ? true : undefined), 5000, 'a connection to close');
    expect(a.closed !== b.closed).toBe(true);
    const left = (await admin.json<any>('/api/servers/rmc')).state.connections;
    expect(left.map((c: any) => c.id)).toEqual([second.id]);
    expect((await admin.post('/api/servers/rmc/connections/424242/disconnect')).status).toBe(404);
    expect((await admin.post('/api/servers/rmc/drain')).status).toBe(409);
  });
});
