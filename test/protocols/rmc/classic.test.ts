/** The classic packed variant served and called end to end (numeric protocol and method ids). */
import { afterEach, describe, expect, it } from 'vitest';
import { silentLogger } from '../../../src/core/logger.js';
import {
  type ClassicMessage,
  classicPacket,
  defineProtocol,
  LoginProtocol,
  list,
  method,
  qResult,
  RESULT_SUCCESS,
  RmcClient,
  RmcError,
  RmcServer,
  stationUrl,
  u32,
} from '../../../src/protocols/rmc/index.js';
import { type Codec, decode, encode } from '../../../src/wire/index.js';
import { RawPeer } from './helpers.js';

const packet = classicPacket as Codec<ClassicMessage>;

// NEX SecureConnection (protocol 11), Register = method 1 (spec §1.4).
const SecureConnection = defineProtocol(
  'SecureConnectionProtocol',
  'classic secure connection',
  {
    Register: method({
      id: 1,
      args: { vecMyURLs: list(stationUrl) },
      results: { retval: qResult, pidConnectionID: u32, urlPublic: stationUrl },
      layout: 'documented',
      doc: 'NEX SecureConnection::Register',
    }),
    Deny: method({ id: 2, args: {}, results: {}, layout: 'unknown', doc: 'always fails' }),
  },
  { id: 11 },
);
const Extended = defineProtocol(
  'ExtendedProtocol',
  'an extended id',
  { Ping: method({ id: 0x7fff, args: { n: u32 }, results: { n: u32 }, layout: 'unknown', doc: '' }) },
  { id: 0x1234 },
);

let cleanup: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const f of cleanup.reverse()) await f();
  cleanup = [];
});

async function classicServer() {
  const server = new RmcServer({ log: silentLogger(), variant: 'classic' });
  server.register(SecureConnection, {
    Register: (ctx, { vecMyURLs }) => ({
      retval: RESULT_SUCCESS,
      pidConnectionID: ctx.connection.id,
      urlPublic: vecMyURLs[0] ?? '',
    }),
    Deny: () => {
      throw RmcError.of('Core::AccessDenied');
    },
  });
  server.register(Extended, { Ping: (_ctx, { n }) => ({ n }) });
  const l = await server.listen({ host: '127.0.0.1', port: 0 });
  cleanup.push(() => l.close());
  return l.port;
}

describe('classic variant: server and client', () => {
  it('a typed call goes out with ids and comes back with methodId | 0x8000', async () => {
    const port = await classicServer();
    const c = await RmcClient.connect({ host: '127.0.0.1', port, variant: 'classic' });
    cleanup.push(() => c.close());
    const r = await c.call(SecureConnection, 'Register', { vecMyURLs: ['prudp:/address=1.2.3.4;port=1'] });
    expect(r).toMatchObject({ retval: RESULT_SUCCESS, urlPublic: 'prudp:/address=1.2.3.4;port=1' });
    await expect(c.call(Extended, 'Ping', { n: 77 })).resolves.toEqual({ n: 77 });
    await expect(c.call(SecureConnection, 'Deny', {})).rejects.toMatchObject({ namespace: 'Core', code: 6 });
    // A protocol without ids cannot be called over classic.
    await expect(c.call(LoginProtocol, 'Register_V1', { vecMyURLs: [] })).rejects.toMatchObject({
      code: 'ERR_RMC_VARIANT',
    });
  });

  it('the bytes on the wire are classic packed RMC', async () => {
    const port = await classicServer();
    const peer = await RawPeer.connect(port);
    cleanup.push(() => peer.destroy());
    const args = encode(SecureConnection.methods.Register.args, { vecMyURLs: ['prudp:/'] });
    peer.write(encode(packet, { type: 'request', protocolId: 11, callId: 77, methodId: 1, args }));
    peer.write(
      encode(packet, { type: 'request', protocolId: 11, callId: 78, methodId: 9, args: Buffer.alloc(0) }),
    );
    peer.write(
      encode(packet, { type: 'request', protocolId: 0x33, callId: 79, methodId: 1, args: Buffer.alloc(0) }),
    );
    const frames = await peer.waitFrames(3);
    expect(frames).toHaveLength(3);
    expect(frames[0]![4]).toBe(11); // protocol byte without the request bit
    const ok = decode(packet, frames[0]!);
    expect(ok).toMatchObject({ type: 'response', protocolId: 11, callId: 77, methodId: 1 });
    expect(frames[0]!.readUInt32LE(10)).toBe(0x8001);
    expect(decode(packet, frames[1]!)).toEqual({
      type: 'error',
      protocolId: 11,
      errorCode: 0x80010002,
      callId: 78,
    });
    expect(decode(packet, frames[2]!)).toEqual({
      type: 'error',
      protocolId: 0x33,
      errorCode: 0x80010002,
      callId: 79,
    });
  });

  it('a truncated classic request closes the connection', async () => {
    const port = await classicServer();
    const peer = await RawPeer.connect(port);
    cleanup.push(() => peer.destroy());
    peer.write(Buffer.from('060000008b0100000000', 'hex')); // call id, then no method id
    expect(await peer.waitClosed()).toBe(true);
    expect(peer.frames).toHaveLength(0);
  });

  it('a classic server refuses protocols without ids', () => {
    const server = new RmcServer({ log: silentLogger(), variant: 'classic' });
    expect(() => server.register(LoginProtocol, {})).toThrow(/needs an id/);
    server.register(SecureConnection, {});
    expect(() => server.register(defineProtocol('Other', '', {}, { id: 11 }), {})).toThrow(
      /already registered/,
    );
    expect(() =>
      defineProtocol('Dup', '', {
        A: method({ id: 1, args: {}, results: {}, layout: 'unknown', doc: '' }),
        B: method({ id: 1, args: {}, results: {}, layout: 'unknown', doc: '' }),
      }),
    ).toThrow(/twice/);
  });
});

describe('gamewire rmc call --variant classic', () => {
  it('calls protocolId::methodId with hex arguments (needs npm run build)', async () => {
    const { spawn } = await import('node:child_process');
    const path = await import('node:path');
    const root = path.resolve(import.meta.dirname, '../../..');
    const port = await classicServer();
    const args = encode(Extended.methods.Ping.args, { n: 5 }).toString('hex');
    const r = await new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
      const p = spawn(
        process.execPath,
        [
          path.join(root, 'bin/gamewire.js'),
          'rmc',
          'call',
          '--port',
          String(port),
          '--variant',
          'classic',
          '4660::32767',
          '--args',
          JSON.stringify(args),
        ],
        { cwd: root },
      );
      let stdout = '';
      let stderr = '';
      p.stdout.on('data', (d) => (stdout += d));
      p.stderr.on('data', (d) => (stderr += d));
      p.on('exit', (code) => resolve({ code, stdout, stderr }));
    });
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual({ methodId: 0x7fff, results: '05000000' });
  });
});
