/**
 * A NoxVR relay client as the conformance checks drive it, over TCP (length-framed packets) or
 * UDP (several packets per datagram, walked by their length fields), the way the reference Unity
 * client's connectors read them. Packets are built and read with gamewire's declarations;
 * requests carry their own uid and wait for the reply that echoes it.
 */
import net from 'node:net';
import { CheckFailure, type CheckRun, type ConformTarget } from '../../../core/conform.js';
import { bindFreshUdp, MessageInbox, targetText } from '../../../core/conform-probes.js';
import { StreamDeframer } from '../../../wire/framing.js';
import { WireReader } from '../../../wire/reader.js';
import { WireWriter } from '../../../wire/writer.js';
import { PROTOCOL_VERSION } from '../constants.js';
import type { ClientMessage, ServerMessage } from '../messages.js';
import { packetMeasure, readServerPacket, splitPackets, writeClientPacket } from '../packet.js';

export type NoxTransport = 'tcp' | 'udp';

export interface ServerPacket {
  uid: number;
  message: ServerMessage;
  raw: Buffer;
}

/** Largest packet the checks accept from a server (the length field's range). */
const MAX_PACKET = 0xffff;

export class NoxPeer {
  readonly inbox: MessageInbox;
  readonly transport: NoxTransport;
  /** Packets the declarations cannot read (what a client's parser would choke on). */
  readonly unreadable: { raw: Buffer; error: string }[] = [];
  private readonly sendBytes: (b: Buffer) => void;
  private readonly closeFn: () => void;
  private readonly writer = new WireWriter({ initialCapacity: 256 });
  private nextUid = 1;
  private lastSent: Buffer = Buffer.alloc(0);
  /** The local port (what the server should report back in its Handshake). */
  readonly localPort: number;
  closed = false;

  private constructor(
    transport: NoxTransport,
    inbox: MessageInbox,
    send: (b: Buffer) => void,
    close: () => void,
    localPort: number,
  ) {
    this.transport = transport;
    this.inbox = inbox;
    this.sendBytes = send;
    this.closeFn = close;
    this.localPort = localPort;
  }

  static async open(target: ConformTarget, transport: NoxTransport, run: CheckRun): Promise<NoxPeer> {
    const inbox = new MessageInbox(run);
    let peer: NoxPeer;
    if (transport === 'tcp') {
      const socket = await new Promise<net.Socket>((resolve, reject) => {
        const s = net.connect({ host: target.host, port: target.port });
        const timer = setTimeout(
          () => {
            s.destroy();
            reject(new CheckFailure(`no TCP connection to ${targetText(target)} within 5 s`));
          },
          Math.min(5000, run.remainingMs()),
        );
        s.once('connect', () => {
          clearTimeout(timer);
          resolve(s);
        });
        s.once('error', (err) => {
          clearTimeout(timer);
          reject(
            new CheckFailure(`cannot connect to ${targetText(target)}: ${err.message}`, {}, { cause: err }),
          );
        });
      });
      socket.setNoDelay(true);
      const deframer = new StreamDeframer(packetMeasure(MAX_PACKET), { maxFrameBytes: MAX_PACKET });
      socket.on('data', (d: Buffer) => {
        try {
          deframer.push(d, (buf, start, end) => {
            peer.arrived(Buffer.from(buf.subarray(start, end)));
            return true;
          });
        } catch (err) {
          peer.unreadable.push({ raw: d, error: (err as Error).message });
          socket.destroy();
        }
      });
      socket.on('error', () => {});
      socket.on('close', () => {
        peer.closed = true;
        inbox.close('the server closed the connection');
      });
      peer = new NoxPeer(
        'tcp',
        inbox,
        (b) => socket.write(b),
        () => socket.destroy(),
        socket.localPort ?? 0,
      );
    } else {
      const socket = await bindFreshUdp(net.isIPv6(target.host) ? 'udp6' : 'udp4');
      const ranges: number[] = [];
      const measure = packetMeasure(MAX_PACKET);
      socket.on('message', (d, rinfo) => {
        if (rinfo.port !== target.port) return;
        try {
          splitPackets(d, 0, d.length, measure, ranges);
        } catch (err) {
          peer.unreadable.push({ raw: d, error: (err as Error).message });
          return;
        }
        for (let i = 0; i < ranges.length; i += 2)
          peer.arrived(Buffer.from(d.subarray(ranges[i], ranges[i + 1])));
      });
      socket.on('error', () => {});
      peer = new NoxPeer(
        'udp',
        inbox,
        (b) => socket.send(b, target.port, target.host),
        () => {
          try {
            socket.close();
          } catch {
            // already closed
          }
        },
        socket.address().port,
      );
    }
    run.defer(() => peer.close());
    return peer;
  }

  private arrived(raw: Buffer): void {
    // A Handshake reply is read field by field by the clients (checks read it themselves);
    // everything else must decode.
    if (raw[4] !== 0x01) {
      try {
        readServerPacket(new WireReader(raw));
      } catch (err) {
        this.unreadable.push({ raw, error: (err as Error).message });
      }
    }
    this.inbox.push(raw);
  }

  get sent(): Buffer {
    return this.lastSent;
  }

  /** Encodes and sends one packet; returns its bytes. */
  post(message: ClientMessage, uid = 0): Buffer {
    const bytes = NoxPeer.encode(message, uid, this.writer);
    this.sendRaw(bytes);
    return bytes;
  }

  static encode(
    message: ClientMessage,
    uid: number,
    writer = new WireWriter({ initialCapacity: 256 }),
  ): Buffer {
    writer.reset();
    writeClientPacket(writer, uid, message);
    return Buffer.from(writer.view());
  }

  sendRaw(bytes: Buffer): void {
    this.lastSent = bytes;
    if (!this.closed) this.sendBytes(bytes);
  }

  allocUid(): number {
    const uid = this.nextUid;
    this.nextUid = this.nextUid >= 0xfffe ? 1 : this.nextUid + 1;
    return uid;
  }

  /** The next packet that decodes and that `match` accepts, else a failure naming `what`. */
  async next(what: string, match: (p: ServerPacket) => boolean, timeoutMs = 3000): Promise<ServerPacket> {
    const raw = await this.inbox.poll((r) => {
      const p = decode(r);
      return p !== undefined && match(p);
    }, timeoutMs);
    if (raw !== undefined) return decode(raw)!;
    const bad = this.unreadable.at(-1);
    const why = this.inbox.closedReason;
    throw new CheckFailure(
      bad !== undefined
        ? `no ${what}; the server sent a packet the client cannot read (${bad.error})`
        : why !== undefined
          ? `no ${what}: ${why}`
          : `no ${what} within ${timeoutMs} ms`,
      { sent: this.lastSent, received: bad?.raw ?? this.inbox.tail() },
    );
  }

  /** Like `next`, but undefined when nothing matching comes. */
  async poll(match: (p: ServerPacket) => boolean, timeoutMs: number): Promise<ServerPacket | undefined> {
    const raw = await this.inbox.poll((r) => {
      const p = decode(r);
      return p !== undefined && match(p);
    }, timeoutMs);
    return raw === undefined ? undefined : decode(raw);
  }

  /** Sends a request with a fresh uid and waits for the reply of `type` that echoes it. */
  async request<T extends ServerMessage['type']>(
    message: ClientMessage,
    type: T,
    timeoutMs = 3000,
  ): Promise<ServerPacket & { message: Extract<ServerMessage, { type: T }> }> {
    const uid = this.allocUid();
    this.post(message, uid);
    return (await this.next(
      `${type} reply (uid ${uid})`,
      (p) => p.uid === uid && p.message.type === type,
      timeoutMs,
    )) as ServerPacket & {
      message: Extract<ServerMessage, { type: T }>;
    };
  }

  /** The Handshake a v1 client sends (no gamewire address cookie: the reference client has none). */
  handshakeBytes(uid: number): Buffer {
    return NoxPeer.encode(
      {
        type: 'Handshake',
        protocol: PROTOCOL_VERSION,
        engine: 'gamewire-conform',
        platform: 'linux',
        addressCookie: null,
      },
      uid,
    );
  }

  close(): void {
    this.closed = true;
    this.closeFn();
  }
}

function decode(raw: Buffer): ServerPacket | undefined {
  try {
    const p = readServerPacket(new WireReader(raw));
    return { uid: p.uid, message: p.message, raw };
  } catch {
    return undefined;
  }
}
