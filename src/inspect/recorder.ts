/**
 * `gamewire serve --record DIR`: every server's traffic, as seen from its sockets, written to
 * rotating, size-bounded pcapng files. The sockets give payloads, not packets, so each payload
 * is wrapped in a synthetic IPv4/IPv6 + TCP/UDP header (link type RAW): TCP connections get a
 * SYN handshake, consistent sequence numbers and FINs, so Wireshark and `gamewire inspect`
 * reassemble them like a capture.
 */
import type dgram from 'node:dgram';
import fs from 'node:fs';
import type net from 'node:net';
import path from 'node:path';
import type { TrafficRecorder } from '../core/recording.js';
import {
  type Endpoint,
  ipPacket,
  LinkType,
  pcapngInterface,
  pcapngPacket,
  pcapngSectionHeader,
} from './writer.js';

export interface RecorderOptions {
  /** Largest file; the next block goes to a new file. */
  maxFileBytes: number;
  /** Files kept; the oldest is deleted beyond this. */
  maxFiles: number;
  /** Bytes buffered before a write (also flushed every `flushMs`). */
  bufferBytes: number;
  flushMs: number;
  /** Clock in microseconds (tests). */
  now: () => number;
}

export const DEFAULT_RECORDER_OPTIONS: RecorderOptions = {
  maxFileBytes: 64 << 20,
  maxFiles: 10,
  bufferBytes: 64 << 10,
  flushMs: 200,
  now: () => Number(process.hrtime.bigint() / 1000n) + START_OFFSET_US,
};

// hrtime has no epoch: anchor it to the wall clock once.
const START_OFFSET_US = Date.now() * 1000 - Number(process.hrtime.bigint() / 1000n);

/** Largest TCP payload per synthetic segment (the IPv4 total length is 16 bits). */
const MAX_SEGMENT = 65_000;
const SYN = 0x02;
const ACK = 0x10;
const PSH_ACK = 0x18;
const FIN_ACK = 0x11;

function endpoint(address: string | undefined, port: number | undefined): Endpoint {
  return { address: address ?? '0.0.0.0', port: port ?? 0 };
}

export class PcapngRecorder implements TrafficRecorder {
  readonly dir: string;
  private readonly options: RecorderOptions;
  private fd = -1;
  private fileBytes = 0;
  private fileIndex = 0;
  private readonly files: string[] = [];
  private pending: Buffer[] = [];
  private pendingBytes = 0;
  private readonly timer: NodeJS.Timeout;
  private closed = false;
  /** Packets written, for tests and the shutdown line. */
  packets = 0;

  constructor(dir: string, options: Partial<RecorderOptions> = {}) {
    this.dir = dir;
    this.options = { ...DEFAULT_RECORDER_OPTIONS, ...options };
    fs.mkdirSync(dir, { recursive: true });
    this.timer = setInterval(() => this.flush(), this.options.flushMs);
    this.timer.unref();
  }

  /** The files written so far, oldest first (rotated-out files are gone). */
  get fileList(): readonly string[] {
    return this.files;
  }

  tcpConnection(socket: net.Socket): void {
    const server = endpoint(socket.localAddress, socket.localPort);
    const client = endpoint(socket.remoteAddress, socket.remotePort);
    let clientSeq = 1000;
    let serverSeq = 5000;
    this.packet(ipPacket('tcp', client, server, Buffer.alloc(0), { seq: clientSeq - 1, ack: 0, flags: SYN }));
    this.packet(
      ipPacket('tcp', server, client, Buffer.alloc(0), {
        seq: serverSeq - 1,
        ack: clientSeq,
        flags: SYN | ACK,
      }),
    );
    this.packet(
      ipPacket('tcp', client, server, Buffer.alloc(0), { seq: clientSeq, ack: serverSeq, flags: ACK }),
    );
    const send = (fromClient: boolean, data: Buffer): void => {
      for (let o = 0; o < data.length; o += MAX_SEGMENT) {
        const part = data.subarray(o, Math.min(data.length, o + MAX_SEGMENT));
        if (fromClient) {
          this.packet(
            ipPacket('tcp', client, server, part, { seq: clientSeq, ack: serverSeq, flags: PSH_ACK }),
          );
          clientSeq = (clientSeq + part.length) >>> 0;
        } else {
          this.packet(
            ipPacket('tcp', server, client, part, { seq: serverSeq, ack: clientSeq, flags: PSH_ACK }),
          );
          serverSeq = (serverSeq + part.length) >>> 0;
        }
      }
    };
    socket.on('data', (chunk: Buffer) => send(true, chunk));
    const write = socket.write;
    // Outgoing bytes are recorded where the server hands them to the socket.
    socket.write = function (this: net.Socket, chunk: any, ...rest: any[]): boolean {
      if (chunk !== undefined && chunk !== null)
        send(false, Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk));
      return (write as any).call(this, chunk, ...rest);
    } as typeof socket.write;
    const end = socket.end;
    socket.end = function (this: net.Socket, chunk?: any, ...rest: any[]): net.Socket {
      if (chunk !== undefined && chunk !== null && typeof chunk !== 'function') {
        send(false, Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk));
      }
      return (end as any).call(this, chunk, ...rest);
    } as typeof socket.end;
    socket.once('close', () => {
      this.packet(
        ipPacket('tcp', client, server, Buffer.alloc(0), { seq: clientSeq, ack: serverSeq, flags: FIN_ACK }),
      );
      this.packet(
        ipPacket('tcp', server, client, Buffer.alloc(0), {
          seq: serverSeq,
          ack: clientSeq + 1,
          flags: FIN_ACK,
        }),
      );
    });
  }

  udpSocket(socket: dgram.Socket): void {
    const local = (): Endpoint => {
      const a = socket.address();
      return {
        address: a.address === '0.0.0.0' || a.address === '::' ? '127.0.0.1' : a.address,
        port: a.port,
      };
    };
    const recorder = this;
    socket.on('message', (msg: Buffer, rinfo: dgram.RemoteInfo) => {
      recorder.packet(ipPacket('udp', { address: rinfo.address, port: rinfo.port }, local(), msg));
    });
    const send = socket.send;
    socket.send = function (this: dgram.Socket, msg: any, ...args: any[]): void {
      // send(msg, [offset, length,] port, [address], [callback]); msg may be a list of buffers.
      let data: Buffer = Array.isArray(msg)
        ? Buffer.concat(msg.map((m: any) => Buffer.from(m)))
        : Buffer.from(msg);
      let i = 0;
      if (typeof args[0] === 'number' && typeof args[1] === 'number' && typeof args[2] === 'number') {
        data = data.subarray(args[0], args[0] + args[1]);
        i = 2;
      }
      const port = args[i];
      const address = typeof args[i + 1] === 'string' ? args[i + 1] : '127.0.0.1';
      if (typeof port === 'number') recorder.packet(ipPacket('udp', local(), { address, port }, data));
      (send as any).call(this, msg, ...args);
    } as typeof socket.send;
  }

  /** Appends one raw IP packet (buffered). */
  packet(ip: Buffer): void {
    if (this.closed) return;
    const block = pcapngPacket(0, this.options.now(), ip);
    if (this.fd < 0 || this.fileBytes + this.pendingBytes + block.length > this.options.maxFileBytes)
      this.rotate();
    this.pending.push(block);
    this.pendingBytes += block.length;
    this.packets++;
    if (this.pendingBytes >= this.options.bufferBytes) this.flush();
  }

  flush(): void {
    if (this.fd < 0 || this.pending.length === 0) return;
    const data = Buffer.concat(this.pending);
    this.pending = [];
    this.pendingBytes = 0;
    fs.writeSync(this.fd, data);
    this.fileBytes += data.length;
  }

  private rotate(): void {
    this.flush();
    if (this.fd >= 0) fs.closeSync(this.fd);
    const stamp = new Date().toISOString().replace(/[:.]/g, '-');
    const file = path.join(this.dir, `gamewire-${stamp}-${String(this.fileIndex++).padStart(4, '0')}.pcapng`);
    this.fd = fs.openSync(file, 'w');
    const head = Buffer.concat([pcapngSectionHeader(), pcapngInterface(LinkType.RAW)]);
    fs.writeSync(this.fd, head);
    this.fileBytes = head.length;
    this.files.push(file);
    while (this.files.length > this.options.maxFiles) fs.rmSync(this.files.shift()!, { force: true });
  }

  close(): void {
    if (this.closed) return;
    clearInterval(this.timer);
    this.flush();
    this.closed = true;
    if (this.fd >= 0) fs.closeSync(this.fd);
    this.fd = -1;
  }
}
