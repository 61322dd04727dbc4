/**
 * The native data plane on its own: real UDP sockets on 127.0.0.1, the addon built by `npm ci`,
 * and a build with AddressSanitizer and UBSan fed random datagrams and table changes.
 */
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import dgram from 'node:dgram';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
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
    };
    expect(result.received).toBe(result.sent);
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
    const result = JSON.parse(r.stdout.trim().split('\n').pop() ?? '{}') as { sent: number; batches: number };
    expect(result.sent).toBeGreaterThan(0);
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
