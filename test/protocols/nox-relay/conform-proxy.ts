/**
 * A transparent NoxVR (protocol 1) TCP proxy for the conformance tests: it cuts both directions
 * into packets by their length prefix and lets a mutation rewrite, drop, add or answer packets,
 * to break one rule of a real gamewire relay at a time. With no mutation it forwards every packet
 * unchanged.
 */
import net from 'node:net';

export interface NoxProxyConnection {
  /** The player id the relay gave this client in its Enter reply (undefined before). */
  playerId: number | undefined;
  /** Sends a packet to the client as if from the relay. */
  toClient(packet: Buffer): void;
  /** Sends a packet to the relay as if from the client. */
  toServer(packet: Buffer): void;
  /** ms (performance.now) of the client's last packet. */
  lastFromClient: number;
  /** Either side has closed: the player this connection carried is gone. */
  closed: boolean;
}

export interface NoxMutation {
  /** A packet from the client: the packets to forward instead (empty: drop it). */
  up?(packet: Buffer, conn: NoxProxyConnection): Buffer[];
  /** A packet from the relay: the packets to deliver instead (empty: drop it). */
  down?(packet: Buffer, conn: NoxProxyConnection): Buffer[];
  /** Called every 100 ms per connection (a proxy that acts on silence). */
  tick?(conn: NoxProxyConnection): void;
}

/** Splits `buf` into whole packets; returns them and the leftover bytes. */
function packets(buf: Buffer): { whole: Buffer[]; rest: Buffer } {
  const whole: Buffer[] = [];
  let off = 0;
  while (buf.length - off >= 2) {
    const len = buf.readUInt16BE(off);
    if (len < 5 || buf.length - off < len) break;
    whole.push(Buffer.from(buf.subarray(off, off + len)));
    off += len;
  }
  return { whole, rest: buf.subarray(off) };
}

export class NoxTcpProxy {
  private readonly server: net.Server;
  private readonly sockets = new Set<net.Socket>();
  private readonly timers = new Set<NodeJS.Timeout>();
  port = 0;

  private constructor(upstreamPort: number, mutation: NoxMutation) {
    this.server = net.createServer((client) => {
      const upstream = net.connect(upstreamPort, '127.0.0.1');
      this.sockets.add(client).add(upstream);
      const conn: NoxProxyConnection = {
        playerId: undefined,
        toClient: (p) => client.write(p),
        toServer: (p) => upstream.write(p),
        lastFromClient: performance.now(),
        closed: false,
      };
      const end = (): void => {
        client.destroy();
        upstream.destroy();
      };
      client.on('error', end);
      upstream.on('error', end);
      client.on('close', () => {
        conn.closed = true;
        upstream.end();
      });
      upstream.on('close', () => {
        conn.closed = true;
        client.end();
      });
      let up = Buffer.alloc(0);
      client.on('data', (d: Buffer) => {
        conn.lastFromClient = performance.now();
        const cut = packets(Buffer.concat([up, d]));
        up = Buffer.from(cut.rest);
        for (const p of cut.whole) for (const out of mutation.up?.(p, conn) ?? [p]) upstream.write(out);
      });
      let down = Buffer.alloc(0);
      upstream.on('data', (d: Buffer) => {
        const cut = packets(Buffer.concat([down, d]));
        down = Buffer.from(cut.rest);
        for (const p of cut.whole) {
          // Enter reply: [len][uid][06][instance][result 0][flags u32][player id u16]…
          if (p[4] === 0x06 && p[6] === 0 && p.length >= 13) conn.playerId = p.readUInt16BE(11);
          for (const out of mutation.down?.(p, conn) ?? [p]) client.write(out);
        }
      });
      if (mutation.tick !== undefined) {
        const timer = setInterval(() => mutation.tick!(conn), 100);
        this.timers.add(timer);
        client.on('close', () => {
          clearInterval(timer);
          this.timers.delete(timer);
        });
      }
    });
  }

  static async start(upstreamPort: number, mutation: NoxMutation = {}): Promise<NoxTcpProxy> {
    const p = new NoxTcpProxy(upstreamPort, mutation);
    await new Promise<void>((resolve) => p.server.listen(0, '127.0.0.1', resolve));
    p.port = (p.server.address() as net.AddressInfo).port;
    return p;
  }

  async close(): Promise<void> {
    for (const t of this.timers) clearInterval(t);
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}
