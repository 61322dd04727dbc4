import net from 'node:net';
import { silentLogger } from '../../../src/core/logger.js';
import { ProtocolMetrics } from '../../../src/core/metrics.js';
import {
  type BuiltinOptions,
  type RmcListening,
  RmcServer,
  type RmcServerOptions,
  registerBuiltins,
} from '../../../src/protocols/rmc/index.js';
import { lengthPrefixed, StreamDeframer } from '../../../src/wire/index.js';

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

  static connect(port: number): Promise<RawPeer> {
    return new Promise((resolve, reject) => {
      const s = net.connect({ host: '127.0.0.1', port }, () => resolve(new RawPeer(s)));
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

  write(b: Uint8Array): void {
    this.socket.write(b);
  }

  destroy(): void {
    this.socket.destroy();
  }
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
