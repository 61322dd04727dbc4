/**
 * One relay connection as the conformance checks open it, over the transport a Unity game picks:
 * a UDP socket, a DTLS 1.2 PSK association (identity = the allocation id bytes, key = the
 * allocation key), or a WebSocket opened byte for byte as Unity Transport's native client opens
 * it (its request, and its checks on the 101 reply and on every frame). Every relay message
 * received lands in an inbox the checks wait on.
 */
import { createHash, randomBytes } from 'node:crypto';
import net from 'node:net';
import tls from 'node:tls';
import { CheckFailure, type CheckRun, type ConformTarget } from '../../../core/conform.js';
import { MessageInbox, targetText, UdpProbe } from '../../../core/conform-probes.js';
import { DtlsClient } from '../../../transports/dtls/index.js';
import type { ConnectionType } from '../client.js';

/** Largest frame payload Unity's native WebSocket client accepts (1400 − 14), else it aborts with 1009. */
export const UTP_MAX_WS_PAYLOAD = 1386;
/** The WebSocket GUID of RFC 6455 §1.3. */
const WS_GUID = '258EAFA5-E914-47DA-95CA-C5AB0DC85B11';

export interface LinkOptions {
  transport: ConnectionType;
  /** wss: CA certificates to trust (PEM), or trust anything. */
  ca?: Buffer;
  insecure?: boolean;
}

/** A relay link under test: send relay messages, wait for what comes back. */
export class RelayLinkProbe {
  readonly inbox: MessageInbox;
  readonly transport: ConnectionType;
  private readonly sendFn: (b: Buffer) => void;
  private readonly closeFn: () => Promise<void>;
  private lastSent: Buffer = Buffer.alloc(0);

  constructor(
    transport: ConnectionType,
    run: CheckRun,
    sendFn: (b: Buffer) => void,
    closeFn: () => Promise<void>,
    inbox = new MessageInbox(run),
  ) {
    this.transport = transport;
    this.inbox = inbox;
    this.sendFn = sendFn;
    this.closeFn = closeFn;
    run.defer(() => this.close());
  }

  get sent(): Buffer {
    return this.lastSent;
  }

  send(message: Buffer): void {
    this.lastSent = message;
    this.sendFn(message);
  }

  /** The next message `match` accepts, or a failure naming `what` with the last exchange. */
  async next(what: string, match: (m: Buffer) => boolean = () => true, timeoutMs = 3000): Promise<Buffer> {
    const got = await this.inbox.poll(match, timeoutMs);
    if (got !== undefined) return got;
    const closed = this.inbox.closedReason;
    throw new CheckFailure(
      closed === undefined ? `no ${what} within ${timeoutMs} ms` : `no ${what}: ${closed}`,
      {
        sent: this.lastSent,
        received: this.inbox.tail(),
      },
    );
  }

  poll(match: (m: Buffer) => boolean = () => true, timeoutMs = 3000): Promise<Buffer | undefined> {
    return this.inbox.poll(match, timeoutMs);
  }

  close(): Promise<void> {
    return this.closeFn().catch(() => {});
  }
}

/** Opens a link of the chosen transport; DTLS needs the allocation's id and key. */
export async function openLink(
  target: ConformTarget,
  run: CheckRun,
  options: LinkOptions,
  credentials: { allocationId: Buffer; key: Buffer },
): Promise<RelayLinkProbe> {
  switch (options.transport) {
    case 'udp': {
      const probe = await UdpProbe.open(target, run);
      const inbox = new MessageInbox(run);
      probe.socket.on('message', (m, rinfo) => {
        if (rinfo.port === target.port) inbox.push(m);
      });
      return new RelayLinkProbe(
        'udp',
        run,
        (b) => probe.socket.send(b, target.port, target.host),
        () => probe.close(),
        inbox,
      );
    }
    case 'dtls': {
      let client: DtlsClient;
      try {
        client = await DtlsClient.connect({
          host: target.host,
          port: target.port,
          identity: credentials.allocationId,
          psk: credentials.key,
          timeoutMs: Math.min(10_000, run.remainingMs()),
        });
      } catch (err) {
        throw new CheckFailure(
          `the DTLS handshake with ${targetText(target)} failed: ${(err as Error).message}`,
          {
            expected:
              'a DTLS 1.2 PSK handshake with identity = the 16 allocation id bytes, PSK = the 64-byte key',
            note: `identity ${credentials.allocationId.toString('hex')}`,
          },
        );
      }
      const inbox = new MessageInbox(run);
      client.on('message', (m) => inbox.push(m));
      client.on('close', (reason) => inbox.close(`the DTLS association closed (${reason})`));
      return new RelayLinkProbe(
        'dtls',
        run,
        (b) => {
          try {
            client.send(b);
          } catch {
            // Closed: the wait that follows reports it.
          }
        },
        async () => client.close(),
        inbox,
      );
    }
    default: {
      const ws = await openWebSocket(target, run, options);
      if (ws.problems.length > 0)
        throw new CheckFailure(
          `the WebSocket upgrade reply would be refused by Unity Transport: ${ws.problems.join('; ')}`,
          {
            sent: ws.request,
            expected:
              'HTTP/1.1 101, Upgrade: websocket, Connection: upgrade, the right Sec-WebSocket-Accept, no Sec-WebSocket-Protocol/Extensions',
            received: ws.reply,
          },
        );
      return ws.link;
    }
  }
}

export interface WebSocketOpening {
  /** The request sent, as Unity Transport's native client writes it. */
  request: Buffer;
  /** The reply head received (status line and headers). */
  reply: Buffer;
  /** What Unity Transport's `Handshake` would refuse in the reply (empty: accepted). */
  problems: string[];
  link: RelayLinkProbe;
  /** The negotiated TLS version (wss). */
  tlsVersion?: string;
}

/**
 * Opens a WebSocket the way Unity Transport's native client does (`WebSocket.Connect`): its exact
 * request, TLS 1.2 at most for wss, then its checks on the reply (`Handshake`). Frames received
 * after it are checked as the client checks them (unmasked, RSV 0, binary, ≤ 1386 bytes).
 */
export async function openWebSocket(
  target: ConformTarget,
  run: CheckRun,
  options: LinkOptions,
): Promise<WebSocketOpening> {
  const secure = options.transport === 'wss';
  const socket = await new Promise<net.Socket>((resolve, reject) => {
    const limit = setTimeout(
      () =>
        reject(
          new CheckFailure(`no ${secure ? 'TLS' : 'TCP'} connection to ${targetText(target)} within 5 s`),
        ),
      Math.min(5000, run.remainingMs()),
    );
    const done = (s: net.Socket) => {
      clearTimeout(limit);
      resolve(s);
    };
    const fail = (err: Error) => {
      clearTimeout(limit);
      reject(new CheckFailure(`cannot connect to ${targetText(target)}: ${err.message}`, {}, { cause: err }));
    };
    if (secure) {
      const s = tls.connect({
        host: target.host,
        port: target.port,
        ...(net.isIP(target.host) ? {} : { servername: target.host }),
        // UnityTLS is mbedTLS 2.x: TLS 1.2 at most.
        maxVersion: 'TLSv1.2',
        ...(options.ca !== undefined ? { ca: options.ca } : {}),
        rejectUnauthorized: options.insecure !== true,
      });
      s.once('secureConnect', () => done(s));
      s.once('error', fail);
    } else {
      const s = net.connect({ host: target.host, port: target.port });
      s.once('connect', () => done(s));
      s.once('error', fail);
    }
  });
  run.defer(() => socket.destroy());
  socket.setNoDelay(true);
  const key = randomBytes(16).toString('base64');
  const hostHeader = `${net.isIPv6(target.host) ? `[${target.host}]` : target.host}:${target.port}`;
  const request = Buffer.from(
    `GET / HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: ${key}\r\nHost: ${hostHeader}\r\n\r\n`,
  );
  const inbox = new MessageInbox(run);
  let buffered = Buffer.alloc(0);
  let head: Buffer | undefined;
  const headDone = new Promise<Buffer>((resolve, reject) => {
    const onData = (d: Buffer): void => {
      buffered = Buffer.concat([buffered, d]);
      const end = buffered.indexOf('\r\n\r\n');
      if (end >= 0) {
        head = buffered.subarray(0, end + 4);
        buffered = buffered.subarray(end + 4);
        socket.off('data', onData);
        resolve(head);
      } else if (buffered.length > 2 * 1472) {
        // Unity's client reads the reply (and any early frames) into 2 × 1472 bytes.
        reject(
          new CheckFailure('the upgrade reply is longer than Unity Transport reads (2 × 1472 bytes)', {
            sent: request,
            received: buffered.subarray(0, 256),
          }),
        );
      }
    };
    socket.on('data', onData);
    socket.once('close', () =>
      reject(
        new CheckFailure('the server closed the connection before its upgrade reply', {
          sent: request,
          received: buffered,
        }),
      ),
    );
    setTimeout(
      () => reject(new CheckFailure('no upgrade reply within 5 s', { sent: request, received: buffered })),
      Math.min(5000, run.remainingMs()),
    ).unref();
  });
  socket.write(request);
  const reply = await headDone;
  const problems = checkUpgradeReply(reply.toString('latin1'), key);
  const sendFrame = (payload: Buffer, opcode = 2): void => {
    if (socket.destroyed) return;
    const mask = randomBytes(4);
    const len = payload.length;
    const header = len < 126 ? Buffer.alloc(6) : Buffer.alloc(8);
    header[0] = 0x80 | opcode;
    if (len < 126) {
      header[1] = 0x80 | len;
      mask.copy(header, 2);
    } else {
      header[1] = 0x80 | 126;
      header.writeUInt16BE(len, 2);
      mask.copy(header, 4);
    }
    const body = Buffer.from(payload);
    for (let i = 0; i < body.length; i++) body[i]! ^= mask[i & 3]!;
    socket.write(Buffer.concat([header, body]));
  };
  let fragments: Buffer[] | undefined;
  const onFrames = (d: Buffer): void => {
    buffered = Buffer.concat([buffered, d]);
    for (;;) {
      if (buffered.length < 2) return;
      const b0 = buffered[0]!;
      const b1 = buffered[1]!;
      let len = b1 & 0x7f;
      let at = 2;
      if (len === 126) {
        if (buffered.length < 4) return;
        len = buffered.readUInt16BE(2);
        at = 4;
      } else if (len === 127) {
        if (buffered.length < 10) return;
        len = Number(buffered.readBigUInt64BE(2));
        at = 10;
      }
      const masked = (b1 & 0x80) !== 0;
      if (masked) at += 4;
      if (buffered.length < at + len) return;
      const payload = Buffer.from(buffered.subarray(at, at + len));
      if (masked) for (let i = 0; i < payload.length; i++) payload[i]! ^= buffered[at - 4 + (i & 3)]!;
      buffered = buffered.subarray(at + len);
      const opcode = b0 & 0x0f;
      // Unity's client: masked frames and RSV bits close with 1002, text with 1003, > 1386 with 1009.
      const broken = masked
        ? 'the server sent a masked frame (Unity closes with 1002)'
        : (b0 & 0x70) !== 0
          ? 'the server set RSV bits (Unity closes with 1002)'
          : opcode === 1
            ? 'the server sent a text frame (Unity closes with 1003)'
            : (opcode === 2 || opcode === 0) && len > UTP_MAX_WS_PAYLOAD
              ? `the server sent a ${len}-byte frame; Unity accepts ${UTP_MAX_WS_PAYLOAD} and aborts with 1009`
              : undefined;
      if (broken !== undefined) {
        violation(broken);
        return;
      }
      if (opcode === 9) sendFrame(payload, 10);
      else if (opcode === 8) {
        inbox.close(
          `the server closed the WebSocket (code ${payload.length >= 2 ? payload.readUInt16BE(0) : 'none'})`,
        );
        socket.end();
        return;
      } else if (opcode === 2 || opcode === 0) {
        if (opcode === 2) fragments = [];
        fragments?.push(payload);
        if ((b0 & 0x80) !== 0 && fragments !== undefined) {
          inbox.push(Buffer.concat(fragments));
          fragments = undefined;
        }
      }
    }
  };
  const violation = (why: string): void => {
    inbox.close(why);
    socket.destroy();
  };
  socket.on('data', onFrames);
  socket.on('close', () => inbox.close('the server closed the connection'));
  socket.on('error', () => {});
  if (buffered.length > 0) onFrames(Buffer.alloc(0));
  const link = new RelayLinkProbe(
    options.transport,
    run,
    (b) => sendFrame(b),
    async () => {
      socket.end();
      socket.destroy();
    },
    inbox,
  );
  const tlsVersion = secure ? ((socket as tls.TLSSocket).getProtocol() ?? undefined) : undefined;
  return { request, reply, problems, link, ...(tlsVersion !== undefined ? { tlsVersion } : {}) };
}

/** What Unity Transport's `WebSocket.Handshake` refuses in a 101 reply (its checks, in order). */
export function checkUpgradeReply(head: string, key: string): string[] {
  const problems: string[] = [];
  const lines = head.split('\r\n');
  if (!lines[0]!.startsWith('HTTP/1.1 101 '))
    problems.push(`status line "${lines[0]}" is not "HTTP/1.1 101 …"`);
  const headers = new Map<string, string[]>();
  for (const line of lines.slice(1)) {
    const i = line.indexOf(':');
    if (i <= 0) continue;
    const name = line.slice(0, i).trim().toLowerCase();
    headers.set(name, [...(headers.get(name) ?? []), line.slice(i + 1).trim()]);
  }
  const one = (n: string) => headers.get(n)?.join(', ');
  const connection = one('connection');
  if (connection === undefined || !connection.split(',').some((t) => t.trim().toLowerCase() === 'upgrade'))
    problems.push(`Connection "${connection ?? ''}" lacks the token upgrade`);
  const upgrade = one('upgrade');
  if (upgrade === undefined || upgrade.toLowerCase() !== 'websocket')
    problems.push(`Upgrade "${upgrade ?? ''}" is not websocket`);
  const accept = createHash('sha1')
    .update(key + WS_GUID)
    .digest('base64');
  if (one('sec-websocket-accept') !== accept)
    problems.push(`Sec-WebSocket-Accept "${one('sec-websocket-accept') ?? ''}" is not ${accept}`);
  if (headers.has('sec-websocket-protocol'))
    problems.push(`Sec-WebSocket-Protocol "${one('sec-websocket-protocol')}" is present`);
  if (headers.has('sec-websocket-extensions'))
    problems.push(`Sec-WebSocket-Extensions "${one('sec-websocket-extensions')}" is present`);
  return problems;
}
