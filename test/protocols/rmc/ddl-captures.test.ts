/**
 * Opt-in proof on real traffic: Splinter Cell: Blacklist captures (K4CZP3R/sc6-prudp-research's
 * Wireshark dumps, tshark JSON exports of PRUDP V0) decoded with the protocol pack imported from
 * the game's DDL (unixoide/5th-echelon's `scripts/ddls`). Every RMC request and response must
 * decode with every parameter named, no byte left over, and re-encode to the same bytes; the test
 * prints the counts and every message that does not, with why.
 *
 * Skipped unless both folders are given (the data is not ours to ship):
 *
 *   GAMEWIRE_DDL_DIR=…/5th-echelon/scripts/ddls GAMEWIRE_SC_BL_CAPTURES=…/sc6-prudp-research
 *
 * The exports become pcap files through scripts/tshark-json-to-pcap.mjs (the path a user takes to
 * `gamewire inspect`), which the capture reader and PRUDP's own pieces read back here; the same
 * pcap files then go through the `gamewire inspect --protocols` command.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import type { Direction } from '../../../src/core/protocol.js';
import { readCapture } from '../../../src/inspect/capture.js';
import { decodeStream, encodeJson } from '../../../src/protocols/rmc/codec.js';
import { importDdl, readDdlInputs } from '../../../src/protocols/rmc/ddl/import.js';
import { packProtocols } from '../../../src/protocols/rmc/ddl/pack.js';
import { BUILTIN_PROTOCOLS } from '../../../src/protocols/rmc/protocols/index.js';
import { accessKeyByte } from '../../../src/protocols/rmc/prudp/checksum.js';
import { PacketType, StreamType } from '../../../src/protocols/rmc/prudp/constants.js';
import { newPacket, readPacket } from '../../../src/protocols/rmc/prudp/packet.js';
import { ClassicPayloadCodec } from '../../../src/protocols/rmc/prudp/payload.js';
import type { MethodDef, ProtocolDef } from '../../../src/protocols/rmc/signature.js';
import { type Json, WireReader, WireWriter } from '../../../src/wire/index.js';
import { ROOT, runCli } from '../../helpers/cli.js';

const ddlDir = process.env.GAMEWIRE_DDL_DIR;
const captureDir = process.env.GAMEWIRE_SC_BL_CAPTURES;
const enabled = ddlDir !== undefined && ddlDir !== '' && captureDir !== undefined && captureDir !== '';

/** Splinter Cell: Blacklist's PRUDP access key (5th-echelon's context) and its servers' ports. */
const ACCESS_KEY = 'yl4NG7qZ';
const PORTS = [21170, 21171, 21176];

interface Found {
  source: string;
  direction: Direction;
  raw: Buffer;
}

/** Every whole RMC message of a pcap's PRUDP traffic, decrypted and joined, once each. */
function rmcMessages(file: string, source: string): { messages: Found[]; datagrams: number; bad: string[] } {
  const cfg = { width: 1 as const, keyByte: accessKeyByte(ACCESS_KEY) };
  const codec = new ClassicPayloadCodec();
  const packet = newPacket();
  const conns = new Map<string, { seen: Set<number>; parts: Buffer[] }>();
  const messages: Found[] = [];
  const bad: string[] = [];
  let datagrams = 0;
  readCapture(fs.readFileSync(file), (p) => {
    // RAW IPv4 + UDP, as the conversion script writes them.
    const ip = p.data;
    const ihl = (ip[0]! & 0x0f) * 4;
    const src = `${ip.subarray(12, 16).join('.')}:${ip.readUInt16BE(ihl)}`;
    const dst = `${ip.subarray(16, 20).join('.')}:${ip.readUInt16BE(ihl + 2)}`;
    const sport = ip.readUInt16BE(ihl);
    const dport = ip.readUInt16BE(ihl + 2);
    if (!PORTS.includes(sport) && !PORTS.includes(dport)) return;
    const direction: Direction = PORTS.includes(dport) ? 'client' : 'server';
    const flow = direction === 'client' ? `${src}-${dst}` : `${dst}-${src}`;
    const payload = Buffer.from(ip.subarray(ihl + 8, ihl + ip.readUInt16BE(ihl + 4)));
    datagrams++;
    let off = 0;
    while (off < payload.length) {
      try {
        off = readPacket(payload, off, cfg, packet);
      } catch (e) {
        bad.push(`${source}: a datagram of ${flow} does not read as PRUDP: ${(e as Error).message}`);
        return;
      }
      const s = packet.source >> 4;
      const coded = s === StreamType.OLD_RV_SECURE || s === StreamType.RV_SECURE;
      if (packet.type !== PacketType.DATA || (packet.flags & 0x08) !== 0 || !coded) continue;
      if (packet.payload.length === 0) continue;
      const key = `${flow}/${direction}/${packet.source}/${packet.destination}/${packet.sessionId}`;
      let c = conns.get(key);
      if (c === undefined) {
        c = { seen: new Set(), parts: [] };
        conns.set(key, c);
      }
      if (c.seen.has(packet.sequenceId)) continue; // a retransmission
      c.seen.add(packet.sequenceId);
      c.parts.push(Buffer.from(codec.decode(packet.payload, 16 << 20)));
      if (packet.fragmentId !== 0) continue;
      messages.push({ source, direction, raw: Buffer.concat(c.parts) });
      c.parts = [];
    }
  });
  return { messages, datagrams, bad };
}

/** Why a body does not decode to named fields that re-encode to its bytes; undefined when it does. */
function whyNot(codec: MethodDef['args'], raw: Buffer): string | undefined {
  const names = (codec.info as { fields?: { name: string }[] }).fields?.map((f) => f.name) ?? [];
  if (names.length === 1 && names[0] === 'bytes')
    return 'the DDL declares a type gamewire cannot encode (kept as hex)';
  const r = new WireReader(raw);
  let value: unknown;
  try {
    value = codec.read(r);
  } catch (e) {
    const err = e as { code?: string; message: string; path?: string };
    return `does not decode: ${err.code ?? ''} ${err.message} (at ${err.path ?? '?'}, byte ${r.offset} of ${raw.length})`;
  }
  if (r.offset !== raw.length)
    return `${raw.length - r.offset} byte(s) left over after the declared parameters (${names.join(', ')})`;
  const w = new WireWriter();
  codec.write(w, value as never);
  const again = w.toBuffer();
  if (!again.equals(raw)) {
    let i = 0;
    while (i < raw.length && again[i] === raw[i]) i++;
    return `re-encodes differently from byte ${i}`;
  }
  return undefined;
}

function methodOf(protocols: readonly ProtocolDef<any>[], protocolId: number, methodId: number) {
  const p = protocols.find((x) => x.id === protocolId);
  return { protocol: p, method: p?.byId.get(methodId) };
}

describe.skipIf(!enabled)('real SC:BL captures (GAMEWIRE_DDL_DIR, GAMEWIRE_SC_BL_CAPTURES)', () => {
  const tmp = enabled ? fs.mkdtempSync(path.join(os.tmpdir(), 'gamewire-scbl-')) : '';
  const packFile = path.join(tmp, 'scbl.pack.json');
  const pcaps: string[] = [];

  it('imports the DDL, converts every export to pcap, and decodes every RMC message by name', () => {
    const { docs, ids } = readDdlInputs([ddlDir!]);
    const pack = importDdl(docs, ids === undefined ? {} : { ids });
    fs.writeFileSync(packFile, JSON.stringify(pack));
    const protocols = [...packProtocols(pack), ...BUILTIN_PROTOCOLS];
    const dumps = path.join(captureDir!, 'wireshark-dumps');
    const exports = fs
      .readdirSync(dumps)
      .filter((f) => f.endsWith('.json'))
      .sort();
    const missing: string[] = [];
    const found: Found[] = [];
    const problems: string[] = [];
    let datagrams = 0;
    for (const f of exports) {
      const file = path.join(dumps, f);
      // Some exports of the repository are missing (Git LFS or git-annex pointers, or empty).
      const head = fs.readFileSync(file).subarray(0, 64).toString();
      if (!head.trimStart().startsWith('[')) {
        missing.push(f);
        continue;
      }
      const pcap = path.join(tmp, f.replace(/\.json$/, '.pcap'));
      const r = spawnSync(
        process.execPath,
        [path.join(ROOT, 'scripts/tshark-json-to-pcap.mjs'), file, pcap],
        { encoding: 'utf8' },
      );
      expect(r.status, r.stderr).toBe(0);
      pcaps.push(pcap);
      const got = rmcMessages(pcap, f);
      datagrams += got.datagrams;
      found.push(...got.messages);
      problems.push(...got.bad);
    }
    const counts = { requests: 0, responses: 0, errors: 0, named: 0, reencoded: 0 };
    const methods = new Set<string>();
    const protocolNames = new Set<string>();
    const failures: string[] = [];
    for (const m of found) {
      let json: Json;
      try {
        [json] = decodeStream(m.raw, 'classic', protocols) as [Json];
      } catch (e) {
        failures.push(`${m.source} ${m.direction}: the envelope does not decode: ${(e as Error).message}`);
        continue;
      }
      const msg = json as Record<string, any>;
      const w = new WireWriter();
      encodeJson(msg, 'classic', w, '', protocols);
      const same = w.toBuffer().equals(m.raw);
      if (msg.type === 'error') {
        counts.errors++;
        if (!same) failures.push(`${m.source}: an RMC error does not re-encode to its bytes`);
        continue;
      }
      const side = msg.type === 'request' ? 'args' : 'results';
      if (msg.type === 'request') counts.requests++;
      else counts.responses++;
      const { protocol, method } = methodOf(protocols, msg.protocolId, msg.methodId);
      const label = `${protocol?.name ?? `protocol ${msg.protocolId}`}::${method?.name ?? `method ${msg.methodId}`}`;
      if (protocol !== undefined) protocolNames.add(protocol.name);
      if (method !== undefined) methods.add(label);
      const body = Buffer.from(m.raw.subarray(bodyStart(m.raw, msg.type)));
      const reason =
        protocol === undefined
          ? `protocol id ${msg.protocolId} is not in the DDL's id mapping`
          : method === undefined
            ? `${protocol.name} has no method ${msg.methodId} in the DDL`
            : whyNot(method[side], body);
      const hexHolders = reason === undefined ? holdersLeftHex(msg[side], pack.types) : [];
      if (hexHolders.length > 0)
        failures.push(`${m.source} ${msg.type} ${label}: AnyDataHolder ${hexHolders.join(', ')} stays hex`);
      else if (reason === undefined && typeof msg[side] === 'object') counts.named++;
      else
        failures.push(
          `${m.source} ${msg.type} ${label} (call ${msg.callId}, ${body.length} bytes): ${reason ?? 'shown as hex'}`,
        );
      if (same) counts.reencoded++;
      else failures.push(`${m.source} ${msg.type} ${label}: the message does not re-encode to its bytes`);
    }
    const report = [
      `exports: ${exports.length - missing.length} read, ${missing.length} missing (${missing.join(', ')}); ${datagrams} PRUDP datagrams`,
      `RMC messages: ${counts.requests} requests, ${counts.responses} responses, ${counts.errors} errors; ${methods.size} methods of ${protocolNames.size} protocols`,
      `named with no byte left over: ${counts.named} of ${counts.requests + counts.responses}; re-encoded byte-identical: ${counts.reencoded}`,
      ...problems,
      ...failures,
    ];
    console.log(report.join('\n'));
    expect(found.length).toBeGreaterThan(0);
    // The decoder itself never fails: what does not decode by name is a message the DDL lacks.
    for (const f of failures) expect(f).toMatch(/is not in the DDL|has no method/);
  });

  it("5th-echelon's own RMC test vector (quazal/src/rmc.rs, when the DDL folder is in a checkout)", (ctx) => {
    const source = path.join(ddlDir!, '../../quazal/src/rmc.rs');
    if (!fs.existsSync(source)) return ctx.skip();
    // The bytes of its `test_request`: a TicketGranting::LoginEx call.
    const m = /fn test_request\(\)[\s\S]*?let data = \[([^\]]*)\]/.exec(fs.readFileSync(source, 'utf8'));
    expect(m).not.toBeNull();
    const raw = Buffer.from(m![1]!.match(/0x[0-9a-fA-F]{2}/g)!.map((x) => Number.parseInt(x, 16)));
    const protocols = [...packProtocols(JSON.parse(fs.readFileSync(packFile, 'utf8'))), ...BUILTIN_PROTOCOLS];
    const [json] = decodeStream(raw, 'classic', protocols) as any[];
    expect(json.args.oExtraData.typeName).toBe('UbiAuthenticationLoginCustomData');
    expect(typeof json.args.oExtraData.data).toBe('object');
    const w = new WireWriter();
    encodeJson(json, 'classic', w, '', protocols);
    expect(w.toBuffer().equals(raw)).toBe(true);
    console.log(`5th-echelon test_request: ${JSON.stringify(json)}`);
  });

  it('`gamewire inspect --protocols` names the same messages from the converted pcap files', () => {
    expect(pcaps.length).toBeGreaterThan(0);
    let typed = 0;
    let hex = 0;
    for (const pcap of pcaps) {
      const args = [
        'inspect',
        pcap,
        '--json',
        ...PORTS.flatMap((p) => ['--port', `${p}/udp=prudp`]),
        '--access-key',
        ACCESS_KEY,
        '--rmc-variant',
        'classic',
        '--protocols',
        packFile,
        '--type',
        'request,response,error',
      ];
      const r = runCli(args);
      expect(r.code, r.stderr).toBe(0);
      for (const line of r.stdout.split('\n').filter((l) => l !== '')) {
        const rec = JSON.parse(line);
        expect(rec.error).toBeUndefined();
        const body = rec.message.type === 'request' ? rec.message.args : rec.message.results;
        if (rec.message.type === 'error') continue;
        if (typeof body === 'object') typed++;
        else hex++;
      }
    }
    console.log(`gamewire inspect: ${typed} requests and responses named, ${hex} as hex`);
    expect(typed).toBeGreaterThan(0);
  });
});

/** The AnyDataHolders in a decoded body that name a class of the pack yet were left as hex. */
function holdersLeftHex(v: unknown, classes: Record<string, unknown>, out: string[] = []): string[] {
  if (Array.isArray(v)) for (const x of v) holdersLeftHex(x, classes, out);
  else if (v !== null && typeof v === 'object') {
    const o = v as Record<string, unknown>;
    if (typeof o.typeName === 'string' && typeof o.data === 'string' && Object.hasOwn(classes, o.typeName))
      out.push(o.typeName);
    for (const x of Object.values(o)) holdersLeftHex(x, classes, out);
  }
  return out;
}

/** Where a classic message's args or results start: after size, protocol id and the ids. */
function bodyStart(raw: Buffer, type: string): number {
  const id = raw[4]! & 0x7f;
  const afterProtocol = id === 0x7f ? 7 : 5;
  // A request: call id, method id; a response: the success byte, call id, method id.
  return afterProtocol + (type === 'request' ? 8 : 9);
}
