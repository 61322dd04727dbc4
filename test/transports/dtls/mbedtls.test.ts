import { describe, expect, it } from 'vitest';
import { mbedtlsClient, startMbedtls } from '../../helpers/mbedtls.js';
import { expectRecordPlane, startEchoServer, waitFor } from './helpers.js';

// Debian's mbedTLS 2.28 (what UnityTLS is built on) as a DTLS 1.2 PSK client, offering its default
// suites as Unity's client does, with a 64-byte key (test/fixtures/mbedtls-dtls-client.c).
const client = mbedtlsClient();

describe.runIf(client !== undefined)('mbedTLS DTLS client against DtlsServer', () => {
  it('handshake with a 64-byte PSK (the server picks AES-128-GCM from mbedTLS’s list), data both ways', async () => {
    const srv = await startEchoServer();
    const c = startMbedtls(client!, srv.port, srv.identity, srv.psk);
    try {
      await waitFor(
        () => srv.associations.length === 1 && /connected/.test(c.stderr()),
        () => `a handshake (mbedTLS: ${c.stderr()}; drops ${srv.drops.join(',')})`,
      );
      expect(srv.associations[0]!.cipherSuite).toBe(0x00a8);
      expect(c.stderr()).toMatch(/connected TLS-PSK-WITH-AES-128-GCM-SHA256/);
      srv.associations[0]!.send(Buffer.from('hello from server'));
      await waitFor(() => c.records().length === 1, 'the server message at mbedTLS');
      const payload = Buffer.from([0xda, 0x72, 0, 0x0a, 0, 1, 2, 0xff]);
      c.send(payload);
      await waitFor(
        () => c.records().length === 2,
        () => `the echo (mbedTLS: ${c.stderr()})`,
      );
      expect(c.records()[0]!.toString()).toBe('hello from server');
      expect(c.records()[1]).toEqual(Buffer.concat([Buffer.from('echo:'), payload]));
      expect(srv.messages).toEqual([payload]);
      expectRecordPlane(srv, 1, 2);
    } finally {
      await c.stop();
      await srv.close();
    }
  });
});
