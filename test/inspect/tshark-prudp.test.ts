/**
 * The generated PRUDP dissector (gamewire-prudp.lua, handing each whole RMC message to
 * gamewire-rmc.lua) against the inspector, with real tshark on tcpdump captures of a real client
 * and server: every packet with the same header fields, flags, compression and reassembly, and
 * every RMC message with the same fields (a pack's methods named under the classic envelope).
 * Damaged input (a bad checksum, a wrong access key or RC4 key, keys that are not plain text) is
 * shown as an error, never as a Lua error.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ipPacket, LinkType, pcapFileHeader, pcapRecord } from '../../src/inspect/writer.js';
import { type ProtocolPack, packProtocols } from '../../src/protocols/rmc/ddl/pack.js';
import { RmcClient } from '../../src/protocols/rmc/index.js';
import { accessKeyByte } from '../../src/protocols/rmc/prudp/checksum.js';
import { FRAGMENT_PLAINTEXT_BYTES, PACKET_TYPE_NAMES } from '../../src/protocols/rmc/prudp/constants.js';
import { ROOT, runCli } from '../helpers/cli.js';
import { EchoProtocol, startPrudp } from '../protocols/rmc/prudp-helpers.js';
import { haveProgram, inspectJson, type JsonRecord, Tcpdump, tempDir } from './helpers.js';
import { dissectorDir, expectTsharkAgrees, tsharkMessages } from './tshark.js';

const HAVE_TCPDUMP = haveProgram('tcpdump');
const HAVE_TSHARK = haveProgram('tshark');
const KEY = 'yl4NG7qZ';
const PACKET_TYPES = new Set<string>(PACKET_TYPE_NAMES);

const cleanups: (() => Promise<unknown> | unknown)[] = [];
afterEach(async () => {
  for (const f of cleanups.splice(0).reverse()) await f();
});

/** The inspector's PRUDP records split as tshark shows them: packets (gw_prudp) and RMC messages (gw_rmc). */
function byLayer(records: JsonRecord[]): JsonRecord[] {
  return records.map((r) => ({
    ...r,
    protocol: PACKET_TYPES.has(r.message?.type) ? 'prudp' : 'rmc',
  }));
}

/** tshark with every generated dissector of `dir`, JSON out; fails on a Lua error. */
function tsharkJson(dir: string, file: string, extra: string[]): { stdout: string; packets: any[] } {
  const scripts = fs
    .readdirSync(dir)
    .filter((f) => f.endsWith('.lua'))
    .flatMap((f) => ['-X', `lua_script:${path.join(dir, f)}`]);
  const r = spawnSync('tshark', [...scripts, ...extra, '-r', file, '-T', 'json', '--no-duplicate-keys'], {
    encoding: 'utf8',
    maxBuffer: 256 << 20,
    timeout: 120_000,
  });
  expect(r.status, r.stderr).toBe(0);
  expect(r.stderr).not.toMatch(/Lua: Error|error during loading|attempt to/i);
  expect(r.stdout).not.toMatch(/_ws\.lua\.text|Lua Error/);
  return { stdout: r.stdout, packets: JSON.parse(r.stdout) };
}

/** Every value of field `name` anywhere in tshark's JSON packets, in order. */
function values(packets: any[], name: string): string[] {
  const out: string[] = [];
  const walk = (v: unknown): void => {
    if (Array.isArray(v)) for (const x of v) walk(x);
    else if (v !== null && typeof v === 'object')
      for (const [k, x] of Object.entries(v as Record<string, unknown>)) {
        if (k === name && typeof x === 'string') out.push(x);
        else if (k === name && Array.isArray(x)) for (const y of x) out.push(String(y));
        else walk(x);
      }
  };
  walk(packets.map((p) => p._source.layers));
  return out;
}

interface Capture {
  file: string;
  port: number;
}

/**
 * A real client and server over PRUDP (hyperscape profile), captured by tcpdump, whole: tcpdump
 * can lose datagrams when the machine is busy (seen: a server's fragments missing while the
 * client's ACKs of them were captured), and a capture that lacks one of the six RMC messages
 * gamewire's inspector must see is taken again (at most three times). What the tests compare is
 * what tshark and the inspector make of the same bytes.
 */
async function captureHyperscape(): Promise<Capture> {
  let cap = await captureOnce();
  for (let attempt = 1; attempt < 3 && !complete(cap); attempt++) {
    console.warn(`tshark-prudp: capture ${attempt} lost datagrams; capturing again`);
    cap = await captureOnce();
  }
  return cap;
}

function complete(cap: Capture): boolean {
  const records = inspectJson(cap.file, ['--port', `${cap.port}/udp=prudp`, '--access-key', KEY]);
  // Six RMC messages decoded, and no error (an error record is no message).
  return (
    records.every((r) => r.error === undefined) &&
    records.filter((r) => r.message !== undefined && !PACKET_TYPES.has(r.message.type)).length >= 6
  );
}

async function captureOnce(): Promise<Capture> {
  // No resend in the capture: on a busy machine an ACK late by more than the default timer made
  // both sides resend fragments, which the comparison of whole messages is not about (a capture
  // with every datagram twice is compared apart, below). Loopback loses nothing.
  const f = await startPrudp({ retransmitMs: 15_000 });
  cleanups.push(() => f.close());
  const dump = await Tcpdump.start(`udp port ${f.port}`, path.join(tempDir(), 'prudp.pcap'));
  cleanups.push(() => dump.kill());
  const c = await RmcClient.connect({
    host: '127.0.0.1',
    port: f.port,
    transport: 'prudp',
    accessKey: KEY,
    timeoutMs: 20_000,
    prudp: { retransmitMs: 15_000 },
  });
  cleanups.push(() => c.close());
  await c.call(EchoProtocol, 'Echo', { data: Buffer.from('hello prudp') });
  // Compressible: travels as zlib (compression byte > 0).
  await c.call(EchoProtocol, 'Echo', { data: Buffer.alloc(3000, 'a') });
  // 5000 bytes of little redundancy: several DATA fragments.
  await c.call(EchoProtocol, 'Sized', { n: 5000, tag: 7 });
  await c.close();
  // A longer quiet period than the default: on a loaded machine tcpdump may write late, and a
  // capture cut short would lose the last messages.
  await dump.stop(1500);
  return { file: dump.file, port: f.port };
}

// Each test captures real traffic with tcpdump (again when tcpdump lost datagrams) and runs tshark
// several times: tens of seconds on a busy machine.
describe('dissector: PRUDP with tshark', () => {
  it('shows the same packets, fields, fragments and RMC messages as gamewire inspect', async (ctx) => {
    if (!HAVE_TCPDUMP || !HAVE_TSHARK) return ctx.skip();
    const cap = await captureHyperscape();
    const records = inspectJson(cap.file, ['--port', `${cap.port}/udp=prudp`, '--access-key', KEY]);
    expect(records.filter((r) => r.error !== undefined)).toEqual([]);
    const packets = records.filter((r) => PACKET_TYPES.has(r.message.type));
    expect(packets.some((r) => r.message.compression > 0)).toBe(true);
    expect(
      packets.filter((r) => r.message.type === 'DATA' && r.message.fragmentId > 0).length,
    ).toBeGreaterThan(1);
    const layered = byLayer(records);
    const decodeAs = [`udp.port==${cap.port},gw_prudp`];
    const flags = ['--access-key', KEY];
    expectTsharkAgrees(cap.file, layered, decodeAs, flags);
    // The comparison is real: a changed header value or RMC field is caught.
    const altered = structuredClone(layered);
    altered.find((r) => r.message.type === 'DATA')!.message.sequenceId += 1;
    expect(() => expectTsharkAgrees(cap.file, altered, decodeAs, flags)).toThrow();
    const rmc = tsharkMessages(cap.file, 'rmc', decodeAs, flags);
    const summary = packets
      .map((r) => `${r.direction} ${r.message.type} ${r.message.sequenceId}/${r.message.fragmentId ?? '-'}`)
      .join(', ');
    expect(
      rmc.map((m) => [m.direction, m.type, m.fields.get('method')?.[0]]),
      summary,
    ).toEqual([
      ['client', 'request', 'EchoProtocol::Echo'],
      ['server', 'response', 'EchoProtocol::Echo*'],
      ['client', 'request', 'EchoProtocol::Echo'],
      ['server', 'response', 'EchoProtocol::Echo*'],
      ['client', 'request', 'EchoProtocol::Sized'],
      ['server', 'response', 'EchoProtocol::Sized*'],
    ]);
    // Each whole message: joined from as many DATA fragments as 963-byte plaintext chunks it takes.
    const { packets: shown } = tsharkJson(dissectorDir(flags), cap.file, ['-d', decodeAs[0]!]);
    const sizes = values(shown, 'gw_prudp.rmcBytes').map(Number);
    expect(sizes).toEqual(
      packets.filter((r) => r.message.rmcBytes !== undefined).map((r) => r.message.rmcBytes),
    );
    expect(values(shown, 'gw_prudp.hdr.fragments').map(Number)).toEqual(
      sizes.map((n) => Math.ceil(n / FRAGMENT_PLAINTEXT_BYTES)),
    );
    expect(Math.max(...values(shown, 'gw_prudp.hdr.fragments').map(Number))).toBeGreaterThan(1);
    expect(values(shown, 'gw_prudp.hdr.checksum_good')).not.toContain('0');

    // Retransmissions (every DATA datagram that is not an ACK captured twice): each marked and
    // decoded once, as the inspector does.
    const pcap = fs.readFileSync(cap.file);
    const twice: Buffer[] = [pcap.subarray(0, 24)];
    for (let off = 24; off < pcap.length; ) {
      const rec = pcap.subarray(off, off + 16 + pcap.readUInt32LE(off + 8));
      twice.push(rec);
      // tcpdump on lo: 16-byte record header, Ethernet (14), IPv4 (20), UDP (8), then PRUDP.
      const typeFlags = rec[16 + 42 + 2]!;
      if ((typeFlags & 0x07) === 2 && (typeFlags & 0x08) === 0) twice.push(rec);
      off += rec.length;
    }
    const twiceFile = path.join(tempDir(), 'retransmitted.pcap');
    fs.writeFileSync(twiceFile, Buffer.concat(twice));
    const again = inspectJson(twiceFile, ['--port', `${cap.port}/udp=prudp`, '--access-key', KEY]);
    expect(again.filter((r) => r.message?.retransmission === true).length).toBeGreaterThan(0);
    expectTsharkAgrees(twiceFile, byLayer(again), decodeAs, flags);

    // Registered on the UDP port the rmc protocol declares for PRUDP.
    const lua = fs.readFileSync(path.join(dissectorDir(flags), 'gamewire-prudp.lua'), 'utf8');
    expect(lua).toContain('DissectorTable.get("udp.port"):add(9103, P)');
  }, 120_000);

  it('shows a bad checksum, a wrong access key and a wrong RC4 key as errors, not Lua errors', async (ctx) => {
    if (!HAVE_TCPDUMP || !HAVE_TSHARK) return ctx.skip();
    const cap = await captureHyperscape();
    const dir = dissectorDir(['--access-key', KEY]);
    const decodeAs = ['-d', `udp.port==${cap.port},gw_prudp`];

    // One checksum byte changed: the first client DATA packet with a payload (the Echo request).
    const pcap = fs.readFileSync(cap.file);
    const records = inspectJson(cap.file, ['--port', `${cap.port}/udp=prudp`, '--access-key', KEY]);
    const target = records.findIndex(
      (r) => r.message?.type === 'DATA' && r.direction === 'client' && r.message.payloadLength > 0,
    );
    // Its frame: the client's DATA datagram captured at that record's time (found by time, source
    // port and type, not by counting records: a capture can hold datagrams that give no record or
    // several).
    const time = records[target]!.time;
    let end = -1;
    for (let at = 24; at < pcap.length && end === -1; ) {
      const next = at + 16 + pcap.readUInt32LE(at + 8);
      // tcpdump on lo: 16-byte record header, Ethernet (14), IPv4 (20), UDP (8), then PRUDP.
      const frameTime = pcap.readUInt32LE(at) + pcap.readUInt32LE(at + 4) / 1e6;
      const fromClient = pcap.readUInt16BE(at + 16 + 34) !== cap.port;
      const isData = (pcap[at + 16 + 42 + 2]! & 0x07) === 2;
      if (Math.abs(frameTime - time) < 5e-7 && fromClient && isData) end = next;
      at = next;
    }
    expect(end, 'the Echo request frame').toBeGreaterThan(0);
    const bad = Buffer.from(pcap);
    bad[end - 1] ^= 0x5a;
    const badFile = path.join(tempDir(), 'bad-checksum.pcap');
    fs.writeFileSync(badFile, bad);
    const inspected = inspectJson(badFile, ['--port', `${cap.port}/udp=prudp`, '--access-key', KEY]);
    expect(inspected.filter((r) => r.error !== undefined).map((r) => r.error!.code)).toEqual([
      'ERR_BAD_CHECKSUM',
    ]);
    const { stdout, packets } = tsharkJson(dir, badFile, decodeAs);
    expect(stdout).toMatch(/bad checksum: expected 0x[0-9a-f]{2}, got 0x[0-9a-f]{2}/);
    expect(values(packets, 'gw_prudp.hdr.checksum_good').filter((v) => v === '0')).toHaveLength(1);
    // That request is not decoded: one request fewer than in the clean capture.
    expect(values(packets, 'gw_rmc.message').filter((v) => v === 'request')).toHaveLength(2);

    // A wrong access key: every packet on the Rendez-Vous stream fails its checksum.
    const wrongAccess = tsharkJson(dir, cap.file, [...decodeAs, '-o', 'gw_prudp.access_key:WRONGKEY']);
    expect(wrongAccess.stdout).toContain('bad checksum');
    expect(values(wrongAccess.packets, 'gw_rmc.message')).toEqual([]);

    // A wrong RC4 key: payloads do not decode; shown as such.
    const wrongRc4 = tsharkJson(dir, cap.file, [...decodeAs, '-o', 'gw_prudp.rc4_key:NOTCD&ML']);
    expect(wrongRc4.stdout).toContain('payload not decoded');
    expect(values(wrongRc4.packets, 'gw_prudp.payloadError.code')).toContain('ERR_PRUDP_BAD_PAYLOAD');
    // The inspector with the same wrong key (`--prudp-rc4-key`, the flag both share) agrees.
    const wrongInspected = inspectJson(cap.file, [
      '--port',
      `${cap.port}/udp=prudp`,
      '--access-key',
      KEY,
      '--prudp-rc4-key',
      'NOTCD&ML',
    ]);
    expect(values(wrongRc4.packets, 'gw_prudp.payloadError.code')).toEqual(
      wrongInspected.flatMap((r) => (r.message?.payloadError ? [r.message.payloadError.code] : [])),
    );
    expect(values(wrongRc4.packets, 'gw_rmc.message').filter((v) => v !== 'error')).toEqual([]);

    // Without an access key its byte is learned from the SYN: every checksum is checked.
    const noKey = tsharkJson(dissectorDir(), cap.file, decodeAs);
    expect(new Set(values(noKey.packets, 'gw_prudp.hdr.key_byte'))).toEqual(
      new Set([`0x${accessKeyByte(KEY).toString(16).padStart(2, '0')}`]),
    );
    expect(new Set(values(noKey.packets, 'gw_prudp.hdr.checksum_good'))).toEqual(new Set(['1']));
    expect(values(noKey.packets, 'gw_rmc.message').filter((v) => v === 'request')).toHaveLength(3);
    // Nor a SYN (a capture started after it): checksums shown unchecked, payloads still decoded.
    let afterSyn = 24;
    for (let i = 0; i < 2; i++) afterSyn += 16 + pcap.readUInt32LE(afterSyn + 8);
    const noSynFile = path.join(tempDir(), 'no-syn.pcap');
    fs.writeFileSync(noSynFile, Buffer.concat([pcap.subarray(0, 24), pcap.subarray(afterSyn)]));
    const noSyn = tsharkJson(dissectorDir(), noSynFile, decodeAs);
    expect(noSyn.stdout).toContain('checksum not checked');
    expect(values(noSyn.packets, 'gw_prudp.hdr.checksum_good')).toEqual([]);
    expect(values(noSyn.packets, 'gw_rmc.message').filter((v) => v === 'request')).toHaveLength(3);

    // Every datagram cut at every length, and with bytes flipped: errors, never Lua errors.
    const damaged: Buffer[] = [];
    let seed = 7;
    for (let off = 24; off < pcap.length; off += 16 + pcap.readUInt32LE(off + 8)) {
      // tcpdump on lo: Ethernet (14) + IPv4 (20) + UDP (8) before the payload.
      const datagram = pcap.subarray(off + 16 + 42, off + 16 + pcap.readUInt32LE(off + 8));
      for (let n = 0; n <= Math.min(datagram.length, 64); n++) damaged.push(datagram.subarray(0, n));
      for (let i = 0; i < 8; i++) {
        const copy = Buffer.from(datagram);
        seed = (seed * 1103515245 + 12345) & 0x7fffffff;
        copy[seed % copy.length] ^= 1 << (seed % 8);
        damaged.push(copy);
      }
    }
    const fuzzFile = path.join(tempDir(), 'damaged.pcap');
    const server = { address: '127.0.0.1', port: cap.port };
    const client = { address: '127.0.0.1', port: 40000 };
    fs.writeFileSync(
      fuzzFile,
      Buffer.concat([
        pcapFileHeader(LinkType.RAW),
        ...damaged.map((d, i) =>
          pcapRecord(
            1_700_000_000_000_000 + i,
            ipPacket('udp', i % 2 ? server : client, i % 2 ? client : server, d),
          ),
        ),
      ]),
    );
    const fuzzed = tsharkJson(dir, fuzzFile, decodeAs);
    expect(fuzzed.packets.length).toBe(damaged.length);
    expect(fuzzed.stdout).toContain('PRUDP packet needs at least');

    // Keys reach the Lua as escaped strings, whatever their bytes: an access key of quotes,
    // brackets, a backslash, a newline, a tab and Latin-1, whose byte sum equals the real key's,
    // checks every checksum of the capture.
    let odd = 'k"]]\\\n--\u00e9\t';
    let fix = (accessKeyByte(KEY) - accessKeyByte(odd) + 256) % 256;
    if (fix === 0) {
      odd += '\u0080';
      fix = 0x80;
    }
    odd += String.fromCharCode(fix);
    const oddDir = path.join(tempDir('gamewire-prudp-lua-'), 'lua');
    const gen = runCli(['dissector', '--out', oddDir, '--access-key', odd, '--prudp-rc4-key', 'CD&ML']);
    expect(gen.code, gen.stderr).toBe(0);
    const oddKey = tsharkJson(oddDir, cap.file, decodeAs);
    const good = values(oddKey.packets, 'gw_prudp.hdr.checksum_good');
    expect(good.length).toBeGreaterThan(10);
    expect(good.filter((v) => v !== '1')).toEqual([]);
    expect(values(oddKey.packets, 'gw_rmc.message').filter((v) => v === 'request')).toHaveLength(3);
  }, 120_000);
});

/** A pack of our own, served under the classic envelope (protocol and method by number). */
const PACK: ProtocolPack = {
  format: 'gamewire-rmc-pack',
  version: 1,
  sources: ['test'],
  types: {
    Player: {
      base: null,
      fields: [
        { name: 'm_pid', type: 'u32' },
        { name: 'm_name', type: 'qString' },
      ],
    },
  },
  protocols: [
    {
      name: 'ArenaProtocol',
      id: 77,
      doc: 'a test protocol',
      methods: [
        {
          name: 'FindPlayers',
          id: 1,
          args: [
            { name: 'query', type: 'qString' },
            { name: 'pids', type: { list: 'u32' } },
          ],
          results: [
            { name: 'retval', type: 'qResult' },
            { name: 'players', type: { list: { class: 'Player' } } },
          ],
        },
      ],
    },
  ],
  problems: [],
};

describe('dissector --protocols: a pack over PRUDP (classic)', () => {
  it('names the pack method and its parameters as the inspector does', async (ctx) => {
    if (!HAVE_TCPDUMP || !HAVE_TSHARK) return ctx.skip();
    const dir = tempDir('gamewire-prudp-pack-');
    const file = path.join(dir, 'arena.pack.json');
    fs.writeFileSync(file, JSON.stringify(PACK));
    const [arena] = packProtocols(PACK);
    const f = await startPrudp({ variant: 'classic' });
    cleanups.push(() => f.close());
    f.rmc.register(arena!, {
      FindPlayers: (_ctx: unknown, a: any) => ({
        retval: 0x10001,
        players: a.pids.map((pid: number) => ({ m_pid: pid, m_name: `${a.query}${pid}` })),
      }),
    } as never);
    const dump = await Tcpdump.start(`udp port ${f.port}`, path.join(dir, 'classic.pcap'));
    cleanups.push(() => dump.kill());
    const c = await RmcClient.connect({
      host: '127.0.0.1',
      port: f.port,
      transport: 'prudp',
      accessKey: KEY,
      variant: 'classic',
      timeoutMs: 20_000,
    });
    cleanups.push(() => c.close());
    const got = await c.call(arena!, 'FindPlayers', { query: 'sniper', pids: [1001, 1002] } as never);
    expect((got as any).players).toHaveLength(2);
    await c.close();
    await dump.stop(1500);

    const port = ['--port', `${f.port}/udp=prudp`, '--access-key', KEY, '--rmc-variant', 'classic'];
    const records = inspectJson(dump.file, [...port, '--protocols', file]);
    expect(records.filter((r) => r.error !== undefined)).toEqual([]);
    const rmc = records.filter((r) => !PACKET_TYPES.has(r.message.type));
    expect(rmc.map((r) => r.message.type)).toEqual(['request', 'response']);
    expect(rmc[0]!.message.args).toEqual({ query: 'sniper', pids: [1001, 1002] });

    const flags = ['--access-key', KEY, '--rmc-variant', 'classic', '--protocols', file];
    const decodeAs = [`udp.port==${f.port},gw_prudp`];
    expectTsharkAgrees(dump.file, byLayer(records), decodeAs, flags);
    const { packets } = tsharkJson(dissectorDir(flags), dump.file, ['-d', decodeAs[0]!]);
    expect(values(packets, 'gw_rmc.hdr.method')).toEqual([
      'ArenaProtocol::FindPlayers',
      'ArenaProtocol::FindPlayers',
    ]);
    expect(values(packets, 'gw_rmc.ArenaProtocol.FindPlayers.args.query')).toEqual(['sniper']);
    expect(values(packets, 'gw_rmc.ArenaProtocol.FindPlayers.results.players.m_name')).toEqual([
      'sniper1001',
      'sniper1002',
    ]);
    // Without the pack the method is a number and the parameters are bytes.
    const { packets: bare } = tsharkJson(dissectorDir(flags.slice(0, 4)), dump.file, ['-d', decodeAs[0]!]);
    expect(values(bare, 'gw_rmc.hdr.method')).toEqual([]);
    expect(values(bare, 'gw_rmc.classic.request.args')).toHaveLength(1);
  }, 120_000);
});

// ---- opt-in: real Splinter Cell: Blacklist traffic ----------------------------------------------

const ddlDir = process.env.GAMEWIRE_DDL_DIR;
const captureDir = process.env.GAMEWIRE_SC_BL_CAPTURES;
const realData = ddlDir !== undefined && ddlDir !== '' && captureDir !== undefined && captureDir !== '';

/**
 * Skipped unless both folders are given (the data is not ours to ship), as ddl-captures.test.ts:
 * GAMEWIRE_DDL_DIR=…/5th-echelon/scripts/ddls GAMEWIRE_SC_BL_CAPTURES=…/sc6-prudp-research.
 * Every export becomes a pcap (scripts/tshark-json-to-pcap.mjs); tshark with the dissectors
 * generated for the imported pack must show every packet and RMC message as the inspector does.
 */
describe.skipIf(!realData)('dissector: real Splinter Cell: Blacklist captures (opt-in)', () => {
  it('agrees with gamewire inspect on every packet and RMC message, the pack naming its methods', () => {
    const dir = tempDir('gamewire-scbl-');
    const pack = path.join(dir, 'blacklist.pack.json');
    const imported = runCli(['rmc', 'ddl', 'import', ddlDir!, '--out', pack]);
    expect(imported.code, imported.stderr).toBe(0);
    const ports = [21170, 21171, 21176];
    const flags = ['--access-key', 'yl4NG7qZ', '--rmc-variant', 'classic', '--protocols', pack];
    const decodeAs = ports.map((p) => `udp.port==${p},gw_prudp`);
    const dumps = path.join(captureDir!, 'wireshark-dumps');
    let messages = 0;
    let named = 0;
    for (const name of fs.readdirSync(dumps).filter((f) => f.endsWith('.json'))) {
      if (fs.statSync(path.join(dumps, name)).size === 0) continue;
      const pcap = path.join(dir, name.replace(/\.json$/, '.pcap'));
      const converted = spawnSync(
        process.execPath,
        [path.join(ROOT, 'scripts/tshark-json-to-pcap.mjs'), path.join(dumps, name), pcap],
        { encoding: 'utf8' },
      );
      expect(converted.status, converted.stderr).toBe(0);
      const records = inspectJson(pcap, [
        ...ports.flatMap((p) => ['--port', `${p}/udp=prudp`]),
        ...flags.filter((f) => f !== '--rmc-variant' && f !== 'classic'),
        '--rmc-variant',
        'classic',
      ]);
      expect(records.filter((r) => r.error !== undefined)).toEqual([]);
      // Packets: every field. RMC messages: type, direction and ids (an AnyDataHolder of a pack
      // class is typed by the inspector, name and bytes in Lua; see docs/rmc.md).
      const layered = byLayer(records);
      expectTsharkAgrees(
        pcap,
        layered.filter((r) => r.protocol === 'prudp'),
        decodeAs,
        flags,
      );
      const want = layered.filter((r) => r.protocol === 'rmc');
      const shown = tsharkMessages(pcap, 'rmc', decodeAs, flags);
      expect(shown.map((m) => [m.type, m.direction])).toEqual(want.map((r) => [r.message.type, r.direction]));
      shown.forEach((m, i) => {
        for (const k of ['protocolId', 'callId', 'methodId', 'errorCode'])
          expect(m.fields.get(k), `${name} #${i} ${k}`).toEqual(
            want[i]!.message[k] === undefined ? undefined : [String(want[i]!.message[k])],
          );
      });
      const { packets } = tsharkJson(
        dissectorDir(flags),
        pcap,
        decodeAs.flatMap((d) => ['-d', d]),
      );
      messages += values(packets, 'gw_rmc.message').length;
      named += values(packets, 'gw_rmc.hdr.method').length;
    }
    console.log(`tshark: ${messages} RMC messages, ${named} named by the pack`);
    expect(named).toBeGreaterThan(0);
  }, 300_000);
});
