import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import {
  ApexAntitoxicityProtocol,
  CloudServersProtocol,
  type HyperscapeMessage,
  hyperscapePacket,
  LoginProtocol,
  type MethodDef,
  parseStationUrl,
  RmcClient,
  RmcError,
  rmcCodec,
  SessionProtocol,
} from '../../../src/protocols/rmc/index.js';
import { type Codec, decode, encode } from '../../../src/wire/index.js';
import { elapse, waitFor } from '../../helpers/wait.js';
import { SEED_URLS, seedRequest } from './fixtures.js';
import { RawPeer, startServer, type TestServer } from './helpers.js';

const packet = hyperscapePacket as Codec<HyperscapeMessage>;

function request(protocol: string, method: string, callId: number, args: Buffer = Buffer.alloc(0)): Buffer {
  return encode(packet, { type: 'request', protocol, callId, method, classVersions: [], args });
}

function typedRequest<M extends MethodDef>(m: M, callId: number, args: unknown): Buffer {
  return request(m.protocol, m.fullName, callId, encode(m.args, args));
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

async function client(port: number, timeoutMs?: number): Promise<RmcClient> {
  const c = await RmcClient.connect({ host: '127.0.0.1', port, timeoutMs });
  cleanup.push(() => c.close());
  return c;
}

async function raw(port: number): Promise<RawPeer> {
  const p = await RawPeer.connect(port);
  cleanup.push(() => p.destroy());
  return p;
}

describe('RMC server: the seed Register_V1 from an independent client', () => {
  it('answers the 253 seed bytes with exactly one well-formed response for call id 6', async () => {
    const s = await setup();
    const peer = await raw(s.port);
    peer.write(seedRequest());
    const frames = await peer.waitFrames(1);
    await elapse(100, 'exactly one response: no second may come');
    expect(frames).toHaveLength(1);
    const frame = frames[0]!;
    expect(frame.readUInt32LE(0)).toBe(frame.length - 4);
    const msg = decode(packet, frame);
    expect(msg).toMatchObject({
      type: 'response',
      protocol: 'LoginProtocol',
      callId: 6,
      method: 'LoginProtocol::Register_V1*',
    });
    const results = decode(LoginProtocol.methods.Register_V1.results, (msg as { results: Buffer }).results);
    expect(results.retval).toBe(0x00010001);
    const url = parseStationUrl(results.urlPublic);
    expect(url.params.get('address')).toBe('127.0.0.1');
    expect(url.params.get('sid')).toBe('15');
    expect(s.metrics.received).toBe(1);
    expect(s.metrics.sent).toBe(1);
  });

  it('also answers when the seed arrives one byte at a time', async () => {
    const s = await setup();
    const peer = await raw(s.port);
    const bytes = seedRequest();
    for (let i = 0; i < bytes.length; i++) {
      peer.write(bytes.subarray(i, i + 1));
      if (i % 50 === 0) await elapse(1, 'let the bytes arrive in many reads');
    }
    const frames = await peer.waitFrames(1);
    expect(frames).toHaveLength(1);
    expect(decode(packet, frames[0]!)).toMatchObject({ type: 'response', callId: 6 });
  });
});

describe('RMC server: unknown protocols and methods', () => {
  it('an unknown protocol gets a well-formed Core::NotImplemented failure, counted', async () => {
    const s = await setup();
    const peer = await raw(s.port);
    peer.write(request('NoSuchProtocol', 'NoSuchProtocol::Nope_V1', 42, Buffer.from([1, 2, 3])));
    const [frame] = await peer.waitFrames(1);
    expect(rmcCodec.decode(frame!, {})).toEqual({
      type: 'error',
      protocol: 'NoSuchProtocol',
      namespace: 'Core',
      code: 2,
      callId: 42,
    });
    expect(s.metrics.counters.get('unimplemented_calls')).toBe(1);
    expect([...s.server.dispatcher.unimplemented()]).toEqual([['NoSuchProtocol NoSuchProtocol::Nope_V1', 1]]);
  });

  it('an unknown method of a known protocol, and a method with another protocol prefix, get NotImplemented', async () => {
    const s = await setup();
    const c = await client(s.port);
    await expect(c.callRaw('LoginProtocol', 'LoginProtocol::Nope_V1', Buffer.alloc(0))).rejects.toMatchObject(
      {
        namespace: 'Core',
        code: 2,
      },
    );
    await expect(
      c.callRaw('LoginProtocol', 'SessionProtocol::Register_V1', Buffer.alloc(0)),
    ).rejects.toBeInstanceOf(RmcError);
    await expect(c.callRaw('__proto__', 'constructor', Buffer.alloc(0))).rejects.toMatchObject({ code: 2 });
    expect(s.metrics.counters.get('unimplemented_calls')).toBe(3);
    // The connection is still usable.
    const r = await c.call(LoginProtocol, 'Register_V1', { vecMyURLs: [] });
    expect(r.retval).toBe(0x00010001);
  });

  it('arguments that do not parse get Core::InvalidArgument and the connection stays open', async () => {
    const s = await setup();
    const c = await client(s.port);
    await expect(
      c.callRaw('LoginProtocol', 'LoginProtocol::Register_V1', Buffer.from([5, 0, 0, 0])),
    ).rejects.toMatchObject({
      namespace: 'Core',
      code: 0x0a,
    });
    await expect(
      c.callRaw(
        'LoginProtocol',
        'LoginProtocol::Register_V1',
        Buffer.concat([encode(LoginProtocol.methods.Register_V1.args, { vecMyURLs: [] }), Buffer.from([0])]),
      ),
    ).rejects.toMatchObject({ code: 0x0a });
    expect(s.metrics.counters.get('invalid_arguments')).toBe(2);
    expect((await c.call(LoginProtocol, 'Register_V1', { vecMyURLs: SEED_URLS })).retval).toBe(0x00010001);
  });
});

describe('LoginProtocol end to end', () => {
  const args = (token: string) => ({
    token,
    clientVersionInfo: { major: 1, minor: 2, patch: 3, build: 4, custom: 'hyperscape' },
    connectionData: {
      urlRegularProtocols: 'prudp:/',
      lstSpecialProtocols: [],
      urlSpecialProtocols: 'prudp:/',
    },
  });

  it('LoginWithToken_V1 creates an account once, sets the connection user, and gives a stable PID', async () => {
    const s = await setup();
    const a = await client(s.port);
    const r1 = await a.call(LoginProtocol, 'LoginWithToken_V1', args('ticket-one'));
    expect(r1.userPid).toHaveLength(16);
    const b = await client(s.port);
    const r2 = await b.call(LoginProtocol, 'LoginWithToken_V1', args('ticket-one'));
    expect(r2.userPid.equals(r1.userPid)).toBe(true);
    const r3 = await b.call(LoginProtocol, 'LoginWithToken_V1', args('ticket-two'));
    expect(r3.userPid.equals(r1.userPid)).toBe(false);
    expect(s.builtins.store.accountCount()).toBe(2);
    expect(s.builtins.store.sessions().length).toBeGreaterThanOrEqual(2);
  });

  it('a JWT-shaped ticket is identified by its sub claim', async () => {
    const s = await setup();
    const c = await client(s.port);
    const jwt = (sub: string, n: string) =>
      `x.${Buffer.from(JSON.stringify({ sub, name: n })).toString('base64url')}.sig`;
    const a = await c.call(LoginProtocol, 'LoginWithToken_V1', args(jwt('user-1', 'Ann')));
    const b = await c.call(LoginProtocol, 'LoginWithToken_V1', args(jwt('user-1', 'Ann2')));
    expect(a.userPid.equals(b.userPid)).toBe(true);
    expect(s.builtins.store.account('user-1')?.name).toBe('Ann2');
  });

  it('an empty ticket is RendezVous::InvalidUsername; a pluggable validator decides', async () => {
    const s = await setup(
      {},
      {
        validateToken: (token) => {
          if (token !== 'good') throw RmcError.of('RendezVous::InvalidPassword');
          return { accountId: 'acc', name: 'Good' };
        },
      },
    );
    const c = await client(s.port);
    await expect(c.call(LoginProtocol, 'LoginWithToken_V1', args('bad'))).rejects.toMatchObject({
      namespace: 'RendezVous',
      code: 0x65,
    });
    expect((await c.call(LoginProtocol, 'LoginWithToken_V1', args('good'))).userPid).toHaveLength(16);

    const d = await setup();
    const c2 = await client(d.port);
    await expect(c2.call(LoginProtocol, 'LoginWithToken_V1', args(''))).rejects.toMatchObject({
      namespace: 'RendezVous',
      code: 0x64,
    });
  });

  it('login sessions end when the connection closes', async () => {
    const s = await setup();
    const c = await RmcClient.connect({ host: '127.0.0.1', port: s.port });
    await c.call(LoginProtocol, 'LoginWithToken_V1', args('t'));
    expect(s.builtins.store.sessions()).toHaveLength(1);
    await c.close();
    await waitFor(() => s.builtins.store.sessions().length === 0, {
      what: 'the login session gone with its connection',
    });
  });
});

describe('CloudServersProtocol end to end', () => {
  it('lists the configured datacenters', async () => {
    const dcs = [
      { id: 'eu', name: 'Europe', region: 'eu-west', host: '10.0.0.1', port: 7000 },
      { id: 'us', name: 'US East', region: 'us-east', host: '10.0.0.2', port: 7001 },
    ];
    const s = await setup({}, { datacenters: dcs });
    const c = await client(s.port);
    expect((await c.call(CloudServersProtocol, 'GetDatacenters_V1', {})).datacenters).toEqual(dcs);
  });
});

describe('SessionProtocol end to end', () => {
  const login = (c: RmcClient, token: string) =>
    c.call(LoginProtocol, 'LoginWithToken_V1', {
      token,
      clientVersionInfo: { major: 1, minor: 0, patch: 0, build: 0, custom: '' },
      connectionData: {
        urlRegularProtocols: 'prudp:/',
        lstSpecialProtocols: [],
        urlSpecialProtocols: 'prudp:/',
      },
    });
  const sid = Buffer.from('10dd0bd5fc58744d369fc0094859950d', 'hex');
  const create = {
    sessionType: 'PartySession',
    sessionId: sid,
    reserved: Buffer.alloc(9),
    sessionKey: `${sid.toString('hex')}5c57c5a2d8f7e363ffff`,
  };

  it('the documented CreateSession_V1 layout is 141 bytes for the wiki-sized arguments', () => {
    const bytes = encode(SessionProtocol.methods.CreateSession_V1.args, {
      ...create,
      sessionKey: 'x'.repeat(98),
    });
    expect(bytes.length).toBe(141);
    expect(bytes.subarray(0, 15).toString('latin1')).toBe('\x0d\x00PartySession\0');
  });

  it('requires login, then creates, joins, lists members, leaves, and cleans up on disconnect', async () => {
    const s = await setup();
    const a = await client(s.port);
    await expect(a.call(SessionProtocol, 'CreateSession_V1', create)).rejects.toMatchObject({
      namespace: 'RendezVous',
      code: 2,
    });
    const pidA = (await login(a, 'alice')).userPid;
    const created = await a.call(SessionProtocol, 'CreateSession_V1', create);
    expect(created).toEqual({ sessionId: sid, memberCount: 1 });

    const b = await RmcClient.connect({ host: '127.0.0.1', port: s.port });
    const pidB = (await login(b, 'bob')).userPid;
    const joined = await b.call(SessionProtocol, 'JoinSession_V1', { sessionId: sid });
    expect(joined.sessionType).toBe('PartySession');
    expect(joined.members.map((m) => m.toString('hex')).sort()).toEqual(
      [pidA.toString('hex'), pidB.toString('hex')].sort(),
    );
    await expect(b.call(SessionProtocol, 'CreateSession_V1', create)).resolves.toMatchObject({
      memberCount: 2,
    });

    // Bob disconnects: his membership goes with him.
    await b.close();
    const session = s.builtins.sessions.get(sid.toString('hex'))!;
    await waitFor(() => session.members.size === 1, { what: 'the membership gone with its connection' });

    await a.call(SessionProtocol, 'LeaveSession_V1', { sessionId: sid });
    expect(s.builtins.sessions.get(sid.toString('hex'))).toBeUndefined();
    await expect(a.call(SessionProtocol, 'LeaveSession_V1', { sessionId: sid })).rejects.toMatchObject({
      code: 0x73,
    });
    await expect(a.call(SessionProtocol, 'JoinSession_V1', { sessionId: sid })).rejects.toMatchObject({
      code: 0x73,
    });
  });

  it('a full session answers RendezVous::SessionFull; an existing id from a stranger is DuplicateEntry', async () => {
    const { SessionRegistry } = await import('../../../src/protocols/rmc/index.js');
    const s = await setup({}, { sessions: new SessionRegistry({ maxMembers: 1 }) });
    const a = await client(s.port);
    const b = await client(s.port);
    await login(a, 'a');
    await login(b, 'b');
    await a.call(SessionProtocol, 'CreateSession_V1', create);
    await expect(b.call(SessionProtocol, 'JoinSession_V1', { sessionId: sid })).rejects.toMatchObject({
      code: 0xc8,
    });
    await expect(b.call(SessionProtocol, 'CreateSession_V1', create)).rejects.toMatchObject({ code: 0x70 });
  });
});

describe('ApexAntitoxicityProtocol end to end', () => {
  it('acknowledges any method with an empty success response', async () => {
    const s = await setup();
    const c = await client(s.port);
    const r = await c.callRaw(
      ApexAntitoxicityProtocol.name,
      'ApexAntitoxicityProtocol::ReportPlayer_V1',
      Buffer.from('abcd', 'hex'),
    );
    expect(r.length).toBe(0);
    const r2 = await c.callRaw(
      ApexAntitoxicityProtocol.name,
      'ApexAntitoxicityProtocol::Anything_V9',
      Buffer.alloc(0),
    );
    expect(r2.length).toBe(0);
    expect(s.metrics.counters.get('unimplemented_calls')).toBeUndefined();
  });
});

describe('RMC server: pipelining', () => {
  it('200 calls in one write get 200 responses with the right call ids', async () => {
    const s = await setup();
    const peer = await raw(s.port);
    const frames: Buffer[] = [];
    for (let i = 0; i < 200; i++) {
      const callId = 1000 + i;
      if (i % 3 === 0)
        frames.push(
          typedRequest(LoginProtocol.methods.Register_V1, callId, {
            vecMyURLs: [`prudp:/address=10.0.0.${i % 250};port=1`],
          }),
        );
      else if (i % 3 === 1)
        frames.push(typedRequest(CloudServersProtocol.methods.GetDatacenters_V1, callId, {}));
      else frames.push(request('Unknown', 'Unknown::X_V1', callId));
    }
    peer.write(Buffer.concat(frames));
    const got = await peer.waitFrames(200);
    await elapse(50, 'no response beyond the 200 may come');
    expect(got).toHaveLength(200);
    const byId = new Map<number, HyperscapeMessage>();
    for (const f of got) {
      const m = decode(packet, f);
      byId.set(m.callId, m);
    }
    expect([...byId.keys()].sort((x, y) => x - y)).toEqual(Array.from({ length: 200 }, (_, i) => 1000 + i));
    for (const [id, m] of byId) {
      const i = id - 1000;
      if (i % 3 === 2) expect(m).toMatchObject({ type: 'error', namespace: 'Core', code: 2 });
      else if (i % 3 === 0) {
        expect(m).toMatchObject({ type: 'response', method: 'LoginProtocol::Register_V1*' });
        const r = decode(LoginProtocol.methods.Register_V1.results, (m as { results: Buffer }).results);
        expect(r.pidConnectionID).toBeGreaterThan(0);
      } else
        expect(m).toMatchObject({ type: 'response', method: 'CloudServersProtocol::GetDatacenters_V1*' });
    }
  });

  it('RmcClient pipelines 500 concurrent typed calls and matches every answer', async () => {
    const s = await setup();
    const c = await client(s.port);
    const urls = Array.from({ length: 500 }, (_, i) => `prudp:/address=10.0.${i >> 8}.${i & 255};port=${i}`);
    const results = await Promise.all(
      urls.map((u) => c.call(LoginProtocol, 'Register_V1', { vecMyURLs: [u] })),
    );
    results.forEach((r, i) => {
      expect(parseStationUrl(r.urlPublic).params.get('address')).toBe('127.0.0.1');
      expect(r.retval).toBe(0x00010001);
      void i;
    });
    expect(c.inFlight).toBe(0);
  });
});

describe('RMC server: fragmentation', () => {
  it('any split of a stream of requests into chunks gets every answer', async () => {
    const s = await setup();
    const stream = Buffer.concat([
      seedRequest(),
      request('Unknown', 'Unknown::X_V1', 7),
      typedRequest(CloudServersProtocol.methods.GetDatacenters_V1, 8, {}),
      seedRequest(),
    ]);
    await fc.assert(
      fc.asyncProperty(
        fc.uniqueArray(fc.integer({ min: 1, max: stream.length - 1 }), { maxLength: 12 }),
        async (cuts) => {
          const peer = await RawPeer.connect(s.port);
          try {
            const points = [0, ...cuts.sort((a, b) => a - b), stream.length];
            for (let i = 1; i < points.length; i++) {
              peer.write(stream.subarray(points[i - 1]!, points[i]!));
              if (i % 3 === 0) await elapse(1, 'let the pieces arrive in separate reads');
            }
            const frames = await peer.waitFrames(4);
            expect(frames.map((f) => decode(packet, f).callId).sort()).toEqual([6, 6, 7, 8]);
          } finally {
            peer.destroy();
          }
        },
      ),
      { numRuns: 25 },
    );
  });
});

describe('RMC server: malformed frames close only that connection', () => {
  const cases: [string, () => Buffer][] = [
    ['a 0x7FFFFFFF length prefix', () => Buffer.from('ffffff7f0e004c6f67696e', 'hex')],
    [
      'a String past the end of its frame',
      () => {
        const b = seedRequest();
        b.writeUInt16LE(0x0400, 4 + 2 + 14 + 1 + 4); // method String length 1024 in a 253-byte frame
        return b;
      },
    ],
    [
      'a String missing its NUL',
      () => {
        const b = seedRequest();
        b[4 + 2 + 13] = 0x21;
        return b;
      },
    ],
    [
      'a bool other than 0/1',
      () => {
        const b = seedRequest();
        b[20] = 7;
        return b;
      },
    ],
    ['a length under the minimum frame', () => Buffer.from('0200000001000000', 'hex')],
  ];

  for (const [name, bad] of cases) {
    it(`${name}: that connection is closed, another client keeps being served`, async () => {
      const s = await setup();
      const good = await client(s.port);
      await good.call(LoginProtocol, 'Register_V1', { vecMyURLs: [] });
      const peer = await raw(s.port);
      peer.write(bad());
      expect(await peer.waitClosed()).toBe(true);
      expect(peer.frames).toHaveLength(0);
      expect(s.metrics.closed.get('malformed')).toBe(1);
      expect(s.metrics.dropped.get('malformed')).toBe(1);
      const r = await good.call(LoginProtocol, 'Register_V1', { vecMyURLs: SEED_URLS });
      expect(r.retval).toBe(0x00010001);
      // A new connection is served too.
      const again = await raw(s.port);
      again.write(seedRequest());
      expect(await again.waitFrames(1)).toHaveLength(1);
    });
  }

  it('answers sent before a malformed frame still arrive', async () => {
    const s = await setup();
    const peer = await raw(s.port);
    const bad = seedRequest();
    bad[20] = 9;
    peer.write(Buffer.concat([seedRequest(), bad]));
    await peer.waitClosed();
    expect(peer.frames).toHaveLength(1);
    expect(decode(packet, peer.frames[0]!)).toMatchObject({ callId: 6 });
  });
});

describe('RMC server: lifecycle', () => {
  it('close() releases the port and ends connections', async () => {
    const s = await startServer();
    const peer = await RawPeer.connect(s.port);
    await s.listening.close();
    expect(await peer.waitClosed()).toBe(true);
    await expect(RawPeer.connect(s.port)).rejects.toThrow();
  });

  it('reports its real port in endpoints when started on port 0', async () => {
    const s = await setup();
    expect(s.port).toBeGreaterThan(0);
    expect(s.listening.endpoints).toEqual([expect.objectContaining({ transport: 'tcp', port: s.port })]);
  });
});
