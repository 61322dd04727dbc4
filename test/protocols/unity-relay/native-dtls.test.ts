/**
 * The DTLS record layer of the native data plane: the C record functions against Node's crypto
 * for every suite, and the relay forwarding RELAYs between DTLS and UDP peers without entering
 * JavaScript, with independent clients (OpenSSL's s_client, GnuTLS's gnutls-cli) and the project's
 * DtlsClient; the hand-over of associations to JavaScript and back (wire view, replacement, close).
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import dgram from 'node:dgram';
import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import { createRegistry } from '../../../src/core/prometheus.js';
import { setTrafficRecorder } from '../../../src/core/recording.js';
import {
  startUnityRelay,
  type UnityRelayInstance,
  type UnityRelayOptions,
} from '../../../src/protocols/unity-relay/index.js';
import {
  type Addon,
  loadNativeDataplane,
  type NativeDataplaneStats,
  type NativeRelaySocket,
} from '../../../src/protocols/unity-relay/native-dataplane.js';
import type { ServerAssociation } from '../../../src/transports/dtls/association.js';
import { DtlsClient } from '../../../src/transports/dtls/index.js';
import { CIPHER_SUITES, RecordProtection } from '../../../src/transports/dtls/suites.js';
import { mbedtlsClient, startMbedtls } from '../../helpers/mbedtls.js';
import { elapse, waitFor as waitUntil } from '../../helpers/wait.js';
import { type AllocationJson, UtpDriver, utpBind, utpConnectRequest, utpRelay } from './utp.js';

const loaded = loadNativeDataplane();
if (process.platform === 'linux' && (loaded.addon === undefined || !loaded.addon.dtlsAvailable()))
  throw new Error(`the native DTLS record layer did not load: ${loaded.reason}`);
const addon = loaded.addon as Addon;

function hasProgram(name: string): boolean {
  try {
    execFileSync('sh', ['-c', `command -v ${name}`], { stdio: 'ignore' });
    return true;
  } catch {
    if (process.env.CI === 'true') throw new Error(`${name} is required in CI but is not installed`);
    return false;
  }
}

const cleanup: (() => unknown)[] = [];
let server: UnityRelayInstance | undefined;

afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
  await server?.close();
  server = undefined;
});

async function waitFor<T>(get: () => T | undefined | false, what: () => string, ms = 20_000): Promise<T> {
  const found = await waitUntil(
    () => {
      const v = get();
      return v === undefined || v === false ? undefined : { v };
    },
    { what, timeoutMs: ms, intervalMs: 20 },
  );
  return found.v;
}

describe('the C record layer against node:crypto (known answers, every suite)', () => {
  for (const [id, suite] of CIPHER_SUITES) {
    it(`${suite.name}: sealed byte for byte as node:crypto seals, opened, forgeries refused`, () => {
      const key = randomBytes(suite.keyLength);
      const iv = randomBytes(suite.fixedIvLength);
      const js = new RecordProtection(suite, key, iv);
      for (const [len, seq] of [
        [0, 0],
        [1, 1],
        [16, 255],
        [37, 2 ** 32],
        [1363, 2 ** 48 - 1],
      ] as const) {
        const plaintext = randomBytes(len);
        const sealed = addon.sealRecord(id, key, iv, 23, 1, seq, plaintext);
        expect(sealed.equals(js.seal(23, 1, seq, plaintext))).toBe(true);
        expect(sealed.length).toBe(len + 13 + suite.explicitNonceLength + suite.tagLength);
        expect(addon.openRecord(id, key, iv, sealed)?.equals(plaintext)).toBe(true);
        // Every bit of the header (the additional data), nonce, ciphertext and tag matters.
        for (let bit = 0; bit < sealed.length * 8; bit += len > 100 ? 61 : 1) {
          const forged = Buffer.from(sealed);
          forged[bit >> 3]! ^= 1 << (bit & 7);
          // Flipping the length field's bits makes another (unparsable) record: refused too.
          expect(addon.openRecord(id, key, iv, forged)).toBeNull();
        }
        const otherKey = Buffer.from(key);
        otherKey[0]! ^= 1;
        expect(addon.openRecord(id, otherKey, iv, sealed)).toBeNull();
      }
      // A record sealed by node:crypto (another epoch, a handshake record) opens natively.
      const hs = js.seal(22, 7, 12345, Buffer.from('finished'));
      expect(addon.openRecord(id, key, iv, hs)?.toString()).toBe('finished');
    });
  }

  it('arbitrary bytes give null or the same plaintext node:crypto gives, never an exception', () => {
    const suite = CIPHER_SUITES.get(0x00a8)!;
    const key = randomBytes(16);
    const iv = randomBytes(4);
    const js = new RecordProtection(suite, key, iv);
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 120 }), fc.boolean(), (bytes, fixLength) => {
        const b = Buffer.from(bytes);
        if (fixLength && b.length >= 13) b.writeUInt16BE(b.length - 13, 11);
        const native = addon.openRecord(0x00a8, key, iv, b);
        if (b.length < 13 || b.readUInt16BE(11) !== b.length - 13) return native === null;
        const expected = js.open(
          b[0]!,
          b.readUInt16BE(1),
          b.readUInt16BE(3),
          b.readUIntBE(5, 6),
          b.subarray(13),
        );
        return expected === undefined ? native === null : native?.equals(expected) === true;
      }),
      { numRuns: 500 },
    );
  });
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

async function start(options: UnityRelayOptions = {}): Promise<UnityRelayInstance> {
  server = await startUnityRelay({
    host: '127.0.0.1',
    port: 0,
    apiPort: 0,
    dtlsPort: 0,
    dataplane: 'native',
    // The tests allocate like a game backend, several games per test (ids with 0x00/0x0a are
    // redrawn): the per-address allocation rate that throttles players is not under test here.
    apiLimits: { allocationsPerMinutePerAddress: 0 },
    ...options,
  });
  expect(server.dtlsDataplane).toBe('native');
  return server;
}

/** A host allocation and `n` joins; ids chosen without 0x00 and 0x0a (they travel through argv). */
async function allocations(s: UnityRelayInstance, joins: number) {
  let host: AllocationJson;
  do host = (await post(s.apiUrl, '/v1/allocate', { maxConnections: 4 })).data.allocation;
  while (keys(host).id.includes(0) || keys(host).id.includes(0x0a));
  const code = (await post(s.apiUrl, '/v1/joincode', { allocationId: host.allocationId })).data.joinCode;
  const out: AllocationJson[] = [];
  while (out.length < joins) {
    const j = (await post(s.apiUrl, '/v1/join', { joinCode: code })).data.allocation as AllocationJson;
    if (!keys(j).id.includes(0) && !keys(j).id.includes(0x0a)) out.push(j);
  }
  return { host, joins: out };
}

const native = (s: UnityRelayInstance) => s.relay.socket as NativeRelaySocket;

/** A relay client over DTLS with an inbox (DtlsClient, or a spawned program's stdout). */
interface DtlsPeer {
  id: Buffer;
  send(b: Buffer): void;
  next(type: number, ms?: number): Promise<Buffer>;
  inbox: Buffer[];
}

/**
 * Relay messages in a byte stream (a program's stdout loses record boundaries; lengths are known).
 * Bytes that start no relay message (a program's own status lines) are skipped.
 */
function splitRelayStream(buf: Buffer): Buffer[] {
  const out: Buffer[] = [];
  const lengths: Record<number, number> = { 1: 4, 2: 22, 6: 36, 8: 36, 9: 36, 12: 21 };
  let off = 0;
  while (off + 4 <= buf.length) {
    if (buf[off] !== 0xda || buf[off + 1] !== 0x72 || buf[off + 2] !== 0) {
      off++;
      continue;
    }
    const type = buf[off + 3]!;
    let len = lengths[type];
    if (type === 10) {
      if (off + 38 > buf.length) break;
      len = 38 + buf.readUInt16BE(off + 36);
    }
    if (len === undefined) {
      off++;
      continue;
    }
    if (off + len > buf.length) break;
    out.push(buf.subarray(off, off + len));
    off += len;
  }
  return out;
}

/** Takes the next message of a type from an inbox that only grows (by position: each once). */
function inboxNext(inbox: () => Buffer[]) {
  const taken = new Set<number>();
  return (type: number, ms = 10_000) =>
    waitFor(
      () => {
        const list = inbox();
        const i = list.findIndex((x, k) => x[3] === type && !taken.has(k));
        if (i < 0) return undefined;
        taken.add(i);
        return list[i];
      },
      () => `relay type ${type}`,
      ms,
    );
}

async function dtlsClientPeer(s: UnityRelayInstance, a: AllocationJson, cipherSuites?: number[]) {
  const k = keys(a);
  const c = await DtlsClient.connect({
    host: '127.0.0.1',
    port: s.dtls!.port,
    identity: k.id,
    psk: k.key,
    timeoutMs: 10_000,
    ...(cipherSuites !== undefined ? { cipherSuites } : {}),
  });
  cleanup.push(() => c.close());
  const inbox: Buffer[] = [];
  c.on('message', (m: Buffer) => inbox.push(Buffer.from(m)));
  const peer: DtlsPeer = { id: k.id, send: (b) => c.send(b), next: inboxNext(() => inbox), inbox };
  return { peer, client: c };
}

function octal(bytes: Buffer): string {
  return [...bytes].map((b) => `\\${b.toString(8).padStart(3, '0')}`).join('');
}

/** OpenSSL's s_client or GnuTLS's gnutls-cli as a DTLS relay client (stdin → records, stdout ← records). */
function programPeer(
  kind: 'openssl' | 'gnutls',
  port: number,
  a: AllocationJson,
): DtlsPeer & { stderr(): string } {
  const k = keys(a);
  const script =
    kind === 'openssl'
      ? `exec openssl s_client -dtls1_2 -connect 127.0.0.1:${port} -quiet -psk ${k.key.toString('hex')} ` +
        `-psk_identity "$(printf '${octal(k.id)}')" -cipher PSK-AES128-GCM-SHA256`
      : `exec gnutls-cli --udp --port ${port} 127.0.0.1 --pskusername "$(printf '${octal(k.id)}')" ` +
        `--pskkey ${k.key.toString('hex')} --priority 'NORMAL:-VERS-ALL:+VERS-DTLS1.2:-KX-ALL:+PSK:-CIPHER-ALL:+AES-256-GCM'`;
  const child: ChildProcess = spawn('sh', ['-c', script], { stdio: ['pipe', 'pipe', 'pipe'] });
  cleanup.push(() => child.kill('SIGKILL'));
  let received = Buffer.alloc(0);
  let stderr = '';
  child.stdout!.on('data', (d: Buffer) => (received = Buffer.concat([received, d])));
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  child.stdin!.on('error', () => {});
  return {
    id: k.id,
    send: (b) => child.stdin!.write(b),
    next: inboxNext(() => splitRelayStream(received)),
    get inbox() {
      return splitRelayStream(received);
    },
    stderr: () => stderr,
  };
}

/** BIND (until BIND_RECEIVED: the handshake may still be under way) and, for a join, CONNECT_REQUEST. */
async function bindAndConnect(p: DtlsPeer, a: AllocationJson, toHost?: AllocationJson): Promise<void> {
  const k = keys(a);
  const bind = utpBind(0, k.cd, k.key);
  const timer = setInterval(() => p.send(bind), 500);
  p.send(bind);
  try {
    await p.next(1, 20_000);
  } finally {
    clearInterval(timer);
  }
  if (toHost !== undefined) {
    p.send(utpConnectRequest(k.id, keys(toHost).hostCd));
    await p.next(6);
  }
}

function delta(a: NativeDataplaneStats, b: NativeDataplaneStats) {
  const out: Record<string, number> = {};
  for (const k of Object.keys(b) as (keyof NativeDataplaneStats)[]) out[k] = b[k] - a[k];
  return out as Record<keyof NativeDataplaneStats, number>;
}

/** Counts the RELAYs the JavaScript DTLS server hands to the relay (none should, natively). */
function relaysSeenByJs(s: UnityRelayInstance): () => number {
  let n = 0;
  s.dtls!.server.on('message', (_a, m) => {
    if (m[3] === 10) n++;
  });
  return () => n;
}

describe('unity-relay RELAYs over DTLS on the native data plane', () => {
  it.runIf(hasProgram('openssl'))(
    "openssl s_client (an independent client) relays to a UDP host and back; the relay's JavaScript never sees those RELAYs",
    async () => {
      const s = await start();
      const { host, joins } = await allocations(s, 1);
      const h = await UtpDriver.create(host);
      cleanup.push(() => h.close());
      expect(await h.bind()).toBe(true);
      const c = programPeer('openssl', s.dtls!.port, joins[0]!);
      await bindAndConnect(c, joins[0]!, host);
      const seen = relaysSeenByJs(s);
      const before = native(s).stats();
      for (let i = 0; i < 20; i++) {
        const up = utpRelay(c.id, h.id, Buffer.from(`up ${i}`));
        c.send(up);
        expect((await h.peer.nextOfType(10, 5000))?.equals(up)).toBe(true);
        const down = h.relay(c.id, Buffer.from(`down ${i}`));
        expect((await c.next(10)).equals(down)).toBe(true);
      }
      const d = delta(before, native(s).stats());
      expect(d.dtlsForwardedIn).toBe(20);
      expect(d.dtlsSealedOut).toBe(20);
      expect(d.forwarded).toBe(40);
      expect(d.dtlsDecryptedToJs).toBe(0);
      expect(d.dtlsToJs).toBe(0);
      expect(seen()).toBe(0);
      // The relay's counters still see them (the sweep brings native counts back).
      s.relay.syncDataplane();
      const a = s.store.find(c.id, 0)!;
      expect(s.store.now() - a.lastSeen).toBeLessThan(5000);
      expect(native(s).counters(c.id)).toMatchObject({ packetsIn: 20, packetsOut: 20 });
    },
    60_000,
  );

  it.runIf(hasProgram('openssl') && hasProgram('gnutls-cli'))(
    'DTLS to DTLS between two independent clients (OpenSSL AES-128-GCM, GnuTLS AES-256-GCM), natively',
    async () => {
      const s = await start();
      const { host, joins } = await allocations(s, 1);
      const h = programPeer('gnutls', s.dtls!.port, host);
      await bindAndConnect(h, host);
      const c = programPeer('openssl', s.dtls!.port, joins[0]!);
      await bindAndConnect(c, joins[0]!, host);
      const seen = relaysSeenByJs(s);
      const before = native(s).stats();
      for (let i = 0; i < 10; i++) {
        const up = utpRelay(c.id, h.id, Buffer.from(`to gnutls ${i}`));
        c.send(up);
        expect((await h.next(10)).equals(up)).toBe(true);
        const down = utpRelay(h.id, c.id, Buffer.from(`to openssl ${i}`));
        h.send(down);
        expect((await c.next(10)).equals(down)).toBe(true);
      }
      const d = delta(before, native(s).stats());
      expect(d.dtlsForwardedIn).toBe(20);
      expect(d.dtlsSealedOut).toBe(20);
      expect(d.dtlsDecryptedToJs).toBe(0);
      expect(seen()).toBe(0);
    },
    60_000,
  );

  const mbedtls = mbedtlsClient();
  it.runIf(mbedtls !== undefined)(
    "mbedTLS (UnityTLS's library) on both ends, 64-byte keys: RELAYs forwarded natively, the relay's JavaScript sees none",
    async () => {
      const s = await start();
      const { host, joins } = await allocations(s, 1);
      const peers: DtlsPeer[] = [];
      for (const a of [host, joins[0]!]) {
        const k = keys(a);
        const m = startMbedtls(mbedtls!, s.dtls!.port, k.id, k.key);
        cleanup.push(() => m.stop());
        peers.push({ id: k.id, send: (b) => m.send(b), next: inboxNext(() => m.records()), inbox: [] });
      }
      const [h, c] = peers as [DtlsPeer, DtlsPeer];
      await bindAndConnect(h, host);
      await bindAndConnect(c, joins[0]!, host);
      const seen = relaysSeenByJs(s);
      const before = native(s).stats();
      for (let i = 0; i < 20; i++) {
        const up = utpRelay(c.id, h.id, randomBytes(1 + i * 60));
        c.send(up);
        expect((await h.next(10)).equals(up)).toBe(true);
        const down = utpRelay(h.id, c.id, Buffer.from(`from the host ${i}`));
        h.send(down);
        expect((await c.next(10)).equals(down)).toBe(true);
      }
      const d = delta(before, native(s).stats());
      expect(d.dtlsForwardedIn).toBe(40);
      expect(d.dtlsSealedOut).toBe(40);
      expect(d.dtlsDecryptedToJs).toBe(0);
      expect(d.dtlsToJs).toBe(0);
      expect(seen()).toBe(0);
    },
    60_000,
  );

  it('DtlsClient to DtlsClient with every suite, and UDP to DTLS, natively', async () => {
    const s = await start();
    for (const suite of CIPHER_SUITES.keys()) {
      const { host, joins } = await allocations(s, 2);
      const h = (await dtlsClientPeer(s, host, [suite])).peer;
      await bindAndConnect(h, host);
      const c = (await dtlsClientPeer(s, joins[0]!, [suite])).peer;
      await bindAndConnect(c, joins[0]!, host);
      const u = await UtpDriver.create(joins[1]!);
      cleanup.push(() => u.close());
      expect(await u.bind()).toBe(true);
      expect((await u.connect())?.[3]).toBe(6);
      const before = native(s).stats();
      for (let i = 0; i < 5; i++) {
        const up = utpRelay(c.id, h.id, randomBytes(1 + i * 300));
        c.send(up);
        expect((await h.next(10)).equals(up)).toBe(true);
        const fromUdp = u.relay(h.id, Buffer.from(`udp ${i}`));
        expect((await h.next(10)).equals(fromUdp)).toBe(true);
        const toUdp = utpRelay(h.id, u.id, Buffer.from(`to udp ${i}`));
        h.send(toUdp);
        expect((await u.peer.nextOfType(10, 5000))?.equals(toUdp)).toBe(true);
      }
      const d = delta(before, native(s).stats());
      expect({ suite, in: d.dtlsForwardedIn, out: d.dtlsSealedOut, toJs: d.dtlsDecryptedToJs }).toEqual({
        suite,
        in: 10,
        out: 10,
        toJs: 0,
      });
    }
  }, 90_000);

  it('the wire view takes associations back to JavaScript and hands them over again: sequence numbers carry on', async () => {
    const s = await start();
    const { host, joins } = await allocations(s, 1);
    const h = (await dtlsClientPeer(s, host)).peer;
    await bindAndConnect(h, host);
    const c = (await dtlsClientPeer(s, joins[0]!)).peer;
    await bindAndConnect(c, joins[0]!, host);
    const mirror = (s.relay as unknown as { nativeMirror: { setPaused(p: boolean, st: unknown): void } })
      .nativeMirror;
    const seen = relaysSeenByJs(s);
    let sent = 0;
    const burst = async (n: number) => {
      for (let i = 0; i < n; i++) {
        const up = utpRelay(c.id, h.id, Buffer.from(`m${sent++}`));
        c.send(up);
        expect((await h.next(10)).equals(up)).toBe(true);
        const down = utpRelay(h.id, c.id, Buffer.from(`r${sent}`));
        h.send(down);
        expect((await c.next(10)).equals(down)).toBe(true);
      }
    };
    const s0 = native(s).stats();
    await burst(10);
    expect(native(s).stats().associations).toBe(2);
    mirror.setPaused(true, s.store);
    expect(native(s).stats().associations).toBe(0);
    const s1 = native(s).stats();
    await burst(10); // JavaScript opens and seals: if a sequence number went back, the clients would drop it
    expect(seen()).toBe(20);
    mirror.setPaused(false, s.store);
    expect(native(s).stats().associations).toBe(2);
    const s2 = native(s).stats();
    await burst(10);
    const s3 = native(s).stats();
    expect(delta(s0, s1).dtlsForwardedIn).toBe(20);
    expect(delta(s1, s2).dtlsForwardedIn).toBe(0);
    expect(delta(s1, s2).dtlsToJs).toBe(20);
    expect(delta(s2, s3).dtlsForwardedIn).toBe(20);
    expect(seen()).toBe(20);
  }, 60_000);

  it("a replayed record is dropped natively and counted as the JavaScript server's drop", async () => {
    const s = await start();
    const { host, joins } = await allocations(s, 1);
    const h = (await dtlsClientPeer(s, host)).peer;
    await bindAndConnect(h, host);
    // The client through a proxy that can replay what it forwarded.
    const proxy = dgram.createSocket('udp4');
    await new Promise<void>((r) => proxy.bind(0, '127.0.0.1', () => r()));
    cleanup.push(() => proxy.close());
    let client: dgram.RemoteInfo | undefined;
    const up: Buffer[] = [];
    proxy.on('message', (m, rinfo) => {
      if (rinfo.port === s.dtls!.port) {
        if (client) proxy.send(m, client.port, client.address);
      } else {
        client = rinfo;
        up.push(Buffer.from(m));
        proxy.send(m, s.dtls!.port, '127.0.0.1');
      }
    });
    const k = keys(joins[0]!);
    const dc = await DtlsClient.connect({
      host: '127.0.0.1',
      port: proxy.address().port,
      identity: k.id,
      psk: k.key,
    });
    cleanup.push(() => dc.close());
    const inbox: Buffer[] = [];
    dc.on('message', (m: Buffer) => inbox.push(Buffer.from(m)));
    const c: DtlsPeer = { id: k.id, send: (b) => dc.send(b), next: inboxNext(() => inbox), inbox };
    await bindAndConnect(c, joins[0]!, host);
    const msg = utpRelay(c.id, h.id, Buffer.from('once'));
    c.send(msg);
    expect((await h.next(10)).equals(msg)).toBe(true);
    const before = native(s).stats();
    proxy.send(up.at(-1)!, s.dtls!.port, '127.0.0.1');
    await waitFor(
      () => s.metrics.dropped.get('dtls_replay'),
      () => 'the replay drop',
    );
    expect(delta(before, native(s).stats()).dtlsDropReplay).toBe(1);
    expect(h.inbox.filter((m) => m.equals(msg))).toHaveLength(1);
  }, 60_000);

  it('a new session from the same address and port takes the binding over, and forwards natively under its keys', async () => {
    const s = await start({ dtls: { probeQuietMs: 100 } });
    const { host, joins } = await allocations(s, 1);
    const h = (await dtlsClientPeer(s, host)).peer;
    await bindAndConnect(h, host);
    // Two DtlsClient sessions in turn behind one proxy socket: the relay sees one address and port.
    const proxy = dgram.createSocket('udp4');
    const front = dgram.createSocket('udp4');
    await new Promise<void>((r) => proxy.bind(0, '127.0.0.1', () => r()));
    await new Promise<void>((r) => front.bind(0, '127.0.0.1', () => r()));
    cleanup.push(() => proxy.close());
    cleanup.push(() => front.close());
    let client: dgram.RemoteInfo | undefined;
    front.on('message', (m, rinfo) => {
      client = rinfo;
      proxy.send(m, s.dtls!.port, '127.0.0.1');
    });
    proxy.on('message', (m) => {
      if (client) front.send(m, client.port, client.address);
    });
    const k = keys(joins[0]!);
    const session = async () => {
      const dc = await DtlsClient.connect({
        host: '127.0.0.1',
        port: front.address().port,
        identity: k.id,
        psk: k.key,
      });
      cleanup.push(() => dc.close());
      const inbox: Buffer[] = [];
      dc.on('message', (m: Buffer) => inbox.push(Buffer.from(m)));
      return { id: k.id, send: (b: Buffer) => dc.send(b), next: inboxNext(() => inbox), inbox };
    };
    const first = await session();
    await bindAndConnect(first, joins[0]!, host);
    const m1 = utpRelay(k.id, h.id, Buffer.from('first session'));
    first.send(m1);
    expect((await h.next(10)).equals(m1)).toBe(true);
    await elapse(300, 'past probeQuietMs: a hello starts a new session');
    const second = await session();
    await waitFor(
      () => s.metrics.closed.get('dtls_replaced'),
      () => 'the old session replaced',
    );
    const before = native(s).stats();
    const m2 = utpRelay(k.id, h.id, Buffer.from('second session, no new BIND'));
    second.send(m2);
    expect((await h.next(10)).equals(m2)).toBe(true);
    const back = utpRelay(h.id, k.id, Buffer.from('to the second session'));
    h.send(back);
    expect((await second.next(10)).equals(back)).toBe(true);
    const d = delta(before, native(s).stats());
    expect(d.dtlsForwardedIn).toBe(2);
    expect(d.dtlsSealedOut).toBe(2);
  }, 60_000);

  it("junk from a bound peer's own address and port is dropped natively: delivery holds, the association never leaves the native plane", async () => {
    const s = await start();
    const { host, joins } = await allocations(s, 1);
    const h = (await dtlsClientPeer(s, host)).peer;
    await bindAndConnect(h, host);
    // The joining client behind a proxy socket, whose address and port are what the relay sees;
    // the attacker binds the very same address and port (SO_REUSEPORT). The proxy's socket is
    // connected to the relay, so the relay's replies reach it and not the attacker's.
    const proxy = dgram.createSocket({ type: 'udp4', reusePort: true });
    const front = dgram.createSocket('udp4');
    await new Promise<void>((r) => proxy.bind(0, '127.0.0.1', () => r()));
    await new Promise<void>((r) => proxy.connect(s.dtls!.port, '127.0.0.1', () => r()));
    await new Promise<void>((r) => front.bind(0, '127.0.0.1', () => r()));
    cleanup.push(() => proxy.close());
    cleanup.push(() => front.close());
    let client: dgram.RemoteInfo | undefined;
    front.on('message', (m, rinfo) => {
      client = rinfo;
      proxy.send(m);
    });
    proxy.on('message', (m) => {
      if (client) front.send(m, client.port, client.address);
    });
    const k = keys(joins[0]!);
    const dc = await DtlsClient.connect({
      host: '127.0.0.1',
      port: front.address().port,
      identity: k.id,
      psk: k.key,
    });
    cleanup.push(() => dc.close());
    const inbox: Buffer[] = [];
    dc.on('message', (m: Buffer) => inbox.push(Buffer.from(m)));
    const c: DtlsPeer = { id: k.id, send: (b) => dc.send(b), next: inboxNext(() => inbox), inbox };
    await bindAndConnect(c, joins[0]!, host);
    const first = utpRelay(c.id, h.id, Buffer.from('before'));
    c.send(first);
    expect((await h.next(10)).equals(first)).toBe(true);
    expect(native(s).stats().associations).toBe(2);

    const seen = relaysSeenByJs(s);
    const closes: string[] = [];
    s.dtls!.server.on('close', (_a, reason) => closes.push(reason));
    const before = native(s).stats();
    // The attack, from another process: bounded in count and time, to 127.0.0.1 only.
    const attacker = spawn(
      process.execPath,
      [
        new URL('../../fixtures/dtls-junk-flood.mjs', import.meta.url).pathname,
        JSON.stringify({ port: s.dtls!.port, fromPort: proxy.address().port, count: 400_000, ms: 3000 }),
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    cleanup.push(() => attacker.kill('SIGKILL'));
    let out = '';
    let err = '';
    attacker.stdout!.on('data', (d: Buffer) => (out += d.toString()));
    attacker.stderr!.on('data', (d: Buffer) => (err += d.toString()));
    const exited = new Promise<number | null>((r) => attacker.on('exit', (code) => r(code)));
    // Meanwhile, the pair relays at a steady rate: 2 RELAYs every 2 ms while the attack lasts.
    let sent = 0;
    let attacking = true;
    void exited.then(() => (attacking = false));
    const started = Date.now();
    while (attacking && Date.now() - started < 10_000) {
      for (let i = 0; i < 2; i++) c.send(utpRelay(c.id, h.id, Buffer.from(`steady ${sent++}`)));
      await new Promise((r) => setTimeout(r, 2));
    }
    expect(await exited, err).toBe(0);
    const attack = JSON.parse(out) as { sent: number };
    const steady = () =>
      new Set(
        h.inbox
          .filter((m) => m[3] === 10 && m.subarray(38).toString().startsWith('steady '))
          .map((m) => m.subarray(38).toString()),
      ).size;
    await waitFor(
      () => steady() >= sent || undefined,
      () => `the steady RELAYs (${steady()} of ${sent})`,
      5000,
    ).catch(() => undefined);
    const delivered = steady();
    const d = delta(before, native(s).stats());
    const junk =
      d.dtlsJunkTruncated +
      d.dtlsJunkVersion +
      d.dtlsJunkEpoch +
      d.dtlsJunkBadMac +
      d.dtlsJunkReplay +
      d.dtlsJunkTooLarge +
      d.dtlsJunkPlaintext +
      d.dtlsDropBadMac +
      d.dtlsDropReplay +
      d.dtlsDropTooLarge;
    console.log(
      `junk attack: ${attack.sent} junk datagrams sent, ${junk} dropped natively; ${delivered} of ${sent} RELAYs delivered`,
    );
    expect(sent).toBeGreaterThan(500);
    expect(delivered / sent).toBeGreaterThanOrEqual(0.99);
    // Never handed back, never handed over again, never suspended: no cipher state rebuilt.
    expect(d.dtlsDetached).toBe(0);
    expect(d.dtlsAttached).toBe(0);
    expect(d.dtlsSuspended).toBe(0);
    expect(native(s).stats().associations).toBe(2);
    expect(closes).toEqual([]);
    expect(seen()).toBe(0);
    // Every junk datagram the relay received was dropped natively, by reason.
    expect(junk).toBeGreaterThanOrEqual(Math.min(attack.sent, d.dtlsReceived - d.dtlsForwardedIn));
    expect(junk).toBeGreaterThan(1000);
    expect(d.dtlsJunkEpoch).toBeGreaterThan(0);
    expect(d.dtlsJunkBadMac).toBeGreaterThan(0);
    expect(d.dtlsJunkTruncated).toBeGreaterThan(0);
    expect(d.dtlsJunkPlaintext).toBeGreaterThan(0);
    // /metrics: the associations each plane holds, the hand-overs, the junk by reason.
    s.relay.syncDataplane();
    expect(s.metrics.gauges.get('dtls_associations_native')).toBe(2);
    expect(s.metrics.gauges.get('dtls_associations_js')).toBe(0);
    expect(s.metrics.counters.get('dtls_handover_to_native')).toBeGreaterThanOrEqual(2);
    expect(s.metrics.counters.get('dtls_native_junk_bad_epoch')).toBe(d.dtlsJunkEpoch);
    const text = await createRegistry(() => [s.metrics]).metrics();
    expect(text).toMatch(/gamewire_gauge\{protocol="unity-relay",name="dtls_associations_native"\} 2/);
    expect(text).toMatch(
      /gamewire_events_total\{protocol="unity-relay",event="dtls_native_junk_bad_mac"\} [1-9]/,
    );
    expect(text).toMatch(
      /gamewire_events_total\{protocol="unity-relay",event="dtls_handover_to_native"\} [1-9]/,
    );
    // Still relaying natively after the attack.
    const after = utpRelay(c.id, h.id, Buffer.from('after'));
    c.send(after);
    await waitFor(
      () => h.inbox.some((m) => m.equals(after)),
      () => 'a RELAY after the attack',
    );
    expect(delta(before, native(s).stats()).dtlsDetached).toBe(0);
  }, 60_000);

  it('keys live once: after the hand-over the JavaScript key Buffers read back as zeros; taking it back restores them', async () => {
    const s = await start();
    const { host } = await allocations(s, 0);
    const assocs: ServerAssociation[] = [];
    s.dtls!.server.on('association', (a) => assocs.push(a as ServerAssociation));
    const { peer } = await dtlsClientPeer(s, host);
    await bindAndConnect(peer, host);
    const a = assocs[0]!;
    expect(a.offloaded).toBe(true);
    const material = [a.read.material(), a.write.material()];
    const state = a.recordState();
    for (const b of [
      state.readKey,
      state.readIv,
      state.writeKey,
      state.writeIv,
      ...material.flatMap((m) => [m.key, m.iv]),
    ])
      expect(b.every((x) => x === 0)).toBe(true);
    // Taken back (as the wire view does): the keys are there again, and JavaScript seals and opens with them.
    s.dtls!.server.setRecordOffload(undefined);
    expect(a.offloaded).toBe(false);
    for (const m of material) {
      expect(m.key.some((x) => x !== 0)).toBe(true);
      expect(m.iv.some((x) => x !== 0)).toBe(true);
    }
    const k = keys(host);
    peer.send(utpBind(0, k.cd, k.key));
    await peer.next(1);
  });

  it('close_notify ends the association on the native side too', async () => {
    const s = await start();
    const { host } = await allocations(s, 0);
    const { peer, client } = await dtlsClientPeer(s, host);
    await bindAndConnect(peer, host);
    expect(native(s).stats().associations).toBe(1);
    client.close();
    await waitFor(
      () => native(s).stats().associations === 0,
      () => 'the association to leave the native side',
    );
    expect(s.dtls!.server.stats().associations).toBe(0);
  });

  it('with a recording installed, --dataplane native keeps DTLS on JavaScript (the recording sees it)', async () => {
    setTrafficRecorder({ tcpConnection() {}, udpSocket() {} });
    try {
      server = await startUnityRelay({
        host: '127.0.0.1',
        port: 0,
        apiPort: 0,
        dtlsPort: 0,
        dataplane: 'native',
      });
      expect(server.dataplane).toBe('native');
      expect(server.dtlsDataplane).toBe('js');
      expect(native(server).dtlsPort).toBeUndefined();
    } finally {
      setTrafficRecorder(undefined);
    }
  });
});
