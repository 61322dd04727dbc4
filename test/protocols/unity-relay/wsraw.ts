/**
 * A WebSocket client written the way Unity Transport's native client is (Runtime/WebSocket/
 * WebSocket.cs): its exact upgrade request, its checks on the reply, masked binary frames out,
 * and a frame parser that refuses what UTP refuses (masked or RSV frames from the server).
 * Independent of the `ws` package the server uses.
 */
import { createHash, randomBytes } from 'node:crypto';
import net from 'node:net';
import tls from 'node:tls';

export interface Frame {
  fin: boolean;
  rsv: number;
  opcode: number;
  masked: boolean;
  payload: Buffer;
  /** The raw first byte (0x82 for a final binary frame). */
  first: number;
}

const GUID = '258EAFA5-E914-47DA-95CA-C5AB0DC85B11';

export class RawWsClient {
  readonly socket: net.Socket;
  /** The reply head, exactly as received (status line and headers, up to and including CRLFCRLF). */
  head = '';
  private buf = Buffer.alloc(0);
  private readonly frames: Frame[] = [];
  private waiters: ((f: Frame | undefined) => void)[] = [];
  closed = false;

  private constructor(socket: net.Socket) {
    this.socket = socket;
  }

  /** UTP's request: `GET / HTTP/1.1`, Upgrade, Connection, Version, Key, Host = IP:port, nothing else. */
  static request(key: string, host: string, extra = ''): string {
    return (
      'GET / HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n' +
      `Sec-WebSocket-Key: ${key}\r\nHost: ${host}\r\n${extra}\r\n`
    );
  }

  /**
   * Connects, sends the request (UTP's, plus `extra` header lines), and reads the reply head.
   * `secure`: TLS first (the certificate is not checked here; wss tests check it separately).
   */
  static async connect(
    port: number,
    options: { secure?: boolean; extra?: string; localAddress?: string } = {},
  ): Promise<RawWsClient> {
    const socket = await new Promise<net.Socket>((resolve, reject) => {
      const s = options.secure
        ? tls.connect({ port, host: '127.0.0.1', rejectUnauthorized: false, servername: 'localhost' }, () =>
            resolve(s),
          )
        : net.connect(
            {
              port,
              host: '127.0.0.1',
              ...(options.localAddress ? { localAddress: options.localAddress } : {}),
            },
            () => resolve(s),
          );
      s.once('error', reject);
    });
    const c = new RawWsClient(socket);
    const key = randomBytes(16).toString('base64');
    socket.write(RawWsClient.request(key, `127.0.0.1:${port}`, options.extra ?? ''));
    await new Promise<void>((resolve, reject) => {
      const onData = (d: Buffer) => {
        c.buf = Buffer.concat([c.buf, d]);
        const end = c.buf.indexOf('\r\n\r\n');
        if (end >= 0) {
          c.head = c.buf.subarray(0, end + 4).toString('latin1');
          c.buf = c.buf.subarray(end + 4);
          socket.off('data', onData);
          socket.on('data', (more: Buffer) => {
            c.buf = Buffer.concat([c.buf, more]);
            c.parse();
          });
          c.parse();
          resolve();
        }
      };
      socket.on('data', onData);
      socket.once('error', reject);
      socket.once('close', () => {
        c.closed = true;
        resolve();
      });
    });
    socket.on('close', () => {
      c.closed = true;
      for (const w of c.waiters.splice(0)) w(undefined);
    });
    socket.on('error', () => {});
    c.expectedAccept = createHash('sha1')
      .update(key + GUID)
      .digest('base64');
    return c;
  }

  expectedAccept = '';

  /** UTP's `Handshake` checks on the reply (WebSocket.cs): the reasons it would refuse it, none if accepted. */
  utpRejections(): string[] {
    const out: string[] = [];
    const lines = this.head.split('\r\n');
    if (!lines[0]!.startsWith('HTTP/1.1 101 ')) out.push(`status line: ${lines[0]}`);
    const headers = new Map<string, string>();
    for (const l of lines.slice(1)) {
      if (l === '') continue;
      const i = l.indexOf(':');
      headers.set(l.slice(0, i).trim().toLowerCase(), l.slice(i + 1).trim());
    }
    if (
      !(headers.get('connection') ?? '')
        .toLowerCase()
        .split(/\s*,\s*/)
        .includes('upgrade')
    )
      out.push('Connection lacks upgrade');
    if ((headers.get('upgrade') ?? '').toLowerCase() !== 'websocket') out.push('Upgrade is not websocket');
    if (headers.get('sec-websocket-accept') !== this.expectedAccept) out.push('bad Sec-WebSocket-Accept');
    if (headers.has('sec-websocket-protocol')) out.push('has Sec-WebSocket-Protocol');
    if (headers.has('sec-websocket-extensions')) out.push('has Sec-WebSocket-Extensions');
    for (const [k, v] of headers) if (v.length > 512) out.push(`header ${k} longer than 512`);
    return out;
  }

  /** Sends one masked frame (UTP: 0x82 for binary). */
  sendFrame(opcode: number, payload: Buffer, fin = true): void {
    const mask = randomBytes(4);
    const len = payload.length;
    const head = len < 126 ? Buffer.alloc(2) : len < 65536 ? Buffer.alloc(4) : Buffer.alloc(10);
    head[0] = (fin ? 0x80 : 0) | opcode;
    if (len < 126) head[1] = 0x80 | len;
    else if (len < 65536) {
      head[1] = 0x80 | 126;
      head.writeUInt16BE(len, 2);
    } else {
      head[1] = 0x80 | 127;
      head.writeBigUInt64BE(BigInt(len), 2);
    }
    const body = Buffer.from(payload);
    for (let i = 0; i < body.length; i++) body[i]! ^= mask[i & 3]!;
    this.socket.write(Buffer.concat([head, mask, body]));
  }

  sendBinary(payload: Buffer): void {
    this.sendFrame(0x2, payload);
  }

  private parse(): void {
    for (;;) {
      if (this.buf.length < 2) return;
      const b0 = this.buf[0]!;
      const b1 = this.buf[1]!;
      let len = b1 & 0x7f;
      let off = 2;
      if (len === 126) {
        if (this.buf.length < 4) return;
        len = this.buf.readUInt16BE(2);
        off = 4;
      } else if (len === 127) {
        if (this.buf.length < 10) return;
        len = Number(this.buf.readBigUInt64BE(2));
        off = 10;
      }
      const masked = (b1 & 0x80) !== 0;
      if (masked) off += 4;
      if (this.buf.length < off + len) return;
      const f: Frame = {
        fin: (b0 & 0x80) !== 0,
        rsv: (b0 >> 4) & 7,
        opcode: b0 & 0x0f,
        masked,
        payload: Buffer.from(this.buf.subarray(off, off + len)),
        first: b0,
      };
      this.buf = this.buf.subarray(off + len);
      const w = this.waiters.shift();
      if (w !== undefined) w(f);
      else this.frames.push(f);
    }
  }

  /** Next frame, or undefined after `ms` or when the connection closed. */
  next(ms = 2000): Promise<Frame | undefined> {
    const f = this.frames.shift();
    if (f !== undefined) return Promise.resolve(f);
    if (this.closed) return Promise.resolve(undefined);
    return new Promise((resolve) => {
      const w = (x: Frame | undefined) => {
        clearTimeout(timer);
        resolve(x);
      };
      const timer = setTimeout(() => {
        this.waiters = this.waiters.filter((y) => y !== w);
        resolve(undefined);
      }, ms);
      this.waiters.push(w);
    });
  }

  /** Next binary frame whose payload is a relay message of `type` (other frames skipped). */
  async nextOfType(type: number, ms = 2000): Promise<Frame | undefined> {
    const end = Date.now() + ms;
    for (;;) {
      const left = end - Date.now();
      if (left <= 0) return undefined;
      const f = await this.next(left);
      if (f === undefined) return undefined;
      if (f.opcode === 2 && f.payload[3] === type) return f;
    }
  }

  close(): void {
    this.socket.destroy();
  }
}
