/**
 * The relay over DTLS, end to end. The independent client is OpenSSL's `s_client -dtls1_2 -psk`
 * against the real `gamewire serve unity-relay` command, through a UDP proxy that counts records
 * per datagram and can replay the client's first ClientHello (the reconnection probe). The
 * project's own DtlsClient covers the relay rules (identity forms, identity binding, sizes,
 * lifetime) in process.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import dgram from 'node:dgram';
import { mkdtempSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Duplex } from 'node:stream';
import { afterEach, describe, expect, it } from 'vitest';
import {
  startUnityRelay,
  type UnityRelayInstance,
  type UnityRelayOptions,
} from '../../../src/protocols/unity-relay/index.js';
import { DtlsClient } from '../../../src/transports/dtls/index.js';
import { BIN, ROOT } from '../../helpers/cli.js';
import { elapse, waitFor as waitUntil } from '../../helpers/wait.js';
import { type AllocationJson, UtpDriver, utpBind, utpConnectRequest, utpPing, utpRelay } from './utp.js';

/** In CI a missing program fails the test; elsewhere the test is skipped. */
function hasProgram(name: string): boolean {
  try {
    execFileSync('sh', ['-c', `command -v ${name}`], { stdio: 'ignore' });
    return true;
  } catch {
    if (process.env.CI === 'true') throw new Error(`${name} is required in CI but is not installed`);
    return false;
  }
}

const haveOpenssl = hasProgram('openssl');
const cleanup: (() => unknown)[] = [];
let server: UnityRelayInstance | undefined;

afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
  await server?.close();
  server = undefined;
});

async function post(api: string, pathName: string, body: unknown): Promise<any> {
  const res = await fetch(`${api}${pathName}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  expect(res.status).toBeLessThan(300);
  return res.json();
}

function keys(a: AllocationJson) {
  const pad = (b: Buffer) => Buffer.concat([b, Buffer.alloc(255 - b.length)]);
  return {
    id: Buffer.from(a.allocationIdBytes, 'base64'),
    key: Buffer.from(a.key, 'base64'),
    cd: pad(Buffer.from(a.connectionData, 'base64')),
    hostCd: pad(Buffer.from(a.hostConnectionData ?? a.connectionData, 'base64')),
  };
}

async function freePort(type: 'udp4' | 'tcp'): Promise<number> {
  if (type === 'udp4') {
    const s = dgram.createSocket('udp4');
    await new Promise<void>((r) => s.bind(0, '127.0.0.1', () => r()));
    const p = s.address().port;
    await new Promise<void>((r) => s.close(() => r()));
    return p;
  }
  const net = await import('node:net');
  const srv = net.createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', () => r()));
  const p = (srv.address() as { port: number }).port;
  await new Promise<void>((r) => srv.close(() => r()));
  return p;
}

async function waitFor<T>(get: () => T | undefined, what: () => string, ms = 20_000): Promise<T> {
  const found = await waitUntil(
    () => {
      const v = get();
      return v === undefined || v === false ? undefined : { v };
    },
    { what, timeoutMs: ms, intervalMs: 20 },
  );
  return found.v;
}

/**
 * A UDP proxy between one client and the server. Counts DTLS records in every server→client
 * datagram, remembers the client's first datagram (its first ClientHello) and can replay it to the
 * server from the same upstream socket (same 5-tuple as the client's session).
 */
async function dtlsProxy(serverPort: number) {
  const front = dgram.createSocket('udp4');
  const back = dgram.createSocket('udp4');
  await new Promise<void>((r) => front.bind(0, '127.0.0.1', () => r()));
  await new Promise<void>((r) => back.bind(0, '127.0.0.1', () => r()));
  let client: { port: number; address: string } | undefined;
  let firstClientDatagram: Buffer | undefined;
  const toClient: { records: number[]; at: number }[] = [];
  front.on('message', (m, rinfo) => {
    client = { port: rinfo.port, address: rinfo.address };
    firstClientDatagram ??= Buffer.from(m);
    back.send(m, serverPort, '127.0.0.1');
  });
  back.on('message', (m) => {
    // Record content types, walking the 13-byte DTLS record headers.
    const records: number[] = [];
    let off = 0;
    while (off + 13 <= m.length) {
      records.push(m[off]!);
      off += 13 + m.readUInt16BE(off + 11);
    }
    toClient.push({ records, at: Date.now() });
    if (client !== undefined) front.send(m, client.port, client.address);
  });
  return {
    port: front.address().port,
    toClient,
    replayFirstClientHello() {
      back.send(firstClientDatagram!, serverPort, '127.0.0.1');
    },
    close() {
      front.close();
      back.close();
    },
  };
}

/** Relay messages in a byte stream (s_client's stdout loses record boundaries; lengths are known). */
function splitRelayStream(buf: Buffer): Buffer[] {
  const out: Buffer[] = [];
  let off = 0;
  const lengths: Record<number, number> = { 1: 4, 2: 22, 6: 36, 8: 36, 9: 36, 12: 21 };
  while (off + 4 <= buf.length) {
    const type = buf[off + 3]!;
    let len = lengths[type];
    if (type === 10) {
      if (off + 38 > buf.length) break;
      len = 38 + buf.readUInt16BE(off + 36);
    }
    if (len === undefined || off + len > buf.length) break;
    out.push(buf.subarray(off, off + len));
    off += len;
  }
  return out;
}

function octal(bytes: Buffer): string {
  return [...bytes].map((b) => `\\${b.toString(8).padStart(3, '0')}`).join('');
}

describe.runIf(haveOpenssl)('openssl s_client -dtls1_2 -psk against `gamewire serve unity-relay`', () => {
  it('handshake, BIND, CONNECT_REQUEST to a UDP host, RELAY both ways one record per datagram; a repeated ClientHello gets no reply', async () => {
    const dataDir = mkdtempSync(path.join(tmpdir(), 'gamewire-dtls-cli-'));
    cleanup.push(() => rmSync(dataDir, { recursive: true, force: true }));
    const dtlsPort = await freePort('udp4');
    const serve = spawn(
      process.execPath,
      [
        BIN,
        'serve',
        'unity-relay',
        '--host',
        '127.0.0.1',
        '--port',
        '0',
        '--api-port',
        '0',
        '--dtls-port',
        String(dtlsPort),
        '--ws-port',
        '0',
        '--wss-port',
        '0',
        '--data-dir',
        dataDir,
        '--log-level',
        'warn',
      ],
      { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    cleanup.push(() => serve.kill('SIGKILL'));
    let out = '';
    serve.stdout.on('data', (d: Buffer) => (out += d.toString()));
    serve.stderr.on('data', (d: Buffer) => (out += d.toString()));
    const apiPort = Number(
      (
        await waitFor(
          () => /unity-relay http 127\.0\.0\.1:(\d+)/.exec(out) ?? undefined,
          () => `serve output: ${out}`,
        )
      )[1],
    );
    const api = `http://127.0.0.1:${apiPort}`;
    expect(out).toMatch(new RegExp(`unity-relay udp 127\\.0\\.0\\.1:${dtlsPort}`));

    // A host over plain UDP.
    const hostAlloc = (await post(api, '/v1/allocate', { maxConnections: 2 })).data
      .allocation as AllocationJson;
    const host = await UtpDriver.create(hostAlloc);
    cleanup.push(() => host.close());
    expect(await host.bind()).toBe(true);
    // A client over DTLS. Its id travels through argv: pick one without 0x00 or a trailing newline.
    const code = (await post(api, '/v1/joincode', { allocationId: hostAlloc.allocationId })).data.joinCode;
    let join: AllocationJson;
    do join = (await post(api, '/v1/join', { joinCode: code })).data.allocation;
    while (keys(join).id.includes(0) || keys(join).id.at(-1) === 0x0a);
    expect(join.serverEndpoints.find((e) => e.connectionType === 'dtls')).toEqual({
      connectionType: 'dtls',
      network: 'udp',
      reliable: false,
      secure: true,
      host: '127.0.0.1',
      port: dtlsPort,
    });
    const j = keys(join);
    const proxy = await dtlsProxy(dtlsPort);
    cleanup.push(() => proxy.close());
    const script =
      `exec openssl s_client -dtls1_2 -connect 127.0.0.1:${proxy.port} -quiet ` +
      `-psk ${j.key.toString('hex')} -psk_identity "$(printf '${octal(j.id)}')" -cipher PSK-AES128-GCM-SHA256`;
    const client: ChildProcess = spawn('sh', ['-c', script], { stdio: ['pipe', 'pipe', 'pipe'] });
    cleanup.push(() => client.kill('SIGKILL'));
    let received = Buffer.alloc(0);
    let stderr = '';
    client.stdout!.on('data', (d: Buffer) => (received = Buffer.concat([received, d])));
    client.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
    const messages = () => splitRelayStream(received);
    const nextOfType = (type: number, after: number) =>
      waitFor(
        () =>
          messages()
            .slice(after)
            .find((m) => m[3] === type),
        () => `relay type ${type} over DTLS (s_client: ${stderr})`,
      );
    // The handshake is done when the server has sent its Finished (a second epoch-1 flight).
    await waitFor(
      () => proxy.toClient.some((d) => d.records.includes(20)),
      () => `the handshake (s_client: ${stderr})`,
    );

    // BIND -> BIND_RECEIVED
    client.stdin!.write(utpBind(0, j.cd, j.key));
    expect((await nextOfType(1, 0)).toString('hex')).toBe('da720001');
    // CONNECT_REQUEST to the UDP host -> ACCEPTED (From = host)
    client.stdin!.write(utpConnectRequest(j.id, j.hostCd));
    expect((await nextOfType(6, 1)).subarray(4, 20).equals(host.id)).toBe(true);
    // RELAY dtls -> udp
    const up = utpRelay(j.id, host.id, Buffer.from('hello over DTLS'));
    client.stdin!.write(up);
    expect((await host.peer.nextOfType(10, 5000))?.equals(up)).toBe(true);
    // RELAY udp -> dtls, five of them at once: five datagrams of one record each.
    const before = proxy.toClient.length;
    const downs: Buffer[] = [];
    for (let i = 0; i < 5; i++) downs.push(host.relay(j.id, Buffer.from(`down ${i}`)));
    await waitFor(
      () => messages().filter((m) => m[3] === 10).length === 5 || undefined,
      () => `five RELAYs (${messages().length} messages)`,
    );
    expect(
      messages()
        .filter((m) => m[3] === 10)
        .map((m) => m.toString('hex')),
    ).toEqual(downs.map((d) => d.toString('hex')));
    const appDatagrams = proxy.toClient.slice(before);
    expect(appDatagrams).toHaveLength(5);
    for (const d of appDatagrams) expect(d.records).toEqual([23]);
    // Every application datagram of the whole session carried exactly one record.
    for (const d of proxy.toClient) if (d.records.includes(23)) expect(d.records).toEqual([23]);

    // The reconnection probe: a ClientHello on the established, active session gets no reply.
    client.stdin!.write(utpPing(j.id));
    await nextOfType(2, 2);
    const quietFrom = proxy.toClient.length;
    proxy.replayFirstClientHello();
    await elapse(1500, 'the probe on an active session must get no reply');
    expect(proxy.toClient.slice(quietFrom)).toEqual([]);
    // …and the session still works.
    const again = utpRelay(j.id, host.id, Buffer.from('still here'));
    client.stdin!.write(again);
    expect((await host.peer.nextOfType(10, 5000))?.equals(again)).toBe(true);
  }, 60_000);
});

describe('unity-relay over DTLS (in process, DtlsClient)', () => {
  async function start(options: UnityRelayOptions = {}): Promise<UnityRelayInstance> {
    server = await startUnityRelay({ host: '127.0.0.1', port: 0, apiPort: 0, dtlsPort: 0, ...options });
    return server;
  }

  async function hostAndJoin(s: UnityRelayInstance) {
    const host = (await post(s.apiUrl, '/v1/allocate', { maxConnections: 4 })).data
      .allocation as AllocationJson;
    const code = (await post(s.apiUrl, '/v1/joincode', { allocationId: host.allocationId })).data.joinCode;
    const join = (await post(s.apiUrl, '/v1/join', { joinCode: code })).data.allocation as AllocationJson;
    return { host, join };
  }

  /** A DtlsClient with an inbox of relay messages. */
  async function dtls(s: UnityRelayInstance, identity: Buffer, psk: Buffer) {
    const c = await DtlsClient.connect({
      host: '127.0.0.1',
      port: s.dtls!.port,
      identity,
      psk,
      timeoutMs: 10_000,
    });
    cleanup.push(() => c.close());
    const inbox: Buffer[] = [];
    const closed: string[] = [];
    c.on('message', (m: Buffer) => inbox.push(Buffer.from(m)));
    c.on('close', (reason: string) => closed.push(reason));
    const next = (type: number, ms = 5000) =>
      waitFor(
        () => {
          const i = inbox.findIndex((m) => m[3] === type);
          return i >= 0 ? inbox.splice(i, 1)[0] : undefined;
        },
        () => `relay type ${type}`,
        ms,
      );
    return { c, inbox, closed, next };
  }

  it('identity as the 16 raw id bytes or as the GUID string; relays to and from a UDP host', async () => {
    const s = await start();
    const { host, join } = await hostAndJoin(s);
    const h = await UtpDriver.create(host);
    cleanup.push(() => h.close());
    expect(await h.bind()).toBe(true);
    const j = keys(join);
    const raw = await dtls(s, j.id, j.key);
    raw.c.send(utpBind(0, j.cd, j.key));
    expect((await raw.next(1)).toString('hex')).toBe('da720001');
    raw.c.send(utpConnectRequest(j.id, j.hostCd));
    expect((await raw.next(6)).subarray(4, 20).equals(h.id)).toBe(true);
    const up = utpRelay(j.id, h.id, Buffer.from('raw id'));
    raw.c.send(up);
    expect((await h.peer.nextOfType(10))?.equals(up)).toBe(true);
    const down = h.relay(j.id, Buffer.alloc(1363 - 38, 3)); // exactly the DTLS limit
    expect((await raw.next(10)).equals(down)).toBe(true);
    // Too large for a DTLS recipient (UTP drops datagrams over its 1400-byte maxMessageSize).
    h.relay(j.id, Buffer.alloc(1364 - 38, 4));
    await waitFor(
      () => s.metrics.dropped.get('too_large_for_dtls'),
      () => 'the oversize drop',
    );

    // The host, over DTLS with its GUID string as identity, from a new session: ERROR 3 until it
    // re-binds with a newer nonce (a new address), then traffic flows.
    const hk = keys(host);
    const guid = await dtls(s, Buffer.from(host.allocationId, 'latin1'), hk.key);
    guid.c.send(utpPing(hk.id));
    expect((await guid.next(12))[20]).toBe(3);
    guid.c.send(utpBind(50, hk.cd, hk.key));
    expect(await guid.next(1)).toBeDefined();
    const up2 = utpRelay(j.id, h.id, Buffer.from('to the host, now on dtls'));
    raw.c.send(up2);
    expect((await guid.next(10)).equals(up2)).toBe(true);
  });

  it('an association speaks only for its own allocation; unknown identities fail the handshake', async () => {
    const s = await start();
    const a = keys((await post(s.apiUrl, '/v1/allocate', { maxConnections: 2 })).data.allocation);
    const b = keys((await post(s.apiUrl, '/v1/allocate', { maxConnections: 2 })).data.allocation);
    const asA = await dtls(s, a.id, a.key);
    // B's BIND (valid HMAC) through A's association: dropped.
    asA.c.send(utpBind(0, b.cd, b.key));
    await waitFor(
      () => s.metrics.dropped.get('identity_mismatch'),
      () => 'identity_mismatch',
    );
    expect(asA.inbox).toEqual([]);
    // A's own BIND works.
    asA.c.send(utpBind(0, a.cd, a.key));
    expect(await asA.next(1)).toBeDefined();
    // An identity that names no allocation: alert 115, no session.
    await expect(
      DtlsClient.connect({
        host: '127.0.0.1',
        port: s.dtls!.port,
        identity: Buffer.alloc(16, 7),
        psk: a.key,
        timeoutMs: 5000,
      }),
    ).rejects.toThrow();
    // The right identity with the wrong key: no session either.
    await expect(
      DtlsClient.connect({
        host: '127.0.0.1',
        port: s.dtls!.port,
        identity: a.id,
        psk: b.key,
        timeoutMs: 5000,
      }),
    ).rejects.toThrow();
  });

  it('an association that never binds is closed after bindTimeoutMs; one that binds stays', async () => {
    const s = await start({ dtls: { bindTimeoutMs: 500 } });
    const a = keys((await post(s.apiUrl, '/v1/allocate', { maxConnections: 2 })).data.allocation);
    // Many associations on one allocation's key, from many ports: none of them binds.
    const idle = await Promise.all(Array.from({ length: 4 }, () => dtls(s, a.id, a.key)));
    const bound = await dtls(s, a.id, a.key);
    bound.c.send(utpBind(0, a.cd, a.key));
    expect(await bound.next(1)).toBeDefined();
    await waitFor(
      () => idle.every((c) => c.closed.length > 0) || undefined,
      () => 'close_notify on the associations that never bound',
    );
    expect(s.metrics.closed.get('dtls_never_bound')).toBe(4);
    // The bound one outlives its own deadline and keeps working.
    await elapse(700, "past the bound association's own deadline: it must not be closed");
    await waitFor(
      () => (s.dtls!.links.size === 1 ? true : undefined),
      () => 'only the bound association left',
    );
    bound.c.send(utpPing(a.id));
    expect(await bound.next(2)).toBeDefined();
    expect(bound.closed).toEqual([]);
  });

  it('the association ends with its binding (CLOSE)', async () => {
    const s = await start();
    const a = keys((await post(s.apiUrl, '/v1/allocate', { maxConnections: 2 })).data.allocation);
    const c = await dtls(s, a.id, a.key);
    c.c.send(utpBind(0, a.cd, a.key));
    expect(await c.next(1)).toBeDefined();
    const close = Buffer.alloc(20);
    close.set([0xda, 0x72, 0x00, 0x0b], 0);
    a.id.copy(close, 4);
    c.c.send(close);
    await waitFor(
      () => c.closed.length > 0 || undefined,
      () => 'close_notify',
    );
    await waitFor(
      () => (s.dtls!.links.size === 0 ? true : undefined),
      () => 'the association to go',
    );
  });
});

// @nodertc/dtls (pure JavaScript, written independently of gamewire) as a relay client.
interface NodertcSocket extends Duplex {
  close(): void;
}
const nodertc = createRequire(import.meta.url)('@nodertc/dtls') as {
  connect(options: {
    type: 'udp4';
    remoteAddress: string;
    remotePort: number;
    pskIdentity: Buffer;
    pskSecret: Buffer;
    cipherSuites: string[];
  }): NodertcSocket;
};

describe('unity-relay over DTLS with @nodertc/dtls', () => {
  it('handshake, BIND, CONNECT_REQUEST to a UDP host, RELAY both ways', async () => {
    server = await startUnityRelay({ host: '127.0.0.1', port: 0, apiPort: 0, dtlsPort: 0 });
    const s = server;
    const host = (await post(s.apiUrl, '/v1/allocate', { maxConnections: 2 })).data
      .allocation as AllocationJson;
    const code = (await post(s.apiUrl, '/v1/joincode', { allocationId: host.allocationId })).data.joinCode;
    const join = (await post(s.apiUrl, '/v1/join', { joinCode: code })).data.allocation as AllocationJson;
    const h = await UtpDriver.create(host);
    cleanup.push(() => h.close());
    expect(await h.bind()).toBe(true);
    const j = keys(join);
    const socket = nodertc.connect({
      type: 'udp4',
      remoteAddress: '127.0.0.1',
      remotePort: s.dtls!.port,
      pskIdentity: j.id,
      pskSecret: j.key,
      cipherSuites: ['TLS_PSK_WITH_AES_128_GCM_SHA256'],
    });
    cleanup.push(() => socket.close());
    const inbox: Buffer[] = [];
    socket.on('data', (d: Buffer) => inbox.push(Buffer.from(d)));
    socket.on('error', () => {});
    await new Promise<void>((resolve, reject) => {
      socket.once('connect', () => resolve());
      socket.once('error', reject);
    });
    const next = (type: number) =>
      waitFor(
        () => {
          const i = inbox.findIndex((m) => m[3] === type);
          return i >= 0 ? inbox.splice(i, 1)[0] : undefined;
        },
        () => `relay type ${type}`,
      );
    socket.write(utpBind(0, j.cd, j.key));
    expect((await next(1)).toString('hex')).toBe('da720001');
    socket.write(utpConnectRequest(j.id, j.hostCd));
    expect((await next(6)).subarray(4, 20).equals(h.id)).toBe(true);
    const up = utpRelay(j.id, h.id, Buffer.from('from nodertc'));
    socket.write(up);
    expect((await h.peer.nextOfType(10, 5000))?.equals(up)).toBe(true);
    const down = h.relay(j.id, Buffer.from('to nodertc'));
    expect((await next(10)).equals(down)).toBe(true);
  });
});
