/**
 * Writing captures: pcap records and pcapng blocks, and synthetic IPv4/IPv6 + UDP/TCP headers
 * around payloads seen at a socket (the recorder has no real headers to copy).
 */

export const LinkType = {
  NULL: 0,
  ETHERNET: 1,
  RAW: 101,
  LOOP: 108,
  LINUX_SLL: 113,
  IPV4: 228,
  IPV6: 229,
  LINUX_SLL2: 276,
} as const;

/** The 24-byte pcap file header (little-endian, microseconds). */
export function pcapFileHeader(linkType: number, snapLength = 262_144): Buffer {
  const b = Buffer.alloc(24);
  b.writeUInt32LE(0xa1b2c3d4, 0);
  b.writeUInt16LE(2, 4);
  b.writeUInt16LE(4, 6);
  b.writeUInt32LE(snapLength, 16);
  b.writeUInt32LE(linkType, 20);
  return b;
}

/** One pcap record header + data. */
export function pcapRecord(timeUs: number, data: Uint8Array): Buffer {
  const b = Buffer.allocUnsafe(16 + data.length);
  b.writeUInt32LE(Math.floor(timeUs / 1e6), 0);
  b.writeUInt32LE(timeUs % 1e6, 4);
  b.writeUInt32LE(data.length, 8);
  b.writeUInt32LE(data.length, 12);
  b.set(data, 16);
  return b;
}

function pad4(n: number): number {
  return (n + 3) & ~3;
}

/** A pcapng section header block (little-endian, section length unknown). */
export function pcapngSectionHeader(application = 'gamewire'): Buffer {
  const app = Buffer.from(application, 'utf8');
  const optLen = 4 + pad4(app.length) + 4;
  const total = 28 + optLen;
  const b = Buffer.alloc(total);
  b.writeUInt32LE(0x0a0d0d0a, 0);
  b.writeUInt32LE(total, 4);
  b.writeUInt32LE(0x1a2b3c4d, 8);
  b.writeUInt16LE(1, 12);
  b.writeUInt16LE(0, 14);
  b.writeInt32LE(-1, 16);
  b.writeInt32LE(-1, 20);
  // shb_userappl (4)
  b.writeUInt16LE(4, 24);
  b.writeUInt16LE(app.length, 26);
  app.copy(b, 28);
  b.writeUInt32LE(total, total - 4);
  return b;
}

/** A pcapng interface description block (microsecond timestamps, the default resolution). */
export function pcapngInterface(linkType: number, snapLength = 262_144): Buffer {
  const b = Buffer.alloc(20);
  b.writeUInt32LE(1, 0);
  b.writeUInt32LE(20, 4);
  b.writeUInt16LE(linkType, 8);
  b.writeUInt32LE(snapLength, 12);
  b.writeUInt32LE(20, 16);
  return b;
}

/** A pcapng enhanced packet block. */
export function pcapngPacket(interfaceId: number, timeUs: number, data: Uint8Array): Buffer {
  const total = 32 + pad4(data.length);
  const b = Buffer.alloc(total);
  b.writeUInt32LE(6, 0);
  b.writeUInt32LE(total, 4);
  b.writeUInt32LE(interfaceId, 8);
  const t = Math.floor(timeUs);
  b.writeUInt32LE(Math.floor(t / 4294967296), 12);
  b.writeUInt32LE(t % 4294967296, 16);
  b.writeUInt32LE(data.length, 20);
  b.writeUInt32LE(data.length, 24);
  b.set(data, 28);
  b.writeUInt32LE(total, total - 4);
  return b;
}

function checksum16(buf: Buffer, start: number, end: number, initial = 0): number {
  let sum = initial;
  for (let i = start; i + 1 < end; i += 2) sum += buf.readUInt16BE(i);
  if ((end - start) % 2 === 1) sum += buf[end - 1]! << 8;
  while (sum > 0xffff) sum = (sum & 0xffff) + (sum >>> 16);
  return sum;
}

function ipv4Bytes(addr: string): Buffer {
  const parts = addr.split('.').map(Number);
  return Buffer.from(parts.length === 4 && parts.every((p) => p >= 0 && p <= 255) ? parts : [127, 0, 0, 1]);
}

/** Expands an IPv6 text address (with `::`, optionally an IPv4 tail) into 16 bytes. */
export function ipv6Bytes(addr: string): Buffer {
  const out = Buffer.alloc(16);
  let text = addr;
  const pct = text.indexOf('%');
  if (pct >= 0) text = text.slice(0, pct);
  const words: number[] = [];
  const parseSide = (s: string): number[] => {
    if (s === '') return [];
    const w: number[] = [];
    for (const part of s.split(':')) {
      if (part.includes('.')) {
        const v4 = ipv4Bytes(part);
        w.push((v4[0]! << 8) | v4[1]!, (v4[2]! << 8) | v4[3]!);
      } else w.push(Number.parseInt(part, 16) & 0xffff);
    }
    return w;
  };
  const dbl = text.indexOf('::');
  if (dbl >= 0) {
    const head = parseSide(text.slice(0, dbl));
    const tail = parseSide(text.slice(dbl + 2));
    words.push(...head, ...new Array(Math.max(0, 8 - head.length - tail.length)).fill(0), ...tail);
  } else words.push(...parseSide(text));
  for (let i = 0; i < 8; i++) out.writeUInt16BE(words[i] ?? 0, i * 2);
  return out;
}

export interface Endpoint {
  address: string;
  port: number;
}

/**
 * A raw IP packet (link type RAW) carrying `payload` from `src` to `dst` over UDP or TCP. TCP
 * segments get the given sequence number, ACK and PSH (or the flags given).
 */
export function ipPacket(
  transport: 'udp' | 'tcp',
  src: Endpoint,
  dst: Endpoint,
  payload: Uint8Array,
  tcp?: { seq: number; ack: number; flags: number },
): Buffer {
  const v6 = src.address.includes(':') && !src.address.startsWith('::ffff:');
  const srcAddr = v6 ? ipv6Bytes(src.address) : ipv4Bytes(src.address.replace(/^::ffff:/, ''));
  const dstAddr = v6 ? ipv6Bytes(dst.address) : ipv4Bytes(dst.address.replace(/^::ffff:/, ''));
  const l4Header = transport === 'udp' ? 8 : 20;
  const l4Length = l4Header + payload.length;
  const ipHeader = v6 ? 40 : 20;
  const b = Buffer.alloc(ipHeader + l4Length);
  const proto = transport === 'udp' ? 17 : 6;
  if (v6) {
    b.writeUInt32BE(0x60000000, 0);
    b.writeUInt16BE(l4Length, 4);
    b[6] = proto;
    b[7] = 64;
    srcAddr.copy(b, 8);
    dstAddr.copy(b, 24);
  } else {
    b[0] = 0x45;
    b.writeUInt16BE(Math.min(0xffff, ipHeader + l4Length), 2);
    b.writeUInt16BE(0x4000, 6); // don't fragment
    b[8] = 64;
    b[9] = proto;
    srcAddr.copy(b, 12);
    dstAddr.copy(b, 16);
    b.writeUInt16BE(~checksum16(b, 0, 20) & 0xffff, 10);
  }
  const o = ipHeader;
  b.writeUInt16BE(src.port, o);
  b.writeUInt16BE(dst.port, o + 2);
  if (transport === 'udp') {
    b.writeUInt16BE(Math.min(0xffff, l4Length), o + 4);
  } else {
    const t = tcp ?? { seq: 0, ack: 0, flags: 0x18 };
    b.writeUInt32BE(t.seq >>> 0, o + 4);
    b.writeUInt32BE(t.ack >>> 0, o + 8);
    b[o + 12] = 5 << 4;
    b[o + 13] = t.flags;
    b.writeUInt16BE(65535, o + 14);
  }
  b.set(payload, o + l4Header);
  // Transport checksum over the pseudo-header, so Wireshark shows no checksum warnings.
  let pseudo = 0;
  const addrLen = v6 ? 16 : 4;
  const srcAt = v6 ? 8 : 12;
  pseudo = checksum16(b, srcAt, srcAt + addrLen * 2, pseudo);
  pseudo += proto + l4Length;
  const sum = checksum16(b, o, o + l4Length, pseudo);
  const csum = ~sum & 0xffff;
  b.writeUInt16BE(transport === 'udp' && csum === 0 ? 0xffff : csum, o + (transport === 'udp' ? 6 : 16));
  return b;
}
