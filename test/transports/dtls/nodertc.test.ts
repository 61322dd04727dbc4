import { createRequire } from 'node:module';
import type { Duplex } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { expectRecordPlane, startEchoServer, waitFor } from './helpers.js';

// @nodertc/dtls (pure JavaScript, written independently of this module) as a third client.
interface NodertcSocket extends Duplex {
  close(): void;
}
interface NodertcDtls {
  connect(options: {
    type: 'udp4';
    remoteAddress: string;
    remotePort: number;
    pskIdentity: Buffer;
    pskSecret: Buffer;
    cipherSuites: string[];
    extendedMasterSecret?: boolean;
  }): NodertcSocket;
}
const dtls = createRequire(import.meta.url)('@nodertc/dtls') as NodertcDtls;

// The PSK suites @nodertc/dtls implements (it has no CCM).
const suites: Array<[string, number]> = [
  ['TLS_PSK_WITH_AES_128_GCM_SHA256', 0x00a8],
  ['TLS_PSK_WITH_AES_256_GCM_SHA384', 0x00a9],
  ['TLS_PSK_WITH_CHACHA20_POLY1305_SHA256', 0xccab],
];

describe('@nodertc/dtls client against DtlsServer', () => {
  for (const ems of [true, false]) {
    for (const [name, id] of suites) {
      it(`${name}, EMS ${ems ? 'on' : 'off'}: handshake and application data both ways`, async () => {
        const srv = await startEchoServer();
        const socket = dtls.connect({
          type: 'udp4',
          remoteAddress: '127.0.0.1',
          remotePort: srv.port,
          pskIdentity: srv.identity,
          pskSecret: srv.psk,
          cipherSuites: [name],
          extendedMasterSecret: ems,
        });
        const received: Buffer[] = [];
        socket.on('data', (d: Buffer) => received.push(d));
        socket.on('error', () => {});
        try {
          await new Promise<void>((resolve, reject) => {
            socket.once('connect', () => resolve());
            socket.once('error', reject);
          });
          await waitFor(() => srv.associations.length === 1, 'the association');
          const a = srv.associations[0]!;
          expect(a.cipherSuite).toBe(id);
          expect(a.extendedMasterSecret).toBe(ems);
          const payload = Buffer.from([0xda, 0x72, 0, 1, 2, 3, 0xff]);
          socket.write(payload);
          await waitFor(() => received.length >= 1, 'the echo');
          expect(received[0]).toEqual(Buffer.concat([Buffer.from('echo:'), payload]));
          expect(srv.messages[0]).toEqual(payload);
          expectRecordPlane(srv, 1, 1);
          a.send(Buffer.from('from server'));
          await waitFor(() => received.length >= 2, 'the server message');
          expect(received[1]!.toString()).toBe('from server');
        } finally {
          socket.close();
          await srv.close();
        }
      });
    }
  }
});
