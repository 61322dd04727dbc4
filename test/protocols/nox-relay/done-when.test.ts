/**
 * The "Done when" list, by an independent scripted client: raw TCP sockets and bytes
 * built by hand with Buffer, no gamewire codec, client or framing code.
 */
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NoxRelayServer } from '../../../src/protocols/nox-relay/server.js';
import { elapse } from '../../helpers/wait.js';
import { startServer } from './helpers.js';

interface Frame {
  uid: number;
  type: number;
  payload: Buffer;
}

function str(s: string): Buffer {
  const b = Buffer.from(s, 'utf8');
  const len = Buffer.alloc(2);
  len.writeUInt16BE(b.length);
  return Buffer.concat([len, b]);
}

function frame(uid: number, type: number, ...parts: Buffer[]): Buffer {
  const payload = Buffer.concat(parts);
  const h = Buffer.alloc(5);
  h.writeUInt16BE(5 + payload.length, 0);
  h.writeUInt16BE(uid, 2);
  h[4] = type;
  return Buffer.concat([h, payload]);
}

const u8 = (v: number) => Buffer.from([v]);
const u16 = (v: number) => {
  const b = Buffer.alloc(2);
  b.writeUInt16BE(v);
  return b;
};
const f32 = (...v: number[]) => {
  const b = Buffer.alloc(4 * v.length);
  for (const [i, x] of v.entries()) b.writeFloatBE(x, 4 * i);
  return b;
};

class Script {
  readonly socket: net.Socket;
  readonly frames: Frame[] = [];
  closed = false;
  private acc = Buffer.alloc(0);
  private waiters: (() => void)[] = [];

  constructor(port: number) {
    this.socket = net.connect({ host: '127.0.0.1', port });
    this.socket.on('error', () => {});
    this.socket.on('data', (d) => {
      this.acc = Buffer.concat([this.acc, d]);
      while (this.acc.length >= 2 && this.acc.length >= this.acc.readUInt16BE(0)) {
        const n = this.acc.readUInt16BE(0);
        this.frames.push({
          uid: this.acc.readUInt16BE(2),
          type: this.acc[4]!,
          payload: this.acc.subarray(5, n),
        });
        this.acc = this.acc.subarray(n);
      }
      for (const w of this.waiters.splice(0)) w();
    });
    this.socket.on('close', () => {
      this.closed = true;
      for (const w of this.waiters.splice(0)) w();
    });
  }

  ready(): Promise<void> {
    return new Promise((r) => this.socket.once('connect', () => r()));
  }

  /** Waits for the first frame (not yet taken) matching; takes it. */
  async expect(pred: (f: Frame) => boolean, ms = 2000): Promise<Frame> {
    const deadline = Date.now() + ms;
    for (;;) {
      const i = this.frames.findIndex(pred);
      if (i >= 0) return this.frames.splice(i, 1)[0]!;
      if (this.closed || Date.now() > deadline) throw new Error('expected frame did not arrive');
      // Woken by the next frame or the close, or at the deadline.
      await new Promise<void>((r) => {
        const t = setTimeout(r, Math.max(1, deadline - Date.now()));
        this.waiters.push(() => {
          clearTimeout(t);
          r();
        });
      });
    }
  }

  send(b: Buffer): void {
    this.socket.write(b);
  }
}

let server: NoxRelayServer;
beforeAll(async () => {
  server = await startServer();
});
afterAll(async () => {
  await server.close();
});

async function login(token: string, engine: string): Promise<Script> {
  const s = new Script(server.port);
  await s.ready();
  s.send(frame(1, 0x01, u16(1), str(engine), str('linux')));
  const hs = await s.expect((f) => f.uid === 1 && f.type === 0x01);
  expect(hs.payload.readUInt16BE(0)).toBe(1); // protocol
  expect(hs.payload.subarray(4, 8).toString('hex')).toBe('7f000001'); // our IP echoed
  expect(hs.payload.readUInt16BE(8)).toBe(s.socket.localPort); // our port echoed
  expect(hs.payload[10]! & 1).toBe(1); // IsOffline
  s.send(frame(2, 0x05, u8(0), str(token)));
  const auth = await s.expect((f) => f.uid === 2 && f.type === 0x05);
  expect(auth.payload[0]).toBe(0); // Success
  return s;
}

describe('nox-relay: the issue "Done when" list over raw TCP', () => {
  it('handshake, offline auth, Sessions, Enter, Join, Transform within 2 s, Latency uid, Quit and Leave', async () => {
    const a = await login('501', 'script-a');
    // Sessions page 0: count, one 13-byte entry (instance 0), then current page and total pages.
    a.send(frame(3, 0x11, u8(0)));
    const sessions = await a.expect((f) => f.uid === 3 && f.type === 0x12);
    expect(sessions.payload[0]).toBe(1);
    expect(sessions.payload[1 + 4]).toBe(0); // internal id
    expect(sessions.payload.subarray(1 + 13)).toEqual(Buffer.from([0, 1]));
    // Enter instance 0, then Traveling Travel + Ready.
    a.send(frame(4, 0x06, u8(0), u8(0)));
    const enter = await a.expect((f) => f.uid === 4 && f.type === 0x06);
    expect([enter.payload[0], enter.payload[1]]).toEqual([0, 0]);
    const aId = enter.payload.readUInt16BE(6);
    a.send(frame(5, 0x0a, u8(0), u8(0)));
    expect((await a.expect((f) => f.uid === 5 && f.type === 0x0a)).payload[1]).toBe(0x04);
    a.send(frame(6, 0x0a, u8(0), u8(1)));
    expect((await a.expect((f) => f.uid === 6 && f.type === 0x0a)).payload[1]).toBe(0x10);

    const b = await login('502', 'script-b');
    b.send(frame(4, 0x06, u8(0), u8(0)));
    const benter = await b.expect((f) => f.uid === 4 && f.type === 0x06);
    expect(benter.payload[1]).toBe(0);
    const bId = benter.payload.readUInt16BE(6);
    // Each sees the other's Join (uid 0, type 0x10, player id at offset 5).
    const joinA = await b.expect((f) => f.type === 0x10);
    expect(joinA.uid).toBe(0);
    expect(joinA.payload.readUInt16BE(5)).toBe(aId);
    const joinB = await a.expect((f) => f.type === 0x10);
    expect(joinB.payload.readUInt16BE(5)).toBe(bId);
    b.send(frame(5, 0x0a, u8(0), u8(0)));
    await b.expect((f) => f.uid === 5);
    b.send(frame(6, 0x0a, u8(0), u8(1)));
    await b.expect((f) => f.uid === 6);

    // A Transform from A reaches B within 2 s, with A's id instead of 0xFFFF.
    const t0 = Date.now();
    a.send(frame(0, 0x0b, u8(0), u8(1), u16(0xffff), u16(5), u8(0x03), f32(1, 1.7, -2), f32(0, 0, 0, 1)));
    const tr = await b.expect((f) => f.type === 0x0b, 2000);
    expect(Date.now() - t0).toBeLessThan(2000);
    expect(tr.payload.readUInt16BE(2)).toBe(aId);
    expect(tr.payload.readUInt16BE(4)).toBe(5);
    expect(tr.payload.readFloatBE(7)).toBe(1);
    expect(tr.payload.readFloatBE(7 + 24)).toBe(1); // w

    // Latency: the same UID and the client's timestamp echoed.
    const ts = Buffer.from('00000191fb3e3a83', 'hex');
    a.send(frame(0xbeef, 0x04, ts));
    const lat = await a.expect((f) => f.type === 0x04);
    expect(lat.uid).toBe(0xbeef);
    expect(lat.payload.subarray(0, 8)).toEqual(ts);
    expect(lat.payload.length).toBe(16);

    // Quit: A gets the confirmation, B the Leave.
    a.send(frame(7, 0x07, u8(0), u8(0)));
    const quit = await a.expect((f) => f.uid === 7 && f.type === 0x07);
    expect([quit.payload[0], quit.payload[1]]).toEqual([0, 0]);
    const leave = await b.expect((f) => f.type === 0x11);
    expect(leave.uid).toBe(0);
    expect([leave.payload[0], leave.payload[1], leave.payload.readUInt16BE(2)]).toEqual([0, 0, aId]);
    a.socket.destroy();
    b.socket.destroy();
  });

  it('a length-3 frame closes only its own connection', async () => {
    const victim = await login('503', 'victim');
    const bystander = await login('504', 'bystander');
    victim.send(Buffer.from([0x00, 0x03, 0x00]));
    await victim.expect(() => false, 1000).catch(() => undefined);
    expect(victim.closed).toBe(true);
    bystander.send(frame(9, 0x04, Buffer.alloc(8)));
    expect((await bystander.expect((f) => f.uid === 9)).type).toBe(0x04);
    expect(bystander.closed).toBe(false);
    bystander.socket.destroy();
  });

  it('answers frames written one byte at a time, and two frames in one write', async () => {
    const s = new Script(server.port);
    await s.ready();
    const hs = frame(21, 0x01, u16(1), str('bytewise'), str('linux'));
    for (const byte of hs) {
      s.send(Buffer.from([byte]));
      await elapse(2, 'space the bytes so that they arrive in separate reads');
    }
    expect((await s.expect((f) => f.uid === 21)).type).toBe(0x01);
    s.send(Buffer.concat([frame(22, 0x04, Buffer.alloc(8)), frame(23, 0x11, u8(0))]));
    expect((await s.expect((f) => f.uid === 22)).type).toBe(0x04);
    expect((await s.expect((f) => f.uid === 23)).type).toBe(0x12);
    s.socket.destroy();
  });
});
