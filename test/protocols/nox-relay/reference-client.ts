/**
 * A test client that behaves exactly like the reference NoxVR v1 client, AtelierVR/nox.relay as
 * of its last TCP/UDP commit (f8a268f, before the move to QUIC), mapped onto the v1 messages:
 *
 * - one connected UDP socket; the first Handshake is not padded and carries no address cookie
 *   (Core/Relay.cs `Handshake()`, Core/Types/Handshakes/HandshakeRequest.cs);
 * - request uids come from a counter that starts at 0 and wraps before 0xFFFF (`NextState()`);
 *   a reply is matched by uid and type; every datagram is cut into packets by their length
 *   fields (Core/Connectors/UdpConnector.cs);
 * - Handshake, Authentification, then the room list walked page by page until the wanted master
 *   id appears (`List(uint mid)`), Enter with the internal id the list gave, Traveling Travel,
 *   then Ready (Runtime/Helper.cs);
 * - a Latency keep-alive every KeepAliveInterval seconds of the Handshake reply;
 * - its own transforms as OnPlayer with player id 0xFFFF ("self"), one per moved rig per tick
 *   (Runtime/Players/LocalPlayer.cs `SendTransformsBatch`): it never sends its player id back;
 * - instance messages are routed by instance id to the room it entered, and dropped when the id
 *   is not that room's (Core/Relay.cs `HandleInstance`).
 *
 * https://github.com/AtelierVR/nox.relay/tree/f8a268f695b48547c969c4a608599a582266deb2
 */
import dgram from 'node:dgram';
import {
  PROTOCOL_VERSION,
  TransformType,
  TravelingAction,
} from '../../../src/protocols/nox-relay/constants.js';
import type { ClientMessage, ServerMessage } from '../../../src/protocols/nox-relay/messages.js';
import {
  packetMeasure,
  readServerPacket,
  splitPackets,
  writeClientPacket,
} from '../../../src/protocols/nox-relay/packet.js';
import { WireReader, WireWriter } from '../../../src/wire/index.js';

type Reply<T extends ServerMessage['type']> = Extract<ServerMessage, { type: T }>;

const measure = packetMeasure(0xffff);

export interface ReferenceClientOptions {
  port: number;
  host?: string;
  /** Source address (127.0.0.x). */
  localAddress: string;
  /** Offline token. */
  token: string;
  /** Reply timeout; the reference client waits the Handshake's segmentation timeout (15 s by default). */
  requestTimeoutMs?: number;
}

export class ReferenceV1Client {
  readonly options: ReferenceClientOptions;
  private readonly socket = dgram.createSocket('udp4');
  private readonly writer = new WireWriter({ initialCapacity: 256 });
  private readonly reader = new WireReader();
  private nextState = 0;
  private readonly waiting = new Map<number, { type: string; resolve: (m: ServerMessage) => void }>();
  private keepAlive: NodeJS.Timeout | undefined;
  private ticker: NodeJS.Timeout | undefined;
  /** Bytes sent and received on the wire. */
  bytesSent = 0;
  bytesReceived = 0;
  /** The internal id the room list gave for the room entered (what it routes instance messages by). */
  roomId = -1;
  playerId = -1;
  /** Own transforms sent. */
  transformsSent = 0;
  /** Transforms received from each other player id. */
  readonly transformsFrom = new Map<number, number>();
  /** Instance messages that named another room (the reference client logs and drops them). */
  unknownRoom = 0;
  closed = false;

  constructor(options: ReferenceClientOptions) {
    this.options = options;
    this.socket.on('message', (msg) => this.onDatagram(msg));
    this.socket.on('error', () => {});
  }

  async connect(): Promise<void> {
    await new Promise<void>((resolve) => this.socket.bind(0, this.options.localAddress, () => resolve()));
    // The test process hosts a whole crowd: room for a few seconds of its traffic while it waits
    // for a busy machine, so that losses measured are the server's, not the harness's.
    this.socket.setRecvBufferSize(1 << 20);
    await new Promise<void>((resolve) =>
      this.socket.connect(this.options.port, this.options.host ?? '127.0.0.1', () => resolve()),
    );
  }

  private state(): number {
    if (this.nextState >= 0xffff) this.nextState = 0;
    return this.nextState++;
  }

  private emit(message: ClientMessage, uid = this.state()): number {
    const w = this.writer.reset();
    writeClientPacket(w, uid, message);
    const bytes = w.toBuffer();
    this.bytesSent += bytes.length;
    if (!this.closed) this.socket.send(bytes);
    return uid;
  }

  private request<T extends ServerMessage['type']>(message: ClientMessage, type: T): Promise<Reply<T>> {
    const uid = this.state();
    return new Promise<Reply<T>>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiting.delete(uid);
        reject(new Error(`${this.options.localAddress}: no ${type} reply to ${message.type} (uid ${uid})`));
      }, this.options.requestTimeoutMs ?? 15_000);
      this.waiting.set(uid, {
        type,
        resolve: (m) => {
          clearTimeout(timer);
          resolve(m as Reply<T>);
        },
      });
      this.emit(message, uid);
    });
  }

  private onDatagram(msg: Buffer): void {
    this.bytesReceived += msg.length;
    let ranges: number[];
    try {
      ranges = splitPackets(msg, 0, msg.length, measure, []);
    } catch {
      return;
    }
    for (let i = 0; i < ranges.length; i += 2) {
      let uid: number;
      let m: ServerMessage;
      try {
        ({ uid, message: m } = readServerPacket(this.reader.reset(msg, ranges[i]!, ranges[i + 1]!)));
      } catch {
        continue;
      }
      if ('instanceId' in m && m.type !== 'Enter' && this.roomId >= 0 && m.instanceId !== this.roomId) {
        this.unknownRoom++;
        continue;
      }
      const w = this.waiting.get(uid);
      if (w !== undefined && w.type === m.type) {
        this.waiting.delete(uid);
        w.resolve(m);
      }
      if (m.type === 'Transform') {
        this.transformsFrom.set(m.playerId!, (this.transformsFrom.get(m.playerId!) ?? 0) + 1);
      }
    }
  }

  /** Handshake → Authentification → room list → Enter → Travel → Ready, as Runtime/Helper.cs does. */
  async join(masterId: number): Promise<void> {
    const hs = await this.request(
      {
        type: 'Handshake',
        protocol: PROTOCOL_VERSION,
        engine: 'unity',
        platform: 'windows',
        addressCookie: null,
      },
      'Handshake',
    );
    const every = hs.keepAliveInterval * 1000;
    this.keepAlive = setInterval(() => this.emit({ type: 'Latency', timestamp: BigInt(Date.now()) }), every);
    this.keepAlive.unref();
    const auth = await this.request(
      { type: 'Authentification', flags: 0, accessToken: this.options.token },
      'Authentification',
    );
    if (auth.result !== 0) throw new Error(`authentification failed: ${auth.result}`);
    let page = 0;
    let total = 1;
    let room: number | undefined;
    do {
      const list = await this.request({ type: 'Sessions', page }, 'Sessions');
      total = list.totalPages;
      room = list.instances.find((i) => i.masterId === masterId)?.internalId;
      page++;
    } while (room === undefined && page < total);
    if (room === undefined) throw new Error(`room ${masterId} is not listed`);
    this.roomId = room;
    const enter = await this.request({ type: 'Enter', instanceId: room, flags: 0 }, 'Enter');
    if (enter.result !== 0) throw new Error(`enter failed: ${enter.result}`);
    this.playerId = enter.playerId!;
    await this.request({ type: 'Traveling', instanceId: room, action: TravelingAction.Travel }, 'Traveling');
    const ready = await this.request(
      { type: 'Traveling', instanceId: room, action: TravelingAction.Ready },
      'Traveling',
    );
    if ((ready.result & 0x10) === 0) throw new Error(`not ready: ${ready.result}`);
  }

  /** A Latency request, as its keep-alive loop sends one, awaited. */
  latencyNow(): Promise<Reply<'Latency'>> {
    return this.request({ type: 'Latency', timestamp: BigInt(Date.now()) }, 'Latency');
  }

  /** One transform of a part (rig 5: the head) of its own player (id 0xFFFF = self), as LocalPlayer sends a moved part. */
  sendTransform(x: number, rig = 5): void {
    this.transformsSent++;
    this.emit({
      type: 'Transform',
      instanceId: this.roomId,
      transformType: TransformType.OnPlayer,
      playerId: 0xffff,
      rig,
      flags: 0x01,
      position: { x, y: 1.7, z: 0 },
    });
  }

  /**
   * Sends a transform every `1000 / hz` ms (the player keeps moving). With `rigs` > 1 each one
   * moves another part in turn, so that no two updates of one part fall in one TPS window (the
   * relay would merge them) and every update sent is one relayed.
   */
  startMoving(hz: number, rigs = 1): void {
    let x = 0;
    let n = 0;
    this.ticker = setInterval(() => {
      x += 0.05;
      this.sendTransform(x, rigs === 1 ? 5 : 1 + (n++ % rigs));
    }, 1000 / hz);
  }

  stopMoving(): void {
    if (this.ticker !== undefined) clearInterval(this.ticker);
    this.ticker = undefined;
  }

  /** Transforms received from other players. */
  get transformsReceived(): number {
    let n = 0;
    for (const [id, count] of this.transformsFrom) if (id !== this.playerId) n += count;
    return n;
  }

  close(): Promise<void> {
    this.stopMoving();
    if (this.keepAlive !== undefined) clearInterval(this.keepAlive);
    if (this.closed) return Promise.resolve();
    this.closed = true;
    return new Promise((resolve) => this.socket.close(() => resolve()));
  }
}
