/**
 * `gamewire load rmc` against spawned `serve rmc`: HyperScape logins over PRUDP (ECDH CONNECT)
 * and TCP, and the classic Kerberos ladder (auth server, ticket, secure server); every answer
 * must echo its own call's number.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runProtocolLoad } from '../../helpers/load.js';
import { type Served, startServe } from '../../helpers/serve.js';

let hyperscape: Served;
let classic: Served;

beforeAll(async () => {
  [hyperscape, classic] = await Promise.all([
    startServe(['rmc', '--port', '0', '--host', '127.0.0.1', '--no-admin']),
    startServe(['rmc', '--port', '0', '--host', '127.0.0.1', '--no-admin', '--prudp-profile', 'classic']),
  ]);
});

afterAll(async () => {
  await Promise.all([hyperscape?.stop(), classic?.stop()]);
});

describe('load rmc', () => {
  for (const transport of ['prudp', 'tcp'] as const) {
    it(`HyperScape players log in over ${transport} and every call is answered once, with its own number`, async () => {
      const s = await runProtocolLoad(
        'rmc',
        { target: { host: '127.0.0.1', port: hyperscape.port('udp') }, clients: 4, durationS: 2.5 },
        { transport, callRate: 10 },
      );
      expect(s.sessions).toMatchObject({ started: 4, joined: 4, failed: 0 });
      expect(s.violations).toEqual({});
      expect(s.counters.calls).toBeGreaterThan(4);
      // Calls still in flight when the run ended are the only ones without an answer.
      expect(s.counters.answered).toBeGreaterThanOrEqual(s.counters.calls! - 4);
      expect(s.latencyMs.call?.count).toBe(s.counters.answered);
      expect(s.bytes.in).toBeGreaterThan(0);
    });
  }

  it('classic players get a Kerberos ticket, then register on the secure server the login names', async () => {
    const s = await runProtocolLoad(
      'rmc',
      {
        target: { host: '127.0.0.1', port: classic.port('udp') },
        clients: 2,
        durationS: 40,
      },
      { prudpProfile: 'classic', callRate: 5 },
      // A classic login costs the server 0.1 s of CPU: the run ends once both are in and calling.
      { stopWhen: (p) => p.sessions.joined === 2 && (p.rates.answered ?? 0) > 0 },
    );
    expect(s.sessions).toMatchObject({ joined: 2, failed: 0 });
    expect(s.violations).toEqual({});
    expect(s.counters.logins).toBe(2);
  }, 60_000);

  it('a wrong password fails the login with the reason', async () => {
    const s = await runProtocolLoad(
      'rmc',
      { target: { host: '127.0.0.1', port: classic.port('udp') }, clients: 1, durationS: 30 },
      { prudpProfile: 'classic', password: 'not-it' },
    );
    expect(s.sessions.failed).toBe(1);
    expect(s.errors).toEqual({ ERR_RMC_TICKET: 1 });
  }, 60_000);
});
