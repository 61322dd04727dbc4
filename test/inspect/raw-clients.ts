/**
 * Small clients written from the protocol descriptions with node:net / node:dgram only: they
 * share no code with gamewire, so a capture of their sessions checks the inspector against
 * bytes gamewire did not produce.
 */
import dgram from 'node:dgram';
import net from 'node:net';

/** A TCP connection that collects bytes and lets a test wait for a number of them. */
export class RawTcp {
  readonly socket: net.Socket;
  private buf = Buffer.alloc(0);
  private waiters: (() => void)[] = [];
  /** XOR applied to received bytes (JS5 after a rekey). */
  xorKey = 0;

  private constructor(socket: net.Socket) {
    this.socket = socket;
    socket.setNoDelay(true);
    socket.on('data', (chunk: Buffer) => {
      const c = Buffer.from(chunk);
      if (this.xorKey !== 0) for (let i = 0; i < c.length; i++) c[i]! ^= this.xorKey;
      this.buf = Buffer.concat([this.buf, c]);
      const w = this.waiters;
      this.waiters = [];
      for (const f of w) f();
    });
    socket.on('error', () => {});
  }

  static connect(port: number): Promise<RawTcp> {
    return new Promise((resolve, reject) => {
      const s = net.connect({ host: '127.0.0.1', port }, () => resolve(new RawTcp(s)));
      s.once('error', reject);
    });
  }

  send(b: Buffer): void {
    this.socket.write(b);
  }

  /** Resolves with the first `n` buffered bytes (removed), waiting up to `ms`. */
  async take(n: number, ms = 10_000): Promise<Buffer> {
    const deadline = Date.now() + ms;
    while (this.buf.length < n) {
      if (Date.now() > deadline)
        throw new Error(`timed out waiting for ${n} bytes (have ${this.buf.length})`);
      // Woken by the next bytes, or at the deadline.
      await new Promise<void>((r) => {
        const t = setTimeout(r, Math.max(1, deadline - Date.now()));
        this.waiters.push(() => {
          clearTimeout(t);
          r();
        });
      });
    }
    const out = this.buf.subarray(0, n);
    this.buf = this.buf.subarray(n);
    return out;
  }

  /** Waits until at least `n` bytes are buffered, without taking them. */
  async peek(n: number, ms = 10_000): Promise<Buffer> {
    const b = await this.take(n, ms);
    this.buf = Buffer.concat([b, this.buf]);
    return b;
  }

  close(): Promise<void> {
    return new Promise((resolve) => {
      this.socket.end(() => resolve());
      setTimeout(resolve, 1000);
    });
  }
}

// ---- JS5 ----------------------------------------------------------------------------------

/** One JS5 response, read the way a client reads it: header, then the 0xFF-marked body. */
export async function js5ReadResponse(
  c: RawTcp,
): Promise<{ archive: number; group: number; container: Buffer }> {
  const head = await c.peek(8);
  const compression = head[3]! & 0x7f;
  const length = head.readInt32BE(4);
  const containerLength = length + (compression === 0 ? 5 : 9);
  const total = 3 + containerLength;
  const framed = total <= 512 ? total : total + Math.ceil((total - 512) / 511);
  const bytes = await c.take(framed);
  const plain: number[] = [];
  for (let i = 0; i < bytes.length; i++) {
    if (i > 0 && i % 512 === 0) {
      if (bytes[i] !== 0xff) throw new Error(`no block marker at ${i}`);
      continue;
    }
    plain.push(bytes[i]!);
  }
  const p = Buffer.from(plain);
  return { archive: p[0]!, group: p.readUInt16BE(1), container: p.subarray(3) };
}

// ---- NoxVR ----------------------------------------------------------------------------------

export function noxString(s: string): Buffer {
  const b = Buffer.from(s, 'utf8');
  const len = Buffer.alloc(2);
  len.writeUInt16BE(b.length);
  return Buffer.concat([len, b]);
}

/** `[length u16][uid u16][type u8][payload]`, big-endian, length counting the whole packet. */
export function noxPacket(type: number, payload: Buffer, uid = 0xffff): Buffer {
  const h = Buffer.alloc(5);
  h.writeUInt16BE(5 + payload.length, 0);
  h.writeUInt16BE(uid, 2);
  h[4] = type;
  return Buffer.concat([h, payload]);
}

export function noxHandshake(engine: string, platform: string): Buffer {
  return noxPacket(0x01, Buffer.concat([Buffer.from([0, 1]), noxString(engine), noxString(platform)]));
}

export function noxAuth(token: string): Buffer {
  return noxPacket(0x05, Buffer.concat([Buffer.from([0]), noxString(token)]));
}

export function noxLatency(ms: bigint): Buffer {
  const b = Buffer.alloc(8);
  b.writeBigInt64BE(ms);
  return noxPacket(0x04, b);
}

export function noxSegment(id: number, total: number, index: number, data: Buffer): Buffer {
  const h = Buffer.alloc(6);
  h.writeUInt16BE(id, 0);
  h.writeUInt16BE(total, 2);
  h.writeUInt16BE(index, 4);
  return noxPacket(0x02, Buffer.concat([h, data]));
}

export function noxReliable(inner: Buffer[]): Buffer {
  const parts: Buffer[] = [Buffer.from([inner.length])];
  for (const p of inner) {
    const l = Buffer.alloc(2);
    l.writeUInt16BE(p.length);
    parts.push(l, p);
  }
  return noxPacket(0x03, Buffer.concat(parts));
}

/** Reads one whole Nox packet from a TCP stream. */
export async function noxRead(c: RawTcp): Promise<Buffer> {
  const h = await c.peek(2);
  return c.take(h.readUInt16BE(0));
}

export class RawUdp {
  readonly socket: dgram.Socket;
  private readonly queue: Buffer[] = [];
  private waiter: (() => void) | undefined;
  private readonly port: number;

  private constructor(socket: dgram.Socket, port: number) {
    this.socket = socket;
    this.port = port;
    socket.on('message', (m) => {
      this.queue.push(m);
      this.waiter?.();
    });
  }

  static async open(port: number): Promise<RawUdp> {
    const s = dgram.createSocket('udp4');
    await new Promise<void>((r) => s.bind(0, '127.0.0.1', () => r()));
    return new RawUdp(s, port);
  }

  send(b: Buffer): void {
    this.socket.send(b, this.port, '127.0.0.1');
  }

  async next(ms = 5000): Promise<Buffer> {
    const deadline = Date.now() + ms;
    while (this.queue.length === 0) {
      if (Date.now() > deadline) throw new Error('no datagram');
      // Woken by the next datagram, or at the deadline.
      await new Promise<void>((r) => {
        const t = setTimeout(r, Math.max(1, deadline - Date.now()));
        this.waiter = () => {
          clearTimeout(t);
          r();
        };
      });
    }
    return this.queue.shift()!;
  }

  close(): Promise<void> {
    return new Promise((r) => this.socket.close(() => r()));
  }
}

// ---- RMC (HyperScape envelope) ------------------------------------------------------------------

/** Quazal String: u16le length counting a trailing NUL, the bytes, the NUL. */
export function qString(s: string): Buffer {
  const b = Buffer.from(`${s}\0`, 'utf8');
  const len = Buffer.alloc(2);
  len.writeUInt16LE(b.length);
  return Buffer.concat([len, b]);
}

/** A request: u32le size, protocol name, 1 (request), call id, method name, no class versions, args. */
export function rmcRequest(protocol: string, callId: number, method: string, args: Buffer): Buffer {
  const id = Buffer.alloc(4);
  id.writeUInt32LE(callId);
  const body = Buffer.concat([
    qString(protocol),
    Buffer.from([1]),
    id,
    qString(method),
    Buffer.alloc(4),
    args,
  ]);
  const size = Buffer.alloc(4);
  size.writeUInt32LE(body.length);
  return Buffer.concat([size, body]);
}

export async function rmcRead(c: RawTcp): Promise<Buffer> {
  const h = await c.peek(4);
  return c.take(4 + h.readUInt32LE(0));
}
