/**
 * Transparent proxies in front of a real gamewire relay for the conformance tests, each able to
 * break one rule: a UDP proxy (one upstream socket per client address, so the relay still sees
 * each client apart) whose mutation sees every datagram both ways, and a TCP proxy that can
 * rewrite the WebSocket upgrade reply. With no mutation they forward every byte unchanged.
 */
import dgram from 'node:dgram';
import net from 'node:net';

export interface Peer {
  address: string;
  port: number;
}

export interface UdpMutation {
  /** A datagram from a client: what to send the relay (null: drop it). */
  up?(d: Buffer, from: Peer, proxy: UdpRelayProxy): Buffer | null;
  /** A datagram from the relay to a client: what to deliver (null: drop it). */
  down?(d: Buffer, to: Peer, proxy: UdpRelayProxy): Buffer | null;
}

export class UdpRelayProxy {
  readonly socket = dgram.createSocket('udp4');
  private readonly upstreams = new Map<string, dgram.Socket>();
  /** Allocation id (hex) → the client address that last sent a BIND for it. */
  readonly boundFrom = new Map<string, Peer>();
  port = 0;
  private readonly relayPort: number;
  private readonly mutation: UdpMutation;

  private constructor(relayPort: number, mutation: UdpMutation) {
    this.relayPort = relayPort;
    this.mutation = mutation;
  }

  static async start(relayPort: number, mutation: UdpMutation = {}): Promise<UdpRelayProxy> {
    const p = new UdpRelayProxy(relayPort, mutation);
    await new Promise<void>((resolve) => p.socket.bind(0, '127.0.0.1', resolve));
    p.port = p.socket.address().port;
    p.socket.on('message', (d, rinfo) => p.fromClient(d, { address: rinfo.address, port: rinfo.port }));
    return p;
  }

  private fromClient(d: Buffer, from: Peer): void {
    const k = `${from.address}:${from.port}`;
    let up = this.upstreams.get(k);
    if (up === undefined) {
      up = dgram.createSocket('udp4');
      up.bind(0, '127.0.0.1');
      up.on('message', (r) => {
        const out = this.mutation.down === undefined ? r : this.mutation.down(r, from, this);
        if (out !== null) this.socket.send(out, from.port, from.address);
      });
      this.upstreams.set(k, up);
    }
    // BIND: the allocation id is inside the connection data (format 2: at datagram offset 12).
    if (d.length === 295 && d[3] === 0) this.boundFrom.set(d.subarray(12, 28).toString('hex'), from);
    const out = this.mutation.up === undefined ? d : this.mutation.up(d, from, this);
    if (out !== null) up.send(out, this.relayPort, '127.0.0.1');
  }

  /** Sends a datagram to a client as if from the relay. */
  sendToClient(d: Buffer, to: Peer): void {
    this.socket.send(d, to.port, to.address);
  }

  async close(): Promise<void> {
    for (const s of this.upstreams.values()) s.close();
    await new Promise<void>((resolve) => this.socket.close(() => resolve()));
  }
}

/** A TCP proxy that rewrites the server's first reply (the HTTP head of a WebSocket upgrade). */
export class TcpHeadProxy {
  private readonly server: net.Server;
  private readonly sockets = new Set<net.Socket>();
  port = 0;

  private constructor(upstreamPort: number, rewriteHead: (head: string) => string) {
    this.server = net.createServer((client) => {
      const upstream = net.connect(upstreamPort, '127.0.0.1');
      this.sockets.add(client).add(upstream);
      client.on('error', () => upstream.destroy());
      upstream.on('error', () => client.destroy());
      client.on('close', () => upstream.destroy());
      upstream.on('close', () => client.destroy());
      client.pipe(upstream);
      let head = Buffer.alloc(0);
      let done = false;
      upstream.on('data', (d: Buffer) => {
        if (done) {
          client.write(d);
          return;
        }
        head = Buffer.concat([head, d]);
        const end = head.indexOf('\r\n\r\n');
        if (end < 0) return;
        done = true;
        client.write(Buffer.from(rewriteHead(head.subarray(0, end + 4).toString('latin1')), 'latin1'));
        client.write(head.subarray(end + 4));
      });
    });
  }

  static async start(upstreamPort: number, rewriteHead: (head: string) => string): Promise<TcpHeadProxy> {
    const p = new TcpHeadProxy(upstreamPort, rewriteHead);
    await new Promise<void>((resolve) => p.server.listen(0, '127.0.0.1', resolve));
    p.port = (p.server.address() as net.AddressInfo).port;
    return p;
  }

  async close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}
