/**
 * A scripted client that behaves like Unity Transport 2.x's RelayLayer (spec §3), written
 * independently of gamewire's codec: every datagram is assembled by hand from the spec's byte
 * tables, the HMAC computed like `RelayServerData.ComputeBindHMAC`.
 */
import { createHmac, randomBytes } from 'node:crypto';
import dgram from 'node:dgram';
import { elapse } from '../../helpers/wait.js';

export interface AllocationJson {
  allocationId: string;
  allocationIdBytes: string;
  connectionData: string;
  key: string;
  region: string;
  relayServer: { ipV4: string; port: number };
  serverEndpoints: { connectionType: string; host: string; port: number; secure?: boolean }[];
  hostConnectionData?: string;
}

const SIG = [0xda, 0x72, 0x00];

export function utpBind(nonce: number, connectionData: Buffer, key: Buffer): Buffer {
  const b = Buffer.alloc(295);
  b.set(SIG, 0);
  b[3] = 0; // Bind
  b[4] = 0; // AcceptMode AUTO
  b[5] = nonce & 0xff; // little-endian, as UTP copies a ushort
  b[6] = nonce >> 8;
  b[7] = 255;
  connectionData.copy(b, 8, 0, Math.min(255, connectionData.length));
  createHmac('sha256', key).update(b.subarray(0, 263)).digest().copy(b, 263);
  return b;
}

export function utpPing(id: Buffer): Buffer {
  const b = Buffer.alloc(22);
  b.set([...SIG, 2], 0);
  id.copy(b, 4);
  b[20] = 1; // SequenceNumber = 1, native order
  return b;
}

export function utpConnectRequest(id: Buffer, hostConnectionData: Buffer): Buffer {
  const b = Buffer.alloc(276);
  b.set([...SIG, 3], 0);
  id.copy(b, 4);
  b[20] = 255;
  hostConnectionData.copy(b, 21, 0, 255);
  return b;
}

export function utpRelay(from: Buffer, to: Buffer, content: Buffer): Buffer {
  const b = Buffer.alloc(38 + content.length);
  b.set([...SIG, 10], 0);
  from.copy(b, 4);
  to.copy(b, 20);
  b[36] = content.length >> 8; // SwitchEndianness: big-endian
  b[37] = content.length & 0xff;
  content.copy(b, 38);
  return b;
}

export function utpDisconnect(from: Buffer, to: Buffer): Buffer {
  const b = Buffer.alloc(36);
  b.set([...SIG, 9], 0);
  from.copy(b, 4);
  to.copy(b, 20);
  return b;
}

export function utpClose(id: Buffer): Buffer {
  const b = Buffer.alloc(20);
  b.set([...SIG, 11], 0);
  id.copy(b, 4);
  return b;
}

/** UTP 2.x SimpleConnectionLayer handshake: "UTP" v1 | type | 8-byte token. */
export function utpHandshake(type: 1 | 2, token: Buffer): Buffer {
  return Buffer.concat([Buffer.from([0x55, 0x54, 0x50, 0x01, type]), token]);
}

/** A UDP socket that remembers what it received, with helpers to wait for datagrams. */
export class Peer {
  readonly socket: dgram.Socket;
  readonly inbox: Buffer[] = [];
  private waiters: { test: (b: Buffer) => boolean; resolve: (b: Buffer) => void }[] = [];
  readonly relayHost: string;
  readonly relayPort: number;

  private constructor(socket: dgram.Socket, host: string, port: number) {
    this.socket = socket;
    this.relayHost = host;
    this.relayPort = port;
    socket.on('message', (msg) => {
      const i = this.waiters.findIndex((w) => w.test(msg));
      if (i >= 0) {
        const [w] = this.waiters.splice(i, 1);
        w!.resolve(msg);
      } else this.inbox.push(msg);
    });
  }

  static async open(relayHost: string, relayPort: number): Promise<Peer> {
    const s = dgram.createSocket('udp4');
    await new Promise<void>((resolve) => s.bind(0, '127.0.0.1', () => resolve()));
    return new Peer(s, relayHost, relayPort);
  }

  get port(): number {
    return this.socket.address().port;
  }

  send(b: Buffer): void {
    this.socket.send(b, this.relayPort, this.relayHost);
  }

  /** Next datagram matching `test` (from the inbox first), or undefined after `ms`. */
  next(test: (b: Buffer) => boolean = () => true, ms = 1000): Promise<Buffer | undefined> {
    const i = this.inbox.findIndex(test);
    if (i >= 0) return Promise.resolve(this.inbox.splice(i, 1)[0]);
    return new Promise((resolve) => {
      const w = {
        test,
        resolve: (b: Buffer) => {
          clearTimeout(timer);
          resolve(b);
        },
      };
      const timer = setTimeout(() => {
        this.waiters = this.waiters.filter((x) => x !== w);
        resolve(undefined);
      }, ms);
      this.waiters.push(w);
    });
  }

  /** Next datagram of a relay message type. */
  nextOfType(type: number, ms = 1000): Promise<Buffer | undefined> {
    return this.next((b) => b.length >= 4 && b[0] === 0xda && b[1] === 0x72 && b[3] === type, ms);
  }

  /** Waits `ms` and returns everything that arrived (inbox emptied). */
  async drain(ms: number): Promise<Buffer[]> {
    await elapse(ms, 'everything that arrives within the window');
    return this.inbox.splice(0);
  }

  close(): Promise<void> {
    return new Promise((resolve) => this.socket.close(() => resolve()));
  }
}

/**
 * A UTP 2.x-like driver: BIND now and every `retryMs` with the nonce incremented after each
 * send, until BIND_RECEIVED; CONNECT_REQUEST every `retryMs` until ACCEPTED.
 */
export class UtpDriver {
  readonly peer: Peer;
  readonly allocation: AllocationJson;
  readonly id: Buffer;
  readonly key: Buffer;
  readonly connectionData: Buffer;
  readonly hostConnectionData: Buffer;
  nonce = 0;
  hostId: Buffer | undefined;
  readonly token = randomBytes(8);

  constructor(peer: Peer, allocation: AllocationJson) {
    this.peer = peer;
    this.allocation = allocation;
    this.id = Buffer.from(allocation.allocationIdBytes, 'base64');
    this.key = Buffer.from(allocation.key, 'base64');
    const pad = (b: Buffer) => Buffer.concat([b, Buffer.alloc(255 - b.length)]);
    this.connectionData = pad(Buffer.from(allocation.connectionData, 'base64'));
    this.hostConnectionData = pad(
      Buffer.from(allocation.hostConnectionData ?? allocation.connectionData, 'base64'),
    );
  }

  static async create(allocation: AllocationJson): Promise<UtpDriver> {
    const ep = allocation.serverEndpoints.filter((e) => e.connectionType === 'udp').at(-1)!;
    return new UtpDriver(await Peer.open(ep.host, ep.port), allocation);
  }

  bindMessage(): Buffer {
    return utpBind(this.nonce, this.connectionData, this.key);
  }

  async bind(retryMs = 100, attempts = 20): Promise<boolean> {
    for (let i = 0; i < attempts; i++) {
      this.peer.send(this.bindMessage());
      this.nonce++; // IncrementNonce() after every BIND sent (UTP >= 2.2)
      const got = await this.peer.nextOfType(1, retryMs);
      if (got !== undefined) return got.length === 4;
    }
    return false;
  }

  async connect(retryMs = 100, attempts = 20): Promise<Buffer | undefined> {
    for (let i = 0; i < attempts; i++) {
      this.peer.send(utpConnectRequest(this.id, this.hostConnectionData));
      const got = await this.peer.next((b) => b[3] === 6 || b[3] === 8 || b[3] === 12, retryMs);
      if (got === undefined) continue;
      if (got[3] !== 6) return got;
      this.hostId = Buffer.from(got.subarray(4, 20));
      return got;
    }
    return undefined;
  }

  relay(to: Buffer, content: Buffer): Buffer {
    const b = utpRelay(this.id, to, content);
    this.peer.send(b);
    return b;
  }

  close(): Promise<void> {
    return this.peer.close();
  }
}
