/**
 * inspect: throughput of `gamewire inspect --json` (capture → records → JSON lines) on a mixed
 * capture, in MB of capture per second, against reading the same capture without decoding
 * (the pcap parser alone, counting packets). Goal: ≥ 50 MB/s.
 *
 * The capture is made here, in memory: NoxVR over TCP (Handshake, Transform streams) and UDP,
 * Unity Relay RELAY datagrams, JS5 requests and framed multi-block responses, RMC requests.
 */
import { performance } from 'node:perf_hooks';
import { CaptureParser } from '../src/inspect/capture.js';
import { recordJson } from '../src/inspect/output.js';
import { loadFlowProtocols } from '../src/inspect/protocols.js';
import { inspectBuffer } from '../src/inspect/run.js';
import { ipPacket, LinkType, pcapFileHeader, pcapRecord } from '../src/inspect/writer.js';
import { frameResponse } from '../src/protocols/js5/framing.js';
import type { BenchRow, BenchSuite } from './harness.js';

function ethernet(ip: Buffer): Buffer {
  const h = Buffer.alloc(14);
  h.writeUInt16BE(0x0800, 12);
  return Buffer.concat([h, ip]);
}

function noxPacket(type: number, payload: Buffer): Buffer {
  const h = Buffer.alloc(5);
  h.writeUInt16BE(5 + payload.length, 0);
  h.writeUInt16BE(7, 2);
  h[4] = type;
  return Buffer.concat([h, payload]);
}

function transform(i: number): Buffer {
  // instance, OnPlayer, player, rig, flags = position|rotation, vector3, quaternion
  const b = Buffer.alloc(1 + 1 + 2 + 2 + 1 + 12 + 16);
  b[0] = 1;
  b[1] = 1;
  b.writeUInt16BE(i & 0xffff, 2);
  b.writeUInt16BE(0, 4);
  b[6] = 0x03;
  for (let k = 0; k < 7; k++) b.writeFloatBE(i * 0.5 + k, 7 + k * 4);
  return noxPacket(0x0b, b);
}

/** About `targetBytes` of mixed capture. */
export function mixedCapture(targetBytes: number): Buffer {
  const parts: Buffer[] = [pcapFileHeader(LinkType.ETHERNET)];
  let size = 24;
  let t = 1_700_000_000_000_000;
  const push = (ip: Buffer) => {
    const rec = pcapRecord(t, ethernet(ip));
    t += 10;
    parts.push(rec);
    size += rec.length;
  };
  const container = Buffer.alloc(5 + 3000, 0x42);
  container[0] = 0;
  container.writeInt32BE(3000, 1);
  const js5Response = frameResponse(5, 77, container);
  let flow = 0;
  while (size < targetBytes) {
    flow++;
    const client = { address: '10.0.0.2', port: 20_000 + (flow % 40_000) };
    // NoxVR over TCP: handshake, then a burst of transforms, several per segment.
    const nox = { address: '10.0.0.1', port: 23032 };
    let cs = 1000;
    const tcp = (from: typeof client, to: typeof client, seq: number, data: Buffer, flags = 0x18) =>
      push(ipPacket('tcp', from, to, data, { seq, ack: 1, flags }));
    tcp(client, nox, cs - 1, Buffer.alloc(0), 0x02);
    const hsPayload = Buffer.concat([
      Buffer.from([0, 1, 0, 4]),
      Buffer.from('node'),
      Buffer.from([0, 5]),
      Buffer.from('linux'),
    ]);
    const hs = noxPacket(0x01, hsPayload);
    tcp(client, nox, cs, hs);
    cs += hs.length;
    for (let k = 0; k < 20; k++) {
      const burst = Buffer.concat([transform(k), transform(k + 1), transform(k + 2), transform(k + 3)]);
      tcp(client, nox, cs, burst);
      cs += burst.length;
    }
    // Unity Relay datagrams.
    const relay = { address: '10.0.0.1', port: 37000 };
    for (let k = 0; k < 20; k++) {
      const m = Buffer.alloc(38 + 200, k);
      m.set([0xda, 0x72, 0, 10]);
      m.writeUInt16BE(200, 36);
      push(ipPacket('udp', client, relay, m));
    }
    // JS5: handshake, requests, a few 3 KB responses.
    const js5 = { address: '10.0.0.1', port: 43594 };
    let jc = 5000;
    let js = 9000;
    tcp(client, js5, jc - 1, Buffer.alloc(0), 0x02);
    tcp(js5, client, js - 1, Buffer.alloc(0), 0x12);
    const jhs = Buffer.from([15, 0, 0, 2, 18]);
    tcp(client, js5, jc, jhs);
    jc += 5;
    tcp(js5, client, js, Buffer.from([0]));
    js += 1;
    for (let k = 0; k < 5; k++) {
      tcp(client, js5, jc, Buffer.from([1, 5, 0, 77]));
      jc += 4;
      tcp(js5, client, js, js5Response);
      js += js5Response.length;
    }
  }
  return Buffer.concat(parts);
}

export const suite: BenchSuite = {
  name: 'inspect',
  description: 'gamewire inspect --json on a mixed capture vs reading the capture without decoding (MB/s)',
  async run() {
    const capture = mixedCapture(32 << 20);
    const mb = capture.length / 1e6;
    const time = (fn: () => void): number => {
      const runs: number[] = [];
      for (let r = 0; r < 5; r++) {
        const start = performance.now();
        fn();
        runs.push((performance.now() - start) / 1000);
      }
      runs.sort((a, b) => a - b);
      return mb / runs[Math.floor(runs.length / 2)]!;
    };
    let sink = 0;
    const readOnly = time(() => {
      const p = new CaptureParser((pk) => {
        sink += pk.data.length;
      });
      p.push(capture);
      p.end();
    });
    let records = 0;
    let bytesOut = 0;
    const protocols = await loadFlowProtocols();
    const subject = time(() => {
      inspectBuffer(
        capture,
        (r) => {
          records++;
          bytesOut += JSON.stringify(recordJson(r)).length + 1;
        },
        { protocols },
      );
    });
    const decodeOnly = time(() => {
      inspectBuffer(
        capture,
        () => {
          records++;
        },
        { protocols },
      );
    });
    if (sink === -1) console.log(sink);
    const rows: BenchRow[] = [
      {
        name: `inspect --json, ${mb.toFixed(1)} MB mixed capture`,
        subject,
        baseline: readOnly,
        unit: 'MB/s',
        ratio: subject / readOnly,
        extra: {
          decodeWithoutJsonMBs: Number(decodeOnly.toFixed(1)),
          goalMBs: 50,
          jsonBytesPerRun: bytesOut / 10,
        },
      },
    ];
    return { suite: 'inspect', rows, notes: [`${records} records over all runs`] };
  },
};
