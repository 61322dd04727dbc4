/** The dispatcher without sockets: the seam a PRUDP transport would use. */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import { silentLogger } from '../../../src/core/logger.js';
import { ProtocolMetrics } from '../../../src/core/metrics.js';
import {
  type HyperscapeMessage,
  hyperscapePacket,
  LoginProtocol,
  MemoryStore,
  parseDatacenters,
  type RmcDispatcher,
  RmcServer,
  type RmcSink,
  registerBuiltins,
} from '../../../src/protocols/rmc/index.js';
import { type Codec, DecodeError, decode, WireWriter } from '../../../src/wire/index.js';
import { seedRequest } from './fixtures.js';
import { memoryPeer, RawPeer } from './helpers.js';

const packet = hyperscapePacket as Codec<HyperscapeMessage>;

function memoryTransport() {
  const server = new RmcServer({ log: silentLogger() });
  registerBuiltins(server);
  const writer = new WireWriter();
  let commits = 0;
  let closed = false;
  const sink: RmcSink = {
    writer,
    commit: () => void commits++,
    close: () => {
      closed = true;
    },
    connection: memoryPeer('10.1.2.3', 3074),
  };
  const d: RmcDispatcher = server.dispatcher;
  const conn = d.open(sink);
  return { d, conn, writer, commits: () => commits, closed: () => closed, metrics: server.metrics };
}

describe('RmcDispatcher over an in-memory transport', () => {
  it('answers the seed Register_V1 into the sink, synchronously for a sync handler', () => {
    const t = memoryTransport();
    const seed = seedRequest();
    // The frame may sit anywhere inside a larger buffer.
    const buf = Buffer.concat([Buffer.from([9, 9, 9]), seed, Buffer.from([7])]);
    t.d.handleFrame(t.conn, buf, 3, 3 + seed.length);
    expect(t.commits()).toBe(1);
    const msg = decode(packet, t.writer.view());
    expect(msg).toMatchObject({ type: 'response', callId: 6, method: 'LoginProtocol::Register_V1*' });
    const r = decode(LoginProtocol.methods.Register_V1.results, (msg as { results: Buffer }).results);
    expect(r.urlPublic).toBe('prudp:/address=10.1.2.3;port=3074;sid=15');
    expect(t.conn.stationUrls).toHaveLength(4);
  });

  it('refuses a frame whose length prefix does not match its size', () => {
    const t = memoryTransport();
    const seed = seedRequest();
    expect(() => t.d.handleFrame(t.conn, seed, 0, seed.length - 1)).toThrow(
      expect.objectContaining({ code: 'ERR_BAD_LENGTH' }),
    );
    expect(() => t.d.handleFrame(t.conn, seed, 0, 2)).toThrow(
      expect.objectContaining({ code: 'ERR_INCOMPLETE' }),
    );
    expect(t.commits()).toBe(0);
  });

  it('runs disconnect hooks when the transport closes the connection', () => {
    const t = memoryTransport();
    const calls: string[] = [];
    t.conn.onDisconnect(() => void calls.push('a'));
    t.conn.onDisconnect(() => {
      throw new Error('a failing hook does not stop the others');
    });
    t.conn.onDisconnect(() => void calls.push('b'));
    t.d.closeConnection(t.conn);
    t.d.closeConnection(t.conn);
    expect(calls).toEqual(['a', 'b']);
    expect(t.conn.closed).toBe(true);
    t.conn.onDisconnect(() => void calls.push('late'));
    expect(calls).toEqual(['a', 'b', 'late']);
  });

  it('arbitrary frame bodies either answer or throw DecodeError, and the dispatcher keeps working', () => {
    const t = memoryTransport();
    fc.assert(
      fc.property(fc.uint8Array({ minLength: 3, maxLength: 80 }), (body) => {
        const frame = Buffer.alloc(4 + body.length);
        frame.writeUInt32LE(body.length, 0);
        frame.set(body, 4);
        try {
          t.d.handleFrame(t.conn, frame, 0, frame.length);
        } catch (e) {
          expect(e).toBeInstanceOf(DecodeError);
        }
        t.writer.reset();
      }),
      { numRuns: 1000 },
    );
    const seed = seedRequest();
    t.d.handleFrame(t.conn, seed, 0, seed.length);
    expect(decode(packet, t.writer.view())).toMatchObject({ callId: 6 });
  });

  it('mutated seed frames either answer or throw DecodeError', () => {
    const t = memoryTransport();
    fc.assert(
      fc.property(fc.nat({ max: 252 }), fc.integer({ min: 0, max: 255 }), (at, byte) => {
        const b = seedRequest();
        if (at >= 4) b[at] = byte;
        try {
          t.d.handleFrame(t.conn, b, 0, b.length);
        } catch (e) {
          expect(e).toBeInstanceOf(DecodeError);
        }
        t.writer.reset();
      }),
      { numRuns: 1000 },
    );
  });
});

describe('TCP transport limits', () => {
  let stop: (() => Promise<void>) | undefined;
  afterEach(async () => {
    await stop?.();
    stop = undefined;
  });

  it('closes a connection that stays idle', async () => {
    const metrics = new ProtocolMetrics('rmc');
    const server = new RmcServer({ log: silentLogger(), metrics, idleTimeoutMs: 100 });
    registerBuiltins(server);
    const l = await server.listen({ host: '127.0.0.1', port: 0 });
    stop = () => l.close();
    const peer = await RawPeer.connect(l.port);
    const t0 = Date.now();
    expect(await peer.waitClosed(3000)).toBe(true);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(80);
    expect(metrics.closed.get('idle_timeout')).toBe(1);
  });

  it('a frame over maxFrameBytes closes the connection before it is buffered', async () => {
    const metrics = new ProtocolMetrics('rmc');
    const server = new RmcServer({ log: silentLogger(), metrics, maxFrameBytes: 128 });
    registerBuiltins(server);
    const l = await server.listen({ host: '127.0.0.1', port: 0 });
    stop = () => l.close();
    const peer = await RawPeer.connect(l.port);
    peer.write(seedRequest()); // 253 bytes > 128
    expect(await peer.waitClosed()).toBe(true);
    expect(peer.frames).toHaveLength(0);
    expect(metrics.dropped.get('malformed')).toBe(1);
  });
});

describe('embedded store and configuration', () => {
  const dirs: string[] = [];
  afterEach(() => {
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  });

  it('MemoryStore persists accounts to its account log and keeps PIDs across restarts', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'gamewire-rmc-'));
    dirs.push(dir);
    const file = path.join(dir, 'sub', 'accounts.json');
    const a = new MemoryStore(file);
    const acc = a.login('user-1', 'Ann');
    expect(acc.pid).toMatch(/^[0-9a-f]{32}$/);
    await a.flush(); // writes are asynchronous
    // A header line, then one line per account change.
    expect(readFileSync(file, 'utf8').trim().split('\n')).toHaveLength(2);
    const b = new MemoryStore(file);
    expect(b.account('user-1')?.pid).toBe(acc.pid);
    expect(b.login('user-1', 'Ann B').pid).toBe(acc.pid);
    expect(b.accountCount()).toBe(1);
  });

  it('parseDatacenters reads flag strings and config objects, and rejects the rest', () => {
    expect(parseDatacenters(undefined)).toEqual([
      { id: 'local', name: 'Local', region: 'local', host: '127.0.0.1', port: 9103 },
    ]);
    expect(parseDatacenters(['eu=10.0.0.1:7000'])).toEqual([
      { id: 'eu', name: 'eu', region: 'eu', host: '10.0.0.1', port: 7000 },
    ]);
    expect(parseDatacenters([{ id: 'us', host: 'h', port: 1, name: 'US' }])).toEqual([
      { id: 'us', name: 'US', region: 'us', host: 'h', port: 1 },
    ]);
    expect(() => parseDatacenters(['nope'])).toThrow(/id=host:port/);
    expect(() => parseDatacenters([{ id: 'x', host: 'h', port: 70000 }])).toThrow(/port/);
    expect(() => parseDatacenters('eu=1:1')).toThrow(/list/);
  });
});
