import net from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { silentLogger } from '../../../src/core/logger.js';
import { ProtocolMetrics } from '../../../src/core/metrics.js';
import {
  type CallContext,
  defineProtocol,
  type HyperscapeMessage,
  hyperscapePacket,
  method,
  qString,
  RmcClient,
  RmcClientError,
  type RmcConnection,
  RmcError,
  RmcServer,
  u32,
} from '../../../src/protocols/rmc/index.js';
import { DeclarationError } from '../../../src/wire/errors.js';
import { type Codec, decode, encode } from '../../../src/wire/index.js';
import { elapse, waitFor } from '../../helpers/wait.js';

// The worked example of docs/rmc.md.
const EchoProtocol = defineProtocol('EchoProtocol', 'Test protocol', {
  Echo_V1: method({
    args: { text: qString },
    results: { text: qString, length: u32 },
    layout: 'unknown',
    doc: 'echo',
  }),
  Whoami_V1: method({
    args: {},
    results: { connection: u32, calls: u32 },
    layout: 'unknown',
    doc: 'connection id',
  }),
  Fail_V1: method({ args: { code: u32 }, results: {}, layout: 'unknown', doc: 'throws an RmcError' }),
  Crash_V1: method({ args: {}, results: {}, layout: 'unknown', doc: 'throws a plain Error' }),
  Hang_V1: method({ args: {}, results: {}, layout: 'unknown', doc: 'never answers' }),
  Slow_V1: method({ args: { ms: u32 }, results: { ms: u32 }, layout: 'unknown', doc: 'answers after ms' }),
  BadResult_V1: method({
    args: {},
    results: { name: qString },
    layout: 'unknown',
    doc: 'returns an unencodable result',
  }),
  Missing_V1: method({ args: {}, results: {}, layout: 'unknown', doc: 'has no handler' }),
});

let cleanup: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const f of cleanup.reverse()) await f();
  cleanup = [];
});

async function echoServer(options: ConstructorParameters<typeof RmcServer>[0] = {}) {
  const metrics = new ProtocolMetrics('rmc');
  const disconnected: number[] = [];
  const server = new RmcServer({ log: silentLogger(), metrics, ...options });
  server.register(EchoProtocol, {
    Echo_V1: async (_ctx, { text }) => ({ text, length: text.length }),
    Whoami_V1(ctx: CallContext) {
      const n = ((ctx.connection.data.get('calls') as number | undefined) ?? 0) + 1;
      if (n === 1) ctx.connection.onDisconnect(() => void disconnected.push(ctx.connection.id));
      ctx.connection.data.set('calls', n);
      return { connection: ctx.connection.id, calls: n };
    },
    Fail_V1: (_ctx, { code }) => {
      throw new RmcError('RendezVous', code);
    },
    Crash_V1: () => {
      throw new Error('boom');
    },
    Hang_V1: () => new Promise<never>(() => {}),
    Slow_V1: async (_ctx, { ms }) => {
      await elapse(ms, 'a handler that takes this long');
      return { ms };
    },
    BadResult_V1: () => ({}) as { name: string },
  });
  const listening = await server.listen({ host: '127.0.0.1', port: 0 });
  cleanup.push(() => listening.close());
  return { server, listening, port: listening.port, metrics, disconnected };
}

async function client(
  port: number,
  options: { timeoutMs?: number; variant?: 'hyperscape' | 'nex-verbose' | 'classic' } = {},
) {
  const c = await RmcClient.connect({ host: '127.0.0.1', port, ...options });
  cleanup.push(() => c.close());
  return c;
}

describe('RMC framework: typed handlers', () => {
  it('decodes arguments and encodes results from the declaration', async () => {
    const s = await echoServer();
    const c = await client(s.port);
    await expect(c.call(EchoProtocol, 'Echo_V1', { text: 'héllo' })).resolves.toEqual({
      text: 'héllo',
      length: 5,
    });
  });

  it('keeps per-connection state and runs disconnect hooks once', async () => {
    const s = await echoServer();
    const c = await RmcClient.connect({ host: '127.0.0.1', port: s.port });
    const a = await c.call(EchoProtocol, 'Whoami_V1', {});
    const b = await c.call(EchoProtocol, 'Whoami_V1', {});
    expect(b).toEqual({ connection: a.connection, calls: 2 });
    const other = await client(s.port);
    expect((await other.call(EchoProtocol, 'Whoami_V1', {})).calls).toBe(1);
    await c.close();
    await waitFor(() => s.disconnected.length > 0, { what: 'the disconnect hook' });
    expect(s.disconnected).toEqual([a.connection]);
  });

  it('an RmcError becomes (namespace, code); a plain exception Core::Exception; bad results Core::Exception', async () => {
    const s = await echoServer();
    const c = await client(s.port);
    const e = await c.call(EchoProtocol, 'Fail_V1', { code: 0x81 }).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(RmcError);
    expect(e).toMatchObject({ namespace: 'RendezVous', code: 0x81 });
    await expect(c.call(EchoProtocol, 'Crash_V1', {})).rejects.toMatchObject({ namespace: 'Core', code: 5 });
    await expect(c.call(EchoProtocol, 'BadResult_V1', {})).rejects.toMatchObject({
      namespace: 'Core',
      code: 5,
    });
    await expect(c.call(EchoProtocol, 'Missing_V1', {})).rejects.toMatchObject({
      namespace: 'Core',
      code: 2,
    });
    expect(s.metrics.counters.get('handler_exceptions')).toBe(1);
    expect((await c.call(EchoProtocol, 'Echo_V1', { text: 'still fine' })).length).toBe(10);
  });

  it('answers in completion order: a fast call overtakes a slow one on the same connection', async () => {
    const s = await echoServer();
    const c = await client(s.port);
    const order: string[] = [];
    await Promise.all([
      c.call(EchoProtocol, 'Slow_V1', { ms: 150 }).then(() => order.push('slow')),
      c.call(EchoProtocol, 'Echo_V1', { text: 'x' }).then(() => order.push('fast')),
    ]);
    expect(order).toEqual(['fast', 'slow']);
  });

  it('the nex-verbose failure layout works end to end', async () => {
    const s = await echoServer({ variant: 'nex-verbose' });
    const c = await client(s.port, { variant: 'nex-verbose' });
    await expect(c.call(EchoProtocol, 'Fail_V1', { code: 0x64 })).rejects.toMatchObject({
      namespace: 'RendezVous',
      code: 0x64,
    });
  });

  it('rejects registering a protocol twice or a handler for an undeclared method', () => {
    const server = new RmcServer({ log: silentLogger() });
    server.register(EchoProtocol, {});
    expect(() => server.register(EchoProtocol, {})).toThrow(/already registered/);
    const other = new RmcServer({ log: silentLogger() });
    expect(() => other.register(EchoProtocol, { Nope_V1: () => ({}) } as never)).toThrow(/has no method/);
  });

  it('RmcError.of looks names up; qualifiedName and resultCode convert', () => {
    const e = RmcError.of('Core::NotImplemented');
    expect([e.namespace, e.code, e.resultCode, e.qualifiedName]).toEqual([
      'Core',
      2,
      0x80010002,
      'Core::NotImplemented',
    ]);
    expect(RmcError.of('RendezVous::0x81').qualifiedName).toBe('RendezVous::0x0081');
    expect(() => RmcError.of('Nope::Nope')).toThrow(DeclarationError);
  });
});

describe('RmcClient', () => {
  it('times out a call that gets no answer, and the connection stays usable', async () => {
    const s = await echoServer();
    const c = await client(s.port, { timeoutMs: 100 });
    const e = await c.call(EchoProtocol, 'Hang_V1', {}).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(RmcClientError);
    expect((e as RmcClientError).code).toBe('ERR_RMC_TIMEOUT');
    expect(c.inFlight).toBe(0);
    await expect(c.call(EchoProtocol, 'Echo_V1', { text: 'a' }, { timeoutMs: 2000 })).resolves.toMatchObject({
      length: 1,
    });
  });

  it('rejects every pending call when it closes', async () => {
    const s = await echoServer();
    const c = await client(s.port);
    const pending = [
      c.call(EchoProtocol, 'Hang_V1', {}),
      c.call(EchoProtocol, 'Hang_V1', {}),
      c.call(EchoProtocol, 'Slow_V1', { ms: 500 }),
    ];
    const settled = pending.map((p) =>
      p.then(
        () => 'resolved',
        (e: unknown) => e,
      ),
    );
    await waitFor(() => c.inFlight === 3, { what: 'three calls in flight' });
    await c.close();
    for (const p of settled) expect(await p).toMatchObject({ code: 'ERR_RMC_CLOSED' });
    await expect(c.call(EchoProtocol, 'Echo_V1', { text: 'x' })).rejects.toMatchObject({
      code: 'ERR_RMC_CLOSED',
    });
  });

  it('rejects pending calls when the server goes away', async () => {
    const s = await echoServer();
    const c = await client(s.port);
    const p = c.call(EchoProtocol, 'Hang_V1', {}).then(
      () => 'resolved',
      (e: unknown) => e,
    );
    await waitFor(() => s.metrics.received >= 1, { what: 'the call at the server' });
    await s.listening.close(50);
    expect(await p).toBeInstanceOf(RmcClientError);
  });

  it('allocates increasing call ids and rejects a response whose method is not the request + "*"', async () => {
    const seen: number[] = [];
    const fake = net.createServer((sock) => {
      sock.on('data', (chunk) => {
        const m = decode(hyperscapePacket as Codec<HyperscapeMessage>, chunk) as {
          callId: number;
          method: string;
        };
        seen.push(m.callId);
        const wrong = seen.length === 2;
        const reply = encode(hyperscapePacket as Codec<HyperscapeMessage>, {
          type: 'response',
          protocol: 'EchoProtocol',
          callId: m.callId,
          method: wrong ? 'EchoProtocol::Other_V1*' : `${m.method}*`,
          results: encode(EchoProtocol.methods.Echo_V1.results, { text: 'ok', length: 2 }),
        });
        sock.write(reply);
      });
    });
    await new Promise<void>((r) => fake.listen(0, '127.0.0.1', () => r()));
    cleanup.push(() => new Promise<void>((r) => fake.close(() => r())));
    const c = await client((fake.address() as net.AddressInfo).port);
    await expect(c.call(EchoProtocol, 'Echo_V1', { text: 'a' })).resolves.toEqual({ text: 'ok', length: 2 });
    await expect(c.call(EchoProtocol, 'Echo_V1', { text: 'b' })).rejects.toMatchObject({
      code: 'ERR_RMC_METHOD_MISMATCH',
    });
    await expect(c.call(EchoProtocol, 'Echo_V1', { text: 'c' })).resolves.toMatchObject({ length: 2 });
    expect(seen).toEqual([1, 2, 3]);
  });

  it('fails to connect with a typed error', async () => {
    const probe = net.createServer();
    await new Promise<void>((r) => probe.listen(0, '127.0.0.1', () => r()));
    const port = (probe.address() as net.AddressInfo).port;
    await new Promise<void>((r) => probe.close(() => r()));
    await expect(RmcClient.connect({ host: '127.0.0.1', port })).rejects.toMatchObject({
      code: 'ERR_RMC_CONNECTION',
    });
  });
});

describe('RMC server: connection context', () => {
  it('exposes the remote address and closes from a handler', async () => {
    const metrics = new ProtocolMetrics('rmc');
    const server = new RmcServer({ log: silentLogger(), metrics });
    const Bye = defineProtocol('ByeProtocol', 'closes', {
      Bye_V1: method({ args: {}, results: { address: qString }, layout: 'unknown', doc: '' }),
    });
    let conn: RmcConnection | undefined;
    server.register(Bye, {
      Bye_V1(ctx) {
        conn = ctx.connection;
        setTimeout(() => ctx.connection.close(), 10);
        return { address: ctx.connection.remoteAddress };
      },
    });
    const l = await server.listen({ host: '127.0.0.1', port: 0 });
    cleanup.push(() => l.close());
    const c = await RmcClient.connect({ host: '127.0.0.1', port: l.port });
    await expect(c.call(Bye, 'Bye_V1', {})).resolves.toEqual({ address: '127.0.0.1' });
    await waitFor(() => c.closed, { what: 'the client closed' });
    // The server side sees its socket's 'close' a little after the client does.
    await waitFor(() => conn?.closed === true, { what: 'the server side closed' });
  });
});
