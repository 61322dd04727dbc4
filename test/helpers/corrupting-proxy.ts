/**
 * Corrupting links for tests of the load generators' integrity checks: a proxy between a client
 * and a server that relays everything unchanged except what `corrupt` rewrites, server → client,
 * a given number of times (once by default). A protocol's test decodes a message with the
 * project's own codecs, flips one bit of a payload field and re-encodes it; `flipOneBit` and
 * `flipFloat32Bit` are the flips, `bitDifference` proves that the result differs from the
 * original in that one bit only (so framing and headers are intact and only the payload changed).
 *
 * - `CorruptingUdpProxy`: every client source gets its own upstream socket bound to the client's
 *   own address (the server still sees who is behind it, as through impaired-link.ts's proxy);
 *   `corrupt` sees each whole datagram from the server.
 * - `CorruptingTcpProxy`: each connection is relayed through a socket connected from the
 *   client's address; the server's stream is cut into whole frames by `frame` (a length-prefixed
 *   protocol's measure) and `corrupt` sees each frame.
 *
 * JS5's stream (a handshake reply, XORed responses with block markers) has its own parsing proxy,
 * test/protocols/js5/conform-proxy.ts, whose `response` hook does the same job.
 */
import dgram from 'node:dgram';
import net from 'node:net';
import { expect } from 'vitest';
import { type CliResult, errorOf } from './cli.js';

/** Rewrites one server → client message: the bytes to send instead, or undefined to pass it on. */
export type Corrupt = (message: Buffer) => Buffer | undefined;

export interface CorruptionStats {
  /** Messages (datagrams or frames) relayed server → client, corrupted ones included. */
  relayed: number;
  /** Messages `corrupt` rewrote. */
  corrupted: number;
}

/** A copy of `buf` with bit `bit` (0: least significant) of byte `offset` flipped. */
export function flipOneBit(buf: Uint8Array, offset: number, bit: number): Buffer {
  const out = Buffer.from(buf);
  out[offset]! ^= 1 << bit;
  return out;
}

/** `value` as a float32 with bit `bit` (0..31, 31: the sign) of its representation flipped. */
export function flipFloat32Bit(value: number, bit: number): number {
  const v = new DataView(new ArrayBuffer(4));
  v.setFloat32(0, value);
  v.setUint32(0, v.getUint32(0) ^ ((2 ** bit) >>> 0));
  return v.getFloat32(0);
}

/**
 * Where `a` and `b` differ, as bit positions (`byte * 8 + bit`); lengths must match (a changed
 * length is not a one-bit flip: the offsets are then [-1]).
 */
export function bitDifference(a: Uint8Array, b: Uint8Array): number[] {
  if (a.length !== b.length) return [-1];
  const out: number[] = [];
  for (let i = 0; i < a.length; i++) {
    const x = a[i]! ^ b[i]!;
    for (let bit = 0; bit < 8; bit++) if (x & (1 << bit)) out.push(i * 8 + bit);
  }
  return out;
}

/** Counts down the corruptions left and keeps the stats. */
class Corrupter {
  readonly stats: CorruptionStats = { relayed: 0, corrupted: 0 };
  private left: number;
  private readonly corrupt: Corrupt;

  constructor(corrupt: Corrupt, times: number) {
    this.corrupt = corrupt;
    this.left = times;
  }

  pass(message: Buffer): Buffer {
    this.stats.relayed++;
    if (this.left <= 0) return message;
    const out = this.corrupt(message);
    if (out === undefined) return message;
    this.left--;
    this.stats.corrupted++;
    return out;
  }
}

export interface CorruptingOptions {
  /** Rewrites a server → client message. */
  corrupt: Corrupt;
  /** How many messages `corrupt` may rewrite (default 1); after that everything passes. */
  times?: number;
  /** Listening address (default 127.0.0.1, a free port). */
  listen?: { host?: string; port?: number };
}

export class CorruptingUdpProxy {
  private readonly corrupter: Corrupter;
  private readonly upstreams = new Map<string, dgram.Socket>();
  private readonly socket: dgram.Socket;

  private constructor(socket: dgram.Socket, target: { host: string; port: number }, o: CorruptingOptions) {
    this.socket = socket;
    this.corrupter = new Corrupter(o.corrupt, o.times ?? 1);
    socket.on('message', (msg, rinfo) => {
      const key = `${rinfo.address}:${rinfo.port}`;
      const up = this.upstreams.get(key);
      if (up !== undefined) {
        up.send(msg, target.port, target.host);
        return;
      }
      const s = dgram.createSocket('udp4');
      this.upstreams.set(key, s);
      s.on('error', () => {});
      s.on('message', (reply) => this.socket.send(this.corrupter.pass(reply), rinfo.port, rinfo.address));
      // Bound to the client's own address: the server sees who is behind the proxy.
      s.bind(0, rinfo.address, () => s.send(msg, target.port, target.host));
    });
  }

  static async start(
    target: { host: string; port: number },
    o: CorruptingOptions,
  ): Promise<CorruptingUdpProxy> {
    const socket = dgram.createSocket('udp4');
    await new Promise<void>((resolve, reject) => {
      socket.once('error', reject);
      socket.bind(o.listen?.port ?? 0, o.listen?.host ?? '127.0.0.1', () => {
        socket.off('error', reject);
        resolve();
      });
    });
    socket.on('error', () => {});
    return new CorruptingUdpProxy(socket, target, o);
  }

  get port(): number {
    return this.socket.address().port;
  }

  get stats(): CorruptionStats {
    return this.corrupter.stats;
  }

  async close(): Promise<void> {
    for (const s of this.upstreams.values()) s.close();
    this.upstreams.clear();
    await new Promise<void>((resolve) => this.socket.close(() => resolve()));
  }
}

export interface CorruptingTcpOptions extends CorruptingOptions {
  /** The length of the whole frame at the start of `buf`, or undefined when more bytes are needed. */
  frame: (buf: Buffer) => number | undefined;
}

export class CorruptingTcpProxy {
  private readonly corrupter: Corrupter;
  private readonly sockets = new Set<net.Socket>();
  private readonly server: net.Server;

  private constructor(server: net.Server, o: CorruptingTcpOptions) {
    this.server = server;
    this.corrupter = new Corrupter(o.corrupt, o.times ?? 1);
  }

  static async start(
    target: { host: string; port: number },
    o: CorruptingTcpOptions,
  ): Promise<CorruptingTcpProxy> {
    const server = net.createServer();
    const proxy = new CorruptingTcpProxy(server, o);
    server.on('connection', (client) => proxy.relay(client, target, o));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(o.listen?.port ?? 0, o.listen?.host ?? '127.0.0.1', () => resolve());
    });
    return proxy;
  }

  get port(): number {
    return (this.server.address() as net.AddressInfo).port;
  }

  get stats(): CorruptionStats {
    return this.corrupter.stats;
  }

  private relay(client: net.Socket, target: { host: string; port: number }, o: CorruptingTcpOptions): void {
    const upstream = net.connect({
      host: target.host,
      port: target.port,
      localAddress: client.remoteAddress?.replace(/^::ffff:/, ''),
    });
    this.sockets.add(client).add(upstream);
    client.setNoDelay(true);
    upstream.setNoDelay(true);
    const kill = () => {
      client.destroy();
      upstream.destroy();
      this.sockets.delete(client);
      this.sockets.delete(upstream);
    };
    client.on('error', kill);
    upstream.on('error', kill);
    client.on('close', () => upstream.end());
    upstream.on('close', () => client.end());
    client.on('data', (d: Buffer) => upstream.write(d));
    let down: Buffer = Buffer.alloc(0);
    upstream.on('data', (d: Buffer) => {
      down = down.length === 0 ? d : Buffer.concat([down, d]);
      for (;;) {
        const n = down.length === 0 ? undefined : o.frame(down);
        if (n === undefined || n > down.length) break;
        client.write(this.corrupter.pass(Buffer.from(down.subarray(0, n))));
        down = down.subarray(n);
      }
    });
  }

  async close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    this.sockets.clear();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

/**
 * What `gamewire load … --json` must show when exactly one integrity violation of `kind` was
 * seen: exit 1, `ERR_LOAD_FAILED` naming it (its message containing `detail`, when given), and a
 * summary that counts it once and is not ok.
 */
export function expectOneViolation(r: CliResult, kind: string, detail = ''): void {
  expect(r.code, r.stderr).toBe(1);
  const e = errorOf(r);
  expect(e.code).toBe('ERR_LOAD_FAILED');
  expect(e.message).toContain(`1 integrity violations (${kind}:${detail}`);
  const summary = JSON.parse(r.stdout) as { ok: boolean; violations: Record<string, number> };
  expect(summary.violations).toEqual({ [kind]: 1 });
  expect(summary.ok).toBe(false);
}
