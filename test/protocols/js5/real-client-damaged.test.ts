/**
 * A damaged cache served to a client that behaves like the real 530 client (Pazaz/RT4-Client
 * `Js5NetQueue`): it cannot see the server close (`loop` tests only `available() < 0`, and Java's
 * `available()` is 0 at end of stream), so a close looks like silence; its watchdog fires after
 * 30 s without a byte (restarted by any byte received; here `watchdogMs`, short to keep the test
 * fast), not counted as an error; it reconnects and re-sends its in-flight requests in order,
 * urgent before prefetch, after the packets of a new connection.
 *
 * With the default `--missing-group` (drop) it loads every group but the damaged one, then asks
 * for that one again after each watchdog; with `close` each connection is cut where the damaged
 * group sits in its in-flight list, and it never gets past it (docs/js5.md, "Missing groups").
 */
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { decodeContainer } from '../../../src/protocols/js5/cache/container.js';
import { createDemoCache } from '../../../src/protocols/js5/cache/demo.js';
import { readIndex } from '../../../src/protocols/js5/cache/js5-index.js';
import { crc32 } from '../../../src/protocols/js5/cache/master-index.js';
import { BLOCK_SIZE } from '../../../src/protocols/js5/framing.js';
import type { Js5Server } from '../../../src/protocols/js5/server.js';
import { startServer, tempDir } from './helpers.js';

/** The 530 client's caps: 20 urgent and 20 prefetch requests, pending and in flight together. */
const CAP = 20;
/** The archives the 530 client creates at start (`createJs5`). */
const ARCHIVES = 28;
/** The client's loop period (a client cycle is 20 ms). */
const CYCLE_MS = 20;

const k = (archive: number, group: number): number => archive * 65536 + group;
const name = (key: number): string => `${Math.floor(key / 65536)}/${key % 65536}`;

/**
 * A model of the 530 client's JS5 download: `Js5NetQueue` for the wire, and providers that ask
 * for the master index, every index (urgent) and every group (prefetch) as the real ones do at
 * start. Everything it receives is checked as the client checks it (CRCs against the master
 * index and the indexes).
 */
class RealLikeClient {
  /** What the providers still want, before the net queue has room. */
  private readonly wantUrgent: number[] = [k(255, 255)];
  private readonly wantPrefetch: number[] = [];
  /** Js5NetQueue's four lists. */
  private readonly pendingUrgent: number[] = [];
  private readonly inFlightUrgent: number[] = [];
  private readonly pendingPrefetch: number[] = [];
  private readonly inFlightPrefetch: number[] = [];
  private socket: net.Socket | undefined;
  private ready = false;
  private writeError = false;
  private rx: Buffer = Buffer.alloc(0);
  private silentMs = 0;
  private lastLoop = Date.now();
  private timer: NodeJS.Timeout | undefined;
  master: { crc: number; version: number }[] | undefined;
  private readonly expected = new Map<number, number>();

  readonly indexes = new Set<number>();
  readonly groups = new Set<number>();
  /** Groups the indexes list (what "every group" is). */
  listed = 0;
  connections = 0;
  watchdogFires = 0;
  /** I/O errors and CRC failures: what the real client counts towards giving up. */
  errors = 0;
  /** Every request written, per connection, in order (what the server was asked). */
  readonly sent: number[][] = [];
  /** Groups and indexes received per connection. */
  readonly received: number[] = [];

  private readonly port: number;
  private readonly watchdogMs: number;

  constructor(port: number, watchdogMs: number) {
    this.port = port;
    this.watchdogMs = watchdogMs;
  }

  start(): void {
    this.timer = setInterval(() => this.loop(), CYCLE_MS);
  }

  stop(): void {
    clearInterval(this.timer);
    this.socket?.destroy();
  }

  get done(): boolean {
    return this.master !== undefined && this.indexes.size === ARCHIVES && this.groups.size === this.listed;
  }

  private loop(): void {
    const now = Date.now();
    if (this.socket !== undefined) {
      // The watchdog: loop time without a byte received, at most 200 ms per loop.
      this.silentMs += Math.min(200, now - this.lastLoop);
      if (this.silentMs > this.watchdogMs) {
        this.watchdogFires++;
        this.drop();
      }
    }
    this.lastLoop = now;
    if (this.socket !== undefined && this.writeError) {
      // BufferedSocket.checkError: a write that failed is an IOException, counted.
      this.errors++;
      this.drop();
    }
    this.fill();
    if (this.socket === undefined) {
      if (this.pendingUrgent.length + this.inFlightUrgent.length + this.pendingPrefetch.length > 0)
        this.connect();
      else if (this.inFlightPrefetch.length > 0) this.connect();
      return;
    }
    if (!this.ready) return;
    this.write();
    this.read();
  }

  /** The providers ask while the net queue has room (method2326 / method2321 < 20). */
  private fill(): void {
    while (this.wantUrgent.length > 0 && this.pendingUrgent.length + this.inFlightUrgent.length < CAP)
      this.pendingUrgent.push(this.wantUrgent.shift()!);
    while (this.wantPrefetch.length > 0 && this.pendingPrefetch.length + this.inFlightPrefetch.length < CAP)
      this.pendingPrefetch.push(this.wantPrefetch.shift()!);
  }

  private drop(): void {
    this.socket?.destroy();
    this.socket = undefined;
    this.ready = false;
  }

  private connect(): void {
    const socket = net.connect({ host: '127.0.0.1', port: this.port, allowHalfOpen: true });
    this.socket = socket;
    this.ready = false;
    this.writeError = false;
    this.rx = Buffer.alloc(0);
    this.silentMs = 0;
    this.connections++;
    this.sent.push([]);
    this.received.push(0);
    socket.on('error', () => {
      this.writeError = true;
    });
    // A FIN from the server is not seen: Java's available() is 0 at end of stream.
    socket.on('end', () => {});
    let replied = false;
    socket.on('data', (d: Buffer) => {
      if (socket !== this.socket) return;
      if (!replied) {
        replied = true;
        if (d[0] !== 0) throw new Error(`handshake answered ${d[0]}`);
        d = d.subarray(1);
        // loggedOut(): connected, logged out, then the in-flight requests go back to pending.
        socket.write(Buffer.from('0600000303000000', 'hex'));
        this.pendingUrgent.push(...this.inFlightUrgent.splice(0));
        this.pendingPrefetch.push(...this.inFlightPrefetch.splice(0));
        this.silentMs = 0;
        this.ready = true;
      }
      if (d.length > 0) this.rx = Buffer.concat([this.rx, d]);
    });
    socket.write(Buffer.from([15, 0, 0, 0x02, 0x12]));
  }

  private write(): void {
    const out: Buffer[] = [];
    const sent = this.sent[this.sent.length - 1]!;
    for (const key of this.pendingUrgent.splice(0)) {
      out.push(Buffer.from([1, Math.floor(key / 65536), (key >> 8) & 0xff, key & 0xff]));
      this.inFlightUrgent.push(key);
      sent.push(key);
    }
    for (const key of this.pendingPrefetch.splice(0)) {
      out.push(Buffer.from([0, Math.floor(key / 65536), (key >> 8) & 0xff, key & 0xff]));
      this.inFlightPrefetch.push(key);
      sent.push(key);
    }
    if (out.length > 0) this.socket!.write(Buffer.concat(out));
  }

  /** Whole responses from what has arrived; any byte restarts the watchdog. */
  private read(): void {
    if (this.rx.length === 0) return;
    this.silentMs = 0;
    for (;;) {
      if (this.rx.length < 8) return;
      const typeByte = this.rx[3]!;
      const length = this.rx.readInt32BE(4);
      const plain = 3 + length + ((typeByte & 0x7f) === 0 ? 5 : 9);
      const framed = plain + (plain > BLOCK_SIZE ? Math.ceil((plain - BLOCK_SIZE) / (BLOCK_SIZE - 1)) : 0);
      const key = k(this.rx[0]!, this.rx.readUInt16BE(1));
      const list = (typeByte & 0x80) !== 0 ? this.inFlightPrefetch : this.inFlightUrgent;
      const at = list.indexOf(key);
      if (at < 0) {
        // A response that matches nothing in flight: IOException.
        this.errors++;
        this.drop();
        return;
      }
      if (this.rx.length < framed) return;
      const bytes = this.rx.subarray(0, framed);
      this.rx = this.rx.subarray(framed);
      const parts: Buffer[] = [bytes.subarray(3, Math.min(BLOCK_SIZE, framed))];
      for (let i = BLOCK_SIZE; i < framed; i += BLOCK_SIZE) {
        if (bytes[i] !== 0xff) throw new Error(`bad marker in ${name(key)}`);
        parts.push(bytes.subarray(i + 1, i + BLOCK_SIZE));
      }
      const container = Buffer.concat(parts);
      container[0] = typeByte & 0x7f;
      list.splice(at, 1);
      this.received[this.received.length - 1]!++;
      this.deliver(key, container);
    }
  }

  private deliver(key: number, container: Buffer): void {
    const archive = Math.floor(key / 65536);
    const group = key % 65536;
    if (key === k(255, 255)) {
      // Js5MasterIndex: one provider per archive, entries read raw at 5 + 8 × archive.
      this.master = [];
      for (let a = 0; a < ARCHIVES; a++)
        this.master.push({
          crc: container.readInt32BE(5 + 8 * a),
          version: container.readInt32BE(9 + 8 * a),
        });
      for (let a = 0; a < ARCHIVES; a++) this.wantUrgent.push(k(255, a));
      return;
    }
    if (archive === 255) {
      if (crc32(container) !== this.master![group]!.crc) {
        this.errors++;
        this.wantUrgent.push(key);
        return;
      }
      const index = readIndex(decodeContainer(container, 'none').data);
      this.indexes.add(group);
      for (const g of index.groups) {
        this.expected.set(k(group, g.id), g.checksum);
        this.wantPrefetch.push(k(group, g.id));
      }
      this.listed += index.groups.length;
      return;
    }
    if (crc32(container) !== this.expected.get(key)) {
      this.errors++;
      this.wantPrefetch.push(key);
      return;
    }
    this.groups.add(key);
  }
}

async function until(what: () => boolean, timeoutMs: number): Promise<boolean> {
  const end = Date.now() + timeoutMs;
  while (!what() && Date.now() < end) await new Promise((r) => setTimeout(r, 25));
  return what();
}

/** The 530 demo (flat store) with one byte of group 0/2's container flipped: a CRC failure. */
let dir: string;
const BAD = k(0, 2);
beforeAll(() => {
  dir = path.join(tempDir(), 'damaged');
  createDemoCache(dir, { kind: 'flat', profile: '530' });
  const file = path.join(dir, '0', '2.dat');
  const bytes = fs.readFileSync(file);
  // The last container byte (the 2 after it are the version trailer).
  bytes[bytes.length - 3]! ^= 0xff;
  fs.writeFileSync(file, bytes);
});

const servers: Js5Server[] = [];
afterAll(async () => {
  for (const s of servers) await s.close();
});

const WATCHDOG_MS = 1000;

describe('a damaged group, served to a client that cannot see a close (the 530 client)', () => {
  test('default (drop): every other group arrives; the damaged one is asked again after each watchdog', async () => {
    const { server, metrics } = await startServer('530', {}, dir);
    servers.push(server);
    expect(server.settings.missingGroup).toBe('drop');
    const c = new RealLikeClient(server.port, WATCHDOG_MS);
    const started = Date.now();
    c.start();
    try {
      await until(
        () => c.master !== undefined && c.indexes.size === ARCHIVES && c.groups.size === c.listed - 1,
        20_000,
      );
      const loadedMs = Date.now() - started;
      // Two more watchdog periods: the hole is asked again on each new connection.
      await until(() => c.connections >= 3, 4 * WATCHDOG_MS);
      console.info(
        `drop: ${c.groups.size}/${c.listed} groups, ${c.indexes.size}/${ARCHIVES} indexes in ${loadedMs} ms; ` +
          `${c.connections} connections, ${c.watchdogFires} watchdog fires, ${c.errors} errors`,
      );
      expect(c.indexes.size).toBe(ARCHIVES);
      expect(c.listed).toBe(212);
      expect(c.groups.size).toBe(211);
      expect(c.groups.has(BAD)).toBe(false);
      expect(c.errors).toBe(0);
      // Everything arrived on the first connection; later ones only re-ask for the hole.
      expect(c.received[0]).toBe(1 + ARCHIVES + 211);
      expect(c.connections).toBeGreaterThanOrEqual(3);
      for (const later of c.sent.slice(1, -1)) expect(later).toEqual([BAD]);
      expect(metrics.dropped.get('missing_group')).toBeGreaterThanOrEqual(2);
    } finally {
      c.stop();
    }
  }, 30_000);

  test('close: every connection is cut where the damaged group sits, and the client stalls', async () => {
    const { server, metrics } = await startServer('530', { missingGroup: 'close' }, dir);
    servers.push(server);
    const c = new RealLikeClient(server.port, WATCHDOG_MS);
    c.start();
    try {
      // Four connections, as the real client had after 120 s with a 30 s watchdog.
      await until(() => c.connections >= 5, 8 * WATCHDOG_MS);
      console.info(
        `close: ${c.groups.size}/${c.listed} groups, ${c.indexes.size}/${ARCHIVES} indexes after ` +
          `${c.connections} connections (${c.watchdogFires} watchdog fires, ${c.errors} errors); ` +
          `received per connection: ${c.received.join(', ')}`,
      );
      expect(c.connections).toBeGreaterThanOrEqual(5);
      // Each connection ended by the watchdog, none by an error the client could see.
      expect(c.watchdogFires).toBeGreaterThanOrEqual(4);
      expect(c.errors).toBe(0);
      // Nothing after the first connection: the damaged group is re-sent at the front of every
      // later connection's requests (its in-flight list, in order), and the server closes there.
      expect(c.groups.size).toBeLessThan(20);
      expect(c.done).toBe(false);
      expect(c.received.slice(-2)).toEqual([0, 0]);
      // (The last connection may not have written yet.)
      for (const later of c.sent.slice(1, -1)) expect(later[0]).toBe(BAD);
      expect(c.sent[1]!.map(name).slice(0, 3)).toEqual(['0/2', '0/20', '0/21']);
      expect(metrics.closed.get('missing_group')).toBeGreaterThanOrEqual(3);
    } finally {
      c.stop();
    }
  }, 30_000);
});
