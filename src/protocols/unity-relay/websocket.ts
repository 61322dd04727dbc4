/**
 * The WebSocket endpoints of the relay (`ws` and `wss`), on the `ws` package, shaped for the
 * Unity Transport clients:
 * - the 101 reply never carries `Sec-WebSocket-Protocol` or `Sec-WebSocket-Extensions` (UTP's
 *   native client rejects a reply with either): permessage-deflate off, subprotocols declined;
 * - one relay message per binary frame, both ways; pings answered (ws's autoPong); a text frame
 *   closes the connection with 1003; a frame larger than the relay's message limit closes with 1009;
 * - each connection is the client's "address" for BIND, PING and re-BIND (a `WsLink`).
 *
 * Limits (all options): connections in all and per IP (counted at TCP accept, before any HTTP),
 * HTTP request deadline, idle connections closed, a connection that never binds closed, and a
 * per-connection send buffer beyond which messages to that peer are dropped (it is not reading).
 */
import { execFile } from 'node:child_process';
import { createPrivateKey, X509Certificate } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rename, rm, stat } from 'node:fs/promises';
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import path from 'node:path';
import type { Duplex } from 'node:stream';
import { WebSocketServer } from 'ws';
import { addressKey, CloseReason, type Connection, ConnectionTable } from '../../core/connection.js';
import { CommandError } from '../../core/errors.js';
import type { Logger } from '../../core/logger.js';
import type { ProtocolMetrics } from '../../core/metrics.js';
import { publishFile } from '../../core/publish-file.js';
import type { RelayLink } from './links.js';
import type { RelayServer } from './relay.js';

/** Default WebSocket connections per client address, each of ws and wss (many players can share one NAT address). */
export const DEFAULT_WS_MAX_CONNECTIONS_PER_IP = 256;

/**
 * Listen backlog of the WebSocket endpoints and the allocation API (the kernel caps it at
 * `net.core.somaxconn`). Node's default, 511, overflows when thousands of connections arrive in
 * the same instant (an attack, or a crowd reconnecting): the kernel then drops handshakes of
 * everyone alike and a real client waits out TCP's retransmission backoff (seconds).
 */
export const LISTEN_BACKLOG = 4096;

export interface WsEndpointOptions {
  host: string;
  port: number;
  /** `wss`: TLS with `cert` and `key` (PEM). */
  secure: boolean;
  cert?: Buffer | string;
  key?: Buffer | string;
  /** Open connections in all. Default 10 000. */
  maxConnections?: number;
  /** Open connections per client IP. Default 256 (many players can share one NAT address). */
  maxConnectionsPerIp?: number;
  /** Time to send the HTTP upgrade request after connecting. Default 10 s. */
  handshakeTimeoutMs?: number;
  /** A connection that sends nothing for this long is closed. Default 60 s (UTP pings every 3 s). */
  idleTimeoutMs?: number;
  /** A connection that has not bound an allocation after this long is closed. Default 15 s. */
  bindTimeoutMs?: number;
  /** Bytes queued to one peer beyond which further messages to it are dropped. Default 256 KiB. */
  maxBufferedBytes?: number;
  /** How often idle connections are looked for. Default 1 s. */
  sweepIntervalMs?: number;
  now?: () => number;
}

/**
 * One accepted TCP connection of a WebSocket endpoint on the connection seam, from the accept
 * on (before any HTTP or TLS): the caps count it there. Once upgraded it carries a `WsLink`;
 * its messages are WebSocket binary messages, its bytes the socket's (TLS records for wss).
 */
export class WsConnection implements Connection {
  readonly transport = 'websocket' as const;
  readonly socket: net.Socket;
  readonly remoteAddress: string;
  readonly remotePort: number;
  readonly addressKey: string;
  messagesIn = 0;
  messagesOut = 0;
  link: WsLink | undefined = undefined;
  /** Why it is closing (the first reason given); undefined while open. */
  reason: string | undefined = undefined;

  constructor(socket: net.Socket) {
    this.socket = socket;
    this.remoteAddress = socket.remoteAddress ?? '';
    this.remotePort = socket.remotePort ?? 0;
    this.addressKey = addressKey(socket.remoteAddress);
  }

  get open(): boolean {
    return this.reason === undefined && !this.socket.destroyed;
  }

  get bytesIn(): number {
    return this.socket.bytesRead;
  }

  get bytesOut(): number {
    return this.socket.bytesWritten;
  }

  send(bytes: Buffer): void {
    this.link?.send(bytes);
  }

  /**
   * Ends it for `reason`: a WebSocket close frame (`code`, default 1000) once upgraded, or at
   * once (`terminate`, or before the upgrade).
   */
  close(reason: string = CloseReason.ClosedByServer, code = 1000, terminate = false): void {
    this.reason ??= reason;
    const ws = this.link?.ws;
    if (ws === undefined) this.socket.destroy();
    else if (terminate) ws.terminate();
    else ws.close(code, reason === CloseReason.ClosedByServer ? undefined : reason);
  }
}

/**
 * The accepted WebSocket as a link uses it (a `ws` socket is one; the package's types name no
 * dependency).
 */
export interface WsSocket {
  readonly readyState: number;
  readonly bufferedAmount: number;
  send(data: Buffer, options: { binary: boolean }): void;
  close(code?: number, reason?: string): void;
  terminate(): void;
}

/** One WebSocket connection: the client's "address" on the relay. */
export class WsLink implements RelayLink {
  readonly transport: 'ws' | 'wss';
  readonly identity = undefined;
  readonly maxMessage: number;
  readonly address: string;
  readonly port: number;
  readonly ws: WsSocket;
  /** The connection of the seam it runs on (its counters, its close reason). */
  readonly connection: WsConnection | undefined;
  readonly openedAt: number;
  lastReceivedAt: number;
  everBound = false;
  private readonly maxBuffered: number;
  private readonly metrics: ProtocolMetrics;

  constructor(
    transport: 'ws' | 'wss',
    ws: WsSocket,
    address: string,
    port: number,
    maxMessage: number,
    maxBuffered: number,
    metrics: ProtocolMetrics,
    now: number,
    connection?: WsConnection,
  ) {
    this.transport = transport;
    this.ws = ws;
    this.connection = connection;
    this.address = address;
    this.port = port;
    this.maxMessage = maxMessage;
    this.maxBuffered = maxBuffered;
    this.metrics = metrics;
    this.openedAt = now;
    this.lastReceivedAt = now;
  }

  get open(): boolean {
    return this.ws.readyState === 1;
  }

  send(msg: Buffer): void {
    if (this.ws.readyState !== 1) return;
    if (this.ws.bufferedAmount > this.maxBuffered) {
      // The peer is not reading: drop, as a congested UDP path would, instead of queueing without bound.
      this.metrics.drop(`${this.transport}_backpressure`);
      return;
    }
    if (this.connection !== undefined) this.connection.messagesOut++;
    this.ws.send(msg, { binary: true });
  }

  /** Set by the endpoint: the connection has proven itself, so it is never evicted for a newcomer. */
  onProven: (() => void) | undefined;

  /** A connection is its own source. */
  carries(src: RelayLink): boolean {
    return src === this;
  }

  linkForBind(): RelayLink {
    return this;
  }

  /** Counted on arrival (every message), not here. */
  accepted(): void {}

  /** The native data plane has no WebSocket: its RELAYs stay with JavaScript. */
  bindNative(): boolean {
    return false;
  }

  bound(): void {
    this.everBound = true;
    this.onProven?.();
    this.onProven = undefined;
  }

  /** The binding ended; the connection stays (a later BIND on it binds again). */
  unbound(): void {}
}

export interface WsEndpoint {
  readonly transport: 'ws' | 'wss';
  readonly port: number;
  readonly links: ReadonlySet<WsLink>;
  /** The connection seam's table: every accepted connection, upgraded or not (caps, diagnostics). */
  readonly table: ConnectionTable<WsConnection>;
  close(): Promise<void>;
}

/** Starts a `ws` or `wss` endpoint feeding `relay`. Resolves once it listens. */
export async function startWsEndpoint(
  relay: RelayServer,
  metrics: ProtocolMetrics,
  log: Logger,
  options: WsEndpointOptions,
): Promise<WsEndpoint> {
  const transport = options.secure ? 'wss' : 'ws';
  const now = options.now ?? Date.now;
  const maxConnections = options.maxConnections ?? 10_000;
  const maxPerIp = options.maxConnectionsPerIp ?? DEFAULT_WS_MAX_CONNECTIONS_PER_IP;
  const idleMs = options.idleTimeoutMs ?? 60_000;
  const bindMs = options.bindTimeoutMs ?? 15_000;
  const maxBuffered = options.maxBufferedBytes ?? 256 * 1024;
  const handshakeMs = options.handshakeTimeoutMs ?? 10_000;
  const maxMessage = relay.maxMessageToWs;

  const requestListener = (_req: http.IncomingMessage, res: http.ServerResponse) => {
    res.writeHead(426, { 'content-type': 'text/plain', connection: 'close', upgrade: 'websocket' });
    res.end('Unity Relay WebSocket endpoint: connect with a WebSocket client\n');
  };
  const server: http.Server = options.secure
    ? https.createServer(
        {
          cert: options.cert ?? '',
          key: options.key ?? '',
          minVersion: 'TLSv1.2', // UnityTLS (mbedTLS 2.x) speaks TLS 1.2 at most
          handshakeTimeout: options.handshakeTimeoutMs ?? 10_000,
        },
        requestListener,
      )
    : http.createServer(requestListener);
  server.headersTimeout = handshakeMs;
  server.requestTimeout = handshakeMs;
  server.keepAliveTimeout = 1000;

  const wss = new WebSocketServer({
    noServer: true,
    clientTracking: false,
    perMessageDeflate: false, // never a Sec-WebSocket-Extensions header
    handleProtocols: () => false, // never a Sec-WebSocket-Protocol header
    maxPayload: relay.maxDatagram, // larger frames: close 1009
  });

  // Connections per address (IPv4, or IPv6 /64) and in all, counted at TCP accept (before any
  // HTTP parsing), on the connection seam.
  const table = new ConnectionTable<WsConnection>({
    protocol: metrics.protocol,
    transport: 'websocket',
    maxConnections,
    maxConnectionsPerIp: maxPerIp,
  });
  // Connections that have not bound yet, oldest first. When every slot is taken, a newcomer
  // evicts the oldest of them: half-open upgrades from many addresses cannot lock new players
  // out, and a bound player is never evicted.
  const unproven = new Set<WsConnection>();
  // Accepted connections by remote address and port: the raw TCP socket and, for wss, the TLS
  // socket above it (what the upgrade sees) share those.
  const byRemote = new Map<string, WsConnection>();
  const onConnection = (socket: net.Socket) => {
    const connection = new WsConnection(socket);
    if (maxPerIp > 0 && table.countFor(connection.addressKey) >= maxPerIp) {
      metrics.drop(`${transport}_per_ip_cap`);
      table.refuse(socket.remoteAddress, socket.remotePort, CloseReason.PerIpLimit);
      socket.destroy();
      return;
    }
    if (table.size >= maxConnections) {
      const oldest = unproven.values().next();
      if (oldest.done === true) {
        metrics.drop(`${transport}_connection_cap`);
        table.refuse(socket.remoteAddress, socket.remotePort, CloseReason.OverCapacity);
        socket.destroy();
        return;
      }
      const evicted = oldest.value;
      unproven.delete(evicted);
      metrics.close(`${transport}_evicted`);
      // Its slot is released now ('close' comes later), so the count never exceeds the cap.
      evicted.reason ??= 'evicted';
      table.release(evicted, evicted.reason);
      evicted.socket.destroy();
    }
    if (table.open(connection) !== undefined) {
      socket.destroy(); // closing: refused (and published) by the table
      return;
    }
    unproven.add(connection);
    const key = `${connection.remoteAddress}|${connection.remotePort}`;
    byRemote.set(key, connection);
    socket.once('close', () => {
      unproven.delete(connection);
      if (byRemote.get(key) === connection) byRemote.delete(key);
      table.release(connection, connection.reason ?? CloseReason.PeerClosed);
    });
  };
  // Raw TCP accept, also for wss: a connection that never finishes TLS counts too.
  server.on('connection', onConnection);
  if (options.secure) {
    server.on('tlsClientError', (_err: Error, socket: Duplex) => {
      metrics.drop('wss_tls_error');
      const s = socket as net.Socket;
      const connection = byRemote.get(`${s.remoteAddress ?? ''}|${s.remotePort ?? 0}`);
      if (connection !== undefined) connection.reason ??= 'tls_error';
      socket.destroy();
    });
  }

  const links = new Set<WsLink>();
  server.on('upgrade', (req: http.IncomingMessage, socket: Duplex, head: Buffer) => {
    socket.on('error', () => socket.destroy());
    wss.handleUpgrade(req, socket, head, (ws) => {
      const s = socket as net.Socket;
      const connection = byRemote.get(`${s.remoteAddress ?? ''}|${s.remotePort ?? 0}`);
      const link = new WsLink(
        transport,
        ws,
        s.remoteAddress ?? '',
        s.remotePort ?? 0,
        maxMessage,
        maxBuffered,
        metrics,
        now(),
        connection,
      );
      if (connection !== undefined) {
        connection.link = link;
        link.onProven = () => unproven.delete(connection);
      }
      links.add(link);
      metrics.count(`${transport}_connections`);
      ws.on('message', (data: Buffer | ArrayBuffer | Buffer[], isBinary: boolean) => {
        if (!isBinary) {
          metrics.drop(`${transport}_text_frame`);
          if (connection !== undefined) connection.reason ??= 'text_frame';
          ws.close(1003, 'binary frames only');
          return;
        }
        link.lastReceivedAt = now();
        if (connection !== undefined) connection.messagesIn++;
        const msg = Buffer.isBuffer(data)
          ? data
          : Array.isArray(data)
            ? Buffer.concat(data)
            : Buffer.from(data);
        relay.handleFrom(msg, link);
      });
      ws.on('error', (err: Error) => {
        metrics.drop(`${transport}_protocol_error`);
        // ws names the breach: a frame over maxPayload is "too_large" (1009), the rest malformed.
        if (connection !== undefined)
          connection.reason ??=
            (err as { code?: string }).code === 'WS_ERR_UNSUPPORTED_MESSAGE_LENGTH'
              ? 'too_large'
              : CloseReason.Malformed;
        log.debug({ err }, 'websocket error');
      });
      ws.on('close', () => {
        links.delete(link);
        metrics.close(`${transport}_closed`);
      });
    });
  });

  const sweep = setInterval(() => {
    const t = now();
    for (const link of links) {
      if (t - link.lastReceivedAt >= idleMs) {
        metrics.close(`${transport}_idle`);
        if (link.connection !== undefined) link.connection.reason ??= CloseReason.IdleTimeout;
        link.ws.terminate();
      } else if (!link.everBound && t - link.openedAt >= bindMs) {
        metrics.close(`${transport}_never_bound`);
        if (link.connection !== undefined) link.connection.reason ??= 'never_bound';
        link.ws.close(1008, 'no BIND');
      }
    }
  }, options.sweepIntervalMs ?? 1000);
  sweep.unref();

  try {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen({ port: options.port, host: options.host, backlog: LISTEN_BACKLOG }, () => {
        server.off('error', reject);
        resolve();
      });
    });
  } catch (err) {
    // Nothing listens: leave nothing behind (the caller may try another port).
    clearInterval(sweep);
    wss.close();
    throw err;
  }
  server.on('error', (err) => log.warn({ err }, `${transport} server error`));
  const address = server.address();
  const port = typeof address === 'object' && address !== null ? address.port : 0;
  let closing: Promise<void> | undefined;
  return {
    transport,
    port,
    links,
    table,
    close() {
      closing ??= (async () => {
        clearInterval(sweep);
        table.closing();
        for (const c of table.connections()) c.reason ??= CloseReason.ServerClosing;
        for (const link of links) link.ws.terminate();
        server.closeAllConnections();
        await new Promise<void>((resolve) => server.close(() => resolve()));
        wss.close();
      })();
      return closing;
    },
  };
}

const CERT_FILE = 'unity-relay-wss-cert.pem';
const KEY_FILE = 'unity-relay-wss-key.pem';

/** How long a process that lost the race for the wss pair waits for the winner's certificate. */
const CERT_WAIT_MS = 30_000;
const CERT_POLL_MS = 50;

/**
 * A self-signed certificate for local `wss` use, generated once into `dir` with `openssl req`
 * (ECDSA P-256, valid 825 days; subjectAltName: localhost, 127.0.0.1 and `publicHost`) and reused
 * on later runs. Browsers and Unity clients must be told to trust it (see docs/unity-relay.md).
 *
 * Processes starting together on one folder must not write into the same two files (each ended
 * with the other's certificate or a half-written key). Each generates its pair in a private temp
 * folder; the key is then published with src/core/publish-file.ts, which only one process wins;
 * the winner moves its certificate into place (`generated` is true for it alone), the others drop
 * theirs and wait for it. The pair is checked before use: a key whose certificate does not come
 * within `waitMs` of the key's creation, or does not match (a run killed between the two), is an
 * error naming both files.
 */
export async function ensureSelfSignedCert(
  dir: string,
  publicHost: string,
  options: { waitMs?: number } = {},
): Promise<{ cert: Buffer; key: Buffer; certPath: string; keyPath: string; generated: boolean }> {
  const certPath = path.join(dir, CERT_FILE);
  const keyPath = path.join(dir, KEY_FILE);
  let generated = false;
  // The key decides who generates: a certificate without its key is replaced.
  if (!existsSync(keyPath)) {
    await mkdir(dir, { recursive: true });
    const tmp = await mkdtemp(path.join(dir, '.unity-relay-wss-'));
    try {
      const tmpCert = path.join(tmp, CERT_FILE);
      const tmpKey = path.join(tmp, KEY_FILE);
      await opensslSelfSigned(tmpKey, tmpCert, publicHost);
      const published = await publishFile(keyPath, await readFile(tmpKey), { mode: 0o600 });
      if (published.created) {
        await rename(tmpCert, certPath);
        generated = true;
      }
    } finally {
      await rm(tmp, { recursive: true, force: true });
    }
  }
  // A process that lost may get here before the winner's certificate is in place: it comes right
  // after the key, so a key older than the wait has a certificate that will never come.
  const waitMs = options.waitMs ?? CERT_WAIT_MS;
  const keyTime = await stat(keyPath).then(
    (st) => st.mtimeMs,
    () => Date.now(),
  );
  const deadline = Math.min(Date.now(), keyTime) + waitMs;
  for (;;) {
    const pair = await readPair(certPath, keyPath);
    if (pair.matching) return { cert: pair.cert, key: pair.key, certPath, keyPath, generated };
    if (Date.now() >= deadline) {
      throw new CommandError(
        'ERR_WSS_CERT',
        pair.cert === undefined
          ? `wss key ${keyPath} has no certificate ${certPath} (a run stopped while creating them?): delete both files to generate a new pair`
          : `wss certificate ${certPath} and key ${keyPath} do not match: delete both files to generate a new pair`,
      );
    }
    await new Promise((resolve) => setTimeout(resolve, CERT_POLL_MS));
  }
}

type Pair = { matching: true; cert: Buffer; key: Buffer } | { matching: false; cert?: Buffer };

/** Reads both files; `matching` when both are there, parse, and the certificate is the key's. */
async function readPair(certPath: string, keyPath: string): Promise<Pair> {
  const [cert, key] = await Promise.all([readIfThere(certPath), readIfThere(keyPath)]);
  if (cert === undefined || key === undefined) return { matching: false, cert };
  try {
    if (new X509Certificate(cert).checkPrivateKey(createPrivateKey(key)))
      return { matching: true, cert, key };
  } catch {
    // Not PEM (yet): treated as a mismatch.
  }
  return { matching: false, cert };
}

async function readIfThere(file: string): Promise<Buffer | undefined> {
  try {
    return await readFile(file);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw err;
  }
}

/** Runs `openssl req` for a self-signed P-256 pair into `keyPath` and `certPath`. */
async function opensslSelfSigned(keyPath: string, certPath: string, publicHost: string): Promise<void> {
  const names = new Set(['DNS:localhost', 'IP:127.0.0.1']);
  if (publicHost !== '' && publicHost !== '0.0.0.0')
    names.add(net.isIP(publicHost) ? `IP:${publicHost}` : `DNS:${publicHost}`);
  const cn = publicHost === '' || publicHost === '0.0.0.0' ? 'localhost' : publicHost;
  await new Promise<void>((resolve, reject) => {
    execFile(
      'openssl',
      [
        'req',
        '-x509',
        '-newkey',
        'ec',
        '-pkeyopt',
        'ec_paramgen_curve:prime256v1',
        '-nodes',
        '-keyout',
        keyPath,
        '-out',
        certPath,
        '-days',
        '825',
        '-subj',
        `/CN=${cn}`,
        '-addext',
        `subjectAltName=${[...names].join(',')}`,
      ],
      { timeout: 30_000 },
      (err, _stdout, stderr) => {
        if (err !== null) reject(new Error(`openssl req failed: ${stderr.trim() || err.message}`));
        else resolve();
      },
    );
  });
}
