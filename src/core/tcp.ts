import net from 'node:net';
import { addressKey, CloseReason, type Connection, ConnectionTable, formatRemote } from './connection.js';
import type { Logger } from './logger.js';
import type { ProtocolMetrics } from './metrics.js';
import { trafficRecorder } from './recording.js';

export {
  addressKey,
  CloseReason,
  type CloseReasonName,
  type ConnectionEvent,
  connectionChannels,
  formatRemote,
} from './connection.js';

export interface TcpListenOptions {
  host: string;
  port: number;
  /** Protocol name in diagnostics events (default `metrics.protocol`). */
  protocol?: string;
  /** Connections beyond this are closed at once (counted as `over_capacity`). */
  maxConnections: number;
  /**
   * Connections from one address (IPv4, or IPv6 /64) beyond this are closed at accept (counted
   * as `per_ip_limit`). 0 or absent: no per-address limit.
   */
  maxConnectionsPerIp?: number;
  /** A connection silent for this long is closed (counted as `idle_timeout`). 0 disables. */
  idleTimeoutMs: number;
  /**
   * Accepted sockets do not read until the handler calls `socket.resume()` (so a server over
   * its memory budget can accept without reading a first chunk). Default false.
   */
  pauseOnConnect?: boolean;
  metrics: ProtocolMetrics;
  log: Logger;
  /**
   * Attaches the protocol's handlers. Socket errors are already handled (logged, counted,
   * closed). `connection` is the socket's place on the connection seam (counters, close).
   */
  onConnection(socket: net.Socket, connection: TcpConnection): void;
  /**
   * Makes the connection object of an accepted socket (default `new TcpConnection(socket,
   * metrics)`): a transport built on TCP (framed TCP) makes its own subclass.
   */
  createConnection?(socket: net.Socket): TcpConnection;
}

export interface TcpListener {
  server: net.Server;
  port: number;
  sockets: ReadonlySet<net.Socket>;
  /** Open connections per address key (see `addressKey`). */
  readonly perIp: ReadonlyMap<string, number>;
  /** The connection seam's table of this listener (caps, diagnostics). */
  readonly table: ConnectionTable<TcpConnection>;
  /** Stops accepting, ends every connection (flushing queued writes), then resolves. */
  close(graceMs?: number): Promise<void>;
}

/** The reason a socket is being closed for, recorded by `closeSocket` and reported once on 'close'. */
const closeReasons = new WeakMap<net.Socket, string>();

/**
 * Closes `socket` for `reason`: counts it in `metrics` (first reason only), records it for the
 * `close` diagnostics event, then ends (flushing what was written) or destroys the socket.
 */
export function closeSocket(
  socket: net.Socket,
  reason: string,
  metrics: ProtocolMetrics,
  how: 'end' | 'destroy' | 'destroySoon' = 'destroy',
): void {
  if (!closeReasons.has(socket)) {
    closeReasons.set(socket, reason);
    metrics.close(reason);
  }
  if (how === 'end') socket.end();
  else if (how === 'destroySoon') socket.destroySoon();
  else socket.destroy();
}

/** The reason recorded for a socket's close, if any. */
export function closeReasonOf(socket: net.Socket): string | undefined {
  return closeReasons.get(socket);
}

/**
 * One accepted TCP socket on the connection seam. Bytes are the socket's own counts; a raw
 * stream has no messages (framed TCP counts its frames).
 */
export class TcpConnection implements Connection {
  readonly transport = 'tcp' as const;
  readonly socket: net.Socket;
  readonly remoteAddress: string;
  readonly remotePort: number;
  readonly addressKey: string;
  messagesIn = 0;
  messagesOut = 0;
  protected readonly metrics: ProtocolMetrics;

  constructor(socket: net.Socket, metrics: ProtocolMetrics) {
    this.socket = socket;
    this.metrics = metrics;
    this.remoteAddress = socket.remoteAddress ?? '';
    this.remotePort = socket.remotePort ?? 0;
    this.addressKey = addressKey(socket.remoteAddress);
  }

  get open(): boolean {
    return !this.socket.destroyed && !this.socket.writableEnded && !closeReasons.has(this.socket);
  }

  get bytesIn(): number {
    return this.socket.bytesRead;
  }

  get bytesOut(): number {
    return this.socket.bytesWritten;
  }

  send(bytes: Buffer): void {
    const s = this.socket;
    if (s.destroyed || s.writableEnded) return;
    this.messagesOut++;
    s.write(bytes);
  }

  close(reason: string = CloseReason.ClosedByServer): void {
    closeSocket(this.socket, reason, this.metrics, 'end');
  }
}

/**
 * The TCP transport every gamewire TCP server shares: connection cap, per-address cap at
 * accept, idle timeout, no Nagle, lifecycle diagnostics, and errors isolated to their own
 * connection so one bad peer never reaches the others.
 */
export function listenTcp(options: TcpListenOptions): Promise<TcpListener> {
  const { metrics, log } = options;
  const table = new ConnectionTable<TcpConnection>({
    protocol: options.protocol ?? metrics.protocol,
    transport: 'tcp',
    maxConnections: options.maxConnections,
    maxConnectionsPerIp: options.maxConnectionsPerIp ?? 0,
  });
  const sockets = new Set<net.Socket>();
  const server = net.createServer({ pauseOnConnect: options.pauseOnConnect === true }, (socket) => {
    const refused = table.refusalFor(addressKey(socket.remoteAddress));
    if (refused !== undefined) {
      metrics.close(refused);
      table.refuse(socket.remoteAddress, socket.remotePort, refused);
      socket.on('error', () => {});
      socket.destroy();
      return;
    }
    const connection = options.createConnection?.(socket) ?? new TcpConnection(socket, metrics);
    table.open(connection);
    sockets.add(socket);
    metrics.open = sockets.size;
    socket.setNoDelay(true);
    if (options.idleTimeoutMs > 0) {
      socket.setTimeout(options.idleTimeoutMs, () => closeSocket(socket, CloseReason.IdleTimeout, metrics));
    }
    socket.on('error', (err) => {
      if (!closeReasons.has(socket)) {
        closeReasons.set(socket, CloseReason.SocketError);
        metrics.close(CloseReason.SocketError);
      }
      log.debug(
        { err: err.message, remote: formatRemote(socket.remoteAddress, socket.remotePort) },
        'socket error',
      );
    });
    socket.on('close', () => {
      sockets.delete(socket);
      metrics.open = sockets.size;
      table.release(connection, closeReasons.get(socket) ?? CloseReason.PeerClosed);
    });
    try {
      trafficRecorder()?.tcpConnection(socket);
      options.onConnection(socket, connection);
    } catch (err) {
      // A handler bug costs this one connection, never the server.
      log.error({ err }, 'connection handler failed');
      closeSocket(socket, CloseReason.HandlerError, metrics);
    }
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port, options.host, () => {
      server.off('error', reject);
      // Listen errors go to the caller (which says which port and flag); later ones are logged.
      server.on('error', (err) => log.error({ err }, 'tcp server error'));
      const address = server.address() as net.AddressInfo;
      let closed: Promise<void> | undefined;
      resolve({
        server,
        port: address.port,
        sockets,
        perIp: table.perAddressCounts,
        table,
        close(graceMs = 2000) {
          table.closing();
          closed ??= new Promise<void>((done) => {
            server.close(() => done());
            for (const s of sockets) {
              if (!closeReasons.has(s)) closeReasons.set(s, CloseReason.ServerClosing);
              s.end();
            }
            const timer = setTimeout(() => {
              for (const s of sockets) s.destroy();
            }, graceMs);
            timer.unref();
          });
          return closed;
        },
      });
    });
  });
}
