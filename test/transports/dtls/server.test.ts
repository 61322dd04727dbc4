import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import dgram from 'node:dgram';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { clientHelloBody, handshakeMessage } from '../../../src/transports/dtls/handshake.js';
import {
  AlertDescription,
  DtlsClient,
  type DtlsError,
  DtlsServer,
} from '../../../src/transports/dtls/index.js';
import { plainRecord } from '../../../src/transports/dtls/record.js';
import { canUnshare, runInNetns } from '../../helpers/netns.js';
import { elapse } from '../../helpers/wait.js';
import {
  hasProgram,
  plaintextHandshakeTypes,
  recordPlane,
  recordTypes,
  sendAndCollect,
  sendAndCollectBurst,
  startEchoServer,
  startProxy,
  testIdentity,
  waitFor,
} from './helpers.js';

/** A ClientHello datagram as a DTLS client sends it (first: record version 1.0, no cookie). */
function clientHello(
  cookie: Buffer = Buffer.alloc(0),
  random: Buffer = randomBytes(32),
  messageSeq = 0,
  recordSeq = 0,
): Buffer {
  const body = clientHelloBody(random, cookie, [0x00a8, 0xc0a4], true);
  return plainRecord(
    22,
    cookie.length ? 0xfefd : 0xfeff,
    0,
    recordSeq,
    handshakeMessage(1, messageSeq, body),
  );
}

/** The cookie of a HelloVerifyRequest datagram. */
function cookieOf(hvr: Buffer): Buffer {
  // record header 13 + handshake header 12 + server_version 2, then the cookie vector.
  const len = hvr[27]!;
  return hvr.subarray(28, 28 + len);
}

const connectOptions = (port: number, identity: Buffer, psk: Buffer) => ({
  host: '127.0.0.1',
  port,
  identity,
  psk,
});

// Every test has its own server (and proxy): they run concurrently.
describe.concurrent('DtlsClient against DtlsServer', () => {
  for (const suite of [0x00a8, 0x00a9, 0xc0a4, 0xc0a5, 0xc0a8, 0xc0a9, 0xccab]) {
    for (const ems of [true, false]) {
      it(`suite 0x${suite.toString(16)}, EMS ${ems}: handshake, data both ways, close_notify`, async () => {
        const srv = await startEchoServer();
        const client = await DtlsClient.connect({
          ...connectOptions(srv.port, srv.identity, srv.psk),
          cipherSuites: [suite],
          extendedMasterSecret: ems,
        });
        try {
          expect(client.cipherSuite).toBe(suite);
          expect(client.extendedMasterSecret).toBe(ems);
          const got: Buffer[] = [];
          client.on('message', (m) => got.push(m));
          client.send(Buffer.from('one'));
          await waitFor(() => got.length === 1, 'the echo');
          expect(got[0]!.toString()).toBe('echo:one');
          expect(srv.associations[0]!.extendedMasterSecret).toBe(ems);
          client.close();
          await waitFor(() => srv.closes.includes('close-notify'), 'close_notify at the server');
          expect(srv.server.stats().associations).toBe(0);
        } finally {
          client.close();
          await srv.close();
        }
      });
    }
  }

  it('the server prefers AES-128-GCM over the client order (mbedTLS offers ChaCha20 and AES-256 first)', async () => {
    const srv = await startEchoServer();
    const client = await DtlsClient.connect({
      ...connectOptions(srv.port, srv.identity, srv.psk),
      cipherSuites: [0xccab, 0x00a9, 0xc0a5, 0xc0a9, 0x00a8, 0xc0a4, 0xc0a8],
    });
    try {
      expect(client.cipherSuite).toBe(0x00a8);
    } finally {
      client.close();
      await srv.close();
    }
  });

  it('an unknown identity fails with alert 115, a wrong PSK with alert 51; neither makes an association', async () => {
    const srv = await startEchoServer();
    try {
      const unknown = DtlsClient.connect(connectOptions(srv.port, Buffer.from('nobody'), srv.psk));
      await expect(unknown).rejects.toMatchObject({
        code: 'ERR_DTLS_ALERT',
        alert: AlertDescription.unknownPskIdentity,
      });
      const wrongPsk = Buffer.from(srv.psk);
      wrongPsk[63]! ^= 0x80;
      const wrong = DtlsClient.connect(connectOptions(srv.port, srv.identity, wrongPsk));
      await expect(wrong).rejects.toMatchObject({
        code: 'ERR_DTLS_ALERT',
        alert: AlertDescription.decryptError,
      });
      expect(srv.associations).toHaveLength(0);
      expect(srv.server.stats().handshakesInProgress).toBe(0);
      expect(srv.drops).toEqual(expect.arrayContaining(['unknown-psk-identity', 'bad-finished']));
    } finally {
      await srv.close();
    }
  });

  it('the server closing an association sends close_notify: the client emits close', async () => {
    const srv = await startEchoServer();
    const client = await DtlsClient.connect(connectOptions(srv.port, srv.identity, srv.psk));
    const reasons: string[] = [];
    client.on('close', (r) => reasons.push(r));
    try {
      await waitFor(() => srv.associations.length === 1, 'the association');
      srv.associations[0]!.close();
      await waitFor(() => reasons.length === 1, 'the close at the client');
      expect(reasons).toEqual(['close-notify']);
      expect(srv.closes).toEqual(['local-close']);
      expect(srv.associations[0]!.send(Buffer.from('late'))).toBe(false);
      expect(() => client.send(Buffer.from('late'))).toThrow(
        expect.objectContaining({ code: 'ERR_DTLS_NOT_OPEN' }),
      );
      // (A server fed by the native plane owns no socket: listening would be its first.)
      if (recordPlane === 'js')
        await expect(srv.server.listen(0, '127.0.0.1')).rejects.toMatchObject({ code: 'ERR_DTLS_LISTENING' });
    } finally {
      client.close();
      await srv.close();
    }
  });
});

describe.concurrent('DTLS record layer on the wire', () => {
  it('one application message is one record in one datagram, both ways', async () => {
    const srv = await startEchoServer();
    const proxy = await startProxy(srv.port);
    const client = await DtlsClient.connect(connectOptions(proxy.port, srv.identity, srv.psk));
    try {
      const got: Buffer[] = [];
      client.on('message', (m) => got.push(m));
      const fromClientBefore = proxy.fromClient.length;
      const fromServerBefore = proxy.fromServer.length;
      const n = 25;
      for (let i = 0; i < n; i++) client.send(Buffer.from(`message ${i}`));
      await waitFor(() => got.length === n, 'every echo');
      const up = proxy.fromClient.slice(fromClientBefore);
      const down = proxy.fromServer.slice(fromServerBefore);
      expect(up).toHaveLength(n);
      expect(down).toHaveLength(n);
      for (const d of [...up, ...down]) expect(recordTypes(d)).toEqual([23]);
      // AES-128-GCM: 13 header + 8 explicit nonce + 16 tag = 37 bytes, as Unity's client reserves.
      expect(down[0]!.length - got[0]!.length).toBe(37);
    } finally {
      client.close();
      await proxy.close();
      await srv.close();
    }
  });

  it('a replayed application record is dropped and not delivered twice', async () => {
    const srv = await startEchoServer();
    const proxy = await startProxy(srv.port);
    const client = await DtlsClient.connect(connectOptions(proxy.port, srv.identity, srv.psk));
    try {
      client.send(Buffer.from('once'));
      await waitFor(() => srv.messages.length === 1, 'the message');
      proxy.inject(proxy.fromClient.at(-1)!);
      await waitFor(() => srv.drops.includes('replay'), 'the replay drop');
      expect(srv.messages).toHaveLength(1);
    } finally {
      client.close();
      await proxy.close();
      await srv.close();
    }
  });

  it('the handshake completes when every flight in both directions is lost once', async () => {
    const srv = await startEchoServer();
    const seen = new Set<string>();
    // Drop the first copy of each distinct flight (by its record/handshake types and direction).
    const proxy = await startProxy(srv.port, (direction, datagram) => {
      if (recordTypes(datagram).includes(23)) return false; // handshake flights only
      const key = `${direction}:${datagram.readUInt16BE(1)}:${recordTypes(datagram).join(',')}:${plaintextHandshakeTypes(datagram).join(',')}`;
      if (seen.has(key)) return false;
      seen.add(key);
      return true;
    });
    try {
      const client = await DtlsClient.connect({
        ...connectOptions(proxy.port, srv.identity, srv.psk),
        retransmitMs: 200,
        timeoutMs: 20_000,
      });
      // Both final flights were lost once too (CCS+Finished each way): all retransmitted.
      expect(srv.associations).toHaveLength(1);
      const got: Buffer[] = [];
      client.on('message', (m) => got.push(m));
      client.send(Buffer.from('after loss'));
      client.send(Buffer.from('after loss 2'));
      await waitFor(() => got.length >= 1, 'an echo');
      client.close();
      expect(srv.server.stats().handshakesCompleted).toBe(1);
      expect([...seen].length).toBe(6);
    } finally {
      await proxy.close();
      await srv.close();
    }
  });
});

describe.concurrent('the reconnection-probe rule', () => {
  it('a ClientHello on a recently active association gets no reply; after probeQuietMs it gets a HelloVerifyRequest', async () => {
    const srv = await startEchoServer({ probeQuietMs: 1500 });
    const proxy = await startProxy(srv.port);
    const client = await DtlsClient.connect(connectOptions(proxy.port, srv.identity, srv.psk));
    try {
      const got: Buffer[] = [];
      client.on('message', (m) => got.push(m));
      client.send(Buffer.from('alive'));
      await waitFor(() => got.length === 1, 'the echo');
      const before = proxy.fromServer.length;
      proxy.inject(clientHello());
      await waitFor(() => srv.drops.includes('probe'), 'the probe drop');
      await elapse(300, 'a probe must get no answer at all');
      expect(proxy.fromServer.length).toBe(before); // no HVR, no ServerHello, no alert
      // The association is untouched.
      client.send(Buffer.from('still alive'));
      await waitFor(() => got.length === 2, 'the second echo');
      // Quiet for longer than probeQuietMs: a hello now starts a new handshake (an HVR).
      await elapse(1700, 'quiet for longer than probeQuietMs');
      const quietFrom = proxy.fromServer.length;
      proxy.inject(clientHello());
      await waitFor(() => proxy.fromServer.length > quietFrom, 'the HVR');
      expect(plaintextHandshakeTypes(proxy.fromServer[quietFrom]!)).toEqual([3]);
      expect(srv.server.stats().associations).toBe(1);
    } finally {
      client.close();
      await proxy.close();
      await srv.close();
    }
  });

  it('a new handshake from the same address replaces the old association only once its Finished verifies', async () => {
    const srv = await startEchoServer({ probeQuietMs: 200 });
    const proxy = await startProxy(srv.port);
    const first = await DtlsClient.connect(connectOptions(proxy.port, srv.identity, srv.psk));
    try {
      await elapse(
        400,
        'past probeQuietMs (200 ms): a hello from this address is a new handshake, not a probe',
      );
      // A half-done re-handshake (hello, HVR, hello with cookie, ServerHello): the old association stays.
      const random = randomBytes(32);
      const hvr = await (async () => {
        const n = proxy.fromServer.length;
        proxy.inject(clientHello(Buffer.alloc(0), random));
        await waitFor(() => proxy.fromServer.length > n, 'the HVR');
        return proxy.fromServer[n]!;
      })();
      const n = proxy.fromServer.length;
      proxy.inject(clientHello(cookieOf(hvr), random, 1, 1));
      await waitFor(() => proxy.fromServer.length > n, 'the ServerHello');
      expect(plaintextHandshakeTypes(proxy.fromServer[n]!)).toEqual([2, 14]);
      expect(srv.server.stats().handshakesInProgress).toBe(1);
      const firstGot: Buffer[] = [];
      first.on('message', (m) => firstGot.push(m));
      first.send(Buffer.from('old still works'));
      await waitFor(() => firstGot.length === 1, 'the old association echo');
      expect(srv.closes).toEqual([]);
      // A complete new handshake from the same 5-tuple (the proxy's socket) replaces it.
      first.removeAllListeners('message');
      await elapse(
        400,
        'past probeQuietMs (200 ms): a hello from this address is a new handshake, not a probe',
      );
      const second = await DtlsClient.connect(connectOptions(proxy.port, srv.identity, srv.psk));
      await waitFor(() => srv.closes.includes('replaced'), 'the replaced close');
      expect(srv.associations).toHaveLength(2);
      expect(srv.server.stats().associations).toBe(1);
      const got: Buffer[] = [];
      second.on('message', (m) => got.push(m));
      second.send(Buffer.from('new'));
      await waitFor(() => got.length === 1, 'the new association echo');
      second.close();
    } finally {
      first.close();
      await proxy.close();
      await srv.close();
    }
  });
});

describe.concurrent('limits', () => {
  /**
   * Hello, HVR, hello with the cookie, from one socket: returns the replies to the second hello
   * (the burst that answers it, or none within 500 ms).
   */
  async function pendingHandshake(port: number): Promise<Buffer[]> {
    const socket = dgram.createSocket('udp4');
    await new Promise<void>((resolve) => socket.bind(0, '127.0.0.1', () => resolve()));
    try {
      const random = randomBytes(32);
      const [hvr] = await sendAndCollectBurst(
        port,
        [clientHello(Buffer.alloc(0), random)],
        { waitMs: 500, quietMs: 0 },
        socket,
      );
      return await sendAndCollectBurst(
        port,
        [clientHello(cookieOf(hvr!), random, 1, 1)],
        { waitMs: 500, quietMs: 200 },
        socket,
      );
    } finally {
      socket.close();
    }
  }

  it('maxHandshakes caps handshakes in progress: a newcomer evicts the oldest; the timeout frees them', async () => {
    // The timeout outlasts the three handshakes below (each a few round trips) many times over.
    const srv = await startEchoServer({ maxHandshakes: 2, maxHandshakesPerIp: 3, handshakeTimeoutMs: 3000 });
    try {
      expect(await pendingHandshake(srv.port)).toHaveLength(1);
      expect(await pendingHandshake(srv.port)).toHaveLength(1);
      // Full: the third is answered (a full table never locks newcomers out), the first goes.
      expect(await pendingHandshake(srv.port)).toHaveLength(1);
      expect(srv.drops).toEqual(['handshake-evicted']);
      expect(srv.server.stats().handshakesInProgress).toBe(2);
      await waitFor(() => srv.server.stats().handshakesInProgress === 0, 'the handshake timeout');
      expect(srv.drops.filter((d) => d === 'handshake-timeout')).toHaveLength(2);
      // Room again: a real client gets in.
      const client = await DtlsClient.connect(connectOptions(srv.port, srv.identity, srv.psk));
      client.close();
    } finally {
      await srv.close();
    }
  });

  it('a real client gets in while half-open handshakes fill the table', async () => {
    const srv = await startEchoServer({
      maxHandshakes: 3,
      maxHandshakesPerIp: 8,
      handshakeTimeoutMs: 60_000,
    });
    try {
      for (let i = 0; i < 3; i++) expect(await pendingHandshake(srv.port)).toHaveLength(1);
      expect(srv.server.stats().handshakesInProgress).toBe(3);
      // Before the attackers' handshakes time out (60 s), the client finishes its own.
      const client = await DtlsClient.connect({
        ...connectOptions(srv.port, srv.identity, srv.psk),
        timeoutMs: 5000,
      });
      client.close();
      expect(srv.drops).toContain('handshake-evicted');
    } finally {
      await srv.close();
    }
  });

  it.runIf(recordPlane === 'js' && hasProgram('ss'))(
    'listen asks a 4 MiB receive buffer (capped by net.core.rmem_max)',
    async () => {
      const srv = await startEchoServer();
      try {
        const out = execFileSync('ss', ['-Huanm', `sport = :${srv.port}`], { encoding: 'utf8' });
        const rb = Number(/rb(\d+)/.exec(out)?.[1]);
        const rmemMax = Number(readFileSync('/proc/sys/net/core/rmem_max', 'utf8'));
        // Linux doubles what it is asked for (bookkeeping), after capping it at rmem_max.
        expect(rb).toBe(2 * Math.min(4 * 1024 * 1024, rmemMax));
      } finally {
        await srv.close();
      }
    },
  );

  it('maxHandshakesPerIp is counted per address', async () => {
    const srv = await startEchoServer({ maxHandshakes: 10, maxHandshakesPerIp: 1 });
    try {
      expect(await pendingHandshake(srv.port)).toHaveLength(1);
      expect(await pendingHandshake(srv.port)).toHaveLength(0);
      expect(srv.drops).toContain('handshake-limit-per-ip');
    } finally {
      await srv.close();
    }
  });

  it('maxAssociations refuses new handshakes once full', async () => {
    const srv = await startEchoServer({ maxAssociations: 1 });
    try {
      const a = await DtlsClient.connect(connectOptions(srv.port, srv.identity, srv.psk));
      await expect(
        DtlsClient.connect({ ...connectOptions(srv.port, srv.identity, srv.psk), timeoutMs: 1500 }),
      ).rejects.toMatchObject({ code: 'ERR_DTLS_TIMEOUT' });
      expect(srv.drops).toContain('association-limit');
      a.close();
    } finally {
      await srv.close();
    }
  });

  it('an idle association is forgotten after associationIdleTimeoutMs', async () => {
    const srv = await startEchoServer({ associationIdleTimeoutMs: 400 });
    const client = await DtlsClient.connect(connectOptions(srv.port, srv.identity, srv.psk));
    try {
      await waitFor(() => srv.closes.includes('idle'), 'the idle close');
      expect(srv.server.stats().associations).toBe(0);
    } finally {
      client.close();
      await srv.close();
    }
  });

  it('maxRecordPlaintext bounds what is sent and what is accepted', async () => {
    const srv = await startEchoServer({ maxRecordPlaintext: 100 });
    const client = await DtlsClient.connect({
      ...connectOptions(srv.port, srv.identity, srv.psk),
      maxRecordPlaintext: 200,
    });
    try {
      await waitFor(() => srv.associations.length === 1, 'the association');
      expect(srv.associations[0]!.send(Buffer.alloc(101))).toBe(false);
      expect(srv.associations[0]!.send(Buffer.alloc(100))).toBe(true);
      expect(() => client.send(Buffer.alloc(201))).toThrow(
        expect.objectContaining({ code: 'ERR_DTLS_TOO_LARGE' }),
      );
      client.send(Buffer.alloc(150));
      await waitFor(() => srv.drops.includes('record-too-large'), 'the drop');
      expect(srv.messages).toHaveLength(0);
    } finally {
      client.close();
      await srv.close();
    }
  });

  it('a HelloVerifyRequest is never larger than the ClientHello that asked for it', async () => {
    const srv = await startEchoServer();
    try {
      // The smallest hello that parses: no suites but one, no extensions.
      const body = Buffer.concat([
        Buffer.from([0xfe, 0xfd]),
        randomBytes(32),
        Buffer.from([0, 0, 0, 2, 0, 0xa8, 1, 0]),
      ]);
      const tiny = plainRecord(22, 0xfeff, 0, 0, handshakeMessage(1, 0, body));
      const replies = await sendAndCollect(srv.port, [tiny], 500);
      expect(tiny.length).toBe(67);
      // HVR = 13 + 12 + 2 + 1 + 32 = 60 bytes.
      expect(replies.map((r) => r.length)).toEqual([60]);
    } finally {
      await srv.close();
    }
  });
});

describe.concurrent('DtlsServer fed by a socket it does not own (one-port sharing)', () => {
  it('handleDatagram serves DTLS next to other traffic on the same socket', async () => {
    const identity = testIdentity();
    const psk = randomBytes(64);
    const server = new DtlsServer({ pskFor: (id) => (id.equals(identity) ? psk : undefined) });
    const socket = dgram.createSocket('udp4');
    const plain: Buffer[] = [];
    socket.on('message', (msg, rinfo) => {
      // Unity relay messages start with 0xDA; DTLS records with a content type 20..23.
      if (msg[0] === 0xda) plain.push(msg);
      else server.handleDatagram(msg, rinfo, (b) => socket.send(b, rinfo.port, rinfo.address));
    });
    server.on('message', (a, m) => a.send(Buffer.concat([Buffer.from('shared:'), m])));
    await new Promise<void>((resolve) => socket.bind(0, '127.0.0.1', () => resolve()));
    const port = socket.address().port;
    const client = await DtlsClient.connect(connectOptions(port, identity, psk));
    try {
      const got: Buffer[] = [];
      client.on('message', (m) => got.push(m));
      client.send(Buffer.from('x'));
      await sendAndCollect(port, [Buffer.from([0xda, 0x72, 0, 1])], 100);
      await waitFor(() => got.length === 1 && plain.length === 1, 'both kinds of traffic');
      expect(got[0]!.toString()).toBe('shared:x');
    } finally {
      client.close();
      await server.close();
      await new Promise<void>((resolve) => socket.close(() => resolve()));
    }
  });
});

describe.concurrent('DtlsServer options', () => {
  it('rejects a suite it does not implement and non-numeric limits', () => {
    expect(() => new DtlsServer({ pskFor: () => undefined, cipherSuites: [0x002f] })).toThrow(
      expect.objectContaining({ code: 'ERR_DTLS_BAD_OPTION' }),
    );
    expect(() => new DtlsServer({ pskFor: () => undefined, maxHandshakes: -1 })).toThrow(
      expect.objectContaining({ code: 'ERR_DTLS_BAD_OPTION' }),
    );
    expect(() => new DtlsServer({ pskFor: () => undefined, maxHandshakes: undefined })).not.toThrow();
  });

  it('a DtlsClient rejects with a typed error when nothing answers', async () => {
    const socket = dgram.createSocket('udp4');
    await new Promise<void>((resolve) => socket.bind(0, '127.0.0.1', () => resolve()));
    try {
      const err = await DtlsClient.connect({
        ...connectOptions(socket.address().port, Buffer.from('a'), Buffer.from('b')),
        timeoutMs: 500,
      }).catch((e: DtlsError) => e);
      expect(err).toMatchObject({ name: 'DtlsError', code: 'ERR_DTLS_TIMEOUT' });
    } finally {
      socket.close();
    }
  });
});

// Not concurrent: it runs a program in a network namespace synchronously (spawnSync), which would
// hold up the other tests' sockets and timers meanwhile; it runs alone after them.
describe('limits, in a network namespace', () => {
  it('maxHandshakesPerIp counts an IPv6 /64 as one address; another /64 is counted apart', (ctx) => {
    if (!canUnshare()) {
      ctx.annotate('unshare -rn is not allowed here: the IPv6 /64 handshake cap was not checked');
      return;
    }
    const sources = ['2001:db8:1:2::a', '2001:db8:1:2::b', '2001:db8:1:2:ffff::c', '2001:db8:1:3::d'];
    const r = runInNetns<{
      answered: Record<string, true | string | null>;
      perIpDrops: number;
      inProgress: number;
    }>('test/transports/dtls/v6-handshake-cap.mjs', sources, { sources, maxHandshakesPerIp: 2 });
    expect(r.answered).toEqual({
      '2001:db8:1:2::a': true,
      '2001:db8:1:2::b': true,
      // A third address of the same /64: refused, as a third port of one IPv4 address would be.
      '2001:db8:1:2:ffff::c': 'handshake-limit-per-ip',
      // Another /64 has its own count.
      '2001:db8:1:3::d': true,
    });
    expect(r.perIpDrops).toBe(1);
    expect(r.inProgress).toBe(3);
  });
});
