import { describe, expect, it } from 'vitest';
import {
  type EchoServer,
  expectRecordPlane,
  hasProgram,
  IN_CI,
  type Spawned,
  spawnProgram,
  startEchoServer,
  waitFor,
} from './helpers.js';

// GnuTLS's gnutls-cli --udp as a second independent DTLS 1.2 PSK client.
const haveGnutls = hasProgram('gnutls-cli');

function octal(bytes: Buffer): string {
  return [...bytes].map((b) => `\\${b.toString(8).padStart(3, '0')}`).join('');
}

function gnutlsCli(srv: EchoServer, cipher: string, ems: boolean, psk = srv.psk): Spawned {
  const priority = `NORMAL:-VERS-ALL:+VERS-DTLS1.2:-KX-ALL:+PSK:-CIPHER-ALL:+${cipher}${ems ? '' : ':%NO_SESSION_HASH'}`;
  const script =
    `exec gnutls-cli --udp --port ${srv.port} 127.0.0.1 --pskusername "$(printf '${octal(srv.identity)}')" ` +
    `--pskkey ${psk.toString('hex')} --priority '${priority}'`;
  return spawnProgram('sh', ['-c', script]);
}

const suites: Array<[string, number]> = [
  ['AES-128-GCM', 0x00a8],
  ['AES-256-GCM', 0x00a9],
  ['AES-128-CCM', 0xc0a4],
  ['AES-256-CCM', 0xc0a5],
  ['AES-128-CCM-8', 0xc0a8],
  ['AES-256-CCM-8', 0xc0a9],
  ['CHACHA20-POLY1305', 0xccab],
];

// Every test has its own server and gnutls-cli: they run concurrently.
describe.runIf(haveGnutls || IN_CI)('gnutls-cli --udp against DtlsServer', { concurrent: true }, () => {
  for (const ems of [true, false]) {
    for (const [cipher, id] of suites) {
      it(`${cipher}, EMS ${ems ? 'on' : 'off'}: handshake and application data both ways`, async () => {
        const srv = await startEchoServer();
        const client = gnutlsCli(srv, cipher, ems);
        try {
          await waitFor(
            () => srv.associations.length === 1,
            () =>
              `a handshake (${client.stderr()}; server drops: ${srv.drops.join(',')}; closes: ${srv.closes.join(',')})`,
          );
          const a = srv.associations[0]!;
          expect(a.cipherSuite).toBe(id);
          expect(a.extendedMasterSecret).toBe(ems);
          expect(a.identity.equals(srv.identity)).toBe(true);
          a.send(Buffer.from('hello from server\n'));
          await waitFor(
            () => client.stdout().includes('hello from server'),
            'the server message at the client',
          );
          client.child.stdin!.write('ping from gnutls\n');
          await waitFor(() => srv.messages.length >= 1, 'the client message at the server');
          expect(srv.messages[0]!.toString()).toBe('ping from gnutls\n');
          await waitFor(() => client.stdout().includes('echo:ping from gnutls'), 'the echo');
          expectRecordPlane(srv, 1, 2);
        } finally {
          await client.stop();
          await srv.close();
        }
      });
    }
  }

  it('a wrong PSK gets no association and the client reports a failed handshake', async () => {
    const srv = await startEchoServer();
    const wrong = Buffer.from(srv.psk);
    wrong[5]! ^= 0x01;
    const client = gnutlsCli(srv, 'AES-128-GCM', true, wrong);
    try {
      await waitFor(
        () => /fatal alert/i.test(client.stderr() + client.stdout().toString()),
        () => `the failure (${client.stderr()} ${client.stdout().toString()} ${srv.drops})`,
      );
      expect(srv.associations).toHaveLength(0);
      expect(srv.drops).toContain('bad-finished');
    } finally {
      await client.stop();
      await srv.close();
    }
  });
});
