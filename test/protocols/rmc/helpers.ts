import net from 'node:net';
import { addressKey, type Connection as SeamConnection } from '../../../src/core/connection.js';
import { silentLogger } from '../../../src/core/logger.js';
import { ProtocolMetrics } from '../../../src/core/metrics.js';
import {
  type BuiltinOptions,
  type HyperscapeMessage,
  hyperscapePacket,
  type MethodDef,
  type RmcListening,
  RmcServer,
  type RmcServerOptions,
  registerBuiltins,
} from '../../../src/protocols/rmc/index.js';
import { type Codec, decode, encode, lengthPrefixed, StreamDeframer } from '../../../src/wire/index.js';

const packet = hyperscapePacket as Codec<HyperscapeMessage>;

/** A HyperScape request frame. */
export function requestFrame(
  protocol: string,
  method: string,
  callId: number,
  args: Buffer = Buffer.alloc(0),
): Buffer {
  return encode(packet, { type: 'request', protocol, callId, method, classVersions: [], args });
}

/** A request frame for a declared method with typed arguments. */
export function typedRequestFrame<M extends MethodDef>(m: M, callId: number, args: unknown): Buffer {
  return requestFrame(m.protocol, m.fullName, callId, encode(m.args, args));
}

export interface TestServer {
  server: RmcServer;
  listening: RmcListening;
  port: number;
  metrics: ProtocolMetrics;
  builtins: ReturnType<typeof registerBuiltins>;
}

export async function startServer(
  options: RmcServerOptions = {},
  builtins: BuiltinOptions = {},
): Promise<TestServer> {
  const metrics = new ProtocolMetrics('rmc');
  const server = new RmcServer({ log: silentLogger(), metrics, ...options });
  const b = registerBuiltins(server, builtins);
  const listening = await server.listen({ host: '127.0.0.1', port: 0 });
  return { server, listening, port: listening.port, metrics, builtins: b };
}

/** A raw TCP peer that collects whole RMC frames, independent of RmcClient. */
export class RawPeer {
  readonly socket: net.Socket;
  readonly frames: Buffer[] = [];
  closed = false;
  private waiters: (() => void)[] = [];
  private readonly deframer = new StreamDeframer(
    lengthPrefixed({ prefix: 'u32le', counts: 'rest', maxFrameBytes: 1 << 20 }),
    {
      maxFrameBytes: 1 << 20,
    },
  );

  private constructor(socket: net.Socket) {
    this.socket = socket;
    socket.on('data', (chunk: Buffer) => {
      this.deframer.push(chunk, (buf, start, end) => {
        this.frames.push(Buffer.from(buf.subarray(start, end)));
      });
      this.wake();
    });
    socket.on('error', () => {});
    socket.on('close', () => {
      this.closed = true;
      this.wake();
    });
  }

  /** `localAddress` picks the source address (any 127.x.y.z works on Linux loopback). */
  static connect(port: number, localAddress?: string): Promise<RawPeer> {
    return new Promise((resolve, reject) => {
      const s = net.connect(
        localAddress === undefined ? { host: '127.0.0.1', port } : { host: '127.0.0.1', port, localAddress },
        () => resolve(new RawPeer(s)),
      );
      s.once('error', reject);
    });
  }

  private wake(): void {
    const w = this.waiters;
    this.waiters = [];
    for (const f of w) f();
  }

  /** Waits until `n` frames arrived (or the socket closed, or the timeout passed). */
  async waitFrames(n: number, timeoutMs = 5000): Promise<Buffer[]> {
    const deadline = Date.now() + timeoutMs;
    while (this.frames.length < n && !this.closed && Date.now() < deadline) {
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, Math.max(1, deadline - Date.now()));
        this.waiters.push(() => {
          clearTimeout(t);
          resolve();
        });
      });
    }
    return this.frames;
  }

  async waitClosed(timeoutMs = 5000): Promise<boolean> {
    const deadline = Date.now() + timeoutMs;
    while (!this.closed && Date.now() < deadline) {
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, Math.max(1, deadline - Date.now()));
        this.waiters.push(() => {
          clearTimeout(t);
          resolve();
        });
      });
    }
    return this.closed;
  }

  /** Sends one request frame and waits for the answer with its call id (decoded), or undefined. */
  async call(frame: Buffer, callId: number, timeoutMs = 10_000): Promise<HyperscapeMessage | undefined> {
    const seen = this.frames.length;
    this.write(frame);
    const deadline = Date.now() + timeoutMs;
    for (let from = seen; ; ) {
      for (; from < this.frames.length; from++) {
        const m = decode(packet, this.frames[from]!);
        if (m.callId === callId) return m;
      }
      if (this.closed || Date.now() >= deadline) return undefined;
      await this.waitFrames(this.frames.length + 1, deadline - Date.now());
    }
  }

  write(b: Uint8Array): void {
    this.socket.write(b);
  }

  destroy(): void {
    this.socket.destroy();
  }
}

/** A connection of the seam for an in-memory RMC transport (the dispatcher tests' sink stands on it). */
export function memoryPeer(remoteAddress: string, remotePort: number): SeamConnection {
  return {
    transport: 'tcp',
    remoteAddress,
    remotePort,
    addressKey: addressKey(remoteAddress),
    open: true,
    bytesIn: 0,
    bytesOut: 0,
    messagesIn: 0,
    messagesOut: 0,
    send() {},
    close() {},
  };
}
