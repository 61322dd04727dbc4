/**
 * Resource limits and failure handling found in review: a peer that never reads, oversized
 * session strings, handler errors that cannot be encoded, repeated logins.
 */
import net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { silentLogger } from '../../../src/core/logger.js';
import { ProtocolMetrics } from '../../../src/core/metrics.js';
import {
  buffer32,
  DEFAULT_MAX_QUEUED_BYTES,
  defineProtocol,
  type HyperscapeMessage,
  hyperscapePacket,
  LoginProtocol,
  MAX_SESSION_STRING_BYTES,
  MemoryStore,
  method,
  qString,
  RmcClient,
  RmcError,
  RmcServer,
  rawBytes,
  rmcCodec,
  SessionProtocol,
  u32,
  uuid,
} from '../../../src/protocols/rmc/index.js';
import { DeclarationError } from '../../../src/wire/errors.js';
import {
  type Codec,
  decode,
  encode,
  lengthPrefixed,
  StreamDeframer,
  struct,
} from '../../../src/wire/index.js';
import { elapse, waitFor } from '../../helpers/wait.js';
import { RawPeer, startServer, type TestServer } from './helpers.js';

/** Waits until the server stops taking calls: `received` unchanged over 100 ms (a stall is the condition). */
async function stalled(metrics: { received: number }): Promise<void> {
  let last = -1;
  await waitFor(
    () => {
      const same = metrics.received === last;
      last = metrics.received;
      return same;
    },
    { what: 'the server to stop taking calls', intervalMs: 100 },
  );
}

const packet = hyperscapePacket as Codec<HyperscapeMessage>;

function request(protocol: string, method: string, callId: number, args: Buffer = Buffer.alloc(0)): Buffer {
  return encode(packet, { type: 'request', protocol, callId, method, classVersions: [], args });
}

let cleanup: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const f of cleanup.reverse()) await f();
  cleanup = [];
});

async function setup(...args: Parameters<typeof startServer>): Promise<TestServer> {
  const s = await startServer(...args);
  cleanup.push(() => s.listening.close());
  return s;
}

async function client(port: number, timeoutMs = 5000): Promise<RmcClient> {
  const c = await RmcClient.connect({ host: '127.0.0.1', port, timeoutMs });
  cleanup.push(() => c.close());
  return c;
}

const loginArgs = (token: string) => ({
  token,
  clientVersionInfo: { major: 1, minor: 0, patch: 0, build: 0, custom: '' },
  connectionData: { urlRegularProtocols: 'prudp:/', lstSpecialProtocols: [], urlSpecialProtocols: 'prudp:/' },
});

const ProbeProtocol = defineProtocol('ProbeProtocol', 'test probes', {
  Blob_V1: method({ args: {}, results: { data: buffer32 }, layout: 'unknown', doc: '32 KiB of results' }),
  Hooks_V1: method({ args: {}, results: { hooks: u32 }, layout: 'unknown', doc: 'disconnect hooks' }),
  Echo_V1: method({ args: { text: qString }, results: { text: qString }, layout: 'unknown', doc: 'echo' }),
  HugeNamespace_V1: method({ args: {}, results: {}, layout: 'unknown', doc: 'async, 70 kB namespace' }),
  Mutated_V1: method({ args: { async: u32 }, results: {}, layout: 'unknown', doc: 'namespace grown later' }),
  LongResult_V1: method({ args: {}, results: { text: qString }, layout: 'unknown', doc: '70 kB result' }),
});

const BLOB = Buffer.alloc(32 * 1024, 0x5a);

function registerProbe(server: RmcServer): void {
  server.register(ProbeProtocol, {
    Blob_V1: () => ({ data: BLOB }),
    Hooks_V1: (ctx) => ({ hooks: ctx.connection.disconnectHookCount }),
    Echo_V1: (_ctx, { text }) => ({ text }),
    HugeNamespace_V1: async () => {
      throw new RmcError('N'.repeat(70_000), 1);
    },
    Mutated_V1: (_ctx, { async }) => {
      // An RmcError whose namespace no longer fits a String by the time it is written.
      const e = new RmcError('Custom', 1);
      (e as { namespace: string }).namespace = 'N'.repeat(70_000);
      if (async === 1)
        return elapse(1, 'the error is thrown after the handler returned (an asynchronous failure)').then(
          () => {
            throw e;
          },
        );
      throw e;
    },
    LongResult_V1: async () => ({ text: 'x'.repeat(70_000) }),
  });
}

describe('RMC hardening: a peer that pipelines and never reads', () => {
  it('keeps the queued answers and the writer bounded, stops reading, and catches up once the peer reads', async () => {
    const metrics = new ProtocolMetrics('rmc');
    const server = new RmcServer({ log: silentLogger(), metrics });
    registerProbe(server);
    const listening = await server.listen({ host: '127.0.0.1', port: 0 });
    cleanup.push(() => listening.close());

    // A peer that does not read: everything the server sends stays in the kernel, then in the server.
    const socket = await new Promise<net.Socket>((resolve, reject) => {
      const s = net.connect({ host: '127.0.0.1', port: listening.port }, () => resolve(s));
      s.once('error', reject);
    });
    socket.pause();
    cleanup.push(() => void socket.destroy());
    const N = 1000; // 1000 × 32 KiB = 32 MiB of answers, asked for in one ~54 kB write
    const frames: Buffer[] = [];
    for (let i = 0; i < N; i++) frames.push(request('ProbeProtocol', 'ProbeProtocol::Blob_V1', i + 1));
    socket.write(Buffer.concat(frames));

    await stalled(metrics);
    // The server stopped taking calls it cannot answer...
    expect(metrics.received).toBeLessThan(N);
    const [stats] = server.connectionStats();
    expect(stats).toBeDefined();
    expect(stats!.readingPaused).toBe(true);
    // One answer may go over the high-water mark before delivery pauses.
    expect(stats!.queuedBytes).toBeLessThanOrEqual(DEFAULT_MAX_QUEUED_BYTES + BLOB.length + 256);
    expect(stats!.writerCapacity).toBeLessThanOrEqual(64 * 1024);
    // The input held back is bounded by the deframer's own limit, not by what the peer sent.
    expect(stats!.bufferedInputBytes).toBeLessThanOrEqual(2 * 1024 * 1024 + 65_536);

    // Now the peer reads: every answer arrives, in order, and the connection settles.
    const deframer = new StreamDeframer(
      lengthPrefixed({ prefix: 'u32le', counts: 'rest', maxFrameBytes: 1 << 20 }),
      { maxFrameBytes: 1 << 20 },
    );
    const ids: number[] = [];
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`only ${ids.length} answers`)), 30_000);
      socket.on('data', (chunk: Buffer) => {
        deframer.push(chunk, (buf, start, end) => {
          const m = decode(packet, buf.subarray(start, end));
          ids.push(m.callId);
        });
        if (ids.length === N) {
          clearTimeout(timer);
          resolve();
        }
      });
      socket.resume();
    });
    expect(ids).toEqual(Array.from({ length: N }, (_, i) => i + 1));
    const after = server.connectionStats()[0]!;
    expect(after.inFlight).toBe(0);
    expect(after.queuedBytes).toBe(0);
    expect(after.readingPaused).toBe(false);
    expect(after.writerCapacity).toBeLessThanOrEqual(64 * 1024);
  }, 60_000);

  it('honours a smaller maxQueuedBytes', async () => {
    const metrics = new ProtocolMetrics('rmc');
    const server = new RmcServer({ log: silentLogger(), metrics, maxQueuedBytes: 100_000 });
    registerProbe(server);
    const listening = await server.listen({ host: '127.0.0.1', port: 0 });
    cleanup.push(() => listening.close());
    const socket = net.connect({ host: '127.0.0.1', port: listening.port });
    socket.pause();
    cleanup.push(() => void socket.destroy());
    const frames: Buffer[] = [];
    for (let i = 0; i < 1000; i++) frames.push(request('ProbeProtocol', 'ProbeProtocol::Blob_V1', i + 1));
    socket.write(Buffer.concat(frames));
    await stalled(metrics);
    expect(metrics.received).toBeLessThan(1000);
    const stats = server.connectionStats()[0]!;
    expect(stats.readingPaused).toBe(true);
    expect(stats.queuedBytes).toBeLessThanOrEqual(100_000 + BLOB.length + 256);
  }, 30_000);
});

describe('RMC hardening: SessionProtocol limits', () => {
  const CreateArgsUnbounded = struct({
    sessionType: qString,
    sessionId: uuid,
    reserved: rawBytes(9),
    sessionKey: qString,
  });

  async function loggedInPeer(s: TestServer): Promise<RawPeer> {
    const peer = await RawPeer.connect(s.port);
    cleanup.push(() => peer.destroy());
    peer.write(
      request(
        'LoginProtocol',
        'LoginProtocol::LoginWithToken_V1',
        1,
        encode(LoginProtocol.methods.LoginWithToken_V1.args, loginArgs('big-strings')),
      ),
    );
    await peer.waitFrames(1);
    expect(decode(packet, peer.frames[0]!)).toMatchObject({ type: 'response', callId: 1 });
    return peer;
  }

  it('a 65 kB sessionType or sessionKey is Core::InvalidArgument and nothing is stored', async () => {
    const s = await setup();
    const peer = await loggedInPeer(s);
    const big = 'T'.repeat(65_000);
    const ok = 'k'.repeat(MAX_SESSION_STRING_BYTES);
    const sid = (n: number) => Buffer.alloc(16, n);
    const create = (callId: number, sessionType: string, sessionKey: string, id: Buffer) =>
      request(
        'SessionProtocol',
        'SessionProtocol::CreateSession_V1',
        callId,
        encode(CreateArgsUnbounded, { sessionType, sessionId: id, reserved: Buffer.alloc(9), sessionKey }),
      );
    peer.write(create(2, big, 'key', sid(1)));
    peer.write(create(3, 'PartySession', big, sid(2)));
    peer.write(create(4, ok, ok, sid(3))); // the limit itself is fine
    const frames = await peer.waitFrames(4);
    const byId = new Map(frames.slice(1).map((f) => [decode(packet, f).callId, decode(packet, f)]));
    expect(byId.get(2)).toMatchObject({ type: 'error', namespace: 'Core', code: 0x0a });
    expect(byId.get(3)).toMatchObject({ type: 'error', namespace: 'Core', code: 0x0a });
    expect(byId.get(4)).toMatchObject({ type: 'response' });
    expect([...s.builtins.sessions.sessions.keys()]).toEqual([sid(3).toString('hex')]);
  });

  it('a connection may be in at most maxSessionsPerConnection sessions', async () => {
    const s = await setup();
    const c = await client(s.port);
    await c.call(LoginProtocol, 'LoginWithToken_V1', loginArgs('many-sessions'));
    const args = (n: number) => ({
      sessionType: 'PartySession',
      sessionId: Buffer.alloc(16, n),
      reserved: Buffer.alloc(9),
      sessionKey: 'k',
    });
    const limit = s.builtins.sessions.maxSessionsPerConnection;
    expect(limit).toBe(16);
    for (let i = 0; i < limit; i++) await c.call(SessionProtocol, 'CreateSession_V1', args(i));
    await expect(c.call(SessionProtocol, 'CreateSession_V1', args(200))).rejects.toMatchObject({
      namespace: 'RendezVous',
      code: 0xdf,
    });
    expect(s.builtins.sessions.sessions.size).toBe(limit);
    // Leaving one makes room again.
    await c.call(SessionProtocol, 'LeaveSession_V1', { sessionId: Buffer.alloc(16, 0) });
    await expect(c.call(SessionProtocol, 'CreateSession_V1', args(200))).resolves.toMatchObject({
      memberCount: 1,
    });
  });
});

describe('RMC hardening: failures that cannot be encoded', () => {
  it('RmcError refuses a namespace that cannot be a String', () => {
    expect(() => new RmcError('N'.repeat(70_000), 1)).toThrow(DeclarationError);
    expect(() => new RmcError('N'.repeat(65_535), 1)).toThrow(DeclarationError);
    expect(() => new RmcError('a\0b', 1)).toThrow(DeclarationError);
    expect(new RmcError('N'.repeat(65_534), 1).namespace).toHaveLength(65_534);
  });

  it('an async handler throwing an oversized RmcError gets Core::Exception; the connection stays sound', async () => {
    const metrics = new ProtocolMetrics('rmc');
    const server = new RmcServer({ log: silentLogger(), metrics });
    registerProbe(server);
    const listening = await server.listen({ host: '127.0.0.1', port: 0 });
    cleanup.push(() => listening.close());
    const c = await client(listening.port, 3000);
    await expect(c.call(ProbeProtocol, 'HugeNamespace_V1', {})).rejects.toMatchObject({
      namespace: 'Core',
      code: 5,
    });
    // The failure frame is rolled back and replaced, sync and async.
    for (const async of [0, 1]) {
      await expect(c.call(ProbeProtocol, 'Mutated_V1', { async })).rejects.toMatchObject({
        namespace: 'Core',
        code: 5,
      });
    }
    // A result that does not fit its String: rolled back, Core::Exception.
    await expect(c.call(ProbeProtocol, 'LongResult_V1', {})).rejects.toMatchObject({
      namespace: 'Core',
      code: 5,
    });
    expect(await c.call(ProbeProtocol, 'Echo_V1', { text: 'still fine' })).toEqual({ text: 'still fine' });
    const stats = server.connectionStats()[0]!;
    expect(stats.inFlight).toBe(0);
  });
});

describe('RMC hardening: repeated logins', () => {
  it('500 logins on one connection leave one disconnect hook and one login session', async () => {
    const s = await setup();
    registerProbe(s.server);
    const c = await client(s.port);
    await Promise.all(
      Array.from({ length: 500 }, (_, i) =>
        c.call(LoginProtocol, 'LoginWithToken_V1', loginArgs(`ticket-${i % 5}`)),
      ),
    );
    expect((await c.call(ProbeProtocol, 'Hooks_V1', {})).hooks).toBe(1);
    expect(s.builtins.store.sessions()).toHaveLength(1);
    expect(s.builtins.store.accountCount()).toBe(5);
    await c.close();
    await waitFor(() => s.builtins.store.sessions().length === 0, {
      what: 'the login session gone with its connection',
    });
  });

  it('the store refuses new accounts beyond maxAccounts with RendezVous::LimitExceeded', async () => {
    const s = await setup({}, { store: new MemoryStore(undefined, { maxAccounts: 3 }) });
    const c = await client(s.port);
    for (let i = 0; i < 3; i++) await c.call(LoginProtocol, 'LoginWithToken_V1', loginArgs(`acct-${i}`));
    await expect(c.call(LoginProtocol, 'LoginWithToken_V1', loginArgs('acct-3'))).rejects.toMatchObject({
      namespace: 'RendezVous',
      code: 0xdf,
    });
    expect(s.builtins.store.accountCount()).toBe(3);
    // Existing accounts still log in.
    expect((await c.call(LoginProtocol, 'LoginWithToken_V1', loginArgs('acct-1'))).userPid).toHaveLength(16);
  });

  it('the default validator does not keep very long claims as account ids', async () => {
    const s = await setup();
    const c = await client(s.port);
    const jwt = `x.${Buffer.from(JSON.stringify({ sub: 's'.repeat(5000) })).toString('base64url')}.sig`;
    await c.call(LoginProtocol, 'LoginWithToken_V1', loginArgs(jwt));
    expect(s.builtins.store.account('s'.repeat(5000))).toBeUndefined();
    expect(s.builtins.store.accountCount()).toBe(1);
  });
});

describe('RMC hardening: empty Strings in the 00 00 form inside lists', () => {
  it('a List<ClassVersion> holding 00 00 01 00 decodes with rmcCodec', () => {
    const body = Buffer.concat([
      Buffer.from('02005000', 'hex'), // protocol "P"
      Buffer.from([1]), // request
      Buffer.from('07000000', 'hex'), // call id 7
      Buffer.from('0500503a3a4d00', 'hex'), // method "P::M"
      Buffer.from('01000000', 'hex'), // one ClassVersion
      Buffer.from('00000100', 'hex'), // name "" as 00 00, version 1
    ]);
    const frame = Buffer.concat([Buffer.alloc(4), body]);
    frame.writeUInt32LE(body.length, 0);
    expect(rmcCodec.decode(frame, {})).toMatchObject({
      type: 'request',
      callId: 7,
      method: 'P::M',
      classVersions: [{ name: '', version: 1 }],
    });
    expect(qString.minSize).toBe(2);
  });
});
