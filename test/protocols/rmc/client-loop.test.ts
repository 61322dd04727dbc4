/**
 * RmcClient over TCP on the core's framed-stream loop (src/core/framed-client.ts): what a
 * misbehaving server does to it, against a scripted server on 127.0.0.1. Each failure keeps the
 * client's own typed error (`RmcClientError` codes and messages).
 */
import type net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { RmcClient, RmcClientError } from '../../../src/protocols/rmc/client.js';
import { ErrorCode } from '../../../src/wire/errors.js';
import { scriptedTcpServer } from '../../helpers/scripted-tcp.js';

const cleanup: (() => unknown)[] = [];
afterEach(async () => {
  while (cleanup.length > 0) await cleanup.pop()!();
});

/** A server that runs `onRequest` on the socket when the first request arrives. */
async function scripted(onRequest: (socket: net.Socket) => void): Promise<number> {
  const server = await scriptedTcpServer((socket) => socket.once('data', () => onRequest(socket)));
  cleanup.push(server.close);
  return server.port;
}

const u32le = (n: number) => {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(n, 0);
  return b;
};

describe('RmcClient (TCP) on the framed-stream loop', () => {
  it('a frame length over maxFrameBytes fails the call with ERR_TOO_LARGE, before the frame arrives', async () => {
    const port = await scripted((s) => s.write(u32le(64 * 1024 * 1024)));
    const c = await RmcClient.connect({ host: '127.0.0.1', port, maxFrameBytes: 4096 });
    cleanup.push(() => c.close());
    const err = await c.callRaw('P', 'M', Buffer.alloc(0)).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(RmcClientError);
    expect((err as RmcClientError).code).toBe(ErrorCode.TOO_LARGE);
    expect((err as RmcClientError).message).toMatch(/^bad frame from server: /);
    expect(c.closed).toBe(true);
  });

  it('the server closing in the middle of a frame: ERR_RMC_CLOSED', async () => {
    const port = await scripted((s) => s.end(Buffer.concat([u32le(100), Buffer.alloc(10)])));
    const c = await RmcClient.connect({ host: '127.0.0.1', port });
    cleanup.push(() => c.close());
    await expect(c.callRaw('P', 'M', Buffer.alloc(0))).rejects.toMatchObject({
      code: 'ERR_RMC_CLOSED',
      message: 'RMC connection is closed',
    });
  });

  it('a frame the envelope cannot read fails the call with its DecodeError code, as a bad frame', async () => {
    // A whole frame of 7 bytes that is no hyperscape envelope.
    const port = await scripted((s) => s.write(Buffer.concat([u32le(7), Buffer.alloc(7, 0xff)])));
    const c = await RmcClient.connect({ host: '127.0.0.1', port });
    cleanup.push(() => c.close());
    const err = (await c.callRaw('P', 'M', Buffer.alloc(0)).catch((e: unknown) => e)) as RmcClientError;
    expect(err).toBeInstanceOf(RmcClientError);
    expect(err.code).toMatch(/^ERR_/);
    expect(err.code).not.toBe('ERR_INTERNAL');
    expect(err.message).toMatch(/^bad frame from server: /);
  });
});
