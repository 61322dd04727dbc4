/**
 * From a captured frame to a transport segment: the link layer (Ethernet with VLAN tags, Linux
 * cooked SLL and SLL2, BSD null/loopback, raw IP), IPv4 (with fragment reassembly) and IPv6 (with
 * its extension headers and fragments), then UDP or TCP.
 *
 * `PacketDecoder.decode` fills one reused `Segment` and returns it, or returns a reason the
 * frame carries nothing the inspector reads (another protocol, a cut-off header). Nothing here
 * throws on bad bytes.
 */
import { LinkType } from './writer.js';

export interface Segment {
  transport: 'udp' | 'tcp';
  /** Addresses as text (`127.0.0.1`, `::1`). */
  src: string;
  dst: string;
  srcPort: number;
  dstPort: number;
  /** TCP only: sequence number, acknowledgement number, flags. */
  seq: number;
  ack: number;
  flags: number;
  payload: Buffer;
}

export const TcpFlag = { FIN: 0x01, SYN: 0x02, RST: 0x04, PSH: 0x08, ACK: 0x10 } as const;

export interface PacketLimits {
  /** IP datagrams being reassembled at once; the oldest is dropped beyond this. */
  maxFragmentedDatagrams: number;
  /** Capture-time seconds after which an incomplete fragmented datagram is dropped. */
  fragmentTimeoutS: number;
}

export const DEFAULT_PACKET_LIMITS: PacketLimits = { maxFragmentedDatagrams: 1024, fragmentTimeoutS: 30 };

/** Why a frame gave no segment (counted, never printed per packet). */
export type Skip =
  | 'link-type'
  | 'not-ip'
  | 'truncated'
  | 'not-udp-tcp'
  | 'fragment-held'
  | 'fragment-dropped';

interface Reassembly {
  key: string;
  parts: { at: number; data: Buffer }[];
  /** Payload length, known once the last fragment arrived. */
  total: number;
  firstUs: number;
  /** The transport protocol number. */
  proto: number;
  src: string;
  dst: string;
}

const ETHERTYPE_IPV4 = 0x0800;
const ETHERTYPE_IPV6 = 0x86dd;
const MAX_IP_PAYLOAD = 65_535;

function ipv4Text(b: Buffer, o: number): string {
  return `${b[o]}.${b[o + 1]}.${b[o + 2]}.${b[o + 3]}`;
}

/** RFC 5952 text form of 16 bytes. */
export function ipv6Text(b: Buffer, o: number): string {
  const w: number[] = [];
  for (let i = 0; i < 8; i++) w.push(b.readUInt16BE(o + i * 2));
  if (w[0] === 0 && w[1] === 0 && w[2] === 0 && w[3] === 0 && w[4] === 0 && w[5] === 0xffff) {
    return `::ffff:${w[6]! >> 8}.${w[6]! & 0xff}.${w[7]! >> 8}.${w[7]! & 0xff}`;
  }
  // Longest run of two or more zero words becomes "::".
  let bestAt = -1;
  let bestLen = 1;
  for (let i = 0; i < 8; ) {
    if (w[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && w[j] === 0) j++;
    if (j - i > bestLen) {
      bestAt = i;
      bestLen = j - i;
    }
    i = j;
  }
  const hex = w.map((x) => x.toString(16));
  if (bestAt < 0) return hex.join(':');
  return `${hex.slice(0, bestAt).join(':')}::${hex.slice(bestAt + bestLen).join(':')}`;
}

export class PacketDecoder {
  readonly segment: Segment = {
    transport: 'udp',
    src: '',
    dst: '',
    srcPort: 0,
    dstPort: 0,
    seq: 0,
    ack: 0,
    flags: 0,
    payload: Buffer.alloc(0),
  };
  private readonly reassemblies = new Map<string, Reassembly>();
  private readonly limits: PacketLimits;
  readonly skipped: Record<Skip, number> = {
    'link-type': 0,
    'not-ip': 0,
    truncated: 0,
    'not-udp-tcp': 0,
    'fragment-held': 0,
    'fragment-dropped': 0,
  };

  constructor(limits: Partial<PacketLimits> = {}) {
    this.limits = { ...DEFAULT_PACKET_LIMITS, ...limits };
  }

  /** Decodes one frame; returns the segment (reused: copy what must outlive the call) or null. */
  decode(linkType: number, frame: Buffer, timeUs: number): Segment | null {
    const r = this.link(linkType, frame, timeUs);
    if (typeof r === 'string') {
      this.skipped[r]++;
      return null;
    }
    return r;
  }

  private link(linkType: number, b: Buffer, timeUs: number): Segment | Skip {
    switch (linkType) {
      case LinkType.ETHERNET: {
        if (b.length < 14) return 'truncated';
        let o = 12;
        let type = b.readUInt16BE(o);
        // 802.1Q / 802.1ad tags, possibly stacked.
        while ((type === 0x8100 || type === 0x88a8) && o + 6 <= b.length) {
          o += 4;
          type = b.readUInt16BE(o);
        }
        return this.byEthertype(type, b, o + 2, timeUs);
      }
      case LinkType.LINUX_SLL:
        if (b.length < 16) return 'truncated';
        return this.byEthertype(b.readUInt16BE(14), b, 16, timeUs);
      case LinkType.LINUX_SLL2:
        if (b.length < 20) return 'truncated';
        return this.byEthertype(b.readUInt16BE(0), b, 20, timeUs);
      case LinkType.NULL:
      case LinkType.LOOP: {
        if (b.length < 4) return 'truncated';
        // NULL stores the address family in the capturing host's byte order; LOOP in network order.
        const le = b.readUInt32LE(0);
        const family = linkType === LinkType.LOOP ? b.readUInt32BE(0) : le < 0x10000 ? le : b.readUInt32BE(0);
        if (family === 2) return this.ipv4(b, 4, timeUs);
        if (family === 24 || family === 28 || family === 30) return this.ipv6(b, 4, timeUs);
        return 'not-ip';
      }
      case LinkType.RAW:
      case 12:
      case 14:
        return this.ipAny(b, 0, timeUs);
      case LinkType.IPV4:
        return this.ipv4(b, 0, timeUs);
      case LinkType.IPV6:
        return this.ipv6(b, 0, timeUs);
      default:
        return 'link-type';
    }
  }

  private byEthertype(type: number, b: Buffer, o: number, timeUs: number): Segment | Skip {
    if (type === ETHERTYPE_IPV4) return this.ipv4(b, o, timeUs);
    if (type === ETHERTYPE_IPV6) return this.ipv6(b, o, timeUs);
    return 'not-ip';
  }

  private ipAny(b: Buffer, o: number, timeUs: number): Segment | Skip {
    if (b.length <= o) return 'truncated';
    const v = b[o]! >> 4;
    if (v === 4) return this.ipv4(b, o, timeUs);
    if (v === 6) return this.ipv6(b, o, timeUs);
    return 'not-ip';
  }

  private ipv4(b: Buffer, o: number, timeUs: number): Segment | Skip {
    if (b.length < o + 20 || b[o]! >> 4 !== 4) return b.length < o + 20 ? 'truncated' : 'not-ip';
    const ihl = (b[o]! & 0x0f) * 4;
    const total = b.readUInt16BE(o + 2);
    if (ihl < 20 || total < ihl || b.length < o + total) return 'truncated';
    const proto = b[o + 9]!;
    const src = ipv4Text(b, o + 12);
    const dst = ipv4Text(b, o + 16);
    const fragField = b.readUInt16BE(o + 6);
    const more = (fragField & 0x2000) !== 0;
    const fragOffset = (fragField & 0x1fff) * 8;
    const payload = b.subarray(o + ihl, o + total);
    if (!more && fragOffset === 0) return this.transport(proto, src, dst, payload);
    const key = `4/${src}/${dst}/${proto}/${b.readUInt16BE(o + 4)}`;
    return this.fragment(key, proto, src, dst, fragOffset, more, payload, timeUs);
  }

  private ipv6(b: Buffer, o: number, timeUs: number): Segment | Skip {
    if (b.length < o + 40) return 'truncated';
    if (b[o]! >> 4 !== 6) return 'not-ip';
    const payloadLength = b.readUInt16BE(o + 4);
    // A zero payload length means a jumbogram; those do not occur on the links we read.
    const end = o + 40 + payloadLength;
    if (payloadLength === 0 || b.length < end) return 'truncated';
    let next = b[o + 6]!;
    const src = ipv6Text(b, o + 8);
    const dst = ipv6Text(b, o + 24);
    let p = o + 40;
    for (let hops = 0; hops < 16; hops++) {
      if (next === 0 || next === 43 || next === 60) {
        if (p + 8 > end) return 'truncated';
        const len = (b[p + 1]! + 1) * 8;
        next = b[p]!;
        p += len;
        continue;
      }
      if (next === 44) {
        if (p + 8 > end) return 'truncated';
        const field = b.readUInt16BE(p + 2);
        const fragOffset = field & 0xfff8;
        const more = (field & 1) !== 0;
        const id = b.readUInt32BE(p + 4);
        const inner = b[p]!;
        const payload = b.subarray(p + 8, end);
        if (!more && fragOffset === 0) return this.transport(inner, src, dst, payload);
        return this.fragment(`6/${src}/${dst}/${id}`, inner, src, dst, fragOffset, more, payload, timeUs);
      }
      if (p > end) return 'truncated';
      return this.transport(next, src, dst, b.subarray(p, end));
    }
    return 'not-udp-tcp';
  }

  private fragment(
    key: string,
    proto: number,
    src: string,
    dst: string,
    at: number,
    more: boolean,
    data: Buffer,
    timeUs: number,
  ): Segment | Skip {
    this.expire(timeUs);
    let r = this.reassemblies.get(key);
    if (r === undefined) {
      if (this.reassemblies.size >= this.limits.maxFragmentedDatagrams) {
        // Drop the oldest (Map keeps insertion order).
        const oldest = this.reassemblies.keys().next().value!;
        this.reassemblies.delete(oldest);
        this.skipped['fragment-dropped']++;
      }
      r = { key, parts: [], total: -1, firstUs: timeUs, proto, src, dst };
      this.reassemblies.set(key, r);
    }
    if (at + data.length > MAX_IP_PAYLOAD) {
      this.reassemblies.delete(key);
      return 'fragment-dropped';
    }
    // Fragments are copied: the frame they came in is only valid during this call.
    r.parts.push({ at, data: Buffer.from(data) });
    if (!more) r.total = at + data.length;
    if (r.total < 0) return 'fragment-held';
    // Complete when the parts cover [0, total) without a hole; overlaps keep the first bytes seen.
    const sorted = r.parts.slice().sort((a, b) => a.at - b.at);
    let covered = 0;
    for (const p of sorted) {
      if (p.at > covered) return 'fragment-held';
      covered = Math.max(covered, p.at + p.data.length);
    }
    if (covered < r.total) return 'fragment-held';
    const whole = Buffer.alloc(r.total);
    const filled = new Uint8Array(r.total);
    for (const p of r.parts) {
      for (let i = 0; i < p.data.length && p.at + i < r.total; i++) {
        if (filled[p.at + i] === 0) {
          whole[p.at + i] = p.data[i]!;
          filled[p.at + i] = 1;
        }
      }
    }
    this.reassemblies.delete(key);
    return this.transport(r.proto, r.src, r.dst, whole);
  }

  private expire(timeUs: number): void {
    const limit = this.limits.fragmentTimeoutS * 1e6;
    for (const r of this.reassemblies.values()) {
      if (timeUs - r.firstUs <= limit) break;
      this.reassemblies.delete(r.key);
      this.skipped['fragment-dropped']++;
    }
  }

  private transport(proto: number, src: string, dst: string, p: Buffer): Segment | Skip {
    const s = this.segment;
    if (proto === 17) {
      if (p.length < 8) return 'truncated';
      const len = p.readUInt16BE(4);
      if (len < 8 || len > p.length) return 'truncated';
      s.transport = 'udp';
      s.srcPort = p.readUInt16BE(0);
      s.dstPort = p.readUInt16BE(2);
      s.seq = s.ack = s.flags = 0;
      s.payload = p.subarray(8, len);
    } else if (proto === 6) {
      if (p.length < 20) return 'truncated';
      const off = (p[12]! >> 4) * 4;
      if (off < 20 || off > p.length) return 'truncated';
      s.transport = 'tcp';
      s.srcPort = p.readUInt16BE(0);
      s.dstPort = p.readUInt16BE(2);
      s.seq = p.readUInt32BE(4);
      s.ack = p.readUInt32BE(8);
      s.flags = p[13]!;
      s.payload = p.subarray(off);
    } else return 'not-udp-tcp';
    s.src = src;
    s.dst = dst;
    return s;
  }
}
