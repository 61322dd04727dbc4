import net from 'node:net';
import { describe, expect, it } from 'vitest';
import { CommandError, connectFailure } from '../../src/core/errors.js';

/** A port nothing listens on: bind one, note it, close it. */
async function closedPort(): Promise<number> {
  const s = net.createServer();
  await new Promise<void>((resolve) => s.listen(0, '127.0.0.1', resolve));
  const port = (s.address() as net.AddressInfo).port;
  await new Promise<void>((resolve) => s.close(() => resolve()));
  return port;
}

describe('connectFailure', () => {
  it('turns a refused TCP connect into "no server at …: is `gamewire serve` running?"', async () => {
    const port = await closedPort();
    const err = await new Promise<Error>((resolve) => {
      const socket = net.connect(port, '127.0.0.1');
      socket.on('error', resolve);
    });
    const e = connectFailure(err, `127.0.0.1:${port}`);
    expect(e).toBeInstanceOf(CommandError);
    expect((e as CommandError).code).toBe('ERR_CONNECT');
    expect((e as CommandError).message).toBe(
      `no server at 127.0.0.1:${port}: is \`gamewire serve\` running?`,
    );
  });

  it('sees through fetch failed to the refused socket', async () => {
    const port = await closedPort();
    const err = await fetch(`http://127.0.0.1:${port}/`).catch((x: unknown) => x);
    expect((err as Error).message).toBe('fetch failed');
    const e = connectFailure(err, `http://127.0.0.1:${port}`);
    expect((e as CommandError).message).toMatch(
      /^no server at http:\/\/127\.0\.0\.1:\d+: is `gamewire serve` running\?$/,
    );
  });

  it('leaves other errors alone', () => {
    const other = new Error('something else');
    expect(connectFailure(other, 'x')).toBe(other);
  });
});
