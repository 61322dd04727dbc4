/**
 * coturn as a reference relay for the unity-relay benchmark: Debian's `turnserver` on loopback,
 * one relay thread, anonymous, UDP only, and a minimal TURN client (Allocate, CreatePermission,
 * ChannelBind, then ChannelData) so each flow is "client → relay → peer", one datagram in and one
 * out, the same work as a RELAY through gamewire. Not a suite: bench/unity-relay.ts uses it.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import dgram from 'node:dgram';
import { existsSync, readFileSync } from 'node:fs';

const MAGIC = 0x2112a442;

export function coturnAvailable(): boolean {
  try {
    execFileSync('turnserver', ['--version'], { stdio: 'ignore' });
    return true;
  } catch {
    return existsSync('/usr/bin/turnserver');
  }
}

/** User + system CPU seconds of a process (all its threads), from /proc. */
export function cpuSecondsOf(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const ticks = Number(fields[11]) + Number(fields[12]); // utime, stime
  return ticks / clockTicks();
}

let ticksPerSecond: number | undefined;
function clockTicks(): number {
  if (ticksPerSecond === undefined) {
    try {
      ticksPerSecond = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
    } catch {
      ticksPerSecond = 100;
    }
  }
  return ticksPerSecond;
}

export interface Coturn {
  child: ChildProcess;
  port: number;
  close(): Promise<void>;
}

/** Starts turnserver on 127.0.0.1:port, pinned to `cpu` when given (taskset). */
export async function startCoturn(port: number, cpu?: number): Promise<Coturn> {
  const args = [
    '-n',
    '--no-auth',
    '--listening-ip=127.0.0.1',
    `--listening-port=${port}`,
    '--relay-ip=127.0.0.1',
    '--allow-loopback-peers',
    '--relay-threads=1',
    '--no-tcp',
    '--no-tls',
    '--no-dtls',
    '--no-tcp-relay',
    '--no-cli',
    '--no-software-attribute',
    '--min-port=40000',
    '--max-port=40999',
    '--log-file=stdout',
    '--simple-log',
  ];
  const child =
    cpu === undefined
      ? spawn('turnserver', args, { stdio: ['ignore', 'pipe', 'pipe'] })
      : spawn('taskset', ['-c', String(cpu), 'turnserver', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let log = '';
  child.stdout?.on('data', (d: Buffer) => {
    log += d.toString();
  });
  child.stderr?.on('data', (d: Buffer) => {
    log += d.toString();
  });
  // Ready when it answers a Binding request.
  const probe = dgram.createSocket('udp4');
  await new Promise<void>((r) => probe.bind(0, '127.0.0.1', () => r()));
  try {
    await transact(probe, port, 0x0001, [], 10_000);
  } catch (err) {
    child.kill('SIGKILL');
    throw new Error(`turnserver did not start: ${(err as Error).message}\n${log.slice(-2000)}`);
  } finally {
    probe.close();
  }
  return {
    child,
    port,
    close: () =>
      new Promise<void>((resolve) => {
        if (child.exitCode !== null) return resolve();
        child.once('exit', () => resolve());
        child.kill('SIGTERM');
        setTimeout(() => child.kill('SIGKILL'), 2000).unref();
      }),
  };
}

/** The PID doing the relaying (taskset execs turnserver, so the PID is the same). */
export function relayPid(c: Coturn): number {
  return c.child.pid ?? -1;
}

interface Attr {
  type: number;
  value: Buffer;
}

function stunMessage(type: number, attrs: Attr[], tid: Buffer): Buffer {
  const body = Buffer.concat(
    attrs.map((a) => {
      const pad = (4 - (a.value.length % 4)) % 4;
      const h = Buffer.alloc(4);
      h.writeUInt16BE(a.type, 0);
      h.writeUInt16BE(a.value.length, 2);
      return Buffer.concat([h, a.value, Buffer.alloc(pad)]);
    }),
  );
  const h = Buffer.alloc(20);
  h.writeUInt16BE(type, 0);
  h.writeUInt16BE(body.length, 2);
  h.writeUInt32BE(MAGIC, 4);
  tid.copy(h, 8);
  return Buffer.concat([h, body]);
}

function xorAddress(address: string, port: number): Buffer {
  const b = Buffer.alloc(8);
  b[1] = 0x01;
  b.writeUInt16BE(port ^ (MAGIC >>> 16), 2);
  const ip = address.split('.').map(Number);
  const ipInt = ((ip[0]! << 24) | (ip[1]! << 16) | (ip[2]! << 8) | ip[3]!) >>> 0;
  b.writeUInt32BE((ipInt ^ MAGIC) >>> 0, 4);
  return b;
}

function readXorAddress(v: Buffer): { address: string; port: number } {
  const port = v.readUInt16BE(2) ^ (MAGIC >>> 16);
  const ip = (v.readUInt32BE(4) ^ MAGIC) >>> 0;
  return { address: `${ip >>> 24}.${(ip >>> 16) & 255}.${(ip >>> 8) & 255}.${ip & 255}`, port };
}

function attrsOf(msg: Buffer): Attr[] {
  const out: Attr[] = [];
  let o = 20;
  const end = Math.min(msg.length, 20 + msg.readUInt16BE(2));
  while (o + 4 <= end) {
    const type = msg.readUInt16BE(o);
    const len = msg.readUInt16BE(o + 2);
    if (o + 4 + len > end) break;
    out.push({ type, value: msg.subarray(o + 4, o + 4 + len) });
    o += 4 + len + ((4 - (len % 4)) % 4);
  }
  return out;
}

/** Sends a request until its success response arrives; rejects on an error response or timeout. */
function transact(
  socket: dgram.Socket,
  port: number,
  type: number,
  attrs: Attr[],
  timeoutMs = 3000,
): Promise<Buffer> {
  const tid = randomBytes(12);
  const msg = stunMessage(type, attrs, tid);
  return new Promise((resolve, reject) => {
    const resend = setInterval(() => socket.send(msg, port, '127.0.0.1'), 200);
    const timer = setTimeout(() => done(new Error(`STUN 0x${type.toString(16)} timed out`)), timeoutMs);
    const on = (m: Buffer) => {
      if (m.length < 20 || !m.subarray(8, 20).equals(tid)) return;
      const cls = m.readUInt16BE(0) & 0x0110;
      if (cls === 0x0100) done(undefined, m);
      else if (cls === 0x0110) done(new Error(`STUN 0x${type.toString(16)} refused`));
    };
    const done = (err?: Error, m?: Buffer) => {
      clearInterval(resend);
      clearTimeout(timer);
      socket.off('message', on);
      if (err !== undefined) reject(err);
      else resolve(m!);
    };
    socket.on('message', on);
    socket.send(msg, port, '127.0.0.1');
  });
}

/** A TURN allocation whose channel 0x4000 goes to `peerPort` on loopback. Returns the prefix for ChannelData. */
export async function turnChannel(socket: dgram.Socket, turnPort: number, peerPort: number): Promise<void> {
  await transact(socket, turnPort, 0x0003, [{ type: 0x0019, value: Buffer.from([17, 0, 0, 0]) }]).then(
    (r) => {
      const relayed = attrsOf(r).find((a) => a.type === 0x0016);
      if (relayed === undefined) throw new Error('no XOR-RELAYED-ADDRESS');
      return readXorAddress(relayed.value);
    },
  );
  const peer = xorAddress('127.0.0.1', peerPort);
  await transact(socket, turnPort, 0x0008, [{ type: 0x0012, value: peer }]);
  const channel = Buffer.from([0x40, 0x00, 0x00, 0x00]);
  await transact(socket, turnPort, 0x0009, [
    { type: 0x000c, value: channel },
    { type: 0x0012, value: peer },
  ]);
}

/** A ChannelData datagram on channel 0x4000 carrying `payload` bytes (of 0x55, or these bytes). */
export function channelData(payload: number | Buffer): Buffer {
  const length = typeof payload === 'number' ? payload : payload.length;
  const b = Buffer.alloc(4 + length, 0x55);
  b.writeUInt16BE(0x4000, 0);
  b.writeUInt16BE(length, 2);
  if (typeof payload !== 'number') payload.copy(b, 4);
  return b;
}
