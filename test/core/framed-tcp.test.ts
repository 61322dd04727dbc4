/**
 * The framed TCP seam (src/core/framed-tcp.ts) on its own: what it guarantees to every protocol
 * that sits on it, checked with a tiny test protocol over real sockets on 127.0.0.x, independent
 * of js5, rmc and nox-relay.
 *
 * The test protocol: a frame is a u16be length (of the rest), then an opcode byte and a payload.
 *   1 echo: the frame comes back;  2 bulk: a 16 KiB reply;  3 bad: DecodeError;
 *   4 bug: any other exception;     5 hold: delivery holds until the test resumes it.
 */
import net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { type FramedConnection, type FramedTcpOptions, listenFramedTcp } from '../../src/core/framed-tcp.js';
import { silentLogger } from '../../src/core/logger.js';
import { ProtocolMetrics } from '../../src/core/metrics.js';
import { DecodeError, ErrorCode } from '../../src/wire/errors.js';
import { lengthPrefixed } from '../../src/wire/framing.js';
import { elapse, waitFor, waitForEvent } from '../helpers/wait.js';

const ECHO = 1;
const BULK = 2;
const BAD = 3;
const BUG = 4;
const HOLD = 5;
const BULK_BYTES = 16 * 1024;
const MAX_FRAME = 0xffff + 2;

function frame(op: number, payload: Buffer | string = Buffer.alloc(0)): Buffer {
  const body = Buffer.concat([Buffer.from([op]), Buffer.from(payload)]);
  const f = Buffer.alloc(2 + body.length);
  f.writeUInt16BE(body.length, 0);
  body.copy(f, 2);
  return f;
}

/** Splits a byte stream of whole test frames into their bodies (opcode + payload). */
function bodies(bytes: Buffer): Buffer[] {
  const out: Buffer[] = [];
  let o = 0;
  while (o + 2 <= bytes.length) {
    const n = bytes.readUInt16BE(o);
    if (o + 2 + n > bytes.length) break;
    out.push(bytes.subarray(o + 2, o + 2 + n));
    o += 2 + n;
  }
  return out;
}

const cleanup: (() => unknown)[] = [];
afterEach(async () => {
  while (cleanup.length > 0) await cleanup.pop()!();
});

interface Delivered {
  port: number;
  op: number;
  payload: string;
}

type Limits = Partial<
  Omit<FramedTcpOptions, 'host' | 'port' | 'measure' | 'metrics' | 'log' | 'onConnection'>
>;

async function testServer(limits: Limits = {}) {
  const metrics = new ProtocolMetrics('framed-test');
  const delivered: Delivered[] = [];
  const closes: { port: number; reason: string }[] = [];
  const conns = new Map<number, FramedConnection>();
  const server = await listenFramedTcp({
    host: '127.0.0.1',
    port: 0,
    measure: lengthPrefixed({ prefix: 'u16be', counts: 'rest', minFrameBytes: 3, maxFrameBytes: MAX_FRAME }),
    maxFrameBytes: MAX_FRAME,
    metrics,
    log: silentLogger(),
    ...limits,
    onConnection: (c) => {
      conns.set(c.remotePort, c);
      return {
        onFrame: (buf, start, end) => {
          const op = buf[start + 2]!;
          delivered.push({ port: c.remotePort, op, payload: buf.toString('latin1', start + 3, end) });
          switch (op) {
            case ECHO:
              c.writer.bytes(buf.subarray(start, end));
              return true;
            case BULK: {
              c.writer.u16be(BULK_BYTES - 2);
              c.writer.zeros(BULK_BYTES - 2);
              return true;
            }
            case BAD:
              throw new DecodeError(ErrorCode.BAD_VALUE, 'opcode 3 is malformed by definition', start + 2);
            case BUG:
              throw new Error('a bug in the handler');
            case HOLD:
              return false;
            default:
              return true;
          }
        },
        onClose: (reason) => closes.push({ port: c.remotePort, reason }),
      };
    },
  });
  cleanup.push(() => server.close(0));
  return { server, metrics, delivered, closes, conns };
}

/** The server saw `p`'s connection close for `reason` (its 'close' may come after the peer's). */
function closedAs(t: { closes: { port: number; reason: string }[] }, p: Peer, reason: string): boolean {
  return t.closes.some((c) => c.port === p.port && c.reason === reason);
}

interface Peer {
  socket: net.Socket;
  port: number;
  received(): Buffer;
  closed: Promise<void>;
}

async function peer(port: number, localAddress = '127.0.0.1', read = true): Promise<Peer> {
  const socket = net.connect({ host: '127.0.0.1', port, localAddress });
  cleanup.push(() => void socket.destroy());
  const chunks: Buffer[] = [];
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
  socket.on('error', () => {});
  await waitForEvent(socket, 'connect', { what: `a connection from ${localAddress}` });
  if (read) socket.on('data', (d: Buffer) => chunks.push(d));
  else socket.pause();
  return {
    socket,
    port: socket.localPort!,
    received: () => Buffer.concat(chunks),
    closed,
  };
}

describe('framed TCP seam: frames', () => {
  it('frames split across writes and many frames in one write are delivered whole and in order, and answered', async () => {
    const t = await testServer();
    const p = await peer(t.server.port);
    const stream = Buffer.concat([frame(ECHO, 'one'), frame(ECHO, 'two'), frame(ECHO, 'three')]);
    // One byte at a time for the first frame, then the rest in one write.
    for (let i = 0; i < 6; i++) p.socket.write(stream.subarray(i, i + 1));
    await waitFor(() => t.delivered.length >= 1, { what: 'the first frame, sent a byte at a time' });
    p.socket.write(stream.subarray(6));
    await waitFor(() => bodies(p.received()).length === 3, { what: 'three echoes' });
    expect(t.delivered.map((d) => d.payload)).toEqual(['one', 'two', 'three']);
    expect(p.received()).toEqual(stream);
  });

  it('a frame announced over maxFrameBytes closes that connection as malformed; a frame at the limit passes', async () => {
    const t = await testServer({ maxFrameBytes: 1000 });
    const ok = await peer(t.server.port);
    const atLimit = frame(ECHO, Buffer.alloc(1000 - 3, 0x61));
    ok.socket.write(atLimit);
    await waitFor(() => ok.received().length === 1000, { what: 'the echo of a frame at the limit' });
    const over = await peer(t.server.port);
    const head = Buffer.alloc(2);
    head.writeUInt16BE(1000 - 1, 0); // 1001 bytes in all
    over.socket.write(head);
    await over.closed;
    await waitFor(() => closedAs(t, over, 'malformed'), { what: 'the close at the server' });
    expect(t.metrics.dropped.get('malformed')).toBe(1);
    expect(ok.socket.destroyed).toBe(false);
  });
});

describe('framed TCP seam: error isolation', () => {
  it('a DecodeError closes that connection as malformed, after the replies already written; others go on', async () => {
    const t = await testServer();
    const bad = await peer(t.server.port);
    const good = await peer(t.server.port);
    bad.socket.write(Buffer.concat([frame(ECHO, 'before'), frame(BAD), frame(ECHO, 'after')]));
    await bad.closed;
    expect(bodies(bad.received()).map((b) => b.toString('latin1', 1))).toEqual(['before']);
    expect(t.delivered.filter((d) => d.port === bad.port).map((d) => d.op)).toEqual([ECHO, BAD]);
    await waitFor(() => closedAs(t, bad, 'malformed'), { what: 'the close at the server' });
    good.socket.write(frame(ECHO, 'still here'));
    await waitFor(() => bodies(good.received()).length === 1, { what: 'the other connection answered' });
  });

  it('any other exception closes that connection as handler_error; the server keeps serving', async () => {
    const t = await testServer();
    const buggy = await peer(t.server.port);
    buggy.socket.write(Buffer.concat([frame(ECHO, 'x'), frame(BUG), frame(ECHO, 'y')]));
    await buggy.closed;
    expect(bodies(buggy.received())).toHaveLength(1);
    await waitFor(() => closedAs(t, buggy, 'handler_error'), { what: 'the close at the server' });
    expect(t.metrics.closed.get('handler_error')).toBe(1);
    const next = await peer(t.server.port);
    next.socket.write(frame(ECHO, 'z'));
    await waitFor(() => bodies(next.received()).length === 1, { what: 'a new connection answered' });
  });
});

describe('framed TCP seam: fairness', () => {
  it('a pipelined burst of 5000 frames delays another connection by a turn, not by its backlog, and is served whole', async () => {
    const t = await testServer({ framesPerTurn: 16 });
    const flooder = await peer(t.server.port);
    const other = await peer(t.server.port);
    const burst = Buffer.concat(Array.from({ length: 5000 }, () => frame(7)));
    expect(burst.length).toBeLessThan(64 * 1024); // one read on the server side
    flooder.socket.write(burst);
    other.socket.write(frame(ECHO, 'other'));
    await waitFor(() => t.delivered.length === 5001, { what: 'every frame delivered' });
    const otherAt = t.delivered.findIndex((d) => d.port === other.port);
    // Served in the order of arrival it would be last (5000); the seam gives it a turn within
    // the flooder's first few (idle turn: 4 × 16 frames, then 256-frame scheduler runs).
    expect(otherAt).toBeGreaterThanOrEqual(0);
    expect(otherAt).toBeLessThan(1000);
    // The flooder is delayed, not refused: all of its frames were delivered, in order.
    expect(t.delivered.filter((d) => d.port === flooder.port)).toHaveLength(5000);
    await waitFor(() => bodies(other.received()).length === 1, { what: 'the echo to the other connection' });
  });

  it('two connections with backlogs are served in alternating turns, neither waiting for the whole backlog of the other', async () => {
    const t = await testServer();
    const a = await peer(t.server.port);
    const b = await peer(t.server.port);
    // Both backlogs wait in the server before either is worked off: each starts with a frame that
    // holds delivery, and both are resumed together.
    a.socket.write(Buffer.concat([frame(HOLD), ...Array.from({ length: 2000 }, () => frame(7, 'a'))]));
    b.socket.write(Buffer.concat([frame(HOLD), ...Array.from({ length: 2000 }, () => frame(7, 'b'))]));
    await waitFor(() => [a, b].every((p) => t.conns.get(p.port)?.held === true), {
      what: 'both connections held, their backlogs waiting',
    });
    t.conns.get(a.port)!.resume();
    t.conns.get(b.port)!.resume();
    await waitFor(() => t.delivered.length === 4002, { what: 'every frame delivered' });
    const order = t.delivered
      .filter((d) => d.op === 7)
      .map((d) => d.payload)
      .join('');
    const runs = order.match(/a+|b+/g) ?? [];
    // With few connections waiting a turn is longer (up to 256 frames a scheduler run, shared),
    // but still a turn: the two backlogs interleave in many runs, none longer than a run.
    expect(order.length).toBe(4000);
    expect(runs.length).toBeGreaterThanOrEqual(8);
    expect(Math.max(...runs.map((r) => r.length))).toBeLessThanOrEqual(256);
  });
});

describe('framed TCP seam: holding delivery', () => {
  it('a sink that returns false gets no frame until resume(), then the rest in order', async () => {
    const t = await testServer();
    const p = await peer(t.server.port);
    p.socket.write(Buffer.concat([frame(HOLD), frame(ECHO, '1'), frame(ECHO, '2')]));
    await waitFor(() => t.delivered.length === 1, { what: 'the hold frame' });
    const c = t.conns.get(p.port)!;
    expect(c.held).toBe(true);
    // The window is the point: nothing may be delivered while held.
    await elapse(200, 'nothing may be delivered while the sink holds delivery');
    expect(t.delivered).toHaveLength(1);
    c.resume();
    await waitFor(() => bodies(p.received()).length === 2, { what: 'the echoes after resume' });
    expect(t.delivered.map((d) => d.payload)).toEqual(['', '1', '2']);
  });
});

describe('framed TCP seam: frame deadline', () => {
  it('a frame begun and not finished within frameTimeoutMs closes the connection (frame_timeout), before the idle timeout', async () => {
    const t = await testServer({ frameTimeoutMs: 300, idleTimeoutMs: 60_000 });
    const p = await peer(t.server.port);
    p.socket.write(frame(ECHO, 'first'));
    await waitFor(() => bodies(p.received()).length === 1, { what: 'the first echo' });
    const started = Date.now();
    p.socket.write(frame(ECHO, 'never finished').subarray(0, 5));
    await waitFor(() => closedAs(t, p, 'frame_timeout'), { what: 'the close for frame_timeout' });
    expect(Date.now() - started).toBeLessThan(60_000);
    await p.closed;
    expect(t.metrics.closed.get('frame_timeout')).toBe(1);
  });

  it('a connection that never sends its first frame closes with the first-frame reason', async () => {
    const t = await testServer({
      frameTimeoutMs: 300,
      idleTimeoutMs: 60_000,
      firstFrameTimeoutReason: 'no_hello',
    });
    const p = await peer(t.server.port);
    await waitFor(() => closedAs(t, p, 'no_hello'), { what: 'the close for the first-frame reason' });
    await p.closed;
    expect(t.metrics.closed.get('no_hello')).toBe(1);
  });

  it('the other side: a peer quiet between whole frames for longer than frameTimeoutMs stays connected', async () => {
    const t = await testServer({ frameTimeoutMs: 200, idleTimeoutMs: 60_000 });
    const p = await peer(t.server.port);
    p.socket.write(frame(ECHO, 'a'));
    await waitFor(() => bodies(p.received()).length === 1, { what: 'the first echo' });
    // The window is the point: several frame deadlines pass with no frame begun.
    await elapse(800, 'four frame deadlines with no partial frame must not close the connection');
    expect(p.socket.destroyed).toBe(false);
    // And a frame sent in pieces, each piece well within the deadline of the frame, passes.
    const f = frame(ECHO, 'b');
    p.socket.write(f.subarray(0, 2));
    await waitFor(() => t.conns.get(p.port)!.bufferedBytes === 2, { what: 'the first piece held' });
    p.socket.write(f.subarray(2));
    await waitFor(() => bodies(p.received()).length === 2, { what: 'the second echo' });
    expect(t.metrics.closed.get('frame_timeout')).toBeUndefined();
  });
});

describe('framed TCP seam: input budgets', () => {
  /** `count` connections from `address`, each sending 50 000 bytes of a 60 000-byte frame. */
  async function partials(
    t: { conns: Map<number, FramedConnection> },
    port: number,
    address: string,
    count: number,
  ): Promise<Peer[]> {
    const head = Buffer.alloc(50_000, 0x61);
    head.writeUInt16BE(60_000 - 2, 0);
    head[2] = ECHO;
    const out: Peer[] = [];
    for (let i = 0; i < count; i++) {
      const p = await peer(port, address);
      p.socket.write(head);
      out.push(p);
      // One at a time, so that at most one read is in flight when a budget fills.
      await waitFor(() => settled(t.conns, [p]), { what: `partial frame ${i + 1} held or paused` });
    }
    return out;
  }

  /** Every one of `peers` either holds its whole partial frame or is not being read. */
  function settled(conns: Map<number, FramedConnection>, peers: Peer[]): boolean {
    return peers.every((p) => {
      const c = conns.get(p.port);
      return c !== undefined && (c.readingPaused || c.bufferedBytes === 50_000);
    });
  }

  it('partial frames from one address cannot hold more than its budget; another address is still read and answered', async () => {
    const budget = 128 * 1024;
    const t = await testServer({
      maxBufferedBytes: 4 * 1024 * 1024,
      maxBufferedBytesPerIp: budget,
      maxConnectionsPerIp: 64,
    });
    const crowd = await partials(t, t.server.port, '127.0.0.5', 20);
    await waitFor(() => settled(t.conns, crowd), { what: 'every partial frame held or paused' });
    // 20 × 50 000 bytes offered; the read that crossed the budget is held (up to 64 KiB), the
    // connections after it are not read at all.
    expect(t.server.bufferedBytes).toBeLessThanOrEqual(budget + 64 * 1024);
    const paused = crowd.filter((p) => t.conns.get(p.port)!.readingPaused).length;
    expect(paused).toBeGreaterThanOrEqual(17);
    expect(t.metrics.counters.get('input_budget_pauses') ?? 0).toBeGreaterThan(0);
    // The other side of the budget: another address sends a whole 60 000-byte frame, answered.
    const other = await peer(t.server.port, '127.0.0.6');
    const big = frame(ECHO, Buffer.alloc(60_000 - 3, 0x62));
    other.socket.write(big);
    await waitFor(() => other.received().length === big.length, {
      what: 'the big echo at the other address',
    });
    expect(other.received()).toEqual(big);
  });

  it('the global budget bounds all addresses together; when held input is released, paused connections are read again', async () => {
    const t = await testServer({
      maxBufferedBytes: 256 * 1024,
      maxBufferedBytesPerIp: 0,
      maxConnectionsPerIp: 0,
    });
    const crowd = [
      ...(await partials(t, t.server.port, '127.0.0.7', 6)),
      ...(await partials(t, t.server.port, '127.0.0.8', 6)),
    ];
    await waitFor(() => settled(t.conns, crowd), { what: 'every partial frame held or paused' });
    expect(t.server.bufferedBytes).toBeLessThanOrEqual(256 * 1024 + 64 * 1024);
    const waiting = crowd.filter((p) => t.conns.get(p.port)!.bufferedBytes === 0);
    expect(waiting.length).toBeGreaterThan(0);
    // Those holding input finish their frames: the memory is released and the waiting ones are read.
    const rest = Buffer.alloc(10_000, 0x61);
    for (const p of crowd) p.socket.write(rest);
    await waitFor(() => crowd.every((p) => p.received().length === 60_000), {
      what: () => `every echo (${crowd.filter((p) => p.received().length === 60_000).length}/12)`,
    });
    expect(t.server.bufferedBytes).toBe(0);
  });
});

describe('framed TCP seam: backpressure', () => {
  it('a peer that does not read its replies stops being read; when it reads again, every frame is answered', async () => {
    const maxQueuedBytes = 64 * 1024;
    const t = await testServer({ maxQueuedBytes });
    const slow = await peer(t.server.port, '127.0.0.1', false);
    // 2000 requests of 3 bytes, each answered with 16 KiB: 32 MiB of replies for 6 KB of input.
    const requests = Buffer.concat(Array.from({ length: 2000 }, () => frame(BULK)));
    slow.socket.write(requests);
    const c = await waitFor(
      () => {
        const conn = t.conns.get(slow.port);
        return conn?.readingPaused === true && conn.queuedBytes >= maxQueuedBytes ? conn : undefined;
      },
      { what: 'the slow reader paused behind its replies' },
    );
    const deliveredWhenPaused = t.delivered.length;
    expect(deliveredWhenPaused).toBeLessThan(2000);
    // The window is the point: no frame may be delivered while the peer reads nothing.
    await elapse(300, 'a peer that does not read must not have its input delivered');
    expect(t.delivered.length).toBe(deliveredWhenPaused);
    // What waits is bounded by the queue limit plus the replies of one turn, not by the input.
    expect(c.queuedBytes).toBeLessThanOrEqual(maxQueuedBytes + 17 * BULK_BYTES);
    // Another connection is served meanwhile.
    const other = await peer(t.server.port);
    other.socket.write(frame(ECHO, 'meanwhile'));
    await waitFor(() => bodies(other.received()).length === 1, { what: 'the other connection answered' });
    // The other side: a slow reader is throttled, not dropped. Reading resumes delivery.
    let got = 0;
    slow.socket.on('data', (d: Buffer) => {
      got += d.length;
    });
    slow.socket.resume();
    await waitFor(() => got === 2000 * BULK_BYTES, {
      what: () => `every reply at the slow reader (${got} of ${2000 * BULK_BYTES} bytes)`,
      timeoutMs: 30_000,
    });
    expect(t.delivered.filter((d) => d.port === slow.port)).toHaveLength(2000);
    expect(slow.socket.destroyed).toBe(false);
  });
});
