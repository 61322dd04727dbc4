/**
 * Js5Client on the core's framed-stream loop (src/core/framed-client.ts): what a misbehaving
 * server does to it, against a scripted server on 127.0.0.1. Each failure keeps the client's own
 * typed error (codes and messages the CLI prints).
 */
import type net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { Js5Client } from '../../../src/protocols/js5/client.js';
import { DecodeError, ErrorCode } from '../../../src/wire/errors.js';
import { scriptedTcpServer } from '../../helpers/scripted-tcp.js';
import { waitFor } from '../../helpers/wait.js';

const cleanup: (() => unknown)[] = [];
afterEach(async () => {
  while (cleanup.length > 0) await cleanup.pop()!();
});

/** A server that accepts the 530 handshake (5 bytes) with reply 0, then runs `script` on the socket. */
async function scripted(script: (socket: net.Socket) => void): Promise<number> {
  const server = await scriptedTcpServer((socket) =>
    socket.once('data', (chunk: Buffer) => {
      expect(chunk[0]).toBe(15);
      socket.write(Buffer.of(0));
      script(socket);
    }),
  );
  cleanup.push(server.close);
  return server.port;
}

/** A response header: archive, group, compression, container length. */
function header(archive: number, group: number, length: number): Buffer {
  const h = Buffer.alloc(8);
  h[0] = archive;
  h.writeUInt16BE(group, 1);
  h[3] = 0;
  h.writeInt32BE(length, 4);
  return h;
}

describe('Js5Client on the framed-stream loop', () => {
  it('a container length over maxContainerBytes fails the requests with ERR_TOO_LARGE, before the container arrives', async () => {
    const port = await scripted((s) => s.write(header(255, 255, 50_000)));
    const c = await Js5Client.connect({
      host: '127.0.0.1',
      port,
      build: 530,
      profile: '530',
      maxContainerBytes: 1000,
    });
    cleanup.push(() => c.close());
    const err = await c.request(255, 255, true).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(DecodeError);
    expect((err as DecodeError).code).toBe(ErrorCode.TOO_LARGE);
    // Later requests fail with the same error: the connection is over.
    await expect(c.request(0, 0, true)).rejects.toBe(err);
  });

  it('the server closing in the middle of a response: ERR_JS5_CLOSED, naming the unanswered requests', async () => {
    // Half a 100-byte response, then FIN.
    const port = await scripted((s) => s.end(Buffer.concat([header(0, 0, 100), Buffer.alloc(40)])));
    const c = await Js5Client.connect({ host: '127.0.0.1', port, build: 530, profile: '530' });
    cleanup.push(() => c.close());
    await expect(c.request(0, 0, true)).rejects.toMatchObject({
      code: 'ERR_JS5_CLOSED',
      message:
        'the js5 server closed the connection with 1 request(s) unanswered (a group it does not have, or something on the way closed it?)',
    });
  });

  it('a response nobody asked for is a DecodeError that closes the connection', async () => {
    const port = await scripted((s) => s.write(Buffer.concat([header(3, 7, 0), Buffer.alloc(0)])));
    const c = await Js5Client.connect({ host: '127.0.0.1', port, build: 530, profile: '530' });
    cleanup.push(() => c.close());
    const pending = c.request(0, 0, true);
    await expect(pending).rejects.toMatchObject({ code: ErrorCode.BAD_VALUE });
    await waitFor(() => c.socket.destroyed, { what: 'the socket closed' });
  });
});
