/** Shared PRUDP test fixtures: an RMC server with an echo protocol behind a PrudpServer, and a lossy UDP proxy. */
import dgram from 'node:dgram';
import { silentLogger } from '../../../src/core/logger.js';
import { ProtocolMetrics } from '../../../src/core/metrics.js';
import {
  buffer32,
  type ConnectHandler,
  defineProtocol,
  method,
  PrudpServer,
  type PrudpServerOptions,
  RmcServer,
  type RmcVariant,
  u32,
} from '../../../src/protocols/rmc/index.js';

export const EchoProtocol = defineProtocol(
  'EchoProtocol',
  'test protocol: echoes bytes, or answers n bytes',
  {
    Echo: method({
      id: 1,
      args: { data: buffer32 },
      results: { data: buffer32 },
      layout: 'unknown',
      doc: '',
    }),
    Sized: method({
      id: 2,
      args: { n: u32, tag: u32 },
      results: { tag: u32, data: buffer32 },
      layout: 'unknown',
      doc: '',
    }),
  },
  { id: 0x70 },
);

export interface PrudpFixture {
  rmc: RmcServer;
  prudp: PrudpServer;
  port: number;
  metrics: ProtocolMetrics;
  /** How many times each tag reached the Sized handler. */
  calls: Map<number, number>;
  close(): Promise<void>;
}

export async function startPrudp(
  options: Partial<PrudpServerOptions> & { variant?: RmcVariant; onConnect?: ConnectHandler } = {},
): Promise<PrudpFixture> {
  const metrics = new ProtocolMetrics('rmc');
  const log = silentLogger();
  const rmc = new RmcServer({ log, metrics, variant: options.variant ?? 'hyperscape' });
  const calls = new Map<number, number>();
  rmc.register(EchoProtocol, {
    Echo: (_ctx, args) => ({ data: args.data }),
    Sized: (_ctx, args) => {
      calls.set(args.tag, (calls.get(args.tag) ?? 0) + 1);
      const data = Buffer.alloc(args.n);
      for (let i = 0; i < args.n; i++) data[i] = (i * 7 + args.tag) & 0xff;
      return { tag: args.tag, data };
    },
  });
  const prudp = new PrudpServer({
    accessKey: 'yl4NG7qZ',
    ...options,
    dispatcher: rmc.dispatcher,
    log,
    metrics,
  });
  const { port } = await prudp.listen({ host: '127.0.0.1', port: 0 });
  return { rmc, prudp, port, metrics, calls, close: () => prudp.close() };
}

export function sizedData(n: number, tag: number): Buffer {
  const data = Buffer.alloc(n);
  for (let i = 0; i < n; i++) data[i] = (i * 7 + tag) & 0xff;
  return data;
}

/**
 * A UDP proxy between one client and a server that drops, duplicates and reorders (delays) a
 * share of the datagrams in each direction, from a seeded generator.
 */
export class LossyProxy {
  readonly socket: dgram.Socket;
  private upstream: dgram.Socket;
  private client: { address: string; port: number } | undefined;
  private seed: number;
  private readonly target: number;
  private readonly rates: { drop: number; dup: number; reorder: number };
  dropped = 0;
  private closed = false;
  duplicated = 0;
  reordered = 0;

  private constructor(
    socket: dgram.Socket,
    upstream: dgram.Socket,
    target: number,
    rates: { drop: number; dup: number; reorder: number },
    seed: number,
  ) {
    this.target = target;
    this.rates = rates;
    this.socket = socket;
    this.upstream = upstream;
    this.seed = seed;
    socket.on('message', (msg, rinfo) => {
      this.client = { address: rinfo.address, port: rinfo.port };
      this.forward(msg, (m) => upstream.send(m, this.target, '127.0.0.1'));
    });
    upstream.on('message', (msg) => {
      const c = this.client;
      if (c !== undefined) this.forward(msg, (m) => socket.send(m, c.port, c.address));
    });
  }

  static async start(target: number, rates: { drop: number; dup: number; reorder: number }, seed = 12345) {
    const socket = dgram.createSocket('udp4');
    const upstream = dgram.createSocket('udp4');
    await new Promise<void>((r) => socket.bind(0, '127.0.0.1', r));
    await new Promise<void>((r) => upstream.bind(0, '127.0.0.1', r));
    return new LossyProxy(socket, upstream, target, rates, seed);
  }

  get port(): number {
    return this.socket.address().port;
  }

  private random(): number {
    // xorshift32: reproducible runs.
    let x = this.seed;
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    this.seed = x >>> 0;
    return this.seed / 0x100000000;
  }

  private forward(msg: Buffer, send: (m: Buffer) => void): void {
    const r = this.random();
    const { drop, dup, reorder } = this.rates;
    if (r < drop) {
      this.dropped++;
      return;
    }
    if (r < drop + dup) {
      this.duplicated++;
      send(msg);
      send(msg);
      return;
    }
    if (r < drop + dup + reorder) {
      this.reordered++;
      setTimeout(
        () => {
          if (!this.closed) send(msg);
        },
        5 + Math.floor(this.random() * 20),
      );
      return;
    }
    send(msg);
  }

  async close(): Promise<void> {
    this.closed = true;
    await new Promise<void>((r) => this.socket.close(() => r()));
    await new Promise<void>((r) => this.upstream.close(() => r()));
  }
}
