import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { DtlsClient } from '../../../src/transports/dtls/index.js';
import { startEchoServer, startProxy, waitFor } from './helpers.js';

// Arbitrary and mutated datagrams: the server must only count drops (never `internal-error`),
// never throw out of handleDatagram, and keep serving real clients and established associations.
describe('DtlsServer under fuzzing', () => {
  it('random datagrams and mutations of a real handshake give only counted drops', async () => {
    const srv = await startEchoServer();
    const proxy = await startProxy(srv.port);
    // A real handshake and some traffic, captured at the proxy.
    const first = await DtlsClient.connect({
      host: '127.0.0.1',
      port: proxy.port,
      identity: srv.identity,
      psk: srv.psk,
    });
    first.send(Buffer.from('captured'));
    await waitFor(() => srv.messages.length === 1, 'the captured message');
    const captured = proxy.fromClient.map((d) => Buffer.from(d));
    expect(captured.length).toBeGreaterThanOrEqual(4);
    first.close();
    await waitFor(() => srv.server.stats().associations === 0, 'the close');
    const { port: proxyPort } = { port: proxy.port };
    let replies = 0;
    const send = () => {
      replies++;
    };

    // 1. Arbitrary bytes, including bytes that start like a record.
    fc.assert(
      fc.property(
        fc.oneof(
          fc.uint8Array({ maxLength: 1600 }),
          fc
            .tuple(
              fc.constantFrom(20, 21, 22, 23),
              fc.constantFrom(0, 1, 2),
              fc.uint8Array({ maxLength: 400 }),
            )
            .map(([type, epoch, rest]) => {
              const d = Buffer.alloc(13 + rest.length);
              d[0] = type;
              d.writeUInt16BE(0xfefd, 1);
              d.writeUInt16BE(epoch, 3);
              d.writeUInt16BE(rest.length, 11);
              Buffer.from(rest).copy(d, 13);
              return new Uint8Array(d);
            }),
        ),
        fc.integer({ min: 1024, max: 65535 }),
        (bytes, port) => {
          srv.server.handleDatagram(Buffer.from(bytes), { address: '127.0.0.1', port }, send);
        },
      ),
      { numRuns: 1500 },
    );

    // 2. The captured client datagrams replayed in order from the captured 5-tuple (so cookies are
    //    valid and deep states are reached), one of them mutated.
    fc.assert(
      fc.property(
        fc.nat(captured.length - 1),
        fc.array(fc.tuple(fc.nat(), fc.nat(255)), { minLength: 1, maxLength: 8 }),
        fc.oneof(fc.constant(-1), fc.nat(600)),
        (which, flips, truncate) => {
          for (let i = 0; i < captured.length; i++) {
            let d = captured[i]!;
            if (i === which) {
              d = Buffer.from(d);
              for (const [at, value] of flips) d[at % d.length] = value;
              if (truncate >= 0) d = d.subarray(0, truncate % (d.length + 1));
            }
            srv.server.handleDatagram(d, { address: '127.0.0.1', port: proxyPort }, send);
          }
        },
      ),
      { numRuns: 400 },
    );

    const drops = srv.server.stats().drops;
    expect(drops['internal-error']).toBeUndefined();
    expect(Object.keys(drops).length).toBeGreaterThan(5);
    expect(replies).toBeGreaterThan(0);

    // Still serving: a new client completes a handshake and echoes.
    const second = await DtlsClient.connect({
      host: '127.0.0.1',
      port: srv.port,
      identity: srv.identity,
      psk: srv.psk,
    });
    const got: Buffer[] = [];
    second.on('message', (m) => got.push(m));
    second.send(Buffer.from('after fuzz'));
    await waitFor(() => got.length === 1, 'the echo after fuzzing');
    second.close();
    await proxy.close();
    await srv.close();
  });

  it('mutated and garbage records on an established association never hurt it', async () => {
    const srv = await startEchoServer();
    const proxy = await startProxy(srv.port);
    const client = await DtlsClient.connect({
      host: '127.0.0.1',
      port: proxy.port,
      identity: srv.identity,
      psk: srv.psk,
    });
    try {
      const got: Buffer[] = [];
      client.on('message', (m) => got.push(m));
      client.send(Buffer.from('base'));
      await waitFor(() => got.length === 1, 'the first echo');
      const appRecord = Buffer.from(proxy.fromClient.at(-1)!);
      await fc.assert(
        fc.asyncProperty(
          fc.array(fc.tuple(fc.nat(), fc.nat(255)), { minLength: 1, maxLength: 4 }),
          async (flips) => {
            const d = Buffer.from(appRecord);
            for (const [at, value] of flips) d[at % d.length] = value;
            proxy.inject(d);
          },
        ),
        { numRuns: 200 },
      );
      client.send(Buffer.from('still here'));
      await waitFor(() => got.length === 2, 'the echo after the garbage');
      expect(got[1]!.toString()).toBe('echo:still here');
      expect(srv.messages).toHaveLength(2);
      expect(srv.server.stats().drops['internal-error']).toBeUndefined();
      expect(srv.closes).toEqual([]);
    } finally {
      client.close();
      await proxy.close();
      await srv.close();
    }
  });
});
