/**
 * A transparent PRUDP V0 proxy for the conformance tests (one upstream socket per client, so the
 * server still sees each client apart). It reads every packet both ways with the access key, lets
 * a mutation rewrite, drop or add packets, and writes rewritten packets with fresh checksums;
 * untouched packets (and datagrams that do not read) go through byte for byte. With the classic
 * profile the mutation can also read and rewrite payloads (RC4 "CD&ML", compression byte).
 */
import dgram from 'node:dgram';
import { accessKeyByte, checksum, keyByteFor } from '../../../src/protocols/rmc/prudp/checksum.js';
import {
  type ChecksumConfig,
  newPacket,
  type PacketFields,
  readPacket,
  writePacket,
} from '../../../src/protocols/rmc/prudp/packet.js';
import { ClassicPayloadCodec } from '../../../src/protocols/rmc/prudp/payload.js';
import { WireWriter } from '../../../src/wire/writer.js';

export interface ProxyPacket {
  fields: PacketFields;
  payload: Buffer;
  /** The packet as it arrived (what goes out when the mutation leaves it alone). */
  raw: Buffer;
}

export interface ProxyPeer {
  /** Sends packets to the client as if from the server. */
  toClient(packets: ProxyPacket[]): void;
  /** State a mutation may keep per client. */
  state: Record<string, unknown>;
}

export interface PrudpMutation {
  /** A packet from the client (checksum verified): what to forward instead. */
  up?(p: ProxyPacket, peer: ProxyPeer): ProxyPacket[];
  /** A packet from the client whose checksum does not verify: forward it (true) or drop it. */
  upBad?(raw: Buffer, peer: ProxyPeer): Buffer | null;
  /** A packet from the server: what to deliver instead. */
  down?(p: ProxyPacket, peer: ProxyPeer): ProxyPacket[];
}

export const classic = new ClassicPayloadCodec();

/** A rewritten copy of a packet (it goes out with a fresh checksum). */
export function rewrite(p: ProxyPacket, fields: Partial<PacketFields> = {}, payload?: Buffer): ProxyPacket {
  return { fields: { ...p.fields, ...fields }, payload: payload ?? p.payload, raw: Buffer.alloc(0) };
}

export class PrudpProxy {
  readonly socket = dgram.createSocket('udp4');
  private readonly upstreams = new Map<string, dgram.Socket>();
  private readonly cfg: ChecksumConfig;
  private readonly writer = new WireWriter({ initialCapacity: 2048 });
  port = 0;
  private readonly serverPort: number;
  private readonly mutation: PrudpMutation;

  private constructor(serverPort: number, accessKey: string, mutation: PrudpMutation) {
    this.serverPort = serverPort;
    this.mutation = mutation;
    this.cfg = { width: 1, keyByte: accessKeyByte(accessKey) };
  }

  static async start(
    serverPort: number,
    accessKey: string,
    mutation: PrudpMutation = {},
  ): Promise<PrudpProxy> {
    const p = new PrudpProxy(serverPort, accessKey, mutation);
    await new Promise<void>((resolve) => p.socket.bind(0, '127.0.0.1', resolve));
    p.port = p.socket.address().port;
    p.socket.on('message', (d, rinfo) => p.fromClient(d, rinfo.address, rinfo.port));
    return p;
  }

  private serialize(packets: ProxyPacket[]): Buffer {
    const parts: Buffer[] = [];
    for (const p of packets) {
      if (p.raw.length > 0) parts.push(p.raw);
      else {
        this.writer.reset();
        writePacket(this.writer, p.fields, p.payload, this.cfg);
        parts.push(Buffer.from(this.writer.view()));
      }
    }
    return Buffer.concat(parts);
  }

  /** Splits a datagram into packets; a packet that does not read ends the walk (returned raw). */
  private split(d: Buffer): { packets: ProxyPacket[]; bad: Buffer | undefined } {
    const packets: ProxyPacket[] = [];
    const pkt = newPacket();
    let off = 0;
    while (off < d.length) {
      try {
        const end = readPacket(d, off, this.cfg, pkt);
        packets.push({
          fields: {
            source: pkt.source,
            destination: pkt.destination,
            type: pkt.type,
            flags: pkt.flags,
            sessionId: pkt.sessionId,
            packetSignature: pkt.packetSignature,
            sequenceId: pkt.sequenceId,
            connectionSignature: pkt.connectionSignature,
            fragmentId: pkt.fragmentId,
          },
          payload: Buffer.from(pkt.payload),
          raw: Buffer.from(d.subarray(off, end)),
        });
        off = end;
      } catch {
        return { packets, bad: Buffer.from(d.subarray(off)) };
      }
    }
    return { packets, bad: undefined };
  }

  private fromClient(d: Buffer, address: string, port: number): void {
    const k = `${address}:${port}`;
    let up = this.upstreams.get(k);
    const peer = this.peers.get(k) ?? this.newPeer(k, address, port);
    if (up === undefined) {
      up = dgram.createSocket('udp4');
      up.bind(0, '127.0.0.1');
      up.on('message', (r) => {
        const { packets, bad } = this.split(r);
        const out = packets.flatMap((p) => this.mutation.down?.(p, peer) ?? [p]);
        const bytes = Buffer.concat([this.serialize(out), bad ?? Buffer.alloc(0)]);
        if (bytes.length > 0) this.socket.send(bytes, port, address);
      });
      this.upstreams.set(k, up);
    }
    const { packets, bad } = this.split(d);
    const out = packets.flatMap((p) => this.mutation.up?.(p, peer) ?? [p]);
    const rest =
      bad === undefined
        ? undefined
        : this.mutation.upBad === undefined
          ? bad
          : this.mutation.upBad(bad, peer);
    const bytes = Buffer.concat([this.serialize(out), rest ?? Buffer.alloc(0)]);
    if (bytes.length > 0) up.send(bytes, this.serverPort, '127.0.0.1');
  }

  private readonly peers = new Map<string, ProxyPeer>();

  private newPeer(k: string, address: string, port: number): ProxyPeer {
    const peer: ProxyPeer = {
      toClient: (packets) => this.socket.send(this.serialize(packets), port, address),
      state: {},
    };
    this.peers.set(k, peer);
    return peer;
  }

  /** Re-checksums a raw 1-byte-checksum packet that did not verify (a server that ignores checksums). */
  fix(raw: Buffer): Buffer {
    const out = Buffer.from(raw);
    out[out.length - 1] = checksum(1, out, 0, out.length - 1, keyByteFor(out[0]! >> 4, this.cfg.keyByte));
    return out;
  }

  async close(): Promise<void> {
    for (const s of this.upstreams.values()) s.close();
    await new Promise<void>((resolve) => this.socket.close(() => resolve()));
  }
}
