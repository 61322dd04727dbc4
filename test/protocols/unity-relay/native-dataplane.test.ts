/**
 * The native data plane on its own: real UDP sockets on 127.0.0.1, the addon built by `npm ci`,
 * and a build with AddressSanitizer and UBSan fed random datagrams and table changes.
 */
import { spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import dgram from 'node:dgram';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import fc from 'fast-check';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  COALESCE_MIN_PPS,
  DEFAULT_NATIVE_COALESCE_US,
  loadNativeDataplane,
  NativeRelaySocket,
  type NativeRemoteInfo,
} from '../../../src/protocols/unity-relay/native-dataplane.js';

const root = join(import.meta.dirname, '..', '..', '..');
// The native data plane is part of the product on Linux: CI must build it, never skip it.
const available = loadNativeDataplane().addon !== undefined;
if (!available && (process.env.CI === 'true' || process.platform === 'linux')) {
  throw new Error(`the native data plane did not load: ${loadNativeDataplane().reason}`);
}

function relay(from: Buffer, to: Buffer, data: Buffer): Buffer {
  const b = Buffer.alloc(38 + data.length);
  b[0] = 0xda;
  b[1] = 0x72;
  b[2] = 0;
  b[3] = 10;
  from.copy(b, 4);
  to.copy(b, 20);
  b.writeUInt16BE(data.length, 36);
  data.copy(b, 38);
  return b;
}

async function udp(): Promise<dgram.Socket> {
  const s = dgram.createSocket('udp4');
  await new Promise<void>((resolve) => s.bind(0, '127.0.0.1', resolve));
  return s;
}

function nextMessage(s: dgram.Socket, ms = 1000): Promise<Buffer | undefined> {
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      s.off('message', on);
      resolve(undefined);
    }, ms);
    const on = (m: Buffer) => {
      clearTimeout(timer);
      s.off('message', on);
      resolve(m);
    };
    s.on('message', on);
  });
}

const open: { close(): void }[] = [];
afterEach(() => {
  for (const s of open.splice(0)) s.close();
});

async function setup(maxDatagramBytes = 1472) {
  const plane = NativeRelaySocket.open({ host: '127.0.0.1', port: 0, maxDatagramBytes });
  const a = await udp();
  const b = await udp();
  const c = await udp();
  open.push(plane, a, b, c);
  const idA = randomBytes(16);
  const idB = randomBytes(16);
  plane.bind(idA, '127.0.0.1', a.address().port);
  plane.bind(idB, '127.0.0.1', b.address().port);
  plane.link(idA, idB);
  const toJs: [Buffer, NativeRemoteInfo][] = [];
  plane.on('message', (m: Buffer, r: NativeRemoteInfo) => toJs.push([Buffer.from(m), r]));
  return { plane, a, b, c, idA, idB, toJs };
}

describe('native relay data plane', () => {
  it('forwards a RELAY between bound, linked peers without entering JavaScript', async () => {
    const { plane, a, b, idA, idB, toJs } = await setup();
    const msg = relay(idA, idB, Buffer.from('hello'));
    const got = nextMessage(b);
    a.send(msg, plane.port, '127.0.0.1');
    expect(await got).toEqual(msg);
    const back = nextMessage(a);
    b.send(relay(idB, idA, Buffer.from('hi')), plane.port, '127.0.0.1');
    expect((await back)?.subarray(38).toString()).toBe('hi');
    expect(toJs).toEqual([]);
    const s = plane.stats();
    expect(s).toMatchObject({ received: 2, forwarded: 2, toJs: 0, tableSize: 2 });
    expect(plane.idleMs(idA)).toBeLessThan(5000);
  });

  it('hands JavaScript everything it does not forward: unlinked, wrong source, bad length, other types', async () => {
    const { plane, a, b, c, idA, idB, toJs } = await setup();
    const cases: [dgram.Socket, Buffer][] = [];
    // A sender bound elsewhere (c is not idA's address).
    cases.push([c, relay(idA, idB, Buffer.from('x'))]);
    // A bad data length field.
    const bad = relay(idA, idB, Buffer.from('abc'));
    bad.writeUInt16BE(2, 36);
    cases.push([a, bad]);
    // A PING, and garbage.
    cases.push([a, Buffer.from([0xda, 0x72, 0, 9, ...idA])]);
    cases.push([a, Buffer.from('not a relay message')]);
    for (const [s, m] of cases) s.send(m, plane.port, '127.0.0.1');
    // Unlinked peers: no longer forwarded.
    plane.unlink(idA, idB);
    const none = nextMessage(b, 300);
    a.send(relay(idA, idB, Buffer.from('late')), plane.port, '127.0.0.1');
    expect(await none).toBeUndefined();
    await expect.poll(() => toJs.length, { timeout: 3000 }).toBe(5);
    expect(toJs.map(([m]) => m)).toEqual([...cases.map(([, m]) => m), relay(idA, idB, Buffer.from('late'))]);
    expect(toJs[0]![1]).toEqual({
      address: '127.0.0.1',
      family: 'IPv4',
      port: c.address().port,
      size: cases[0]![1].length,
    });
    expect(plane.stats()).toMatchObject({ forwarded: 0, toJs: 5 });
  });

  it('stops forwarding to an unbound or forgotten peer, and from a forgotten sender', async () => {
    const { plane, a, b, idA, idB, toJs } = await setup();
    plane.unbind(idB);
    const none = nextMessage(b, 300);
    a.send(relay(idA, idB, Buffer.from('1')), plane.port, '127.0.0.1');
    expect(await none).toBeUndefined();
    plane.bind(idB, '127.0.0.1', b.address().port);
    const again = nextMessage(b);
    a.send(relay(idA, idB, Buffer.from('2')), plane.port, '127.0.0.1');
    expect((await again)?.subarray(38).toString()).toBe('2');
    plane.forget(idA);
    a.send(relay(idA, idB, Buffer.from('3')), plane.port, '127.0.0.1');
    await expect.poll(() => toJs.length, { timeout: 3000 }).toBe(2);
    expect(plane.stats().tableSize).toBe(1);
  });

  it('hands datagrams over the size limit to JavaScript (cut to limit + 1 bytes), and sends from JavaScript', async () => {
    const { plane, a, idA, idB, toJs } = await setup(200);
    const big = relay(idA, idB, Buffer.alloc(300));
    a.send(big, plane.port, '127.0.0.1');
    await expect.poll(() => toJs.length, { timeout: 3000 }).toBe(1);
    expect(toJs[0]![0]).toEqual(big.subarray(0, 201));
    expect(plane.stats().forwarded).toBe(0);
    const reply = nextMessage(a);
    plane.send(Buffer.from('from js'), a.address().port, '127.0.0.1');
    expect((await reply)?.toString()).toBe('from js');
    expect(plane.address()).toEqual({ address: '127.0.0.1', family: 'IPv4', port: plane.port });
  });

  it('random datagrams only ever give counted outcomes', async () => {
    const { plane, a, idA, idB, toJs } = await setup(600);
    const samples = fc.sample(
      fc.oneof(
        fc.uint8Array({ maxLength: 700 }),
        fc.uint8Array({ maxLength: 80 }).map((d) => new Uint8Array(relay(idA, idB, Buffer.from(d)))),
        fc.uint8Array({ minLength: 38, maxLength: 120 }).map((d) => {
          const m = Buffer.from(d);
          m.set([0xda, 0x72, 0, 10]);
          idA.copy(m, 4);
          return new Uint8Array(m);
        }),
      ),
      { numRuns: 400, seed: 7 },
    );
    for (const s of samples) a.send(s, plane.port, '127.0.0.1');
    await expect.poll(() => plane.stats().received, { timeout: 5000 }).toBe(samples.length);
    const st = plane.stats();
    expect(st.forwarded + st.toJs + st.dropBadSource + st.dropBacklog).toBe(samples.length);
    await expect.poll(() => toJs.length, { timeout: 5000 }).toBe(st.toJs);
  });

  it('reports a port in use as EADDRINUSE', async () => {
    const { plane } = await setup();
    expect(() => NativeRelaySocket.open({ host: '127.0.0.1', port: plane.port })).toThrow(
      expect.objectContaining({ code: 'EADDRINUSE' }),
    );
  });
});

/** Every datagram `s` receives, in order. */
function collect(s: dgram.Socket): Buffer[] {
  const got: Buffer[] = [];
  s.on('message', (m: Buffer) => got.push(m));
  return got;
}

/** With GAMEWIRE_NATIVE_TUNING set only while the plane opens (the addon reads it then). */
function openTuned(tuning: string | undefined, dtls = false): NativeRelaySocket {
  const before = process.env.GAMEWIRE_NATIVE_TUNING;
  if (tuning === undefined) delete process.env.GAMEWIRE_NATIVE_TUNING;
  else process.env.GAMEWIRE_NATIVE_TUNING = tuning;
  try {
    return NativeRelaySocket.open({ host: '127.0.0.1', port: 0, ...(dtls ? { dtlsPort: 0 } : {}) });
  } finally {
    if (before === undefined) delete process.env.GAMEWIRE_NATIVE_TUNING;
    else process.env.GAMEWIRE_NATIVE_TUNING = before;
  }
}

/** Content sizes of one burst: runs of one size, a shorter one ending a run, a longer one starting the next. */
const BURST_SIZES = [60, 60, 60, 60, 12, 60, 60, 100, 100, 100, 0, 100, 7, 7, 7, 60, 60, 60, 60, 60, 60, 1];

describe('native data plane: kernel offloads (UDP GSO, GRO) on loopback', () => {
  it('says which offloads it uses; GAMEWIRE_NATIVE_TUNING turns them on and off', () => {
    const plane = openTuned(undefined);
    const off = openTuned('gso=0,batch=16');
    const gro = openTuned('gro=1');
    open.push(plane, off, gro);
    // GSO where the kernel has it (Linux ≥ 4.18), GRO only when asked for.
    expect(plane.offloads()).toMatchObject({ gro: false, busyPollUs: 0, batch: 64 });
    expect(typeof plane.offloads().gso).toBe('boolean');
    expect(off.offloads()).toEqual({
      gso: false,
      gro: false,
      busyPollUs: 0,
      batch: 16,
      coalesceUs: DEFAULT_NATIVE_COALESCE_US,
      coalesceMinPps: COALESCE_MIN_PPS,
    });
    expect(typeof gro.offloads().gro).toBe('boolean');
    const never = NativeRelaySocket.open({ host: '127.0.0.1', port: 0, coalesceUs: 0 });
    open.push(never);
    expect(never.offloads().coalesceUs).toBe(0);
    expect(() => NativeRelaySocket.open({ host: '127.0.0.1', port: 0, coalesceUs: 1001 })).toThrow(
      /coalesceUs/,
    );
  });

  /** Sends `n` RELAYs from a to b through the plane, and waits until b has them all, in order. */
  async function relayBurst(
    plane: NativeRelaySocket,
    a: dgram.Socket,
    b: dgram.Socket,
    ids: Buffer[],
    n: number,
  ) {
    const got = collect(b);
    const want: Buffer[] = [];
    for (let i = 0; i < n; i++) {
      const m = relay(ids[0]!, ids[1]!, Buffer.from(`burst ${i}`));
      want.push(m);
      a.send(m, plane.port, '127.0.0.1');
    }
    await expect.poll(() => got.length, { timeout: 10_000 }).toBe(n);
    expect(got).toEqual(want);
  }

  it('coalesces wake-ups only while datagrams arrive fast: never for a trickle, and it loses nothing', async () => {
    // coalesceMin=1000 pps so that a test's burst is surely "fast" and 40 pps surely is not.
    const plane = openTuned('coalesceMin=1000');
    const never = NativeRelaySocket.open({ host: '127.0.0.1', port: 0, coalesceUs: 0 });
    const [a, b] = [await udp(), await udp()];
    open.push(plane, never, a, b);
    const ids = [randomBytes(16), randomBytes(16)];
    for (const p of [plane, never]) {
      p.bind(ids[0]!, '127.0.0.1', a.address().port);
      p.bind(ids[1]!, '127.0.0.1', b.address().port);
      p.link(ids[0]!, ids[1]!);
    }
    expect(plane.offloads()).toMatchObject({ coalesceUs: DEFAULT_NATIVE_COALESCE_US, coalesceMinPps: 1000 });
    // A trickle: one RELAY, then at least 25 ms before the next (at most 40 per second).
    const got = collect(b);
    for (let i = 0; i < 12; i++) {
      a.send(relay(ids[0]!, ids[1]!, Buffer.from(`slow ${i}`)), plane.port, '127.0.0.1');
      await expect.poll(() => got.length).toBe(i + 1);
      await new Promise((r) => setTimeout(r, 25));
    }
    expect(plane.stats().coalesced).toBe(0);
    expect(plane.stats().directReceives).toBe(0);
    // Bursts (100 RELAYs, small enough for a socket's default receive buffer): the plane sleeps
    // after some wake-ups so the next datagrams gather, then receives them without polling first,
    // and delivers every one, in order.
    const hot = () => plane.stats().coalesced > 0 && plane.stats().directReceives > 0;
    for (let burst = 0; burst < 100 && !hot(); burst++) await relayBurst(plane, a, b, ids, 100);
    expect(plane.stats().coalesced).toBeGreaterThan(0);
    expect(plane.stats().directReceives).toBeGreaterThan(0);
    // direct=0: the same sleeps, each followed by a poll.
    const polled = openTuned('coalesceMin=1000,direct=0');
    open.push(polled);
    polled.bind(ids[0]!, '127.0.0.1', a.address().port);
    polled.bind(ids[1]!, '127.0.0.1', b.address().port);
    polled.link(ids[0]!, ids[1]!);
    for (let burst = 0; burst < 100 && polled.stats().coalesced === 0; burst++)
      await relayBurst(polled, a, b, ids, 100);
    expect(polled.stats().coalesced).toBeGreaterThan(0);
    expect(polled.stats().directReceives).toBe(0);
    // With coalescing off, the same bursts never sleep.
    for (let burst = 0; burst < 5; burst++) await relayBurst(never, a, b, ids, 100);
    expect(never.stats().forwarded).toBe(500);
    expect(never.stats().coalesced).toBe(0);
  });

  it('closes while traffic keeps it receiving without polling (the stop is seen between receives)', async () => {
    // Another process sends RELAYs to the plane as fast as it can, so that after each coalescing
    // sleep (1 ms here, batches of 256) the worker finds datagrams and receives again without
    // polling. close() must still stop it. A worker that looked for the stop signal only in poll
    // would go on until the sender paused for a whole sleep, often (half the runs here) until
    // the sender stopped by itself, 2 s after the "go" just before close(), which it says with a
    // file.
    const plane = openTuned('coalesceMin=1000,coalesce=1000,batch=256');
    const sink = await udp();
    open.push(sink);
    const dir = mkdtempSync(join(tmpdir(), 'gamewire-sender-'));
    const [goFile, endedFile, stopFile] = [join(dir, 'go'), join(dir, 'ended'), join(dir, 'stop')];
    const sender = spawn(process.execPath, [join(root, 'test', 'fixtures', 'native-sender.mjs')], {
      env: {
        ...process.env,
        GAMEWIRE_NATIVE_ADDON: join(root, 'native', 'build', 'Release', 'relay_dataplane.node'),
        GO_FILE: goFile,
        ENDED_FILE: endedFile,
        STOP_FILE: stopFile,
      },
      stdio: ['pipe', 'pipe', 'inherit'],
    });
    try {
      const lines = createInterface({ input: sender.stdout! })[Symbol.asyncIterator]();
      const senderPort = Number((await lines.next()).value);
      const ids = [randomBytes(16), randomBytes(16)];
      plane.bind(ids[0]!, '127.0.0.1', senderPort);
      plane.bind(ids[1]!, '127.0.0.1', sink.address().port);
      plane.link(ids[0]!, ids[1]!);
      sender.stdin!.write(`${plane.port} ${ids[0]!.toString('hex')} ${ids[1]!.toString('hex')}\n`);
      expect((await lines.next()).value).toBe('sending');
      await expect.poll(() => plane.stats().directReceives, { timeout: 15_000 }).toBeGreaterThan(20);
      expect(plane.stats().forwarded).toBeGreaterThan(1000);
      writeFileSync(goFile, '');
      plane.close();
      expect(existsSync(endedFile)).toBe(false);
    } finally {
      writeFileSync(stopFile, '');
      if (sender.exitCode === null) await new Promise((resolve) => sender.once('exit', resolve));
      rmSync(dir, { recursive: true, force: true });
    }
  });

  for (const tuning of [undefined, 'gso=0']) {
    it(`forwards bursts of mixed sizes to two destinations whole and in order${tuning === undefined ? ', runs to one destination as UDP_SEGMENT sends' : ' with the offloads off'}`, async () => {
      const plane = openTuned(tuning);
      const [a, b, c] = [await udp(), await udp(), await udp()];
      open.push(plane, a, b, c);
      const [idA, idB, idC] = [randomBytes(16), randomBytes(16), randomBytes(16)];
      plane.bind(idA, '127.0.0.1', a.address().port);
      plane.bind(idB, '127.0.0.1', b.address().port);
      plane.bind(idC, '127.0.0.1', c.address().port);
      plane.link(idA, idB);
      plane.link(idA, idC);
      const gotB = collect(b);
      const gotC = collect(c);
      const wantB: Buffer[] = [];
      const wantC: Buffer[] = [];
      const gso = plane.offloads().gso;
      // Bursts until the plane has sent at least one run with GSO (a burst arrives in one receive
      // batch only when the worker is slower than the sender; on a busy machine it usually is).
      for (let burst = 0; burst < 40 && (burst < 3 || (gso && plane.stats().gsoSends === 0)); burst++) {
        BURST_SIZES.forEach((size, i) => {
          // Mostly to b, every fourth to c: runs to b are interleaved with datagrams to c.
          const toC = i % 4 === 3;
          const m = relay(idA, toC ? idC : idB, Buffer.alloc(size, (burst * 31 + i) & 0xff));
          (toC ? wantC : wantB).push(m);
          a.send(m, plane.port, '127.0.0.1');
        });
        await expect
          .poll(() => gotB.length + gotC.length, { timeout: 3000 })
          .toBe(wantB.length + wantC.length);
      }
      expect(gotB).toEqual(wantB);
      expect(gotC).toEqual(wantC);
      const st = plane.stats();
      expect(st).toMatchObject({
        forwarded: wantB.length + wantC.length,
        toJs: 0,
        dropSendFailed: 0,
        gsoFallbacks: 0,
      });
      if (gso) {
        expect(st.gsoSends).toBeGreaterThan(0);
        expect(st.gsoDatagrams).toBeGreaterThanOrEqual(2 * st.gsoSends);
      } else {
        expect(st.gsoSends).toBe(0);
      }
    });
  }

  it('splits a receive the kernel coalesced (UDP_GRO) into its datagrams: forwarded, or handed to JavaScript one by one', async () => {
    // Plane 1 forwards runs with UDP_SEGMENT to plane 2, which receives them coalesced (loopback
    // keeps a GSO send whole up to a socket with UDP_GRO on).
    const p1 = openTuned(undefined);
    const p2 = openTuned('gro=1');
    const [a, d] = [await udp(), await udp()];
    open.push(p1, p2, a, d);
    const [idA, idB, idX] = [randomBytes(16), randomBytes(16), randomBytes(16)];
    p1.bind(idA, '127.0.0.1', a.address().port);
    p1.bind(idB, '127.0.0.1', p2.port);
    p1.bind(idX, '127.0.0.1', p2.port);
    p1.link(idA, idB);
    p1.link(idA, idX);
    // Plane 2 knows idA (at plane 1's address) and idB (at d), not idX: RELAYs to idX go to its JavaScript.
    p2.bind(idA, '127.0.0.1', p1.port);
    p2.bind(idB, '127.0.0.1', d.address().port);
    p2.link(idA, idB);
    const toJs: [Buffer, NativeRemoteInfo][] = [];
    p2.on('message', (m: Buffer, r: NativeRemoteInfo) => toJs.push([Buffer.from(m), r]));
    const gotD = collect(d);
    const wantD: Buffer[] = [];
    const wantJs: Buffer[] = [];
    const coalescing = p1.offloads().gso && p2.offloads().gro;
    for (let burst = 0; burst < 40 && (burst < 3 || (coalescing && p2.stats().groReceived === 0)); burst++) {
      BURST_SIZES.forEach((size, i) => {
        const toX = i >= 15;
        const m = relay(idA, toX ? idX : idB, Buffer.alloc(size, (burst * 17 + i) & 0xff));
        (toX ? wantJs : wantD).push(m);
        a.send(m, p1.port, '127.0.0.1');
      });
      await expect
        .poll(() => gotD.length + toJs.length, { timeout: 3000 })
        .toBe(wantD.length + wantJs.length);
    }
    expect(gotD).toEqual(wantD);
    expect(toJs.map(([m]) => m)).toEqual(wantJs);
    for (const [m, r] of toJs)
      expect(r).toEqual({ address: '127.0.0.1', family: 'IPv4', port: p1.port, size: m.length });
    const s2 = p2.stats();
    expect(s2).toMatchObject({
      received: wantD.length + wantJs.length,
      forwarded: wantD.length,
      toJs: wantJs.length,
    });
    if (coalescing) {
      expect(s2.groReceived).toBeGreaterThan(0);
      expect(s2.groDatagrams).toBeGreaterThanOrEqual(2 * s2.groReceived);
    }
  });

  it('seals runs for one DTLS peer into UDP_SEGMENT sends; coalesced records are opened one by one', async () => {
    // Plane 1 holds association 1 for plane 2's DTLS port, plane 2 association 2 for plane 1's,
    // with mirrored keys: what plane 1 seals for idB, plane 2 opens as from idA and forwards to d.
    const p1 = openTuned(undefined, true);
    const p2 = openTuned('gro=1', true);
    const [a, d] = [await udp(), await udp()];
    open.push(p1, p2, a, d);
    const h1 = p1.dtlsHandle!;
    const h2 = p2.dtlsHandle!;
    const [k1, iv1, k2, iv2] = [randomBytes(16), randomBytes(4), randomBytes(16), randomBytes(4)];
    // AES-128-GCM (0x00a8), epoch 1, nothing received yet.
    expect(
      h1.addon.dtlsAttach(
        h1.handle,
        1,
        '127.0.0.1',
        p2.dtlsPort!,
        0x00a8,
        1,
        k2,
        iv2,
        k1,
        iv1,
        0,
        -1,
        0,
        0,
        16384,
      ),
    ).toBe(true);
    expect(
      h2.addon.dtlsAttach(
        h2.handle,
        2,
        '127.0.0.1',
        p1.dtlsPort!,
        0x00a8,
        1,
        k1,
        iv1,
        k2,
        iv2,
        0,
        -1,
        0,
        0,
        16384,
      ),
    ).toBe(true);
    const [idA, idB] = [randomBytes(16), randomBytes(16)];
    p1.bind(idA, '127.0.0.1', a.address().port);
    p1.bindDtls(idB, 1);
    p1.link(idA, idB);
    p2.bindDtls(idA, 2);
    p2.bind(idB, '127.0.0.1', d.address().port);
    p2.link(idA, idB);
    const toJs: Buffer[] = [];
    p2.on('message', (m: Buffer) => toJs.push(m));
    const gotD = collect(d);
    const want: Buffer[] = [];
    const coalescing = p1.offloads().gso && p2.offloads().gro;
    for (let burst = 0; burst < 40 && (burst < 3 || (coalescing && p2.stats().groReceived === 0)); burst++) {
      BURST_SIZES.forEach((size, i) => {
        const m = relay(idA, idB, Buffer.alloc(size, (burst * 13 + i) & 0xff));
        want.push(m);
        a.send(m, p1.port, '127.0.0.1');
      });
      await expect.poll(() => gotD.length, { timeout: 3000 }).toBe(want.length);
    }
    expect(gotD).toEqual(want);
    expect(toJs).toEqual([]);
    const s1 = p1.stats();
    const s2 = p2.stats();
    expect(s1).toMatchObject({ forwarded: want.length, dtlsSealedOut: want.length, gsoFallbacks: 0 });
    expect(s2).toMatchObject({
      dtlsReceived: want.length,
      dtlsForwardedIn: want.length,
      forwarded: want.length,
    });
    expect(s2.dtlsDropReplay + s2.dtlsDropBadMac + s2.dtlsJunkTruncated + s2.dtlsSuspended).toBe(0);
    if (coalescing) {
      expect(s1.gsoSends).toBeGreaterThan(0);
      expect(s2.groReceived).toBeGreaterThan(0);
    }
  });
});

describe('native data plane under AddressSanitizer and UBSan', () => {
  const sanitized = join(root, 'native', 'build-sanitize', 'relay_dataplane.node');
  const asan = spawnSync('cc', ['-print-file-name=libasan.so'], { encoding: 'utf8' }).stdout.trim();

  beforeAll(() => {
    const r = spawnSync(process.execPath, [join(root, 'scripts', 'build-native.mjs'), '--sanitize'], {
      encoding: 'utf8',
    });
    if (r.status !== 0) throw new Error(`sanitizer build failed:\n${r.stderr}`);
  }, 120_000);

  it('survives random datagrams and table churn with no sanitizer report', () => {
    expect(existsSync(sanitized)).toBe(true);
    const r = spawnSync(process.execPath, [join(root, 'test', 'fixtures', 'native-fuzz.mjs')], {
      encoding: 'utf8',
      timeout: 90_000,
      env: {
        ...process.env,
        GAMEWIRE_NATIVE_ADDON: sanitized,
        LD_PRELOAD: asan,
        // Node itself keeps memory at exit; only errors in the addon matter here.
        ASAN_OPTIONS: 'detect_leaks=0:abort_on_error=1',
        UBSAN_OPTIONS: 'print_stacktrace=1:halt_on_error=1',
      },
    });
    expect(r.stderr).not.toMatch(/AddressSanitizer|runtime error|UndefinedBehaviorSanitizer/);
    expect(r.status, r.stderr).toBe(0);
    const result = JSON.parse(r.stdout.trim().split('\n').pop() ?? '{}') as {
      received: number;
      sent: number;
      coalesced: number;
    };
    expect(result.received).toBe(result.sent);
    // The downstream plane coalesces at any rate: its sleeps ran under the sanitizers too.
    expect(result.coalesced).toBeGreaterThan(0);
  }, 120_000);

  it('handles dropped without close() and collected while datagrams arrive: the worker stops, the thread-safe function is released, no sanitizer report (UDP-only planes included: no DTLS socket)', () => {
    const r = spawnSync(
      process.execPath,
      ['--expose-gc', join(root, 'test', 'fixtures', 'native-gc-drop.mjs')],
      {
        encoding: 'utf8',
        // A finalizer that does not release the thread-safe function leaves the process running.
        timeout: 60_000,
        env: {
          ...process.env,
          GAMEWIRE_NATIVE_ADDON: sanitized,
          LD_PRELOAD: asan,
          ASAN_OPTIONS: 'detect_leaks=0:abort_on_error=1',
          UBSAN_OPTIONS: 'print_stacktrace=1:halt_on_error=1',
        },
      },
    );
    expect(r.stderr).not.toMatch(/AddressSanitizer|runtime error|UndefinedBehaviorSanitizer/);
    expect(r.signal, 'the process did not end on its own').toBeNull();
    expect(r.status, r.stderr).toBe(0);
    const result = JSON.parse(r.stdout.trim().split('\n').pop() ?? '{}') as {
      sent: number;
      batches: number;
      planes: number;
      roundsWithBatch: number;
    };
    expect(result.sent).toBeGreaterThan(0);
    // Every plane handed JavaScript a batch before its last reference went: no round was a no-op.
    expect(result.roundsWithBatch).toBe(result.planes);
    expect(result.batches).toBeGreaterThan(0);
  }, 90_000);

  it("survives random, mutated and foreign DTLS records and key churn, and never hands over another association's plaintext", () => {
    const r = spawnSync(process.execPath, [join(root, 'test', 'fixtures', 'native-dtls-fuzz.mjs')], {
      encoding: 'utf8',
      timeout: 110_000,
      env: {
        ...process.env,
        GAMEWIRE_NATIVE_ADDON: sanitized,
        LD_PRELOAD: asan,
        ASAN_OPTIONS: 'detect_leaks=0:abort_on_error=1',
        UBSAN_OPTIONS: 'print_stacktrace=1:halt_on_error=1',
      },
    });
    expect(r.stderr).not.toMatch(/AddressSanitizer|runtime error|UndefinedBehaviorSanitizer/);
    expect(r.status, r.stderr).toBe(0);
    const result = JSON.parse(r.stdout.trim().split('\n').pop() ?? '{}') as Record<string, number>;
    // Every path of the record layer was taken: forwarded, handed over, dropped as the JS server would.
    expect(result.dtlsForwardedIn).toBeGreaterThan(0);
    expect(result.dtlsSealedOut).toBeGreaterThan(0);
    expect(result.dtlsDecryptedToJs).toBeGreaterThan(0);
    expect(result.dtlsDropReplay).toBeGreaterThan(0);
    expect(result.dtlsDropBadMac).toBeGreaterThan(0);
    expect(result.dtlsDropTooLarge).toBeGreaterThan(0);
  }, 120_000);
});

/**
 * ThreadSanitizer reports that concern the addon: an access in its own code at the top of either
 * stack. Node itself is not built with TSan, so V8's own synchronisation (atomics TSan cannot
 * see) gives reports inside V8 that say nothing about the addon; those are left out.
 */
function addonRaces(stderr: string): string[] {
  return stderr
    .split(/^WARNING: ThreadSanitizer: /m)
    .slice(1)
    .filter((report) => {
      const accesses = report.split(/^\s*(Location is|Mutex |Thread )/m)[0] ?? '';
      return accesses
        .split('\n')
        .filter((line) => /^\s*#[01] /.test(line))
        .some((line) => /relay_dataplane\.c|dtls_record\.c/.test(line));
    });
}

describe('native data plane under ThreadSanitizer', () => {
  const tsanBuild = join(root, 'native', 'build-tsan', 'relay_dataplane.node');
  const tsan = spawnSync('cc', ['-print-file-name=libtsan.so'], { encoding: 'utf8' }).stdout.trim();

  beforeAll(() => {
    const r = spawnSync(process.execPath, [join(root, 'scripts', 'build-native.mjs'), '--thread'], {
      encoding: 'utf8',
    });
    if (r.status !== 0) throw new Error(`thread-sanitizer build failed:\n${r.stderr}`);
  }, 120_000);

  for (const fixture of ['native-fuzz.mjs', 'native-dtls-fuzz.mjs']) {
    it(`${fixture}: the worker against the JavaScript thread changing the UDP table and the DTLS associations, no race in the addon`, () => {
      expect(existsSync(tsanBuild)).toBe(true);
      const r = spawnSync(process.execPath, [join(root, 'test', 'fixtures', fixture)], {
        encoding: 'utf8',
        timeout: 150_000,
        env: {
          ...process.env,
          GAMEWIRE_NATIVE_ADDON: tsanBuild,
          LD_PRELOAD: tsan,
          TSAN_OPTIONS: 'halt_on_error=0 exitcode=0 report_signal_unsafe=0',
        },
      });
      expect(r.status, r.stderr.slice(-3000)).toBe(0);
      expect(addonRaces(r.stderr)).toEqual([]);
    }, 160_000);
  }
});
