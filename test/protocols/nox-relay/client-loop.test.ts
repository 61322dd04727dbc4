/**
 * NoxRelayClient over TCP on the core's framed-stream loop (src/core/framed-client.ts): what a
 * misbehaving server does to it, against a scripted server on 127.0.0.1. Errors stay what the
 * client always reported: the socket's own (read by the CLI's `connectFailure`), framing errors
 * to `error` listeners, `ERR_NOX_CLOSED` for the requests a close leaves unanswered.
 */
import net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { NoxRelayClient } from '../../../src/protocols/nox-relay/client.js';
import { DecodeError, ErrorCode } from '../../../src/wire/errors.js';
import { scriptedTcpServer } from '../../helpers/scripted-tcp.js';
import { waitFor } from '../../helpers/wait.js';

const cleanup: (() => unknown)[] = [];
afterEach(async () => {
  while (cleanup.length > 0) await cleanup.pop()!();
});

/** A server that runs `onRequest` on the socket when the first packet arrives. */
async function scripted(onRequest: (socket: net.Socket) => void): Promise<number> {
  const server = await scriptedTcpServer((socket) => socket.once('data', () => onRequest(socket)));
  cleanup.push(server.close);
  return server.port;
}

function client(port: number): NoxRelayClient {
  const c = new NoxRelayClient({ port, transport: 'tcp', keepAliveMs: 0 });
  cleanup.push(() => c.close());
  return c;
}

describe('NoxRelayClient (TCP) on the framed-stream loop', () => {
  it('a packet length under the header is a DecodeError to `error` listeners; the waiting request gets ERR_NOX_CLOSED', async () => {
    const port = await scripted((s) => s.write(Buffer.of(0, 1, 0, 0)));
    const c = client(port);
    const errors: Error[] = [];
    c.on('error', (e: Error) => errors.push(e));
    await c.connect();
    await expect(c.latency()).rejects.toMatchObject({ code: 'ERR_NOX_CLOSED' });
    expect(errors.length).toBe(1);
    expect(errors[0]).toBeInstanceOf(DecodeError);
    expect((errors[0] as DecodeError).code).toBe(ErrorCode.BAD_LENGTH);
    expect(c.isClosed).toBe(true);
  });

  it('the server closing in the middle of a packet: ERR_NOX_CLOSED, no `error` event, `close` once', async () => {
    const port = await scripted((s) => s.end(Buffer.of(0, 40, 0, 1, 2)));
    const c = client(port);
    const errors: Error[] = [];
    let closes = 0;
    c.on('error', (e: Error) => errors.push(e));
    c.on('close', () => closes++);
    await c.connect();
    await expect(c.latency()).rejects.toMatchObject({ code: 'ERR_NOX_CLOSED', message: 'connection closed' });
    await waitFor(() => closes === 1, { what: 'the close event' });
    expect(errors).toEqual([]);
    expect(c.bytesReceived).toBe(5);
  });

  it('a refused connection rejects with the socket error itself (ECONNREFUSED)', async () => {
    const probe = net.createServer();
    await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
    const { port } = probe.address() as net.AddressInfo;
    await new Promise<void>((resolve) => probe.close(() => resolve()));
    const c = client(port);
    await expect(c.connect()).rejects.toMatchObject({ code: 'ECONNREFUSED' });
    expect(c.isClosed).toBe(true);
  });
});
