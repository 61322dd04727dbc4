/**
 * `tcpdump -i lo` captures of real JS5 sessions (a raw client sharing no gamewire code, and
 * gamewire's own client), decoded by `gamewire inspect --json`: every request the client sent
 * appears with its values, in order, from the client; every response from the server, including
 * the XORed ones after a rekey.
 */
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { Js5Client } from '../../src/protocols/js5/client.js';
import type { Js5Server } from '../../src/protocols/js5/server.js';
import { startServer } from '../protocols/js5/helpers.js';
import { haveProgram, inspectJson, type JsonRecord, Tcpdump, tempDir } from './helpers.js';
import { js5ReadResponse, RawTcp } from './raw-clients.js';
import { expectTsharkAgrees } from './tshark.js';

const HAVE_TCPDUMP = haveProgram('tcpdump');
const HAVE_TSHARK = haveProgram('tshark');

let server: Js5Server | undefined;
let dump: Tcpdump | undefined;
afterEach(async () => {
  dump?.kill();
  dump = undefined;
  await server?.close();
  server = undefined;
});

function ofDirection(records: JsonRecord[], d: 'client' | 'server'): any[] {
  return records.filter((r) => r.direction === d).map((r) => r.message ?? r.error);
}

describe('inspect: tcpdump captures of JS5', () => {
  it('decodes a raw client session with a rekey, values in order and in the right direction', async (ctx) => {
    if (!HAVE_TCPDUMP) return ctx.skip();
    ({ server } = await startServer('530'));
    const port = server.port;
    const file = path.join(tempDir(), 'js5.pcap');
    dump = await Tcpdump.start(`tcp port ${port}`, file);

    const c = await RawTcp.connect(port);
    const hs = Buffer.alloc(5);
    hs[0] = 15;
    hs.writeUInt32BE(530, 1);
    c.send(hs);
    expect((await c.take(1))[0]).toBe(0);
    c.send(Buffer.from([1, 255, 0, 255])); // urgent 255/255 (master index)
    const master = await js5ReadResponse(c);
    c.send(Buffer.from([1, 255, 0, 2])); // urgent 255/2
    const first = await js5ReadResponse(c);
    // Rekey with nothing in flight, as real clients do; everything downstream is XORed from now on.
    c.send(Buffer.from([4, 0x5a, 0, 0]));
    c.xorKey = 0x5a;
    c.send(Buffer.from([1, 255, 0, 2]));
    const again = await js5ReadResponse(c);
    expect(again.container.equals(first.container)).toBe(true);
    await c.close();
    await dump.stop();

    const records = inspectJson(file, ['--port', `${port}=js5`]);
    expect(records.filter((r) => r.error !== undefined)).toEqual([]);
    // The generated Wireshark dissector shows the same messages and fields.
    if (HAVE_TSHARK) expectTsharkAgrees(file, records, [`tcp.port==${port},gw_js5`]);
    expect(new Set(records.map((r) => r.protocol))).toEqual(new Set(['js5']));
    expect(ofDirection(records, 'client')).toEqual([
      { type: 'handshake', build: 530 },
      { type: 'urgent', archive: 255, group: 255 },
      { type: 'urgent', archive: 255, group: 2 },
      { type: 'rekey', key: 0x5a },
      { type: 'urgent', archive: 255, group: 2 },
    ]);
    const server_ = ofDirection(records, 'server');
    expect(server_[0]).toEqual({ type: 'handshakeReply', status: 0 });
    const responses = server_.slice(1);
    expect(responses.map((m) => [m.type, m.archive, m.group])).toEqual([
      ['response', 255, 255],
      ['response', 255, 2],
      ['response', 255, 2],
    ]);
    // The data decoded from the XORed response equals the plain one, and what the client read.
    const header = (m: any) => (m.compression === 0 ? 5 : 9);
    expect(responses[2].data).toBe(responses[1].data);
    expect(responses[1].data).toBe(first.container.subarray(header(responses[1])).toString('hex'));
    expect(responses[0].data).toBe(master.container.subarray(header(responses[0])).toString('hex'));
    // Flow label: client first, server port last.
    expect(records[0]!.flow.endsWith(`127.0.0.1:${port}`)).toBe(true);
  });

  it("decodes gamewire's own client (XOR key requested after the handshake) on the default detection", async (ctx) => {
    if (!HAVE_TCPDUMP) return ctx.skip();
    ({ server } = await startServer('530'));
    const port = server.port;
    const file = path.join(tempDir(), 'js5-client.pcap');
    dump = await Tcpdump.start(`tcp port ${port}`, file);
    const client = await Js5Client.connect({
      host: '127.0.0.1',
      port,
      build: 530,
      profile: '530',
      xorKey: 0x21,
    });
    const groups = [0, 1, 2];
    const got = await Promise.all(groups.map((g) => client.request(255, g, true)));
    await client.close();
    await dump.stop();

    // No --port: the handshake (0x0f + build) identifies the flow.
    const records = inspectJson(file);
    expect(records.filter((r) => r.error !== undefined)).toEqual([]);
    // The dissector's heuristic finds the flow too.
    if (HAVE_TSHARK) expectTsharkAgrees(file, records);
    const up = ofDirection(records, 'client');
    expect(up[0]).toEqual({ type: 'handshake', build: 530 });
    expect(up.some((m) => m.type === 'rekey' && m.key === 0x21)).toBe(true);
    const requested = up.filter((m) => m.type === 'urgent').map((m) => m.group);
    expect(requested.sort()).toEqual(groups);
    const responses = ofDirection(records, 'server').filter((m) => m.type === 'response');
    expect(responses.map((m) => m.group).sort()).toEqual(groups);
    for (const m of responses) {
      const c = got[groups.indexOf(m.group)]!;
      expect(
        c
          .subarray(m.compression === 0 ? 5 : 9, c.length)
          .toString('hex')
          .startsWith(m.data),
      ).toBe(true);
    }
  });
});
