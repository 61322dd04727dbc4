/**
 * The client side of framed TCP (src/core/framed-client.ts) on its own, against real servers on
 * 127.0.0.1 port 0: framing whatever the chunking, the frame limit checked before buffering,
 * typed errors for refused, timed out, closed, malformed and a failing handler (the protocol's
 * own, through the hooks), a swappable framing rule, output backpressure and the two closes.
 *
 * The test protocol: a frame is a u16be length (of the rest), then the payload.
 */
import net from 'node:net';
import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import {
  type FramedClientCloseKind,
  FramedClientError,
  type FramedClientOptions,
  FramedStreamClient,
} from '../../src/core/framed-client.js';
import { DecodeError, ErrorCode, GamewireError } from '../../src/wire/errors.js';
import { fixedFrames, lengthPrefixed } from '../../src/wire/framing.js';
import { waitFor } from '../helpers/wait.js';

const MAX_FRAME = 1024;
const u16Frames = lengthPrefixed({
  prefix: 'u16be',
  counts: 'rest',
  minFrameBytes: 2,
  maxFrameBytes: 0xffff + 2,
});

function frame(payload: Buffer | string): Buffer {
  const body = Buffer.from(payload);
  const f = Buffer.alloc(2 + body.length);
  f.writeUInt16BE(body.length, 0);
  body.copy(f, 2);
  return f;
}

const cleanup: (() => unknown)[] = [];
afterEach(async () => {
  while (cleanup.length > 0) await cleanup.pop()!();
});

/** A server whose accepted sockets the test drives by hand. */
async function rawServer(
  onSocket: (socket: net.Socket) => void = () => {},
  serverOptions: net.ServerOpts = {},
): Promise<{
  port: number;
  accepted: net.Socket[];
  next(): Promise<net.Socket>;
}> {
  const accepted: net.Socket[] = [];
  const server = net.createServer(serverOptions, (socket) => {
    socket.on('error', () => {});
    accepted.push(socket);
    onSocket(socket);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  cleanup.push(
    () =>
      new Promise<void>((resolve) => {
        for (const s of accepted) s.destroy();
        server.close(() => resolve());
      }),
  );
  let taken = 0;
  return {
    port: (server.address() as net.AddressInfo).port,
    accepted,
    next: () =>
      waitFor(() => accepted[taken] !== undefined && accepted[taken++], { what: 'an accepted socket' }),
  };
}

interface Observed {
  client: FramedStreamClient;
  frames: string[];
  chunks: number[];
  closes: { error: Error | undefined; kind: FramedClientCloseKind }[];
}

/** A client that records what it sees; `options` override the defaults (u16be frames, 5 s). */
function observed(port: number, options: Partial<FramedClientOptions> = {}): Observed {
  const o: Observed = {
    client: undefined as unknown as FramedStreamClient,
    frames: [],
    chunks: [],
    closes: [],
  };
  o.client = new FramedStreamClient({
    host: '127.0.0.1',
    port,
    timeoutMs: 5000,
    measure: u16Frames,
    maxFrameBytes: MAX_FRAME,
    onChunk: (chunk) => o.chunks.push(chunk.length),
    onFrame: (buf, start, end) => o.frames.push(buf.toString('latin1', start + 2, end)),
    onClose: (error, kind) => o.closes.push({ error, kind }),
    ...options,
  });
  cleanup.push(() => o.client.destroy());
  return o;
}

/** A port nothing listens on: take a free one and let it go. */
async function closedPort(): Promise<number> {
  const probe = net.createServer();
  await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
  const { port } = probe.address() as net.AddressInfo;
  await new Promise<void>((resolve) => probe.close(() => resolve()));
  return port;
}

/** The protocol's own error class, as a protocol's hooks would make. */
class ToyError extends GamewireError {}

describe('framing', () => {
  it('frames split into 1-byte chunks arrive whole and in order', async () => {
    const srv = await rawServer();
    const c = observed(srv.port);
    await c.client.connect();
    const peer = await srv.next();
    const bytes = Buffer.concat([frame('alpha'), frame(''), frame('b'.repeat(300)), frame('omega')]);
    for (let i = 0; i < bytes.length; i++) {
      peer.write(bytes.subarray(i, i + 1));
      // Each byte is read before the next is written: one chunk per byte.
      await waitFor(() => c.client.bytesIn === i + 1, { what: `byte ${i} at the client`, intervalMs: 1 });
    }
    expect(c.chunks.length).toBe(bytes.length);
    expect(c.chunks.every((n) => n === 1)).toBe(true);
    expect(c.frames).toEqual(['alpha', '', 'b'.repeat(300), 'omega']);
    expect(c.client.bufferedBytes).toBe(0);
    expect(c.closes).toEqual([]);
  });

  it('many frames coalesced in each chunk are all delivered, in order', async () => {
    const srv = await rawServer();
    const c = observed(srv.port);
    await c.client.connect();
    const peer = await srv.next();
    const sent = Array.from({ length: 2000 }, (_, i) => `m${i}`);
    peer.write(Buffer.concat(sent.map((m) => frame(m))));
    await waitFor(() => c.frames.length === sent.length, { what: 'every frame at the client' });
    expect(c.frames).toEqual(sent);
    expect(c.chunks.length).toBeLessThan(sent.length / 10);
  });

  it('whatever the chunking, the frames are the ones sent (fast-check over a real socket)', async () => {
    const srv = await rawServer();
    const c = observed(srv.port);
    await c.client.connect();
    const peer = await srv.next();
    let expected: string[] = [];
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.string({ maxLength: 600 }), { minLength: 1, maxLength: 12 }),
        fc.array(fc.integer({ min: 1, max: 700 }), { minLength: 1, maxLength: 8 }),
        async (payloads, cuts) => {
          const bytes = Buffer.concat(payloads.map((p) => frame(Buffer.from(p, 'latin1'))));
          const before = c.frames.length;
          let at = 0;
          for (let i = 0; at < bytes.length; i++) {
            const n = cuts[i % cuts.length]!;
            peer.write(bytes.subarray(at, at + n));
            at += n;
          }
          expected = expected.concat(payloads.map((p) => Buffer.from(p, 'latin1').toString('latin1')));
          await waitFor(() => c.frames.length === before + payloads.length, {
            what: 'the frames of this run',
          });
          expect(c.frames).toEqual(expected);
        },
      ),
      { numRuns: 40 },
    );
    expect(c.closes).toEqual([]);
  });

  it('the framing rule swaps mid-stream: a 1-byte reply, then length-prefixed frames, in one chunk', async () => {
    const srv = await rawServer((s) =>
      s.once('data', () => s.write(Buffer.concat([Buffer.of(0), frame('after')]))),
    );
    let handshake: number | undefined;
    const c: Observed = observed(srv.port, {
      ready: 'first-frame',
      measure: fixedFrames(1),
      onConnect: () => c.client.write(Buffer.from('hello')),
      onFrame: (buf, start, end) => {
        if (handshake === undefined) {
          handshake = buf[start]!;
          c.client.setMeasure(u16Frames);
          return;
        }
        c.frames.push(buf.toString('latin1', start + 2, end));
      },
    });
    await c.client.connect();
    // `connect()` resolved once the reply was handled.
    expect(handshake).toBe(0);
    await waitFor(() => c.frames.length === 1, { what: 'the frame after the handshake' });
    expect(c.frames).toEqual(['after']);
  });
});

describe('limits and malformed input', () => {
  it('the input buffer grown by a large frame is kept by default, released with maxRetainedBytes', async () => {
    const srv = await rawServer();
    const big = frame(Buffer.alloc(60_000, 0x61));
    const capacityAfterBigFrame = async (options: Partial<FramedClientOptions>): Promise<number> => {
      const c = observed(srv.port, { maxFrameBytes: 0xffff + 2, ...options });
      await c.client.connect();
      const peer = await srv.next();
      // Two halves, the second sent once the first was read: the frame spans chunks, so it is gathered.
      peer.write(big.subarray(0, 30_000));
      await waitFor(() => c.client.bytesIn === 30_000, { what: 'the first half at the client' });
      expect(c.client.bufferedBytes).toBe(30_000);
      peer.write(big.subarray(30_000));
      await waitFor(() => c.frames.length === 1, { what: 'the large frame' });
      expect(c.frames[0]!.length).toBe(60_000);
      expect(c.client.bufferedBytes).toBe(0);
      return c.client.inputCapacity;
    };
    expect(await capacityAfterBigFrame({})).toBeGreaterThanOrEqual(60_002);
    expect(await capacityAfterBigFrame({ maxRetainedBytes: 16 * 1024 })).toBe(0);
  });

  it('a claimed length over maxFrameBytes fails at once, before the frame is buffered', async () => {
    const srv = await rawServer();
    // The protocol's own measure allows 1 GiB; the loop's limit (1 KiB) is what stops it.
    const c = observed(srv.port, {
      measure: lengthPrefixed({ prefix: 'u32be', counts: 'rest', maxFrameBytes: 2 ** 30 }),
    });
    await c.client.connect();
    const peer = await srv.next();
    const header = Buffer.alloc(4);
    header.writeUInt32BE(2 ** 29, 0);
    // Only the header and a few bytes are ever sent: the error cannot come from buffering the rest.
    peer.write(Buffer.concat([header, Buffer.from('abc')]));
    await waitFor(() => c.closes.length === 1, { what: 'the close' });
    expect(c.closes[0]!.kind).toBe('malformed');
    const err = c.closes[0]!.error as DecodeError;
    expect(err).toBeInstanceOf(DecodeError);
    expect(err.code).toBe(ErrorCode.TOO_LARGE);
    expect(c.client.bufferedBytes).toBeLessThanOrEqual(7);
    expect(c.frames).toEqual([]);
    await waitFor(() => peer.destroyed || peer.readableEnded, {
      what: 'the connection closed at the server',
    });
  });

  it("the protocol's hook turns a framing error into its own error", async () => {
    const srv = await rawServer();
    const c = observed(srv.port, {
      measure: lengthPrefixed({ prefix: 'u16be', counts: 'rest', minFrameBytes: 3, maxFrameBytes: 100 }),
      errors: { malformed: (cause) => new ToyError('ERR_TOY_FRAME', `bad frame: ${cause.message}`) },
    });
    await c.client.connect();
    const peer = await srv.next();
    peer.write(Buffer.concat([frame('ok'), Buffer.of(0, 0)])); // a length under the minimum
    await waitFor(() => c.closes.length === 1, { what: 'the close' });
    expect(c.frames).toEqual(['ok']);
    expect(c.closes[0]!.kind).toBe('malformed');
    expect(c.closes[0]!.error).toBeInstanceOf(ToyError);
    expect((c.closes[0]!.error as ToyError).code).toBe('ERR_TOY_FRAME');
  });

  it('arbitrary bytes from the server give frames or a typed error, never anything else (fast-check)', async () => {
    const srv = await rawServer();
    await fc.assert(
      fc.asyncProperty(fc.uint8Array({ minLength: 1, maxLength: 3000 }), async (bytes) => {
        const c = observed(srv.port);
        await c.client.connect();
        const peer = await srv.next();
        peer.end(Buffer.from(bytes));
        await waitFor(() => c.closes.length > 0, { what: 'the close' });
        expect(c.closes.length).toBe(1);
        const { error, kind } = c.closes[0]!;
        expect(['closed', 'malformed']).toContain(kind);
        expect(error).toBeInstanceOf(GamewireError);
        await c.client.whenClosed();
      }),
      { numRuns: 30 },
    );
  });
});

describe('typed errors', () => {
  it('peer close in the middle of a frame is a typed "closed" error that says so', async () => {
    const srv = await rawServer();
    const held: number[] = [];
    const c = observed(srv.port, {
      errors: {
        closed: (phase, bufferedBytes) => {
          held.push(bufferedBytes);
          return new ToyError('ERR_TOY_CLOSED', `closed (${phase}) with ${bufferedBytes} bytes of a frame`);
        },
      },
    });
    await c.client.connect();
    const peer = await srv.next();
    peer.end(Buffer.concat([frame('whole'), Buffer.from([0, 10, 1, 2, 3])]));
    await waitFor(() => c.closes.length === 1, { what: 'the close' });
    expect(c.frames).toEqual(['whole']);
    expect(c.closes[0]!.kind).toBe('closed');
    expect((c.closes[0]!.error as ToyError).code).toBe('ERR_TOY_CLOSED');
    expect(held).toEqual([5]);

    // Without a hook: the core's own error, naming the partial frame.
    const d = observed(srv.port);
    await d.client.connect();
    (await srv.next()).end(Buffer.from([0, 10, 1]));
    await waitFor(() => d.closes.length === 1, { what: 'the close' });
    const err = d.closes[0]!.error as FramedClientError;
    expect(err).toBeInstanceOf(FramedClientError);
    expect(err.code).toBe('ERR_CONNECTION_CLOSED');
    expect(err.message).toContain('in the middle of a frame (3 bytes held)');
  });

  it('connect refused: connect() rejects with the typed error (default and hook), onClose once', async () => {
    const port = await closedPort();
    const c = observed(port);
    const err = await c.client.connect().then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(FramedClientError);
    expect((err as FramedClientError).code).toBe('ERR_CONNECT_REFUSED');
    expect(((err as FramedClientError).cause as NodeJS.ErrnoException).code).toBe('ECONNREFUSED');
    expect(c.closes).toEqual([{ error: err, kind: 'refused' }]);

    const d = observed(port, {
      errors: {
        refused: (cause, target) => new ToyError('ERR_TOY_NO_SERVER', `no server at ${target}`, { cause }),
      },
    });
    await expect(d.client.connect()).rejects.toMatchObject({
      code: 'ERR_TOY_NO_SERVER',
      message: `no server at 127.0.0.1:${port}`,
    });
    await d.client.whenClosed();
    expect(d.closes.length).toBe(1);
  });

  it('a server that accepts and never answers: the handshake deadline gives the typed timeout', async () => {
    const srv = await rawServer();
    const phases: string[] = [];
    const c = observed(srv.port, {
      ready: 'first-frame',
      measure: fixedFrames(1),
      // Long enough that a loaded machine still connects within it: the handshake is what times out.
      timeoutMs: 1500,
      errors: {
        timeout: (phase, ms, target) => {
          phases.push(phase);
          return new ToyError('ERR_TOY_TIMEOUT', `no reply from ${target} within ${ms} ms`);
        },
      },
    });
    await expect(c.client.connect()).rejects.toMatchObject({ code: 'ERR_TOY_TIMEOUT' });
    expect(phases).toEqual(['handshake']);
    expect(c.closes.map((x) => x.kind)).toEqual(['timeout']);
    const peer = srv.accepted[0]!;
    await waitFor(() => peer.destroyed || peer.readableEnded, {
      what: 'the connection closed at the server',
    });

    // Without a hook: the core's own timeout. With `ready: 'connected'` the same server is fine.
    const d = observed(srv.port, { ready: 'first-frame', measure: fixedFrames(1), timeoutMs: 300 });
    await expect(d.client.connect()).rejects.toMatchObject({ code: 'ERR_CONNECT_TIMEOUT' });
    const e = observed(srv.port);
    await e.client.connect();
    expect(e.client.open).toBe(true);
  });

  it('a handshake handler that throws rejects connect() with its error', async () => {
    const srv = await rawServer((s) => s.write(Buffer.of(6)));
    const c = observed(srv.port, {
      ready: 'first-frame',
      measure: fixedFrames(1),
      onFrame: (buf, start) => {
        throw new ToyError('ERR_TOY_REFUSED', `refused with status ${buf[start]}`);
      },
    });
    await expect(c.client.connect()).rejects.toMatchObject({
      code: 'ERR_TOY_REFUSED',
      message: 'refused with status 6',
    });
    expect(c.closes.map((x) => x.kind)).toEqual(['handler']);
  });

  it('a handler that throws closes only its own client; later frames of that client are not delivered', async () => {
    const srv = await rawServer();
    const bad = observed(srv.port, {
      onFrame: (buf, start, end) => {
        const s = buf.toString('latin1', start + 2, end);
        if (s === 'boom') throw new Error('handler bug');
        bad.frames.push(s);
      },
    });
    const good = observed(srv.port);
    await bad.client.connect();
    const badPeer = await srv.next();
    await good.client.connect();
    const goodPeer = await srv.next();

    const burst = Buffer.concat(['one', 'boom', 'three'].map((m) => frame(m)));
    badPeer.write(burst);
    goodPeer.write(burst);
    await waitFor(() => bad.closes.length === 1, { what: 'the failing client closed' });
    expect(bad.frames).toEqual(['one']);
    expect(bad.closes[0]!.kind).toBe('handler');
    const err = bad.closes[0]!.error as FramedClientError;
    expect(err).toBeInstanceOf(FramedClientError);
    expect(err.code).toBe('ERR_HANDLER');
    expect(err.message).toContain('handler bug');

    await waitFor(() => good.frames.length === 3, { what: "the other client's frames" });
    goodPeer.write(frame('four'));
    await waitFor(() => good.frames.length === 4, { what: 'a later frame at the other client' });
    expect(good.frames).toEqual(['one', 'boom', 'three', 'four']);
    expect(good.closes).toEqual([]);
    expect(good.client.open).toBe(true);
    await waitFor(() => badPeer.destroyed || badPeer.readableEnded, { what: 'the failed connection closed' });
  });
});

describe('output and closing', () => {
  it('backpressure is visible: write() says when to wait, queuedBytes counts, drained() resolves once read', async () => {
    const srv = await rawServer((s) => s.pause());
    const c = observed(srv.port);
    await c.client.connect();
    const peer = await srv.next();
    const block = Buffer.alloc(256 * 1024, 7);
    let written = 0;
    // The peer reads nothing: the kernel's buffers fill, then the socket's queue grows.
    for (let i = 0; i < 1024; i++) {
      written += block.length;
      if (!c.client.write(block)) break;
    }
    expect(c.client.queuedBytes).toBeGreaterThan(0);
    let drained = false;
    const waiting = c.client.drained().then(() => {
      drained = true;
    });
    expect(drained).toBe(false);
    let received = 0;
    peer.on('data', (chunk: Buffer) => {
      received += chunk.length;
    });
    peer.resume();
    await waiting;
    expect(c.client.queuedBytes).toBe(0);
    await waitFor(() => received === written, { what: 'every byte at the server' });
  });

  it('end() flushes what was written, then closes; onClose reports a local close without an error', async () => {
    const srv = await rawServer();
    const c = observed(srv.port);
    await c.client.connect();
    const peer = await srv.next();
    const got: Buffer[] = [];
    peer.on('data', (b: Buffer) => got.push(b));
    peer.on('end', () => peer.end());
    const payload = Buffer.alloc(512 * 1024, 3);
    c.client.write(payload);
    await c.client.end();
    expect(Buffer.concat(got).equals(payload)).toBe(true);
    expect(c.closes).toEqual([{ error: undefined, kind: 'local' }]);
    expect(c.client.open).toBe(false);
    expect(c.client.write(Buffer.of(1))).toBe(false);
  });

  it('end() with lingerMs destroys a connection whose peer never closes its side', async () => {
    // A half-open server: it reads our FIN and keeps its own side open.
    let ended = false;
    const srv = await rawServer(
      (s) =>
        s.on('end', () => {
          ended = true;
        }),
      { allowHalfOpen: true },
    );
    const c = observed(srv.port);
    await c.client.connect();
    const peer = await srv.next();
    await c.client.end({ lingerMs: 200 });
    expect(ended).toBe(true);
    expect(peer.writableEnded).toBe(false);
    expect(c.closes).toEqual([{ error: undefined, kind: 'local' }]);
  });

  it('destroy() closes at once; frames already buffered are not delivered afterwards', async () => {
    const srv = await rawServer();
    const c = observed(srv.port);
    await c.client.connect();
    const peer = await srv.next();
    peer.write(frame('x'));
    await waitFor(() => c.frames.length === 1, { what: 'the first frame' });
    await c.client.destroy();
    expect(c.closes).toEqual([{ error: undefined, kind: 'local' }]);
    expect(c.client.closed).toBe(true);
    await waitFor(() => peer.destroyed || peer.readableEnded, {
      what: 'the connection closed at the server',
    });
  });
});
