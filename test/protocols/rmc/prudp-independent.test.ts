/**
 * An INDEPENDENT PRUDP client, written from the public description of Quazal PRUDP V0 (packet
 * layout, checksum, RC4 "CD&ML", compression byte, Kerberos, HyperScape ECDH) and sharing no
 * gamewire code: raw node:dgram, its own checksum and RC4, node:zlib and node:crypto directly.
 * It runs the "done when" list against the spawned command
 * `gamewire serve rmc --prudp-profile classic --prudp-access-key yl4NG7qZ` (and hyperscape).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import {
  createCipheriv,
  createDecipheriv,
  createECDH,
  createHash,
  createHmac,
  randomBytes,
} from 'node:crypto';
import dgram from 'node:dgram';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { deflateSync, inflateSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { elapse, waitFor } from '../../helpers/wait.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
const BIN = path.join(ROOT, 'bin/gamewire.js');
const ACCESS_KEY = 'yl4NG7qZ';

// ---- the client's own PRUDP primitives ------------------------------------------------------

function keySum(key: string): number {
  let s = 0;
  for (const c of Buffer.from(key, 'latin1')) s += c;
  return s & 0xff;
}

function checksum1(data: Buffer, key: string): number {
  let words = 0;
  const n = data.length - (data.length % 4);
  for (let i = 0; i < n; i += 4) words = (words + data.readUInt32LE(i)) % 0x100000000;
  let s = keySum(key);
  const wb = Buffer.alloc(4);
  wb.writeUInt32LE(words);
  for (const b of wb) s += b;
  for (let i = n; i < data.length; i++) s += data[i]!;
  return s & 0xff;
}

function checksum4(data: Buffer, key: string): number {
  const padded = Buffer.concat([data, Buffer.alloc((4 - (data.length % 4)) % 4)]);
  let s = keySum(key);
  for (let i = 0; i < padded.length; i += 4) s = (s + padded.readUInt32LE(i)) % 0x100000000;
  return s;
}

function rc4(key: Buffer, data: Buffer): Buffer {
  const S = Array.from({ length: 256 }, (_, i) => i);
  let j = 0;
  for (let i = 0; i < 256; i++) {
    j = (j + S[i]! + key[i % key.length]!) % 256;
    [S[i], S[j]] = [S[j]!, S[i]!];
  }
  const out = Buffer.alloc(data.length);
  let a = 0;
  let b = 0;
  for (let k = 0; k < data.length; k++) {
    a = (a + 1) % 256;
    b = (b + S[a]!) % 256;
    [S[a], S[b]] = [S[b]!, S[a]!];
    out[k] = data[k]! ^ S[(S[a]! + S[b]!) % 256]!;
  }
  return out;
}

const CDML = Buffer.from('CD&ML');

function encodeClassic(body: Buffer): Buffer {
  const z = deflateSync(body);
  const plain =
    z.length < body.length
      ? Buffer.concat([Buffer.from([Math.ceil(body.length / z.length)]), z])
      : Buffer.concat([Buffer.from([0]), body]);
  return rc4(CDML, plain);
}

function decodeClassic(wire: Buffer): { ratio: number; body: Buffer } {
  const plain = rc4(CDML, wire);
  return { ratio: plain[0]!, body: plain[0] === 0 ? plain.subarray(1) : inflateSync(plain.subarray(1)) };
}

interface Pkt {
  src: number;
  dst: number;
  tf: number;
  type: number;
  session: number;
  sig: number;
  seq: number;
  connSig?: number;
  frag?: number;
  hasSize: boolean;
  payload: Buffer;
  raw: Buffer;
}

interface Wire {
  key: string;
  width: 1 | 4;
}

function build(
  w: Wire,
  f: {
    src: number;
    dst: number;
    tf: number;
    session: number;
    sig: number;
    seq: number;
    connSig?: number;
    frag?: number;
  },
  payload: Buffer = Buffer.alloc(0),
): Buffer {
  const type = f.tf & 7;
  const parts: Buffer[] = [];
  const h = Buffer.alloc(10);
  h[0] = f.src;
  h[1] = f.dst;
  h[2] = f.tf;
  h[3] = f.session;
  h.writeUInt32LE(f.sig >>> 0, 4);
  h.writeUInt16LE(f.seq, 8);
  parts.push(h);
  if (type <= 1) {
    const c = Buffer.alloc(4);
    c.writeUInt32LE((f.connSig ?? 0) >>> 0);
    parts.push(c);
  } else if (type === 2) parts.push(Buffer.from([f.frag ?? 0]));
  if ((f.tf & 0x40) !== 0) {
    const s = Buffer.alloc(2);
    s.writeUInt16LE(payload.length);
    parts.push(s);
  }
  parts.push(payload);
  const body = Buffer.concat(parts);
  if (w.width === 1) return Buffer.concat([body, Buffer.from([checksum1(body, w.key)])]);
  const c = Buffer.alloc(4);
  c.writeUInt32LE(checksum4(body, w.key));
  return Buffer.concat([body, c]);
}

/** Parses every packet of a datagram, verifying each checksum (throws on a bad one). */
function parse(w: Wire, d: Buffer): Pkt[] {
  const out: Pkt[] = [];
  let off = 0;
  while (off < d.length) {
    const start = off;
    const tf = d[off + 2]!;
    const type = tf & 7;
    const p: Pkt = {
      src: d[off]!,
      dst: d[off + 1]!,
      tf,
      type,
      session: d[off + 3]!,
      sig: d.readUInt32LE(off + 4),
      seq: d.readUInt16LE(off + 8),
      hasSize: (tf & 0x40) !== 0,
      payload: Buffer.alloc(0),
      raw: Buffer.alloc(0),
    };
    off += 10;
    if (type <= 1) {
      p.connSig = d.readUInt32LE(off);
      off += 4;
    } else if (type === 2) p.frag = d[off++]!;
    let size: number;
    if (p.hasSize) {
      size = d.readUInt16LE(off);
      off += 2;
    } else size = d.length - off - w.width;
    p.payload = Buffer.from(d.subarray(off, off + size));
    off += size;
    const body = d.subarray(start, off);
    const got = w.width === 1 ? d[off]! : d.readUInt32LE(off);
    const want = w.width === 1 ? checksum1(body, w.key) : checksum4(body, w.key);
    if (got !== want) throw new Error(`bad checksum ${got} != ${want}`);
    off += w.width;
    p.raw = Buffer.from(d.subarray(start, off));
    out.push(p);
  }
  return out;
}

class IndependentClient {
  readonly socket = dgram.createSocket('udp4');
  readonly inbox: Pkt[] = [];
  readonly datagrams: Buffer[] = [];
  private waiters: (() => void)[] = [];
  serverSig = 0;
  serverSession = 0;
  readonly clientSig: number;
  readonly session = 0x13;
  seq = 2;

  readonly port: number;
  readonly w: Wire;

  constructor(port: number, w: Wire) {
    this.port = port;
    this.w = w;
    // The official clients' signature: the server's IPv4 big-endian OR its port << 16.
    this.clientSig = (0x7f000001 | (port << 16)) >>> 0;
    this.socket.on('message', (m) => {
      this.datagrams.push(m);
      this.inbox.push(...parse(this.w, m));
      for (const f of this.waiters.splice(0)) f();
    });
  }

  async open(): Promise<void> {
    await new Promise<void>((r) => this.socket.bind(0, '127.0.0.1', r));
  }

  send(d: Buffer): void {
    this.socket.send(d, this.port, '127.0.0.1');
  }

  async next(pred: (p: Pkt) => boolean, ms = 5000): Promise<Pkt> {
    const deadline = Date.now() + ms;
    for (;;) {
      const i = this.inbox.findIndex(pred);
      if (i >= 0) return this.inbox.splice(i, 1)[0]!;
      const left = deadline - Date.now();
      if (left <= 0) throw new Error('timed out waiting for a packet');
      await new Promise<void>((r) => {
        const t = setTimeout(r, left);
        this.waiters.push(() => {
          clearTimeout(t);
          r();
        });
      });
    }
  }

  /** Nothing matching arrives within `ms`. */
  async none(pred: (p: Pkt) => boolean, ms: number): Promise<boolean> {
    await elapse(ms, 'nothing matching may arrive within the window');
    return !this.inbox.some(pred);
  }

  async connect(connectPayload: Buffer = Buffer.alloc(0)): Promise<{ synAck: Pkt; connectAck: Pkt }> {
    this.send(build(this.w, { src: 0x3f, dst: 0x31, tf: 0x20, session: 0, sig: 0, seq: 0, connSig: 0 }));
    const synAck = await this.next((p) => p.type === 0);
    this.serverSig = synAck.connSig!;
    this.send(
      build(
        this.w,
        {
          src: 0x3f,
          dst: 0x31,
          tf: 0x31,
          session: this.session,
          sig: this.serverSig,
          seq: 1,
          connSig: this.clientSig,
        },
        connectPayload,
      ),
    );
    const connectAck = await this.next((p) => p.type === 1);
    this.serverSession = connectAck.session;
    return { synAck, connectAck };
  }

  /** Sends one message (fragmented at 963 bytes), encoded with `enc`; returns the sequence ids used. */
  sendMessage(msg: Buffer, enc: (b: Buffer) => Buffer): number[] {
    const seqs: number[] = [];
    const chunks: Buffer[] = [];
    for (let o = 0; o < msg.length; o += 963) chunks.push(msg.subarray(o, o + 963));
    chunks.forEach((c, i) => {
      const frag = i === chunks.length - 1 ? 0 : i + 1;
      const seq = this.seq++;
      seqs.push(seq);
      this.send(
        build(
          this.w,
          { src: 0x3f, dst: 0x31, tf: 0x32, session: this.session, sig: this.serverSig, seq, frag },
          enc(c),
        ),
      );
    });
    return seqs;
  }

  ack(p: Pkt): void {
    this.send(
      build(this.w, {
        src: 0x3f,
        dst: 0x31,
        tf: (p.tf & 7) | 0x08,
        session: this.session,
        sig: this.serverSig,
        seq: p.seq,
        frag: p.frag,
      }),
    );
  }

  /** Receives one whole message: acks every DATA fragment and concatenates them up to fragment 0. */
  async receiveMessage(dec: (b: Buffer) => Buffer, ms = 5000): Promise<{ message: Buffer; packets: Pkt[] }> {
    const packets: Pkt[] = [];
    for (;;) {
      const p = await this.next((x) => x.type === 2 && (x.tf & 0x08) === 0, ms);
      this.ack(p);
      packets.push(p);
      if (p.frag === 0) break;
    }
    packets.sort((a, b) => a.seq - b.seq);
    return { message: Buffer.concat(packets.map((p) => dec(p.payload))), packets };
  }

  close(): Promise<void> {
    return new Promise((r) => this.socket.close(() => r()));
  }
}

// ---- classic RMC by hand ----------------------------------------------------------------------

function qstr(s: string): Buffer {
  const b = Buffer.from(`${s}\0`, 'utf8');
  const l = Buffer.alloc(2);
  l.writeUInt16LE(b.length);
  return Buffer.concat([l, b]);
}

function u32(v: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(v >>> 0);
  return b;
}

function classicRequest(protocol: number, callId: number, methodId: number, args: Buffer): Buffer {
  const body = Buffer.concat([Buffer.from([protocol | 0x80]), u32(callId), u32(methodId), args]);
  return Buffer.concat([u32(body.length), body]);
}

function classicResponse(m: Buffer): {
  protocol: number;
  ok: boolean;
  callId: number;
  methodId: number;
  results: Buffer;
} {
  expect(m.readUInt32LE(0)).toBe(m.length - 4);
  const protocol = m[4]!;
  const ok = m[5] === 1;
  if (!ok) return { protocol, ok, callId: m.readUInt32LE(10), methodId: 0, results: m.subarray(6, 10) };
  return { protocol, ok, callId: m.readUInt32LE(6), methodId: m.readUInt32LE(10), results: m.subarray(14) };
}

function readQstr(b: Buffer, o: number): [string, number] {
  const n = b.readUInt16LE(o);
  return [b.subarray(o + 2, o + 2 + n - 1).toString('utf8'), o + 2 + n];
}

// ---- the spawned server -------------------------------------------------------------------------

async function spawnServer(args: string[]): Promise<{ port: number; stop: () => Promise<void> }> {
  const dataDir = mkdtempSync(path.join(os.tmpdir(), 'gw-indie-'));
  const child: ChildProcess = spawn(
    process.execPath,
    [
      BIN,
      'serve',
      'rmc',
      '--host',
      '127.0.0.1',
      '--port',
      '0',
      '--rmc-transport',
      'prudp',
      '--data-dir',
      dataDir,
      ...args,
    ],
    { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, NO_COLOR: '1' } },
  );
  let out = '';
  const port = await new Promise<number>((resolve, reject) => {
    const t = setTimeout(() => reject(new Error(`server did not start: ${out}`)), 20_000);
    const onData = (d: Buffer) => {
      out += d.toString();
      const m = /rmc udp 127\.0\.0\.1:(\d+)/.exec(out);
      if (m !== null) {
        clearTimeout(t);
        resolve(Number(m[1]));
      }
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', onData);
    child.once('exit', (code) => reject(new Error(`server exited ${code}: ${out}`)));
  });
  return {
    port,
    stop: async () => {
      if (child.exitCode === null) {
        const exited = new Promise((r) => child.once('exit', r));
        child.kill('SIGTERM');
        await exited;
      }
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

describe('independent PRUDP client vs `gamewire serve rmc --prudp-profile classic`', () => {
  let server: { port: number; stop: () => Promise<void> };
  const w: Wire = { key: ACCESS_KEY, width: 1 };
  beforeAll(async () => {
    server = await spawnServer([
      '--prudp-profile',
      'classic',
      '--prudp-access-key',
      ACCESS_KEY,
      '--prudp-password',
      'pw1',
    ]);
  });
  afterAll(async () => {
    await server?.stop();
  });

  it('handshake, calls (plain and compressed), fragments, a wrong checksum, DISCONNECT, Kerberos', async () => {
    const c = new IndependentClient(server.port, w);
    await c.open();
    try {
      // 1. SYN / CONNECT: checksums verify (parse throws otherwise) and the flag bytes are the official server's.
      const { synAck, connectAck } = await c.connect();
      expect(synAck.raw.subarray(0, 10).toString('hex')).toBe('313f4800000000000000');
      expect(synAck.connSig).not.toBe(0);
      expect(synAck.raw.subarray(14, 16).toString('hex')).toBe('0000'); // size 0
      expect(synAck.raw).toHaveLength(17);
      expect(connectAck.tf).toBe(0x49);
      expect(connectAck.sig).toBe(c.clientSig);
      expect(connectAck.seq).toBe(1);
      expect(connectAck.connSig).toBe(0);
      expect(connectAck.payload.toString('hex')).toBe('0f'); // RC4("CD&ML") of one 00 byte

      // 2a. An uncompressed request: TicketGranting::Login("indie").
      const login = classicRequest(10, 0x1001, 1, qstr('indie'));
      const [seqLogin] = c.sendMessage(login, encodeClassic);
      expect(encodeClassic(login)[0]).toBe(0x0f); // it went uncompressed
      const ack = await c.next((p) => p.type === 2 && (p.tf & 0x08) !== 0 && p.seq === seqLogin);
      expect(ack.tf).toBe(0x4a);
      expect(ack.session).toBe(c.serverSession);
      expect(ack.sig).toBe(c.clientSig);
      expect(ack.frag).toBe(0);
      expect(ack.payload).toHaveLength(0);
      expect(ack.hasSize).toBe(true);
      const r1 = await c.receiveMessage((b) => decodeClassic(b).body);
      expect(r1.packets[0]!.tf).toBe(0x72);
      expect(r1.packets[0]!.seq).toBe(1);
      const resp = classicResponse(r1.message);
      expect(resp).toMatchObject({ protocol: 10, ok: true, callId: 0x1001, methodId: 0x8001 });
      expect(resp.results.readUInt32LE(0)).toBe(0x00010001);
      const pid = resp.results.readUInt32LE(4);
      const ticketLen = resp.results.readUInt32LE(8);
      const sealed = resp.results.subarray(12, 12 + ticketLen);
      const [url] = readQstr(resp.results, 12 + ticketLen);
      expect(url).toBe(`prudps:/address=127.0.0.1;port=${server.port};CID=1;PID=2;sid=1;stream=3;type=2`);

      // 2b. A compressed request: LoginEx with 600 zero bytes of extra data; the response's call id matches.
      const extra = Buffer.concat([
        qstr('UbiAuthenticationLoginCustomData'),
        u32(604),
        u32(600),
        Buffer.alloc(600),
      ]);
      const loginEx = classicRequest(10, 0x1002, 2, Buffer.concat([qstr('indie'), extra]));
      const enc = encodeClassic(loginEx);
      expect(rc4(CDML, enc)[0]).toBeGreaterThan(0); // compressed: the ratio byte
      c.sendMessage(loginEx, encodeClassic);
      const r2 = await c.receiveMessage((b) => decodeClassic(b).body);
      expect(classicResponse(r2.message)).toMatchObject({ ok: true, callId: 0x1002, methodId: 0x8002 });

      // Kerberos: the user ticket opens with MD5^(65000 + pid % 1024)("pw1").
      let userKey = Buffer.from('pw1');
      for (let i = 0; i < 65000 + (pid % 1024); i++) userKey = createHash('md5').update(userKey).digest();
      const ct = sealed.subarray(0, sealed.length - 16);
      expect(
        createHmac('md5', userKey)
          .update(ct)
          .digest()
          .equals(sealed.subarray(sealed.length - 16)),
      ).toBe(true);
      const plain = rc4(userKey, ct);
      const sessionKey = plain.subarray(0, 16);
      expect(plain.readUInt32LE(16)).toBe(2);
      const internal = plain.subarray(24, 24 + plain.readUInt32LE(20));

      // 4a. A request with a wrong checksum is ignored: no ack, no answer.
      const bad = build(
        w,
        { src: 0x3f, dst: 0x31, tf: 0x32, session: c.session, sig: c.serverSig, seq: c.seq, frag: 0 },
        encodeClassic(classicRequest(10, 0x1003, 1, qstr('x'))),
      );
      bad[bad.length - 1] ^= 0x5a;
      // The acks of the calls above: wait until none has arrived for 100 ms, then forget them.
      let seen = -1;
      await waitFor(
        () => {
          const quiet = c.inbox.length === seen;
          seen = c.inbox.length;
          return quiet;
        },
        { what: 'the acks of the calls above to stop', intervalMs: 100 },
      );
      c.inbox.length = 0;
      c.send(bad);
      expect(await c.none((p) => p.type === 2, 700)).toBe(true);

      // 4b. DISCONNECT is acked (0x4b, echoing the sequence id), more than once.
      const dseq = c.seq++;
      c.send(build(w, { src: 0x3f, dst: 0x31, tf: 0x33, session: c.session, sig: c.serverSig, seq: dseq }));
      const dack = await c.next((p) => p.type === 3);
      expect(dack.tf).toBe(0x4b);
      expect(dack.seq).toBe(dseq);
      await c.next((p) => p.type === 3);

      // 3. Secure connection with the Kerberos ticket, then Register with a long URL: a response
      //    over 963 bytes arrives as fragments 1, …, 0 that reassemble.
      const s = new IndependentClient(server.port, w);
      await s.open();
      try {
        const check = 0x11223344;
        const req = rc4(sessionKey, Buffer.concat([u32(pid), u32(0), u32(check)]));
        const request = Buffer.concat([req, createHmac('md5', sessionKey).update(req).digest()]);
        const body = Buffer.concat([u32(internal.length), internal, u32(request.length), request]);
        const { connectAck: sack } = await s.connect(encodeClassic(body));
        const ackBody = decodeClassic(sack.payload).body;
        expect(ackBody.readUInt32LE(0)).toBe(4);
        expect(ackBody.readUInt32LE(4)).toBe(check + 1);
        const longUrl = `prudp:/address=10.1.2.3;port=3074;sid=15;note=${'n'.repeat(1500)}`;
        const register = classicRequest(11, 0x2001, 1, Buffer.concat([u32(1), qstr(longUrl)]));
        expect(register.length).toBeGreaterThan(963);
        s.sendMessage(register, encodeClassic);
        const big = await s.receiveMessage((b) => decodeClassic(b).body);
        expect(big.message.length).toBeGreaterThan(963);
        expect(big.packets.map((p) => p.frag)).toEqual([1, 0]);
        expect(decodeClassic(big.packets[0]!.payload).body).toHaveLength(963);
        const rr = classicResponse(big.message);
        expect(rr).toMatchObject({ protocol: 11, ok: true, callId: 0x2001, methodId: 0x8001 });
        const [pub] = readQstr(rr.results, 8);
        expect(pub).toContain(`note=${'n'.repeat(1500)}`);
        expect(pub).toContain('type=3');
      } finally {
        await s.close();
      }
    } finally {
      await c.close();
    }
  }, 60_000);
});

describe('independent PRUDP client vs `gamewire serve rmc --prudp-profile hyperscape`', () => {
  const runs: { name: string; args: string[]; w: Wire }[] = [
    {
      name: 'access key yl4NG7qZ, 1-byte checksum',
      args: ['--prudp-access-key', ACCESS_KEY],
      w: { key: ACCESS_KEY, width: 1 },
    },
    {
      name: 'access key learned from the SYN (auto), 4-byte checksum',
      args: [],
      w: { key: 'OtherKey9', width: 4 },
    },
  ];
  for (const run of runs) {
    it(`ECDH CONNECT and one AES-encrypted call (${run.name})`, async () => {
      const server = await spawnServer(['--prudp-profile', 'hyperscape', ...run.args]);
      const c = new IndependentClient(server.port, run.w);
      await c.open();
      try {
        const ecdh = createECDH('prime256v1');
        const pub = ecdh.generateKeys();
        const blob = Buffer.concat([Buffer.from('ECK1'), u32(32), pub.subarray(1)]);
        const { connectAck } = await c.connect(blob);
        const a = connectAck.payload;
        expect(a.readUInt16LE(0)).toBe(64);
        expect(a.readUInt16LE(66)).toBe(72);
        const serverBlob = a.subarray(68, 140);
        expect(serverBlob.subarray(0, 4).toString()).toBe('ECK1');
        const shared = ecdh.computeSecret(Buffer.concat([Buffer.from([4]), serverBlob.subarray(8)]));
        const key = createHash('sha1').update(shared).digest().subarray(0, 16);
        const aesEnc = (b: Buffer) => {
          const iv = randomBytes(16);
          const z = deflateSync(b);
          const cph = createCipheriv('aes-128-cbc', key, iv);
          return Buffer.concat([iv, cph.update(Buffer.concat([Buffer.from([2]), z])), cph.final()]);
        };
        const aesDec = (b: Buffer) => {
          const d = createDecipheriv('aes-128-cbc', key, b.subarray(0, 16));
          const plain = Buffer.concat([d.update(b.subarray(16)), d.final()]);
          return plain[0] === 0 ? plain.subarray(1) : inflateSync(plain.subarray(1));
        };
        const body = Buffer.concat([
          qstr('CloudServersProtocol'),
          Buffer.from([1]),
          u32(77),
          qstr('CloudServersProtocol::GetDatacenters_V1'),
          u32(0),
        ]);
        c.sendMessage(Buffer.concat([u32(body.length), body]), aesEnc);
        const { message } = await c.receiveMessage(aesDec);
        expect(message.readUInt32LE(0)).toBe(message.length - 4);
        let [proto, o] = readQstr(message, 4);
        expect(proto).toBe('CloudServersProtocol');
        expect(message[o]).toBe(0); // a response
        expect(message[o + 1]).toBe(1); // success
        expect(message.readUInt32LE(o + 2)).toBe(77);
        [proto, o] = readQstr(message, o + 6);
        expect(proto).toBe('CloudServersProtocol::GetDatacenters_V1*');
      } finally {
        await c.close();
        await server.stop();
      }
    }, 60_000);
  }
});
