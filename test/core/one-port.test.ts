/**
 * listenOnOnePort with real sockets: port 0 tries another number when the one TCP got is held
 * by someone else's UDP socket; a port the user chose is never swapped for another.
 */
import type dgram from 'node:dgram';
import net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { listenOnOnePort } from '../../src/core/one-port.js';
import { bindUdp, closeUdp } from '../../src/core/udp.js';

const opened: (net.Server | dgram.Socket)[] = [];
afterEach(async () => {
  for (const s of opened.splice(0)) {
    if (s instanceof net.Server) await new Promise<void>((r) => s.close(() => r()));
    else await closeUdp(s);
  }
});

function listenTcp(port: number): Promise<net.Server> {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(port, '127.0.0.1', () => resolve(s));
  });
}
const tcpPort = (s: net.Server) => (s.address() as net.AddressInfo).port;
const closeTcp = (s: net.Server) => new Promise<void>((r) => s.close(() => r()));

/** A UDP port held by "another program", and TCP on that same number free. */
async function heldUdpPort(): Promise<number> {
  for (;;) {
    const udp = await bindUdp({ host: '127.0.0.1', port: 0 });
    const port = udp.address().port;
    try {
      const probe = await listenTcp(port);
      await closeTcp(probe);
      opened.push(udp);
      return port;
    } catch {
      await closeUdp(udp);
    }
  }
}

describe('listenOnOnePort', () => {
  it('port 0: when the UDP side of the number TCP got is taken, both move to a number free for both', async () => {
    const held = await heldUdpPort();
    const tried: number[] = [];
    const got = await listenOnOnePort(
      0,
      // The system hands out the held number first (as it may under load), then any.
      (port) => listenTcp(tried.length === 0 ? held : port),
      tcpPort,
      closeTcp,
      (port) => {
        tried.push(port);
        return bindUdp({ host: '127.0.0.1', port });
      },
    );
    opened.push(got.first, got.second);
    expect(tried[0]).toBe(held);
    expect(got.port).not.toBe(held);
    expect(tcpPort(got.first)).toBe(got.port);
    expect(got.second.address().port).toBe(got.port);
    // The first TCP listener was closed, not leaked: its number can be listened on again.
    opened.push(await listenTcp(held));
  });

  it('a port the user chose that is taken on the UDP side is an error, and TCP is released', async () => {
    const held = await heldUdpPort();
    await expect(
      listenOnOnePort(held, listenTcp, tcpPort, closeTcp, (port) => bindUdp({ host: '127.0.0.1', port })),
    ).rejects.toMatchObject({ code: 'EADDRINUSE' });
    opened.push(await listenTcp(held));
  });

  it('gives up after its attempts, with the last error', async () => {
    let calls = 0;
    await expect(
      listenOnOnePort(
        0,
        listenTcp,
        tcpPort,
        closeTcp,
        async () => {
          calls++;
          throw Object.assign(new Error('taken'), { code: 'EADDRINUSE' });
        },
        3,
      ),
    ).rejects.toThrow('taken');
    expect(calls).toBe(3);
  });

  it('other errors are not retried', async () => {
    let calls = 0;
    await expect(
      listenOnOnePort(0, listenTcp, tcpPort, closeTcp, async () => {
        calls++;
        throw Object.assign(new Error('denied'), { code: 'EACCES' });
      }),
    ).rejects.toThrow('denied');
    expect(calls).toBe(1);
  });
});
