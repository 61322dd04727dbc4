/**
 * vcmp-rpc: encode and decode throughput of the declared LibRPC codec against a hand-written
 * DataView codec for the same messages, measured in the same run.
 */
import {
  decodeServerData,
  encodeServerData,
  type RpcValue,
  type TopItem,
} from '../src/protocols/vcmp-rpc/index.js';
import { WireWriter } from '../src/wire/index.js';
import { type BenchRow, type BenchSuite, compareOps } from './harness.js';

// ---- the baseline: a minimal hand-written LibRPC codec over DataView ------------------------------

const utf8 = new TextDecoder();
const enc = new TextEncoder();

class BaselineDecoder {
  view!: DataView;
  bytes!: Uint8Array;
  o = 0;

  decode(bytes: Uint8Array): { type: 'ServerData'; identifier: number; item: TopItem } {
    this.bytes = bytes;
    this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    this.o = 0;
    if (bytes.length < 9) throw new Error('short');
    const identifier = this.view.getUint32(0, true);
    this.o = 4;
    const tag = bytes[this.o++]!;
    const item = this.call(tag, bytes.length);
    if (this.o !== bytes.length) throw new Error('trailing');
    return { type: 'ServerData', identifier, item };
  }

  call(tag: number, parentEnd: number): TopItem {
    const size = this.view.getUint32(this.o, false);
    this.o += 4;
    const end = this.o + size;
    if (end > parentEnd) throw new Error('overrun');
    if (tag === 0x46 || tag === 0x45) {
      const n = this.view.getUint16(this.o, false);
      this.o += 2;
      const name = utf8.decode(this.bytes.subarray(this.o, this.o + n));
      this.o += n;
      const args: RpcValue[] = [];
      while (this.o < end) args.push(this.value(end));
      return { type: 'call', tag: tag === 0x46 ? 'F' : 'E', name, args };
    }
    const calleeTag = this.bytes[this.o++]!;
    const callee = this.call(calleeTag, end) as RpcValue;
    const args: RpcValue[] = [];
    while (this.o < end) args.push(this.value(end));
    return { type: 'call', tag: tag === 0x47 ? 'G' : 'D', callee, args };
  }

  value(end: number): RpcValue {
    const v = this.view;
    const tag = this.bytes[this.o++]!;
    switch (tag) {
      case 0x6f:
        return { type: 'null' };
      case 0x69: {
        const value = v.getInt32(this.o, true);
        this.o += 4;
        return { type: 'int', value };
      }
      case 0x66: {
        const value = v.getFloat32(this.o, true);
        this.o += 4;
        return { type: 'float', value };
      }
      case 0x62: {
        const b = this.bytes[this.o++]!;
        if (b > 1) throw new Error('bool');
        return { type: 'bool', value: b === 1 };
      }
      case 0x73: {
        const n = v.getUint16(this.o, false);
        this.o += 2;
        if (this.o + n > end) throw new Error('overrun');
        const value = utf8.decode(this.bytes.subarray(this.o, this.o + n));
        this.o += n;
        return { type: 'string', value };
      }
      case 0x76: {
        const x = v.getFloat32(this.o, true);
        const y = v.getFloat32(this.o + 4, true);
        const z = v.getFloat32(this.o + 8, true);
        this.o += 12;
        return { type: 'vector', x, y, z };
      }
      case 0x61: {
        const n = v.getUint32(this.o, false);
        this.o += 4;
        const stop = this.o + n;
        const items: RpcValue[] = [];
        while (this.o < stop) items.push(this.value(stop));
        return { type: 'array', items };
      }
      case 0x46:
      case 0x47:
      case 0x45:
      case 0x44:
        return this.call(tag, end) as RpcValue;
      default:
        throw new Error('tag');
    }
  }
}

class BaselineEncoder {
  buf = new Uint8Array(4096);
  view = new DataView(this.buf.buffer);
  o = 0;

  encode(item: TopItem): Uint8Array {
    this.view.setUint32(0, 0x40000001, true);
    this.o = 4;
    this.call(item as RpcValue & { type: 'call' });
    return this.buf.subarray(0, this.o);
  }

  call(c: RpcValue & { type: 'call' }): void {
    this.buf[this.o++] = c.tag.charCodeAt(0);
    const at = this.o;
    this.o += 4;
    if ('name' in c) this.str(c.name);
    else this.value(c.callee);
    for (const a of c.args) this.value(a);
    this.view.setUint32(at, this.o - at - 4, false);
  }

  str(s: string): void {
    const r = enc.encodeInto(s, this.buf.subarray(this.o + 2));
    this.view.setUint16(this.o, r.written, false);
    this.o += 2 + r.written;
  }

  value(v: RpcValue): void {
    const d = this.view;
    switch (v.type) {
      case 'null':
        this.buf[this.o++] = 0x6f;
        return;
      case 'int':
        this.buf[this.o++] = 0x69;
        d.setInt32(this.o, v.value, true);
        this.o += 4;
        return;
      case 'float':
        this.buf[this.o++] = 0x66;
        d.setFloat32(this.o, v.value, true);
        this.o += 4;
        return;
      case 'bool':
        this.buf[this.o++] = 0x62;
        this.buf[this.o++] = v.value ? 1 : 0;
        return;
      case 'string':
        this.buf[this.o++] = 0x73;
        this.str(v.value);
        return;
      case 'vector':
        this.buf[this.o++] = 0x76;
        d.setFloat32(this.o, v.x, true);
        d.setFloat32(this.o + 4, v.y, true);
        d.setFloat32(this.o + 8, v.z, true);
        this.o += 12;
        return;
      case 'array': {
        this.buf[this.o++] = 0x61;
        const at = this.o;
        this.o += 4;
        for (const i of v.items) this.value(i);
        d.setUint32(at, this.o - at - 4, false);
        return;
      }
      case 'call':
        this.call(v);
        return;
      default:
        throw new Error('type');
    }
  }
}

// ---- the messages -------------------------------------------------------------------------------

const MESSAGES: Record<string, TopItem> = {
  'print("Hello")': { type: 'call', tag: 'F', name: 'print', args: [{ type: 'string', value: 'Hello' }] },
  'every scalar': {
    type: 'call',
    tag: 'F',
    name: 'fn',
    args: [
      { type: 'null' },
      { type: 'int', value: 1 },
      { type: 'int', value: -2 },
      { type: 'float', value: 1.5 },
      { type: 'bool', value: true },
      { type: 'string', value: 'ab' },
      { type: 'vector', x: 1, y: 2, z: 3 },
    ],
  },
  'nested calls and arrays': {
    type: 'call',
    tag: 'F',
    name: 'StartRecordingPlayback',
    args: [
      {
        type: 'call',
        tag: 'F',
        name: 'format',
        args: [
          { type: 'string', value: '%d' },
          { type: 'int', value: 5 },
        ],
      },
      {
        type: 'array',
        items: [
          { type: 'int', value: 1 },
          { type: 'string', value: 'runtolake' },
          { type: 'array', items: [] },
        ],
      },
    ],
  },
};

export const suite: BenchSuite = {
  name: 'vcmp-rpc',
  description: 'declared LibRPC codec vs a hand-written DataView codec (same messages, same run)',
  async run() {
    const rows: BenchRow[] = [];
    const writer = new WireWriter({ initialCapacity: 4096 });
    const baselineEncoder = new BaselineEncoder();
    const baselineDecoder = new BaselineDecoder();
    for (const [name, item] of Object.entries(MESSAGES)) {
      const bytes = Buffer.from(encodeServerData(item));
      // Both sides must agree before they are timed.
      if (Buffer.compare(Buffer.from(baselineEncoder.encode(item)), bytes) !== 0)
        throw new Error(`baseline encodes ${name} differently`);
      if (JSON.stringify(baselineDecoder.decode(bytes)) !== JSON.stringify(decodeServerData(bytes))) {
        throw new Error(`baseline decodes ${name} differently`);
      }
      rows.push(
        compareOps(
          `decode ${name} (${bytes.length} B)`,
          () => decodeServerData(bytes),
          () => baselineDecoder.decode(bytes),
        ),
      );
      rows.push(
        compareOps(
          `encode ${name} (${bytes.length} B)`,
          () => encodeServerData(item, { writer }),
          () => baselineEncoder.encode(item),
        ),
      );
    }
    const worst = Math.min(...rows.map((r) => r.ratio));
    return {
      suite: 'vcmp-rpc',
      rows,
      notes: [`lowest ratio ${(worst * 100).toFixed(1)}% (goal ≥ 80%)`],
    };
  },
};
