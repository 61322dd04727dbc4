/**
 * Protocol packs in the inspector and the Wireshark dissector: `gamewire inspect --protocols` and
 * `gamewire dissector --protocols` over a tcpdump capture of a real TCP session with a server that
 * serves a pack of our own (tshark shows the same named fields as the inspector), and over PRUDP
 * V0 captures we write ourselves (two connections on one UDP flow, each numbering its packets
 * from 1: a regression found on real Splinter Cell: Blacklist traffic).
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ipPacket, LinkType, pcapFileHeader, pcapRecord } from '../../../src/inspect/writer.js';
import { type ProtocolPack, packProtocols } from '../../../src/protocols/rmc/ddl/pack.js';
import { accessKeyByte } from '../../../src/protocols/rmc/prudp/checksum.js';
import { Flag, PacketType } from '../../../src/protocols/rmc/prudp/constants.js';
import { writePacket } from '../../../src/protocols/rmc/prudp/packet.js';
import { ClassicPayloadCodec } from '../../../src/protocols/rmc/prudp/payload.js';
import { encode, WireWriter } from '../../../src/wire/index.js';
import { runCli } from '../../helpers/cli.js';
import { haveProgram, inspectJson, Tcpdump, tempDir } from '../../inspect/helpers.js';
import { qString, RawTcp, rmcRead, rmcRequest } from '../../inspect/raw-clients.js';
import { expectTsharkAgrees, tsharkMessages } from '../../inspect/tshark.js';
import { startServer } from './helpers.js';

const HAVE_TCPDUMP = haveProgram('tcpdump');
const HAVE_TSHARK = haveProgram('tshark');

const cleanups: (() => Promise<unknown> | unknown)[] = [];
afterEach(async () => {
  for (const f of cleanups.splice(0).reverse()) await f();
});

/** A pack of our own: plain types, a class with a base, lists, a map, a buffer; and the framed ones. */
const PACK: ProtocolPack = {
  format: 'gamewire-rmc-pack',
  version: 1,
  sources: ['test'],
  types: {
    Data: { base: null, fields: [] },
    Entity: { base: 'Data', fields: [{ name: 'm_pid', type: 'u32' }] },
    Player: {
      base: 'Entity',
      fields: [
        { name: 'm_name', type: 'qString' },
        { name: 'm_tags', type: { list: 'qString' } },
      ],
    },
    Hello: { base: 'Data', fields: [{ name: 'm_greeting', type: 'qString' }] },
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
            { name: 'limit', type: 'u32' },
            { name: 'pids', type: { list: 'u32' } },
          ],
          results: [
            { name: 'retval', type: 'qResult' },
            { name: 'players', type: { list: { class: 'Player' } } },
            { name: 'scores', type: { map: ['qString', 'u16'] } },
            { name: 'blob', type: 'buffer32' },
          ],
        },
        {
          name: 'Stamp',
          id: 2,
          args: [
            { name: 'when', type: 'dateTime' },
            { name: 'extra', type: 'anyDataHolder' },
            { name: 'value', type: 'variant' },
            { name: 'after', type: 'u32' },
          ],
          results: [],
        },
      ],
    },
  ],
  problems: [],
};

function packFile(pack: ProtocolPack = PACK, dir = tempDir('gamewire-pack-')): string {
  const file = path.join(dir, `pack-${Math.random().toString(36).slice(2)}.json`);
  fs.writeFileSync(file, JSON.stringify(pack));
  return file;
}

const [ARENA] = packProtocols(PACK);
const FIND = ARENA!.byName.get('FindPlayers')!;
const STAMP = ARENA!.byName.get('Stamp')!;

describe('inspect and dissector --protocols: RMC over TCP', () => {
  it('names every argument and result of a pack method, and tshark with the generated dissector agrees', async (ctx) => {
    if (!HAVE_TCPDUMP) return ctx.skip();
    const file = packFile();
    const rmc = await startServer();
    cleanups.push(() => rmc.server.close());
    rmc.server.register(ARENA!, {
      FindPlayers: (_ctx: unknown, a: any) => ({
        retval: 0x10001,
        players: a.pids.map((pid: number) => ({ m_pid: pid, m_name: `p${pid}`, m_tags: ['a', a.query] })),
        scores: [{ key: 'best', value: 7 }],
        blob: Buffer.from('c0ffee', 'hex'),
      }),
      Stamp: () => ({}),
    } as never);
    // FindPlayers in one capture: tshark and the inspector must show the same fields.
    const dump = await Tcpdump.start(`tcp port ${rmc.port}`, path.join(tempDir(), 'find.pcap'));
    cleanups.push(() => dump.kill());
    const c = await RawTcp.connect(rmc.port);
    const args = encode(FIND.args, { query: 'sniper', limit: 10, pids: [1001, 1002] });
    c.send(rmcRequest('ArenaProtocol', 5, 'ArenaProtocol::FindPlayers', args));
    await rmcRead(c);
    await c.close();
    await dump.stop();
    // Stamp in another: its DateTime, AnyDataHolder and Variant come before a plain u32.
    const dump2 = await Tcpdump.start(`tcp port ${rmc.port}`, path.join(tempDir(), 'stamp.pcap'));
    cleanups.push(() => dump2.kill());
    const stampArgs = encode(STAMP.args, {
      when: { year: 2024, month: 5, day: 17, hour: 12, minute: 30, second: 1 },
      extra: { typeName: 'Hello', data: qString('hi') },
      value: { kind: 'string', value: 'v' },
      after: 4242,
    } as never);
    const c2 = await RawTcp.connect(rmc.port);
    c2.send(rmcRequest('ArenaProtocol', 6, 'ArenaProtocol::Stamp', stampArgs));
    await rmcRead(c2);
    await c2.close();
    await dump2.stop();

    const port = ['--port', `${rmc.port}=rmc`];
    const records = inspectJson(dump.file, [...port, '--protocols', file]);
    expect(records.filter((r) => r.error !== undefined)).toEqual([]);
    const [call, answer] = records;
    expect(call!.message.args).toEqual({ query: 'sniper', limit: 10, pids: [1001, 1002] });
    expect(answer!.message.results).toEqual({
      retval: 0x10001,
      players: [
        { m_pid: 1001, m_name: 'p1001', m_tags: ['a', 'sniper'] },
        { m_pid: 1002, m_name: 'p1002', m_tags: ['a', 'sniper'] },
      ],
      scores: [{ key: 'best', value: 7 }],
      blob: 'c0ffee',
    });
    // Without the pack the same capture shows hex: the names come from the pack.
    const plain = inspectJson(dump.file, port);
    expect(plain[0]!.message.args).toBe(args.toString('hex'));
    const stamp = inspectJson(dump2.file, [...port, '--protocols', file]);
    expect(stamp[0]!.message.args).toEqual({
      when: { year: 2024, month: 5, day: 17, hour: 12, minute: 30, second: 1 },
      extra: { typeName: 'Hello', data: { m_greeting: 'hi' } },
      value: { kind: 'string', value: 'v' },
      after: 4242,
    });

    if (!HAVE_TSHARK) return;
    const decodeAs = [`tcp.port==${rmc.port},gw_rmc`];
    const flags = ['--protocols', file];
    expectTsharkAgrees(dump.file, records, decodeAs, flags);
    // The comparison is real: a changed value is caught.
    const altered = structuredClone(records);
    altered[0]!.message.args.pids[1] = 1003;
    expect(() => expectTsharkAgrees(dump.file, altered, decodeAs, flags)).toThrow();
    // Stamp: the framed types are read to their end, so the parameter after them is named.
    const shown = tsharkMessages(dump2.file, 'rmc', decodeAs, flags);
    const request = shown.find((b) => b.type === 'request')!;
    expect(request.fields.get('after')).toEqual(['4242']);
    expect(request.fields.get('extra')).toEqual(['Hello']);
    expect(request.fields.get('value')).toEqual(['v']);
  });

  it('takes --protocols repeated and comma-separated, and refuses a pack that does not load', () => {
    const dir = tempDir('gamewire-pack-');
    const a = packFile(PACK, dir);
    const other: ProtocolPack = structuredClone(PACK);
    other.protocols[0]!.name = 'OtherProtocol';
    other.protocols[0]!.id = 78;
    const b = packFile(other, dir);
    const out = path.join(dir, 'lua');
    const r = runCli(['dissector', '--out', out, '--protocols', a, '--protocols', b]);
    expect(r.code, r.stderr).toBe(0);
    const lua = fs.readFileSync(path.join(out, 'gamewire-rmc.lua'), 'utf8');
    expect(lua).toContain('"ArenaProtocol::FindPlayers"');
    expect(lua).toContain('"OtherProtocol::FindPlayers"');
    expect(lua).toContain('"gw_rmc.ArenaProtocol.FindPlayers.args.query"');
    // Without a pack the dissector names none of it.
    const none = path.join(dir, 'lua-none');
    expect(runCli(['dissector', '--out', none]).code).toBe(0);
    expect(fs.readFileSync(path.join(none, 'gamewire-rmc.lua'), 'utf8')).not.toContain('ArenaProtocol');

    const pcap = path.join(dir, 'empty.pcap');
    fs.writeFileSync(pcap, pcapFileHeader(LinkType.RAW));
    expect(runCli(['inspect', pcap, '--protocols', `${a},${b}`]).code).toBe(0);
    const clash = runCli(['inspect', pcap, '--protocols', a, '--protocols', a]);
    expect(clash.code).not.toBe(0);
    expect(clash.stderr).toContain('ERR_RMC_PACK');
    const bad = path.join(dir, 'bad.json');
    fs.writeFileSync(bad, '{"format":"gamewire-rmc-pack","version":99}');
    const refused = runCli(['dissector', '--out', out, '--protocols', bad]);
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toContain('ERR_RMC_PACK');
  });
});

// ---- PRUDP V0 ------------------------------------------------------------------------------------

const ACCESS_KEY = 'yl4NG7qZ';
const CLIENT = { address: '10.1.1.2', port: 3074 };
const SERVER = { address: '10.1.1.1', port: 21170 };

/** A classic RMC message (u32 size, protocol id | 0x80 for a request, call id, method id, body). */
function classic(request: boolean, callId: number, methodId: number, body: Buffer): Buffer {
  const head = Buffer.alloc(request ? 13 : 14);
  let o = 4;
  head[o++] = 77 | (request ? 0x80 : 0);
  if (!request) head[o++] = 1;
  head.writeUInt32LE(callId, o);
  head.writeUInt32LE(request ? methodId : methodId | 0x8000, o + 4);
  const msg = Buffer.concat([head, body]);
  msg.writeUInt32LE(msg.length - 4, 0);
  return msg;
}

function prudpData(fromClient: boolean, sessionId: number, seq: number, plain: Buffer): Buffer {
  const cfg = { width: 1 as const, keyByte: accessKeyByte(ACCESS_KEY) };
  const w = new WireWriter();
  writePacket(
    w,
    {
      type: PacketType.DATA,
      flags: Flag.RELIABLE | Flag.NEED_ACK,
      source: fromClient ? 0x3f : 0x31,
      destination: fromClient ? 0x31 : 0x3f,
      sessionId,
      packetSignature: 0x12345678,
      sequenceId: seq,
      fragmentId: 0,
    },
    new ClassicPayloadCodec().encode(plain),
    cfg,
  );
  return w.toBuffer();
}

describe('inspect --protocols: PRUDP V0', () => {
  it('names pack methods in both of two connections on one UDP flow that reuse sequence ids', () => {
    const dir = tempDir('gamewire-prudp-pack-');
    const file = packFile(PACK, dir);
    const args = encode(FIND.args, { query: 'q', limit: 2, pids: [7] });
    const results = encode(FIND.results, {
      retval: 0x10001,
      players: [{ m_pid: 7, m_name: 'seven', m_tags: [] }],
      scores: [],
      blob: Buffer.alloc(0),
    } as never);
    const datagrams: [boolean, Buffer][] = [];
    // Connection 1 (sessions 0x10 / 0x20), then connection 2 (0x11 / 0x21): both number from 1.
    for (const [c, s, callId] of [
      [0x10, 0x20, 1],
      [0x11, 0x21, 2],
    ] as const) {
      datagrams.push([true, prudpData(true, c, 1, classic(true, callId, 1, args))]);
      datagrams.push([false, prudpData(false, s, 1, classic(false, callId, 1, results))]);
    }
    const pcap = path.join(dir, 'prudp.pcap');
    fs.writeFileSync(
      pcap,
      Buffer.concat([
        pcapFileHeader(LinkType.RAW),
        ...datagrams.map(([up, d], i) =>
          pcapRecord(
            1_700_000_000_000_000 + i * 1000,
            ipPacket('udp', up ? CLIENT : SERVER, up ? SERVER : CLIENT, d),
          ),
        ),
      ]),
    );
    const records = inspectJson(pcap, [
      '--port',
      `${SERVER.port}/udp=prudp`,
      '--access-key',
      ACCESS_KEY,
      '--rmc-variant',
      'classic',
      '--protocols',
      file,
    ]);
    expect(records.filter((r) => r.error !== undefined)).toEqual([]);
    const rmc = records.filter((r) => r.message.type === 'request' || r.message.type === 'response');
    expect(rmc.map((r) => [r.message.type, r.message.callId])).toEqual([
      ['request', 1],
      ['response', 1],
      ['request', 2],
      ['response', 2],
    ]);
    for (const r of rmc.filter((x) => x.message.type === 'request'))
      expect(r.message.args).toEqual({ query: 'q', limit: 2, pids: [7] });
    for (const r of rmc.filter((x) => x.message.type === 'response'))
      expect(r.message.results.players).toEqual([{ m_pid: 7, m_name: 'seven', m_tags: [] }]);
    expect(records.some((r) => r.message.retransmission === true)).toBe(false);
  });
});
