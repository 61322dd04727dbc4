/**
 * Capture files and the layers under the protocols: pcap (both byte orders, µs and ns), pcapng
 * (timestamp resolution, several interfaces), every link type, IPv4 fragments, IPv6 extension
 * headers and fragments; bad files give typed errors only; a message that fails to decode gives
 * its error and offset while the rest of the capture still decodes.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { CaptureError, CaptureParser, readCapture } from '../../src/inspect/capture.js';
import type { InspectRecord } from '../../src/inspect/inspector.js';
import { loadFlowProtocols } from '../../src/inspect/protocols.js';
import { inspectBuffer } from '../../src/inspect/run.js';
import {
  ipPacket,
  LinkType,
  pcapFileHeader,
  pcapngInterface,
  pcapngPacket,
  pcapngSectionHeader,
  pcapRecord,
} from '../../src/inspect/writer.js';
import { BIN, runCli } from '../helpers/cli.js';
import { waitFor } from '../helpers/wait.js';
import { tempDir } from './helpers.js';
import { noxHandshake, rmcRequest } from './raw-clients.js';

const CLIENT = { address: '10.0.0.2', port: 50_000 };
const RELAY = { address: '10.0.0.1', port: 37_000 };

/** A Unity Relay PING from an allocation id of sixteen `fill` bytes. */
function ping(fill: number): Buffer {
  const b = Buffer.alloc(22);
  b.set([0xda, 0x72, 0x00, 0x02]);
  b.fill(fill, 4, 20);
  b[20] = 1;
  return b;
}

function wrap(linkType: number, ip: Buffer): Buffer {
  const v6 = ip[0]! >> 4 === 6;
  switch (linkType) {
    case LinkType.ETHERNET: {
      const h = Buffer.alloc(14);
      h.writeUInt16BE(v6 ? 0x86dd : 0x0800, 12);
      return Buffer.concat([h, ip]);
    }
    case LinkType.LINUX_SLL: {
      const h = Buffer.alloc(16);
      h.writeUInt16BE(v6 ? 0x86dd : 0x0800, 14);
      return Buffer.concat([h, ip]);
    }
    case LinkType.LINUX_SLL2: {
      const h = Buffer.alloc(20);
      h.writeUInt16BE(v6 ? 0x86dd : 0x0800, 0);
      return Buffer.concat([h, ip]);
    }
    case LinkType.NULL: {
      const h = Buffer.alloc(4);
      h.writeUInt32LE(v6 ? 30 : 2);
      return Buffer.concat([h, ip]);
    }
    case LinkType.LOOP: {
      const h = Buffer.alloc(4);
      h.writeUInt32BE(v6 ? 24 : 2);
      return Buffer.concat([h, ip]);
    }
    default:
      return ip;
  }
}

function pcap(linkType: number, frames: Buffer[], t0 = 1_700_000_000_000_000): Buffer {
  return Buffer.concat([pcapFileHeader(linkType), ...frames.map((f, i) => pcapRecord(t0 + i * 1000, f))]);
}

// Every protocol's flows, loaded through the registry as `gamewire inspect` does.
const protocols = await loadFlowProtocols();

function run(
  file: Buffer,
  options = {},
): { records: InspectRecord[]; stats: ReturnType<typeof inspectBuffer> } {
  const records: InspectRecord[] = [];
  const stats = inspectBuffer(file, (r) => records.push(r), { protocols, ...options });
  return { records, stats };
}

describe('capture formats and link layers', () => {
  const linkTypes = [
    LinkType.ETHERNET,
    LinkType.LINUX_SLL,
    LinkType.LINUX_SLL2,
    LinkType.NULL,
    LinkType.LOOP,
    LinkType.RAW,
    LinkType.IPV4,
  ];
  for (const lt of linkTypes) {
    it(`reads UDP over IPv4 on link type ${lt}`, () => {
      const frames = [
        wrap(lt, ipPacket('udp', CLIENT, RELAY, ping(1))),
        wrap(lt, ipPacket('udp', RELAY, CLIENT, Buffer.from([0xda, 0x72, 0, 1]))),
      ];
      const { records } = run(pcap(lt, frames));
      expect(records.map((r) => [r.direction, (r.message as any).type])).toEqual([
        ['client', 'PING'],
        ['server', 'BIND_RECEIVED'],
      ]);
      expect(records[0]!.flow).toBe('10.0.0.2:50000 -> 10.0.0.1:37000');
      expect((records[0]!.message as any).fromAllocationId).toBe('01'.repeat(16));
    });
  }

  it('reads IPv6 (Ethernet, SLL2, BSD null, raw) with a hop-by-hop header in front', () => {
    const c6 = { address: '2001:db8::2', port: 50_000 };
    const r6 = { address: '2001:db8::1', port: 37_000 };
    const plain = ipPacket('udp', c6, r6, ping(2));
    // Insert an 8-byte hop-by-hop header (next header UDP).
    const hbh = Buffer.alloc(8);
    hbh[0] = 17;
    const withExt = Buffer.concat([plain.subarray(0, 40), hbh, plain.subarray(40)]);
    withExt[6] = 0;
    withExt.writeUInt16BE(plain.readUInt16BE(4) + 8, 4);
    for (const lt of [LinkType.ETHERNET, LinkType.LINUX_SLL2, LinkType.NULL, LinkType.RAW, LinkType.IPV6]) {
      const { records } = run(pcap(lt, [wrap(lt, plain), wrap(lt, withExt)]));
      expect(records.map((r) => (r.message as any).type)).toEqual(['PING', 'PING']);
      expect(records[0]!.flow).toBe('[2001:db8::2]:50000 -> [2001:db8::1]:37000');
    }
  });

  it('reassembles IPv4 fragments given out of order, and IPv6 fragments', () => {
    const payload = Buffer.concat([
      Buffer.from([0xda, 0x72, 0, 10]),
      Buffer.alloc(32, 7),
      Buffer.from([0, 200]),
    ]);
    const relay = Buffer.concat([payload, Buffer.alloc(200, 0x61)]);
    const whole = ipPacket('udp', CLIENT, RELAY, relay);
    const l4 = whole.subarray(20);
    const frag = (at: number, end: number, more: boolean): Buffer => {
      const h = Buffer.from(whole.subarray(0, 20));
      h.writeUInt16BE(20 + end - at, 2);
      h.writeUInt16BE(0x1234, 4);
      h.writeUInt16BE((more ? 0x2000 : 0) | (at / 8), 6);
      return Buffer.concat([h, l4.subarray(at, end)]);
    };
    const frames = [frag(96, l4.length, false), frag(0, 48, true), frag(48, 96, true)];
    const { records } = run(pcap(LinkType.RAW, frames));
    expect(records).toHaveLength(1);
    expect((records[0]!.message as any).data).toBe(Buffer.alloc(200, 0x61).toString('hex'));

    const c6 = { address: 'fe80::2', port: 50_000 };
    const r6 = { address: 'fe80::1', port: 37_000 };
    const w6 = ipPacket('udp', c6, r6, relay);
    const l4v6 = w6.subarray(40);
    const frag6 = (at: number, end: number, more: boolean): Buffer => {
      const h = Buffer.from(w6.subarray(0, 40));
      h[6] = 44;
      h.writeUInt16BE(8 + end - at, 4);
      const fh = Buffer.alloc(8);
      fh[0] = 17;
      fh.writeUInt16BE(at | (more ? 1 : 0), 2);
      fh.writeUInt32BE(99, 4);
      return Buffer.concat([h, fh, l4v6.subarray(at, end)]);
    };
    const r2 = run(pcap(LinkType.RAW, [frag6(0, 120, true), frag6(120, l4v6.length, false)]));
    expect(r2.records.map((r) => (r.message as any).type)).toEqual(['RELAY']);
  });

  it('reads big-endian and nanosecond pcap, and pcapng with several interfaces and a timestamp resolution', () => {
    const frame = ipPacket('udp', CLIENT, RELAY, ping(3));
    const be = Buffer.alloc(24);
    be.writeUInt32BE(0xa1b23c4d, 0); // nanoseconds, big-endian
    be.writeUInt16BE(2, 4);
    be.writeUInt16BE(4, 6);
    be.writeUInt32BE(65535, 16);
    be.writeUInt32BE(LinkType.RAW, 20);
    const rec = Buffer.alloc(16);
    rec.writeUInt32BE(1_700_000_000, 0);
    rec.writeUInt32BE(123_456_789, 4);
    rec.writeUInt32BE(frame.length, 8);
    rec.writeUInt32BE(frame.length, 12);
    const r1 = run(Buffer.concat([be, rec, frame]));
    expect(r1.records[0]!.timeUs).toBe(1_700_000_000_123_456);

    // pcapng: interface 0 Ethernet (µs), interface 1 raw IP in nanoseconds (if_tsresol = 9).
    const idb1 = Buffer.alloc(28);
    idb1.writeUInt32LE(1, 0);
    idb1.writeUInt32LE(28, 4);
    idb1.writeUInt16LE(LinkType.RAW, 8);
    idb1.writeUInt16LE(9, 16);
    idb1.writeUInt16LE(1, 18);
    idb1[20] = 9;
    idb1.writeUInt32LE(28, 24);
    const ng = Buffer.concat([
      pcapngSectionHeader(),
      pcapngInterface(LinkType.ETHERNET),
      idb1,
      pcapngPacket(0, 1_700_000_000_000_001, wrap(LinkType.ETHERNET, frame)),
      pcapngPacket(1, 1_700_000_000_000_002_000, frame),
    ]);
    const r2 = run(ng);
    expect(r2.records.map((r) => r.timeUs)).toEqual([1_700_000_000_000_001, 1_700_000_000_000_002]);
  });

  it('feeds the parser byte by byte with the same result (the --follow path)', () => {
    const file = pcap(LinkType.ETHERNET, [wrap(LinkType.ETHERNET, ipPacket('udp', CLIENT, RELAY, ping(4)))]);
    const seen: number[] = [];
    const parser = new CaptureParser((p) => seen.push(p.data.length));
    for (let i = 0; i < file.length; i++) parser.push(file.subarray(i, i + 1));
    parser.end();
    expect(seen).toEqual([14 + 20 + 8 + 22]);
  });
});

describe('bad captures and bad messages', () => {
  const goodParts = [
    pcapFileHeader(LinkType.ETHERNET),
    pcapRecord(1, wrap(LinkType.ETHERNET, ipPacket('udp', CLIENT, RELAY, ping(5)))),
    pcapRecord(2, wrap(LinkType.ETHERNET, ipPacket('udp', CLIENT, RELAY, ping(6)))),
  ];
  const goodNgParts = [
    pcapngSectionHeader(),
    pcapngInterface(LinkType.ETHERNET),
    pcapngPacket(0, 1, wrap(LinkType.ETHERNET, ipPacket('udp', CLIENT, RELAY, ping(7)))),
  ];
  const good = Buffer.concat(goodParts);
  const goodNg = Buffer.concat(goodNgParts);
  /** Lengths at which a file ends cleanly (after a whole header, record or block). */
  const boundaries = (parts: Buffer[]) => parts.map((_, i) => Buffer.concat(parts.slice(0, i + 1)).length);

  it('truncated files give ERR_CAPTURE_TRUNCATED (or a bad-length error), never anything else', () => {
    for (const parts of [goodParts, goodNgParts]) {
      const file = Buffer.concat(parts);
      const clean = new Set(boundaries(parts));
      // The header alone (pcap) is a valid empty capture; a pcapng section needs its header.
      for (let n = 0; n < file.length; n++) {
        if (clean.has(n)) {
          expect(() => run(file.subarray(0, n))).not.toThrow();
          continue;
        }
        let err: unknown;
        try {
          run(file.subarray(0, n));
        } catch (e) {
          err = e;
        }
        expect(err, `cut at ${n}`).toBeInstanceOf(CaptureError);
        expect(['ERR_CAPTURE_TRUNCATED', 'ERR_CAPTURE_BAD_LENGTH']).toContain((err as CaptureError).code);
      }
    }
  });

  it('random bytes, and random corruption of real files, give typed errors only', () => {
    fc.assert(
      fc.property(
        fc.oneof(
          fc.uint8Array({ maxLength: 600 }).map((a) => Buffer.from(a)),
          fc
            .record({ file: fc.constantFrom(good, goodNg), at: fc.nat(), value: fc.nat(255) })
            .map(({ file, at, value }) => {
              const b = Buffer.from(file);
              b[at % b.length] = value;
              return b;
            }),
          fc
            .uint8Array({ maxLength: 300 })
            .map((a) => Buffer.concat([pcapFileHeader(LinkType.ETHERNET), Buffer.from(a)])),
          fc
            .uint8Array({ maxLength: 300 })
            .map((a) =>
              Buffer.concat([pcapngSectionHeader(), pcapngInterface(LinkType.RAW), Buffer.from(a)]),
            ),
        ),
        (file) => {
          try {
            run(file, { ports: [{ port: 37_000, protocol: 'unity-relay' }] });
          } catch (e) {
            expect(e).toBeInstanceOf(CaptureError);
          }
        },
      ),
      { numRuns: 1000 },
    );
  });

  it('random frames inside a valid file are decoded or skipped, never thrown', () => {
    fc.assert(
      fc.property(
        fc.constantFrom(
          LinkType.ETHERNET,
          LinkType.LINUX_SLL,
          LinkType.LINUX_SLL2,
          LinkType.NULL,
          LinkType.RAW,
        ),
        fc.array(fc.uint8Array({ maxLength: 200 }), { maxLength: 10 }),
        (lt, frames) => {
          const records: InspectRecord[] = [];
          readCapture(
            pcap(
              lt,
              frames.map((f) => Buffer.from(f)),
            ),
            () => {},
          );
          inspectBuffer(
            pcap(
              lt,
              frames.map((f) => Buffer.from(f)),
            ),
            (r) => records.push(r),
            { protocols },
          );
        },
      ),
      { numRuns: 500 },
    );
  });

  it('a message that fails gives its typed error and offset; the messages around it still decode', () => {
    const bad = ping(8);
    bad[3] = 0x7e; // unknown type
    const frames = [ping(1), bad, ping(2)].map((p) =>
      wrap(LinkType.ETHERNET, ipPacket('udp', CLIENT, RELAY, p)),
    );
    const { records } = run(pcap(LinkType.ETHERNET, frames));
    expect(records.map((r) => (r.message as any)?.type ?? r.error!.code)).toEqual([
      'PING',
      'ERR_UNKNOWN_TYPE',
      'PING',
    ]);
    expect(records[1]!.error!.offset).toBe(3);
  });

  it('the CLI prints the typed error of a corrupt file as JSON and exits 1', () => {
    const dir = tempDir();
    const file = path.join(dir, 'cut.pcap');
    fs.writeFileSync(file, good.subarray(0, good.length - 5));
    const r = runCli(['inspect', file, '--json']);
    expect(r.code).toBe(1);
    // The packets before the cut were printed.
    expect(r.stdout.trim().split('\n')).toHaveLength(1);
    expect(JSON.parse(r.stderr).error.code).toBe('ERR_CAPTURE_TRUNCATED');
    fs.writeFileSync(file, 'not a capture at all');
    expect(JSON.parse(runCli(['inspect', file]).stderr).error.code).toBe('ERR_CAPTURE_BAD_MAGIC');
  });
});

describe('TCP flows through the whole pipeline', () => {
  const C = { address: '192.168.1.2', port: 40_001 };
  const S = { address: '192.168.1.1', port: 9103 };
  const SYN = 0x02;
  const ACK = 0x10;
  const PSH_ACK = 0x18;

  function tcpCapture(stream: Buffer, cuts: number[], order: number[]): Buffer {
    const isn = 0xfffffff0; // wraps inside the stream
    const frames: Buffer[] = [ipPacket('tcp', C, S, Buffer.alloc(0), { seq: isn, ack: 0, flags: SYN })];
    frames.push(ipPacket('tcp', S, C, Buffer.alloc(0), { seq: 77, ack: isn + 1, flags: SYN | ACK }));
    const bounds = [0, ...cuts, stream.length];
    const segs: Buffer[] = [];
    for (let i = 0; i + 1 < bounds.length; i++) {
      segs.push(
        ipPacket('tcp', C, S, stream.subarray(bounds[i]!, bounds[i + 1]!), {
          seq: (isn + 1 + bounds[i]!) >>> 0,
          ack: 78,
          flags: PSH_ACK,
        }),
      );
    }
    for (const i of order) frames.push(segs[i]!);
    return pcap(LinkType.RAW, frames);
  }

  it('reorders segments, and a frame that fails to decode is reported while the next ones decode', () => {
    const good1 = rmcRequest(
      'LoginProtocol',
      1,
      'LoginProtocol::Register_V1',
      Buffer.from('00000000', 'hex'),
    );
    // A frame with a valid size but a protocol name whose length runs past it.
    const bad = Buffer.from('09000000ff0041424344454647', 'hex');
    const good2 = rmcRequest(
      'LoginProtocol',
      2,
      'LoginProtocol::Register_V1',
      Buffer.from('00000000', 'hex'),
    );
    const stream = Buffer.concat([good1, bad, good2]);
    const file = tcpCapture(stream, [10, 40, 70], [2, 0, 3, 1]);
    const { records } = run(file);
    expect(records.map((r) => (r.message as any)?.callId ?? r.error!.code)).toEqual([1, 'ERR_OVERRUN', 2]);
    // The error's offset counts from the start of the client's stream.
    expect(records[1]!.error!.offset).toBeGreaterThanOrEqual(good1.length);
    expect(records[1]!.error!.offset).toBeLessThan(good1.length + bad.length);
    expect(records.every((r) => r.direction === 'client' && r.protocol === 'rmc')).toBe(true);
  });

  it('a lost segment is reported once as a gap; nothing after it is guessed', () => {
    const frames = [1, 2, 3].map((id) =>
      rmcRequest('LoginProtocol', id, 'LoginProtocol::Register_V1', Buffer.from('00000000', 'hex')),
    );
    const stream = Buffer.concat(frames);
    const n = frames[0]!.length;
    // Segment 1 (the second frame) never captured; the server acknowledges everything.
    const file = tcpCapture(stream, [n, 2 * n], [0, 2]);
    const ackAll = ipPacket('tcp', S, C, Buffer.alloc(0), {
      seq: 78,
      ack: (0xfffffff0 + 1 + stream.length) >>> 0,
      flags: ACK,
    });
    const { records } = run(Buffer.concat([file, pcapRecord(9_999_999, ackAll)]));
    expect(records.map((r) => (r.message as any)?.callId ?? r.error!.code)).toEqual([1, 'ERR_INSPECT_GAP']);
    expect(records[1]!.error!.offset).toBe(n);
  });
});

describe('inspect CLI filters', () => {
  const NOX_C = { address: '10.0.0.3', port: 50_001 };
  const NOX_S = { address: '10.0.0.1', port: 23_032 };
  const bad = ping(9);
  bad[3] = 0x7e;
  const noxHello = noxHandshake('rec', 'udp');
  const file = path.join(tempDir(), 'mixed.pcap');
  fs.writeFileSync(
    file,
    pcap(LinkType.ETHERNET, [
      wrap(LinkType.ETHERNET, ipPacket('udp', CLIENT, RELAY, ping(1))),
      wrap(LinkType.ETHERNET, ipPacket('udp', NOX_C, NOX_S, noxHello)),
      wrap(LinkType.ETHERNET, ipPacket('udp', CLIENT, RELAY, bad)),
      wrap(LinkType.ETHERNET, ipPacket('udp', RELAY, CLIENT, Buffer.from([0xda, 0x72, 0, 1]))),
    ]),
  );
  const lines = (args: string[]) => {
    const r = runCli(['inspect', file, '--json', ...args]);
    expect(r.code).toBe(0);
    return r.stdout
      .trim()
      .split('\n')
      .filter((l) => l !== '')
      .map((l) => JSON.parse(l));
  };

  it('--protocol, --type (and "error"), --flow by label, endpoint or port', () => {
    expect(lines([]).map((r) => r.message?.type ?? r.error.code)).toEqual([
      'PING',
      'Handshake',
      'ERR_UNKNOWN_TYPE',
      'BIND_RECEIVED',
    ]);
    expect(lines(['--protocol', 'nox-relay']).map((r) => r.message.type)).toEqual(['Handshake']);
    expect(lines(['--type', 'PING,BIND_RECEIVED']).map((r) => r.message.type)).toEqual([
      'PING',
      'BIND_RECEIVED',
    ]);
    expect(lines(['--type', 'error']).map((r) => r.error.code)).toEqual(['ERR_UNKNOWN_TYPE']);
    expect(lines(['--flow', '10.0.0.3:50001']).map((r) => r.message.type)).toEqual(['Handshake']);
    expect(lines(['--flow', '10.0.0.2:50000 -> 10.0.0.1:37000'])).toHaveLength(3);
    expect(lines(['--flow', '23032'])).toHaveLength(1);
    // Ports can be remapped: 37000 as nox-relay turns the relay flow into decode errors.
    expect(
      lines(['--port', '37000/udp=nox-relay', '--protocol', 'nox-relay']).every(
        (r) => r.protocol === 'nox-relay',
      ),
    ).toBe(true);
  });

  it('the table output and usage errors', () => {
    const r = runCli(['inspect', file]);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('→ PING');
    expect(r.stdout).toContain('← BIND_RECEIVED');
    expect(r.stdout).toContain('ERROR ERR_UNKNOWN_TYPE at 3');
    expect(runCli(['inspect', file, '--port', 'x=js5']).code).toBe(2);
    expect(runCli(['inspect', file, '--port', '1=nope']).code).toBe(2);
    expect(runCli(['inspect', file, '--protocol', 'nope']).code).toBe(2);
    expect(runCli(['inspect']).code).toBe(2);
  });
});

describe('inspect --follow FILE', () => {
  it('keeps reading a capture that is still being written, until SIGINT', async () => {
    const file = path.join(tempDir(), 'growing.pcap');
    const frame = (fill: number) => wrap(LinkType.ETHERNET, ipPacket('udp', CLIENT, RELAY, ping(fill)));
    fs.writeFileSync(file, Buffer.concat([pcapFileHeader(LinkType.ETHERNET), pcapRecord(1, frame(1))]));
    const child = spawn(process.execPath, [BIN, 'inspect', file, '--follow', '--json'], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let out = '';
    child.stdout.on('data', (d: Buffer) => {
      out += d.toString();
    });
    const lines = () => out.split('\n').filter((l) => l !== '');
    const waitLines = async (n: number) => {
      await waitFor(() => lines().length >= n, { what: () => `${n} lines (got: ${out})`, timeoutMs: 20_000 });
    };
    try {
      await waitLines(1);
      fs.appendFileSync(file, pcapRecord(2, frame(2)));
      await waitLines(2);
      expect(lines().map((l) => JSON.parse(l).message.fromAllocationId)).toEqual([
        '01'.repeat(16),
        '02'.repeat(16),
      ]);
      child.kill('SIGINT');
      expect(await new Promise((r) => child.once('exit', r))).toBe(0);
    } finally {
      if (child.exitCode === null) child.kill('SIGKILL');
    }
  });
});
