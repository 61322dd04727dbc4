/**
 * The inspector's pipeline: captured frames → segments → flows → protocol decoders → records.
 *
 * A flow is one UDP 4-tuple or one TCP connection. Its protocol comes from the port map
 * (`--port`, then every protocol's default ports) or, failing that, from the content of the
 * first bytes; the side that owns the mapped port is the server. TCP directions are reassembled
 * (tcp.ts) before they reach the decoder.
 */

import { ConfigError } from '../core/errors.js';
import type { FlowProtocol } from '../core/flow.js';
import type { Direction } from '../core/protocol.js';
import type { Json } from '../wire/codec.js';
import type { DecodeError } from '../wire/errors.js';
import type { CapturedPacket } from './capture.js';
import { PacketDecoder, type PacketLimits, type Segment, TcpFlag } from './packet.js';
import {
  type DecoderOptions,
  decoderDefaults,
  type Emitter,
  type FlowDecoder,
  findProtocol,
} from './protocols.js';
import { type TcpLimits, TcpReassembler } from './tcp.js';

export interface InspectRecord {
  /** Capture time of the packet that completed the message, in microseconds since the epoch. */
  timeUs: number;
  /** `client-address:port -> server-address:port`. */
  flow: string;
  transport: 'tcp' | 'udp';
  direction: Direction;
  protocol: string;
  message?: Json;
  error?: { code: string; message: string; offset: number; path?: string };
}

/** `port` (both transports) or `port/udp`, `port/tcp`, mapped to a protocol name. */
export interface PortMapping {
  port: number;
  transport?: 'tcp' | 'udp';
  protocol: string;
}

export interface InspectOptions {
  /** The protocols to decode, from `loadFlowProtocols()` (src/inspect/protocols.ts). */
  protocols: readonly FlowProtocol<any>[];
  ports: PortMapping[];
  /** Try content detection for flows no port maps (default true). */
  detect: boolean;
  /** Flows held at once; the oldest is finished and dropped beyond this. */
  maxFlows: number;
  decoder: Partial<DecoderOptions>;
  packet: Partial<PacketLimits>;
  tcp: Partial<TcpLimits>;
  /** Sees every payload handed to a decoder (in-order TCP bytes, or a datagram): the replay uses it. */
  onPayload?: (
    flow: string,
    transport: 'tcp' | 'udp',
    protocol: string,
    direction: Direction,
    bytes: Buffer,
    /** Capture time of the packet that carried them, in microseconds since the epoch. */
    timeUs: number,
  ) => void;
}

export const DEFAULT_INSPECT_OPTIONS: InspectOptions = {
  protocols: [],
  ports: [],
  detect: true,
  maxFlows: 65_536,
  decoder: {},
  packet: {},
  tcp: {},
};

export interface InspectStats {
  packets: number;
  segments: number;
  flows: number;
  unknownFlows: number;
  messages: number;
  errors: number;
  gapBytes: number;
  skipped: Record<string, number>;
}

function endpoint(address: string, port: number): string {
  return address.includes(':') ? `[${address}]:${port}` : `${address}:${port}`;
}

class Flow {
  readonly key: string;
  readonly transport: 'tcp' | 'udp';
  /** The endpoint (address, port) of side 0: whoever sent the first packet seen. */
  readonly a: string;
  readonly aPort: number;
  readonly bPort: number;
  readonly b: string;
  protocol: FlowProtocol<any> | null | undefined = undefined;
  /** Which side (0 = a, 1 = b) is the client; set with the protocol. */
  clientSide: 0 | 1 = 0;
  label = '';
  decoder: FlowDecoder | undefined;
  readonly tcp: [TcpReassembler, TcpReassembler] | undefined;
  /** The client side is known from a captured SYN. */
  synSeen = false;

  constructor(key: string, s: Segment, inspector: Inspector) {
    this.key = key;
    this.transport = s.transport;
    this.a = s.src;
    this.aPort = s.srcPort;
    this.b = s.dst;
    this.bPort = s.dstPort;
    if (s.transport === 'tcp') {
      const limits = inspector.options.tcp;
      const sink = (side: 0 | 1) => ({
        data: (bytes: Buffer, offset: number) => inspector.streamData(this, side, bytes, offset),
        gap: (offset: number, length: number) => inspector.streamGap(this, side, offset, length),
      });
      this.tcp = [new TcpReassembler(sink(0), limits), new TcpReassembler(sink(1), limits)];
    }
  }

  sideOf(s: Segment): 0 | 1 {
    return s.src === this.a && s.srcPort === this.aPort ? 0 : 1;
  }

  directionOf(side: 0 | 1): Direction {
    return side === this.clientSide ? 'client' : 'server';
  }

  assign(protocol: FlowProtocol<any> | null, clientSide: 0 | 1): void {
    this.protocol = protocol;
    this.clientSide = clientSide;
    const c = clientSide === 0 ? endpoint(this.a, this.aPort) : endpoint(this.b, this.bPort);
    const s = clientSide === 0 ? endpoint(this.b, this.bPort) : endpoint(this.a, this.aPort);
    this.label = `${c} -> ${s}`;
  }
}

export class Inspector {
  readonly options: InspectOptions;
  private readonly flows = new Map<string, Flow>();
  private readonly packets: PacketDecoder;
  private readonly decoderOptions: DecoderOptions;
  private readonly onRecord: (r: InspectRecord) => void;
  private readonly tcpPorts = new Map<number, FlowProtocol<any>>();
  private readonly udpPorts = new Map<number, FlowProtocol<any>>();
  private readonly explicitTcp = new Set<number>();
  private readonly explicitUdp = new Set<number>();
  private now = 0;
  readonly stats: InspectStats = {
    packets: 0,
    segments: 0,
    flows: 0,
    unknownFlows: 0,
    messages: 0,
    errors: 0,
    gapBytes: 0,
    skipped: {},
  };

  constructor(onRecord: (r: InspectRecord) => void, options: Partial<InspectOptions> = {}) {
    this.options = { ...DEFAULT_INSPECT_OPTIONS, ...options };
    this.onRecord = onRecord;
    this.packets = new PacketDecoder(this.options.packet);
    const protocols = this.options.protocols;
    this.decoderOptions = { ...decoderDefaults(protocols), ...this.options.decoder };
    for (const p of protocols) {
      for (const port of p.tcpPorts) this.tcpPorts.set(port, p);
      for (const port of p.udpPorts) this.udpPorts.set(port, p);
    }
    for (const m of this.options.ports) {
      const p = findProtocol(protocols, m.protocol);
      if (p === undefined) throw new ConfigError(`unknown protocol ${m.protocol}`, 'ports');
      if (m.transport !== 'udp') {
        this.tcpPorts.set(m.port, p);
        this.explicitTcp.add(m.port);
      }
      if (m.transport !== 'tcp') {
        this.udpPorts.set(m.port, p);
        this.explicitUdp.add(m.port);
      }
    }
  }

  /** One captured frame. */
  packet(p: CapturedPacket): void {
    this.stats.packets++;
    this.now = p.timeUs;
    const s = this.packets.decode(p.linkType, p.data, p.timeUs);
    if (s === null) return;
    this.stats.segments++;
    const key =
      s.src < s.dst || (s.src === s.dst && s.srcPort < s.dstPort)
        ? `${s.transport} ${s.src} ${s.srcPort} ${s.dst} ${s.dstPort}`
        : `${s.transport} ${s.dst} ${s.dstPort} ${s.src} ${s.srcPort}`;
    let flow = this.flows.get(key);
    if (flow === undefined) {
      // A TCP segment with neither data nor SYN (a late ACK, a FIN after the flow ended) opens nothing.
      if (s.transport === 'tcp' && s.payload.length === 0 && (s.flags & TcpFlag.SYN) === 0) return;
      if (this.flows.size >= this.options.maxFlows) this.retire(this.flows.values().next().value!);
      flow = new Flow(key, s, this);
      this.flows.set(key, flow);
      this.stats.flows++;
      this.mapByPort(flow, s);
    }
    const side = flow.sideOf(s);
    if (s.transport === 'udp') {
      if (flow.protocol === undefined) this.detect(flow, side, s.payload);
      if (flow.protocol === null || flow.protocol === undefined) return;
      const direction = flow.directionOf(side);
      this.options.onPayload?.(flow.label, 'udp', flow.protocol.name, direction, s.payload, this.now);
      flow.decoder!.datagram(direction, s.payload);
      return;
    }
    const tcp = flow.tcp!;
    if ((s.flags & TcpFlag.SYN) !== 0 && (s.flags & TcpFlag.ACK) === 0 && flow.protocol === undefined) {
      // The SYN's sender is the client, whatever the content says later.
      flow.clientSide = side;
      flow.synSeen = true;
    }
    tcp[side]!.segment(s.seq, (s.flags & TcpFlag.SYN) !== 0, (s.flags & TcpFlag.FIN) !== 0, s.payload);
    if ((s.flags & TcpFlag.ACK) !== 0) tcp[side === 0 ? 1 : 0]!.acknowledged(s.ack);
    if ((s.flags & TcpFlag.RST) !== 0 || (tcp[0].finished && tcp[1].finished)) this.retire(flow);
  }

  /** Ends the capture: flushes every TCP direction. */
  finish(): void {
    for (const flow of [...this.flows.values()]) this.retire(flow);
    const skipped = this.packets.skipped as Record<string, number>;
    for (const k of Object.keys(skipped)) if (skipped[k]! > 0) this.stats.skipped[k] = skipped[k]!;
  }

  private retire(flow: Flow): void {
    if (flow.tcp !== undefined) {
      flow.tcp[0].flush();
      flow.tcp[1].flush();
      this.stats.gapBytes += flow.tcp[0].gapBytes + flow.tcp[1].gapBytes;
    }
    this.flows.delete(flow.key);
  }

  private mapByPort(flow: Flow, s: Segment): void {
    const ports = s.transport === 'tcp' ? this.tcpPorts : this.udpPorts;
    const explicit = s.transport === 'tcp' ? this.explicitTcp : this.explicitUdp;
    const atDst = ports.get(s.dstPort);
    const atSrc = ports.get(s.srcPort);
    // An explicit mapping beats a default one; otherwise the destination of the first packet
    // (usually the client's first send) is taken as the server.
    let server: 0 | 1 | -1 = -1;
    if (atDst !== undefined && (explicit.has(s.dstPort) || !explicit.has(s.srcPort) || atSrc === undefined))
      server = 1;
    else if (atSrc !== undefined) server = 0;
    if (server === -1) return;
    if (s.transport === 'tcp' && (s.flags & (TcpFlag.SYN | TcpFlag.ACK)) === TcpFlag.SYN) {
      // The SYN's sender is the client.
      server = 1;
    }
    const protocol = server === 1 ? (atDst ?? atSrc)! : (atSrc ?? atDst)!;
    this.setProtocol(flow, protocol, server === 1 ? 0 : 1);
  }

  private setProtocol(flow: Flow, protocol: FlowProtocol<any> | null, clientSide: 0 | 1): void {
    flow.assign(protocol, clientSide);
    if (protocol === null) {
      this.stats.unknownFlows++;
      return;
    }
    const emitter: Emitter = {
      message: (direction, message) => this.emit(flow, direction, message, undefined),
      error: (direction, error) => this.emit(flow, direction, undefined, error),
    };
    flow.decoder = protocol.create(emitter, this.decoderOptions);
  }

  /** Content detection on the first bytes a side sent. */
  private detect(flow: Flow, side: 0 | 1, first: Buffer): void {
    if (this.options.detect) {
      for (const p of this.options.protocols) {
        const sender = p.detect?.(flow.transport, first);
        if (sender === undefined) continue;
        let clientSide: 0 | 1 = sender === 'client' ? side : side === 0 ? 1 : 0;
        if (flow.synSeen) clientSide = flow.clientSide;
        this.setProtocol(flow, p, clientSide);
        return;
      }
    }
    this.setProtocol(flow, null, flow.clientSide);
  }

  /** In-order bytes of a TCP side (called by the reassembler). */
  streamData(flow: Flow, side: 0 | 1, bytes: Buffer, offset: number): void {
    if (flow.protocol === undefined) {
      // Content detection needs the start of a stream.
      if (offset !== 0) this.setProtocol(flow, null, flow.clientSide);
      else this.detect(flow, side, bytes);
    }
    const protocol = flow.protocol;
    if (protocol === null || protocol === undefined) return;
    const direction = flow.directionOf(side);
    this.options.onPayload?.(flow.label, 'tcp', protocol.name, direction, bytes, this.now);
    flow.decoder!.stream(direction, bytes, offset);
  }

  streamGap(flow: Flow, side: 0 | 1, offset: number, length: number): void {
    if (flow.protocol === undefined || flow.protocol === null) return;
    flow.decoder!.gap(flow.directionOf(side), offset, length);
  }

  private emit(
    flow: Flow,
    direction: Direction,
    message: Json | undefined,
    error: DecodeError | undefined,
  ): void {
    const record: InspectRecord = {
      timeUs: this.now,
      flow: flow.label,
      transport: flow.transport,
      direction,
      protocol: flow.protocol!.name,
    };
    if (error !== undefined) {
      this.stats.errors++;
      record.error = { code: error.code, message: error.message, offset: error.offset };
      if (error.path !== '') record.error.path = error.path;
    } else {
      this.stats.messages++;
      record.message = message!;
    }
    this.onRecord(record);
  }
}
