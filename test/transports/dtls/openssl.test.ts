import { randomBytes } from 'node:crypto';
import dgram from 'node:dgram';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DtlsClient } from '../../../src/transports/dtls/index.js';
import {
  type EchoServer,
  expectRecordPlane,
  hasProgram,
  IN_CI,
  plaintextHandshakeTypes,
  recordTypes,
  type Spawned,
  sendUntil,
  spawnProgram,
  startEchoServer,
  startProxy,
  testIdentity,
  type UdpProxy,
  waitFor,
} from './helpers.js';

// OpenSSL's s_client as an independent DTLS 1.2 PSK client: every suite of the server's list that
// OpenSSL implements, with and without the extended master secret.
const haveOpenssl = hasProgram('openssl');

/** printf-escaped bytes, so a binary identity reaches argv unchanged (dash's printf knows octal). */
function octal(bytes: Buffer): string {
  return [...bytes].map((b) => `\\${b.toString(8).padStart(3, '0')}`).join('');
}

function sClient(srv: EchoServer, cipher: string, env?: NodeJS.ProcessEnv): Spawned {
  const script =
    `exec openssl s_client -dtls1_2 -connect 127.0.0.1:${srv.port} -quiet ` +
    `-psk ${srv.psk.toString('hex')} -psk_identity "$(printf '${octal(srv.identity)}')" -cipher ${cipher}`;
  return spawnProgram('sh', ['-c', script], env);
}

/** s_client with the echo server's identity and key, to `port` (the server, or a proxy in front of it). */
function sClientScript(srv: EchoServer, port: number): string {
  return (
    `exec openssl s_client -dtls1_2 -connect 127.0.0.1:${port} -quiet ` +
    `-psk ${srv.psk.toString('hex')} -psk_identity "$(printf '${octal(srv.identity)}')" -cipher PSK-AES128-GCM-SHA256`
  );
}

const isHelloVerify = (d: Buffer) => plaintextHandshakeTypes(d).join() === '3';
const isServerHelloFlight = (d: Buffer) => plaintextHandshakeTypes(d).join() === '2,14';
const isFinalFlight = (d: Buffer) => recordTypes(d).join() === '20,22';

/**
 * The server's datagrams at the proxy as letters: H (HelloVerifyRequest), S (ServerHello +
 * ServerHelloDone), F (ChangeCipherSpec + Finished), ? (anything else); application data
 * is left out.
 */
function flights(proxy: UdpProxy): string {
  return proxy.fromServer
    .filter((d) => !recordTypes(d).includes(23))
    .map((d) => (isHelloVerify(d) ? 'H' : isServerHelloFlight(d) ? 'S' : isFinalFlight(d) ? 'F' : '?'))
    .join('');
}

/**
 * The server's handshake as seen on the wire, by content rather than position (a loaded machine
 * makes s_client's 1 s timer fire, and each retransmitted flight gets its answer again): only
 * small HelloVerifyRequests until a cookie proves the address, then ServerHello + ServerHelloDone
 * in one datagram, then ChangeCipherSpec + Finished in one.
 */
function expectHandshakeFlights(proxy: UdpProxy): void {
  expect(plaintextHandshakeTypes(proxy.fromClient[0]!)).toEqual([1]);
  expect(flights(proxy)).toMatch(/^H+S+F+$/);
  // No reply larger than the request before the cookie proves the address.
  for (const d of proxy.fromServer.filter(isHelloVerify))
    expect(d.length).toBeLessThanOrEqual(proxy.fromClient[0]!.length);
}

let dir = '';
let noEmsEnv: NodeJS.ProcessEnv = {};

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'gw-dtls-openssl-'));
  // OpenSSL 3 has no s_client flag for it; its config's Options can clear ExtendedMasterSecret.
  const conf = join(dir, 'no-ems.cnf');
  writeFileSync(
    conf,
    [
      'openssl_conf = conf_start',
      '[conf_start]',
      'ssl_conf = ssl_sect',
      '[ssl_sect]',
      'system_default = system_default_sect',
      '[system_default_sect]',
      'Options = -ExtendedMasterSecret',
      '',
    ].join('\n'),
  );
  noEmsEnv = { ...process.env, OPENSSL_CONF: conf };
});

afterAll(() => {
  if (dir !== '') rmSync(dir, { recursive: true, force: true });
});

const suites: Array<[string, number]> = [
  ['PSK-AES128-GCM-SHA256', 0x00a8],
  ['PSK-AES256-GCM-SHA384', 0x00a9],
  ['PSK-AES128-CCM', 0xc0a4],
  ['PSK-AES256-CCM', 0xc0a5],
  ['PSK-AES128-CCM8', 0xc0a8],
  ['PSK-AES256-CCM8', 0xc0a9],
  ['PSK-CHACHA20-POLY1305', 0xccab],
];

// Every test has its own server and s_client (or s_server): they run concurrently.
describe.runIf(haveOpenssl || IN_CI)(
  'openssl s_client -dtls1_2 against DtlsServer',
  { concurrent: true },
  () => {
    // First: s_client's own retransmission timers make it the longest; the others run meanwhile.
    it('s_client through a proxy that loses every handshake flight once still completes (real retransmission timers)', async () => {
      const srv = await startEchoServer();
      const seen = new Set<string>();
      const proxy = await startProxy(srv.port, (direction, datagram) => {
        if (recordTypes(datagram).includes(23)) return false;
        const key = `${direction}:${datagram.readUInt16BE(1)}:${recordTypes(datagram).join(',')}:${plaintextHandshakeTypes(datagram).join(',')}`;
        if (seen.has(key)) return false;
        seen.add(key);
        return true;
      });
      const script =
        `exec openssl s_client -dtls1_2 -connect 127.0.0.1:${proxy.port} -quiet ` +
        `-psk ${srv.psk.toString('hex')} -psk_identity "$(printf '${octal(srv.identity)}')" -cipher PSK-AES128-GCM-SHA256`;
      const client = spawnProgram('sh', ['-c', script]);
      try {
        await waitFor(
          () => srv.associations.length === 1,
          () => `a handshake (${client.stderr()})`,
          25_000,
        );
        client.child.stdin!.write('after loss');
        await waitFor(
          () => client.stdout().includes('echo:after loss'),
          () => `the echo (${client.stderr()})`,
          25_000,
        );
        // The first copy of each was lost: hello, HVR, ServerHello flight, the client's CKE+CCS+Finished
        // (OpenSSL then resends it as three datagrams) and our CCS+Finished.
        expect([...seen]).toEqual(
          expect.arrayContaining([
            'to-server:65279:22:1',
            'to-client:65279:22:3',
            'to-client:65277:22,22:2,14',
            'to-server:65277:22,20,22:16',
            'to-client:65277:20,22:',
          ]),
        );
      } finally {
        await client.stop();
        await proxy.close();
        await srv.close();
      }
    }, 60_000);

    for (const ems of [true, false]) {
      for (const [cipher, id] of suites) {
        it(`${cipher}, EMS ${ems ? 'on' : 'off'}: handshake and application data both ways`, async () => {
          const srv = await startEchoServer();
          const client = sClient(srv, cipher, ems ? undefined : noEmsEnv);
          try {
            await waitFor(
              () => srv.associations.length === 1,
              () => `a handshake (${client.stderr()})`,
            );
            const a = srv.associations[0]!;
            expect(a.cipherSuite).toBe(id);
            expect(a.extendedMasterSecret).toBe(ems);
            expect(a.identity.equals(srv.identity)).toBe(true);
            // Server first, then a client message echoed back: both directions.
            a.send(Buffer.from('hello from server\n'));
            await waitFor(
              () => client.stdout().includes('hello from server'),
              'the server message at the client',
            );
            const payload = Buffer.from([0xda, 0x72, 0x00, 0x0b, 0xff, 0x00, 0x01, 0x0a]);
            client.child.stdin!.write(payload);
            await waitFor(() => srv.messages.length >= 1, 'the client message at the server');
            expect(srv.messages[0]).toEqual(payload);
            await waitFor(
              () => client.stdout().includes(Buffer.concat([Buffer.from('echo:'), payload])),
              'the echo',
            );
            expectRecordPlane(srv, 1, 2);
          } finally {
            await client.stop();
            await srv.close();
          }
        });
      }
    }

    it('the first reply to a ClientHello is a small HelloVerifyRequest, then the handshake completes', async () => {
      const srv = await startEchoServer();
      const proxy = await startProxy(srv.port);
      const client = spawnProgram('sh', ['-c', sClientScript(srv, proxy.port)]);
      try {
        await waitFor(() => srv.associations.length === 1, 'a handshake');
        // The server's last flight goes out as the association starts: wait until it passed the
        // proxy (counting datagrams is not enough: a retransmission adds some).
        await waitFor(
          () => proxy.fromServer.some(isFinalFlight),
          () => `the final flight at the proxy (${flights(proxy)})`,
        );
        expectHandshakeFlights(proxy);
      } finally {
        await client.stop();
        await proxy.close();
        await srv.close();
      }
    });

    it('every handshake datagram of the client twice (retransmissions under load): the same flights, one association', async () => {
      const srv = await startEchoServer();
      let proxy: UdpProxy | undefined;
      proxy = await startProxy(srv.port, (direction, datagram) => {
        // A second copy of each epoch-0 datagram, as a client whose timer fired early sends it.
        if (direction === 'to-server' && datagram.readUInt16BE(3) === 0) proxy?.inject(datagram);
        return false;
      });
      const client = spawnProgram('sh', ['-c', sClientScript(srv, proxy.port)]);
      try {
        await waitFor(
          () => srv.associations.length === 1,
          () => `a handshake (${client.stderr()})`,
        );
        await waitFor(
          () => proxy.fromServer.some(isFinalFlight),
          () => `the final flight at the proxy (${flights(proxy)})`,
        );
        client.child.stdin!.write('after copies');
        await waitFor(
          () => client.stdout().includes('echo:after copies'),
          () => `the echo (${client.stderr()})`,
        );
        expectHandshakeFlights(proxy);
        // Each copy of the first ClientHello got its own small HelloVerifyRequest, the copy of the
        // cookie-carrying one a resent ServerHello flight; still one association.
        const kinds = flights(proxy);
        expect(kinds.match(/H/g)?.length ?? 0).toBeGreaterThanOrEqual(2);
        expect(kinds.match(/S/g)?.length ?? 0).toBeGreaterThanOrEqual(2);
        expect(srv.associations).toHaveLength(1);
      } finally {
        await client.stop();
        await proxy.close();
        await srv.close();
      }
    });

    it('an unknown identity gets alert 115 (unknown_psk_identity)', async () => {
      const srv = await startEchoServer();
      const script =
        `exec openssl s_client -dtls1_2 -connect 127.0.0.1:${srv.port} -quiet ` +
        `-psk ${srv.psk.toString('hex')} -psk_identity stranger -cipher PSK-AES128-GCM-SHA256`;
      const client = spawnProgram('sh', ['-c', script]);
      try {
        await waitFor(
          () => /unknown psk identity/i.test(client.stderr()),
          () => `the alert at the client (${client.stderr()})`,
        );
        expect(srv.associations).toHaveLength(0);
        expect(srv.drops).toContain('unknown-psk-identity');
      } finally {
        await client.stop();
        await srv.close();
      }
    });

    it('a wrong PSK never makes an association and the client gets a fatal alert', async () => {
      const srv = await startEchoServer();
      const wrong = Buffer.from(srv.psk);
      wrong[0]! ^= 0xff;
      const script =
        `exec openssl s_client -dtls1_2 -connect 127.0.0.1:${srv.port} -quiet ` +
        `-psk ${wrong.toString('hex')} -psk_identity "$(printf '${octal(srv.identity)}')" -cipher PSK-AES128-GCM-SHA256`;
      const client = spawnProgram('sh', ['-c', script]);
      try {
        await waitFor(
          () => /alert/i.test(client.stderr()),
          () => `the alert at the client (${client.stderr()})`,
        );
        expect(client.stderr()).toMatch(/decrypt error/i);
        expect(srv.associations).toHaveLength(0);
        expect(srv.drops).toContain('bad-finished');
      } finally {
        await client.stop();
        await srv.close();
      }
    });

    it('a suite the server does not accept gets alert 40 (handshake_failure)', async () => {
      const srv = await startEchoServer({ cipherSuites: [0x00a8] });
      const script =
        `exec openssl s_client -dtls1_2 -connect 127.0.0.1:${srv.port} -quiet ` +
        `-psk ${srv.psk.toString('hex')} -psk_identity x -cipher PSK-AES256-GCM-SHA384`;
      const client = spawnProgram('sh', ['-c', script]);
      try {
        await waitFor(
          () => /handshake failure/i.test(client.stderr()),
          () => `the alert at the client (${client.stderr()})`,
        );
        expect(srv.drops).toContain('no-shared-cipher-suite');
      } finally {
        await client.stop();
        await srv.close();
      }
    });
  },
);

async function freeUdpPort(): Promise<number> {
  const s = dgram.createSocket('udp4');
  await new Promise<void>((resolve) => s.bind(0, '127.0.0.1', () => resolve()));
  const { port } = s.address();
  await new Promise<void>((resolve) => s.close(() => resolve()));
  return port;
}

// DtlsClient against an independent server: OpenSSL's s_server.
describe.runIf(haveOpenssl || IN_CI)(
  'DtlsClient against openssl s_server -dtls1_2',
  { concurrent: true },
  () => {
    for (const [cipher, id] of suites) {
      it(`${cipher}: handshake and data both ways`, async () => {
        const port = await freeUdpPort();
        const identity = testIdentity();
        const psk = randomBytes(64);
        const server = spawnProgram('sh', [
          '-c',
          `exec openssl s_server -dtls1_2 -accept 127.0.0.1:${port} -nocert -naccept 1 -quiet ` +
            `-psk ${psk.toString('hex')} -psk_identity "$(printf '${octal(identity)}')" -cipher ${cipher}`,
        ]);
        let client: DtlsClient | undefined;
        try {
          client = await DtlsClient.connect({
            host: '127.0.0.1',
            port,
            identity,
            psk,
            cipherSuites: [id],
            timeoutMs: 20_000,
          });
          expect(client.cipherSuite).toBe(id);
          expect(client.extendedMasterSecret).toBe(true);
          const got: Buffer[] = [];
          client.on('message', (m) => got.push(m));
          await sendUntil(
            () => client!.send(Buffer.from('to s_server')),
            () => server.stdout().includes('to s_server'),
            () => `the message at s_server (${server.stderr()})`,
          );
          await sendUntil(
            () => server.child.stdin!.write('to DtlsClient'),
            () => Buffer.concat(got).includes('to DtlsClient'),
            'the message at the client',
          );
        } finally {
          client?.close();
          await server.stop();
        }
      });
    }
  },
);
