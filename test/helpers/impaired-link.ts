/**
 * Impaired links for tests, in user space: this kernel has no netem qdisc (CONFIG_NET_SCH_NETEM
 * is off, `tc qdisc add … netem` answers "unknown qdisc"), so the loss, delay, reordering and
 * cuts a real network adds are made by proxies between the clients and the server.
 *
 * - `ImpairedUdpProxy`: every client source gets its own upstream socket, bound to the client's
 *   own address (so the server still sees each client's address, as through a NAT that keeps
 *   addresses); each datagram, both ways, may be dropped, duplicated, delayed (with jitter, so
 *   later ones overtake) or held back longer (reordered), from a seeded generator.
 * - `ImpairedTcpProxy`: every connection is relayed through a socket connected from the
 *   client's address; bytes are delayed and cut into small pieces at random boundaries, and a
 *   share of connections is reset after a random number of bytes (the network or a middlebox
 *   dropping a TCP connection mid-download).
 */
import dgram from 'node:dgram';
import net from 'node:net';

/** xorshift32: reproducible impairments for a given seed. */
class Random {
  private s: number;
  constructor(seed: number) {
    this.s = seed >>> 0 || 1;
  }
  next(): number {
    let x = this.s;
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    this.s = x >>> 0;
    return this.s / 0x100000000;
  }
}

export interface UdpImpairment {
  /** Share of datagrams dropped, each way. */
  loss?: number;
  /** Share sent twice. */
  duplicate?: number;
  /** Share held back an extra 5–25 ms, so that later datagrams overtake them. */
  reorder?: number;
  /** Delay of every datagram, plus up to `jitterMs` more. */
  delayMs?: number;
  jitterMs?: number;
  seed?: number;
}

export class ImpairedUdpProxy {
  readonly stats = { forwarded: 0, dropped: 0, duplicated: 0, reordered: 0, clients: 0 };
  private readonly upstreams = new Map<string, dgram.Socket>();
  private readonly timers = new Set<NodeJS.Timeout>();
  private readonly random: Random;
  private closed = false;

  private readonly socket: dgram.Socket;
  private readonly imp: UdpImpairment;

  private constructor(socket: dgram.Socket, target: { host: string; port: number }, imp: UdpImpairment) {
    this.socket = socket;
    this.imp = imp;
    this.random = new Random(imp.seed ?? 24);
    socket.on('message', (msg, rinfo) => {
      const key = `${rinfo.address}:${rinfo.port}`;
      let up = this.upstreams.get(key);
      if (up === undefined) {
        const s = dgram.createSocket('udp4');
        up = s;
        this.upstreams.set(key, s);
        this.stats.clients++;
        s.on('error', () => {});
        s.on('message', (reply) => this.pass(reply, (m) => this.socket.send(m, rinfo.port, rinfo.address)));
        // Bound to the client's own address: the server sees who is behind the proxy.
        s.bind(0, rinfo.address, () => this.pass(msg, (m) => s.send(m, target.port, target.host)));
        return;
      }
      const s = up;
      this.pass(msg, (m) => s.send(m, target.port, target.host));
    });
  }

  static async start(
    listen: { host?: string; port?: number },
    target: { host: string; port: number },
    imp: UdpImpairment,
  ): Promise<ImpairedUdpProxy> {
    const socket = dgram.createSocket('udp4');
    await new Promise<void>((resolve, reject) => {
      socket.once('error', reject);
      socket.bind(listen.port ?? 0, listen.host ?? '127.0.0.1', () => {
        socket.off('error', reject);
        resolve();
      });
    });
    socket.on('error', () => {});
    return new ImpairedUdpProxy(socket, target, imp);
  }

  get port(): number {
    return this.socket.address().port;
  }

  private later(ms: number, fn: () => void): void {
    const t = setTimeout(() => {
      this.timers.delete(t);
      if (!this.closed) fn();
    }, ms);
    this.timers.add(t);
  }

  private pass(msg: Buffer, send: (m: Buffer) => void): void {
    if (this.closed) return;
    const { loss = 0, duplicate = 0, reorder = 0, delayMs = 0, jitterMs = 0 } = this.imp;
    if (this.random.next() < loss) {
      this.stats.dropped++;
      return;
    }
    const copies = this.random.next() < duplicate ? 2 : 1;
    if (copies === 2) this.stats.duplicated++;
    for (let i = 0; i < copies; i++) {
      let wait = delayMs + this.random.next() * jitterMs;
      if (this.random.next() < reorder) {
        this.stats.reordered++;
        wait += 5 + this.random.next() * 20;
      }
      this.stats.forwarded++;
      if (wait <= 0) send(msg);
      else this.later(wait, () => send(msg));
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const t of this.timers) clearTimeout(t);
    this.timers.clear();
    for (const s of this.upstreams.values()) s.close();
    this.upstreams.clear();
    await new Promise<void>((resolve) => this.socket.close(() => resolve()));
  }
}

export interface TcpImpairment {
  /** Delay of each piece, plus up to `jitterMs` (order within a connection is kept: TCP). */
  delayMs?: number;
  jitterMs?: number;
  /** Largest piece a chunk is cut into (bytes); pieces are 1..maxPiece at random. */
  maxPiece?: number;
  /** Share of connections reset after a random number of bytes (up to `resetWithinBytes`). */
  resetShare?: number;
  resetWithinBytes?: number;
  seed?: number;
}

export class ImpairedTcpProxy {
  readonly stats = { connections: 0, resets: 0, pieces: 0 };
  private readonly sockets = new Set<net.Socket>();
  private readonly random: Random;

  private readonly server: net.Server;

  private constructor(server: net.Server, imp: TcpImpairment) {
    this.server = server;
    this.random = new Random(imp.seed ?? 42);
  }

  static async start(
    listen: { host?: string; port?: number },
    target: { host: string; port: number },
    imp: TcpImpairment,
  ): Promise<ImpairedTcpProxy> {
    const server = net.createServer();
    const proxy = new ImpairedTcpProxy(server, imp);
    server.on('connection', (client) => proxy.relay(client, target, imp));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(listen.port ?? 0, listen.host ?? '127.0.0.1', () => resolve());
    });
    return proxy;
  }

  get port(): number {
    return (this.server.address() as net.AddressInfo).port;
  }

  private relay(client: net.Socket, target: { host: string; port: number }, imp: TcpImpairment): void {
    this.stats.connections++;
    const upstream = net.connect({
      host: target.host,
      port: target.port,
      localAddress: client.remoteAddress?.replace(/^::ffff:/, ''),
    });
    this.sockets.add(client);
    this.sockets.add(upstream);
    client.setNoDelay(true);
    upstream.setNoDelay(true);
    const cutAt =
      this.random.next() < (imp.resetShare ?? 0)
        ? Math.floor(1 + this.random.next() * (imp.resetWithinBytes ?? 100_000))
        : Number.POSITIVE_INFINITY;
    let relayed = 0;
    let dead = false;
    const kill = () => {
      if (dead) return;
      dead = true;
      client.destroy();
      upstream.destroy();
      this.sockets.delete(client);
      this.sockets.delete(upstream);
    };
    // Each direction is a chain, so delayed pieces keep their order.
    const pipe = (from: net.Socket, to: net.Socket, counts: boolean) => {
      let chain = Promise.resolve();
      from.on('data', (chunk: Buffer) => {
        if (dead) return;
        const pieces: Buffer[] = [];
        for (let at = 0; at < chunk.length; ) {
          const n = Math.max(1, Math.floor(this.random.next() * (imp.maxPiece ?? chunk.length)) + 1);
          pieces.push(chunk.subarray(at, Math.min(chunk.length, at + n)));
          at += n;
        }
        for (const piece of pieces) {
          const wait = (imp.delayMs ?? 0) + this.random.next() * (imp.jitterMs ?? 0);
          chain = chain.then(
            () =>
              new Promise<void>((resolve) => {
                const go = () => {
                  if (dead) return resolve();
                  this.stats.pieces++;
                  if (counts) {
                    relayed += piece.length;
                    if (relayed >= cutAt) {
                      this.stats.resets++;
                      to.write(piece.subarray(0, piece.length - (relayed - cutAt)));
                      kill();
                      return resolve();
                    }
                  }
                  to.write(piece);
                  resolve();
                };
                if (wait <= 0) go();
                else setTimeout(go, wait);
              }),
          );
        }
      });
      from.on('end', () => {
        chain = chain.then(() => {
          if (!dead) to.end();
        });
      });
    };
    pipe(client, upstream, false);
    pipe(upstream, client, true);
    client.on('error', kill);
    upstream.on('error', kill);
    client.on('close', kill);
    upstream.on('close', kill);
  }

  async close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    this.sockets.clear();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}
