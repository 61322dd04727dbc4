#!/usr/bin/env node
/**
 * Turns a tshark JSON export (`tshark -T json`, with or without `-x`) of UDP traffic back into a
 * pcap file that `gamewire inspect` and Wireshark read.
 *
 *   node scripts/tshark-json-to-pcap.mjs capture.json capture.pcap
 *
 * A packet exported with its raw bytes (`frame_raw`, Ethernet) keeps them; one exported without
 * them is rebuilt from its IPv4 addresses, UDP ports and `data` bytes. Packets that are not UDP
 * over IPv4 are left out and counted. The link type is RAW IP (101).
 */
import fs from 'node:fs';

const [input, output] = process.argv.slice(2);
if (input === undefined || output === undefined) {
  process.stderr.write('usage: node scripts/tshark-json-to-pcap.mjs EXPORT.json OUT.pcap\n');
  process.exit(2);
}

/** `aa:bb:cc` or `aabbcc` as bytes. */
const hex = (s) => Buffer.from(String(s).replace(/:/g, ''), 'hex');

function checksum16(b, from, to, start = 0) {
  let sum = start;
  for (let i = from; i + 1 < to; i += 2) sum += b.readUInt16BE(i);
  if ((to - from) % 2 === 1) sum += b[to - 1] << 8;
  while (sum > 0xffff) sum = (sum & 0xffff) + (sum >>> 16);
  return sum;
}

/** An IPv4 + UDP packet around `payload`, with valid checksums. */
function udpPacket(src, sport, dst, dport, payload) {
  const b = Buffer.alloc(28 + payload.length);
  b[0] = 0x45;
  b.writeUInt16BE(b.length, 2);
  b[8] = 64;
  b[9] = 17;
  Buffer.from(src.split('.').map(Number)).copy(b, 12);
  Buffer.from(dst.split('.').map(Number)).copy(b, 16);
  b.writeUInt16BE(~checksum16(b, 0, 20) & 0xffff, 10);
  b.writeUInt16BE(sport, 20);
  b.writeUInt16BE(dport, 22);
  b.writeUInt16BE(8 + payload.length, 24);
  payload.copy(b, 28);
  const pseudo = checksum16(b, 12, 20) + 17 + 8 + payload.length;
  const sum = ~checksum16(b, 20, b.length, pseudo) & 0xffff;
  b.writeUInt16BE(sum === 0 ? 0xffff : sum, 26);
  return b;
}

/** The IPv4 packet of one exported frame, or undefined when it is not UDP over IPv4. */
function ipOf(layers) {
  const raw = layers.frame_raw;
  if (Array.isArray(raw) && typeof raw[0] === 'string') {
    const frame = hex(raw[0]);
    // Ethernet II (encapsulation 1): the IPv4 packet after the 14-byte header, without the
    // padding that fills a short frame to 60 bytes.
    if (frame.length > 34 && frame.readUInt16BE(12) === 0x0800 && frame[23] === 17)
      return frame.subarray(14, 14 + frame.readUInt16BE(16));
    return undefined;
  }
  const ip = layers.ip;
  const udp = layers.udp;
  if (ip === undefined || udp === undefined) return undefined;
  const payload = layers.data?.['data.data'] === undefined ? Buffer.alloc(0) : hex(layers.data['data.data']);
  return udpPacket(
    ip['ip.src'],
    Number(udp['udp.srcport']),
    ip['ip.dst'],
    Number(udp['udp.dstport']),
    payload,
  );
}

const packets = JSON.parse(fs.readFileSync(input, 'utf8'));
const parts = [];
const header = Buffer.alloc(24);
header.writeUInt32LE(0xa1b2c3d4, 0);
header.writeUInt16LE(2, 4);
header.writeUInt16LE(4, 6);
header.writeUInt32LE(262_144, 16);
header.writeUInt32LE(101, 20);
parts.push(header);
let kept = 0;
let skipped = 0;
for (const [i, p] of packets.entries()) {
  const layers = p?._source?.layers ?? {};
  const ip = ipOf(layers);
  if (ip === undefined) {
    skipped++;
    continue;
  }
  // The capture's clock when it was exported, else one packet per millisecond.
  const epoch = Number(layers.frame?.['frame.time_epoch']);
  const us = Number.isFinite(epoch) ? Math.round(epoch * 1e6) : i * 1000;
  const rec = Buffer.alloc(16);
  rec.writeUInt32LE(Math.floor(us / 1e6), 0);
  rec.writeUInt32LE(us % 1e6, 4);
  rec.writeUInt32LE(ip.length, 8);
  rec.writeUInt32LE(ip.length, 12);
  parts.push(rec, ip);
  kept++;
}
fs.writeFileSync(output, Buffer.concat(parts));
process.stdout.write(
  `${output}: ${kept} UDP packets${skipped === 0 ? '' : `, ${skipped} others left out`}\n`,
);
