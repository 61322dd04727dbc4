/**
 * A transparent JS5 proxy for the conformance tests: it sits between `gamewire conform js5` and
 * a real Js5Server and breaks exactly one rule. It parses both directions the way the protocol
 * defines them (the handshake, 4-byte requests with the rekey, framed and XORed responses), hands
 * each piece to the mutation, and re-frames what the mutation returns. With no mutation it
 * forwards every byte unchanged.
 */
import net from 'node:net';
import { BLOCK_SIZE, frameResponse } from '../../../src/protocols/js5/framing.js';

export interface ProxyConnection {
  /** Requests forwarded and not answered yet, by `archive/group` (a multiset). */
  pending: string[];
  /** The XOR key the client asked for (0: none). */
  xorKey: number;
  /** The client side socket. */
  client: net.Socket;
}

export interface Js5Mutation {
  /** Rewrites the client's handshake before the server sees it. */
  clientHandshake?(bytes: Buffer): Buffer;
  /** Rewrites the server's one-byte handshake reply: bytes to send instead, or 'close'. */
  handshakeReply?(reply: number): Buffer | 'close';
  /** A 4-byte client packet: what to forward (null: swallow it), or 'close' the connection. */
  request?(packet: Buffer, conn: ProxyConnection): Buffer | null | 'close';
  /** A whole response, unframed (`archive u8, group u16, container`): the responses to send instead. */
  response?(plain: Buffer, conn: ProxyConnection): Buffer[];
  /** Frames a plain response (default: the protocol's framing). */
  frame?(plain: Buffer): Buffer;
  /**
   * Serves requests from one queue for every connection, one at a time, each response written
   * and drained before the next request goes up: a server with a single global work queue.
   */
  globalFifo?: boolean;
}

/** A proxy on 127.0.0.1, port 0, to `serverPort`. */
export class Js5Proxy {
  private server: net.Server;
  private readonly sockets = new Set<net.Socket>();
  private fifo: { conn: ProxyConnection; upstream: net.Socket; packet: Buffer }[] = [];
  private fifoRunning = false;
  /** In FIFO mode: who waits for the next response of a connection. */
  private readonly waiting = new Map<ProxyConnection, (bytes: Buffer[]) => void>();
  port = 0;

  private readonly serverPort: number;
  private readonly mutation: Js5Mutation;
  private readonly handshakeBytes: number;

  private constructor(serverPort: number, mutation: Js5Mutation, handshakeBytes: number) {
    this.serverPort = serverPort;
    this.mutation = mutation;
    this.handshakeBytes = handshakeBytes;
    this.server = net.createServer((client) => this.accept(client));
  }

  static async start(serverPort: number, mutation: Js5Mutation, handshakeBytes = 5): Promise<Js5Proxy> {
    const p = new Js5Proxy(serverPort, mutation, handshakeBytes);
    await new Promise<void>((resolve) => p.server.listen(0, '127.0.0.1', resolve));
    p.port = (p.server.address() as net.AddressInfo).port;
    return p;
  }

  async close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private accept(client: net.Socket): void {
    const upstream = net.connect(this.serverPort, '127.0.0.1');
    this.sockets.add(client);
    this.sockets.add(upstream);
    const conn: ProxyConnection = { pending: [], xorKey: 0, client };
    const m = this.mutation;
    const end = (): void => {
      client.destroy();
      upstream.destroy();
    };
    client.on('error', end);
    upstream.on('error', end);
    client.on('close', () => {
      this.sockets.delete(client);
      upstream.end();
    });
    upstream.on('close', () => {
      this.sockets.delete(upstream);
      // Let what is queued for the client go first (the server's close follows its last bytes).
      client.end();
    });

    // Client → server: the handshake, then 4-byte packets.
    let up = Buffer.alloc(0);
    let handshaken = false;
    client.on('data', (d: Buffer) => {
      up = Buffer.concat([up, d]);
      if (!handshaken) {
        if (up.length < this.handshakeBytes) return;
        const hs = up.subarray(0, this.handshakeBytes);
        up = up.subarray(this.handshakeBytes);
        upstream.write(m.clientHandshake?.(Buffer.from(hs)) ?? hs);
        handshaken = true;
      }
      const out: Buffer[] = [];
      while (up.length >= 4) {
        const packet = Buffer.from(up.subarray(0, 4));
        up = up.subarray(4);
        const decided = m.request === undefined ? packet : m.request(packet, conn);
        if (decided === 'close') {
          if (out.length > 0) upstream.write(Buffer.concat(out));
          end();
          return;
        }
        if (decided === null) continue;
        if (decided[0] === 0 || decided[0] === 1) {
          conn.pending.push(`${decided[1]}/${decided.readUInt16BE(2)}`);
          if (m.globalFifo === true) {
            this.fifo.push({ conn, upstream, packet: decided });
            continue;
          }
        }
        if (decided[0] === 4) conn.xorKey = decided[1]!;
        out.push(decided);
      }
      if (out.length > 0) upstream.write(Buffer.concat(out));
      // After the packets before them (a rekey) went up.
      if (this.fifo.length > 0 && !this.fifoRunning) void this.runFifo();
    });

    // Server → client: the one-byte reply, then framed responses.
    let down = Buffer.alloc(0);
    let replied = false;
    upstream.on('data', (d: Buffer) => {
      down = Buffer.concat([down, d]);
      if (!replied) {
        if (down.length < 1) return;
        const reply = down[0]!;
        down = down.subarray(1);
        replied = true;
        const r = m.handshakeReply?.(reply) ?? Buffer.from([reply]);
        if (r === 'close') {
          end();
          return;
        }
        client.write(r);
      }
      for (;;) {
        const framed = takeResponse(down, conn.xorKey);
        if (framed === undefined) return;
        down = down.subarray(framed.length);
        const plainFramed = Buffer.from(framed.map((b) => b ^ conn.xorKey));
        const plain = unframe(plainFramed);
        const k = `${plain[0]}/${plain.readUInt16BE(1)}`;
        const i = conn.pending.indexOf(k);
        if (i >= 0) conn.pending.splice(i, 1);
        const outs = (m.response?.(plain, conn) ?? [plain]).map((o) => {
          const bytes = m.frame?.(o) ?? reframe(o);
          if (conn.xorKey !== 0) for (let j = 0; j < bytes.length; j++) bytes[j]! ^= conn.xorKey;
          return bytes;
        });
        const waiter = this.waiting.get(conn);
        if (waiter !== undefined) {
          this.waiting.delete(conn);
          waiter(outs);
        } else for (const o of outs) client.write(o);
      }
    });
  }

  /** The single global queue: one request at a time, its response drained before the next. */
  private async runFifo(): Promise<void> {
    this.fifoRunning = true;
    while (this.fifo.length > 0) {
      const { conn, upstream, packet } = this.fifo.shift()!;
      if (conn.client.destroyed) continue;
      const outs = await new Promise<Buffer[]>((resolve) => {
        this.waiting.set(conn, resolve);
        conn.client.once('close', () => resolve([]));
        upstream.write(packet);
      });
      for (const o of outs) {
        if (conn.client.destroyed || conn.client.write(o)) continue;
        await new Promise<void>((resolve) => {
          conn.client.once('drain', resolve);
          conn.client.once('close', resolve);
        });
      }
    }
    this.fifoRunning = false;
  }
}

/** The framed bytes of the first whole response in `buf` (still XORed), or undefined. */
function takeResponse(buf: Buffer, xorKey: number): Buffer | undefined {
  if (buf.length < 8) return undefined;
  const type = (buf[3]! ^ xorKey) & 0x7f;
  const length =
    (((buf[4]! ^ xorKey) << 24) |
      ((buf[5]! ^ xorKey) << 16) |
      ((buf[6]! ^ xorKey) << 8) |
      (buf[7]! ^ xorKey)) >>>
    0;
  const plainLength = 3 + length + (type === 0 ? 5 : 9);
  const framed =
    plainLength <= BLOCK_SIZE
      ? plainLength
      : plainLength + Math.ceil((plainLength - BLOCK_SIZE) / (BLOCK_SIZE - 1));
  return buf.length >= framed ? buf.subarray(0, framed) : undefined;
}

/** Removes the markers (the server under the proxy frames correctly). */
function unframe(framed: Buffer): Buffer {
  const parts: Buffer[] = [framed.subarray(0, Math.min(BLOCK_SIZE, framed.length))];
  for (let i = BLOCK_SIZE; i < framed.length; i += BLOCK_SIZE)
    parts.push(framed.subarray(i + 1, i + BLOCK_SIZE));
  return Buffer.concat(parts);
}

/** Frames a plain response the protocol's way. */
export function reframe(plain: Buffer): Buffer {
  return frameResponse(plain[0]!, plain.readUInt16BE(1), plain.subarray(3));
}

/** Rewrites a plain response's container data (after the length fields); the length follows. */
export function withContainerData(plain: Buffer, data: Buffer): Buffer {
  const head = (plain[3]! & 0x7f) === 0 ? 8 : 12;
  const out = Buffer.concat([plain.subarray(0, head), data]);
  out.writeInt32BE(data.length, 4);
  return out;
}
