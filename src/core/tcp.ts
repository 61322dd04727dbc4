import diagnosticsChannel from 'node:diagnostics_channel';
import net from 'node:net';
import type { Logger } from 'pino';
import type { ProtocolMetrics } from './metrics.js';
import { trafficRecorder } from './recording.js';

/**
 * Why a connection ended (or was refused), shared by every TCP server. Protocols add their own
 * (`malformed` is common to all framed protocols). They are the `reason` label of
 * `gamewire_connections_closed_total` and of the `gamewire:connection:*` diagnostics events.
 */
export const CloseReason = {
  /** The peer closed, or the connection ended without a more specific reason. */
  PeerClosed: 'peer_closed',
  /** Refused at accept: the server holds `maxConnections`. */
  OverCapacity: 'over_capacity',
  /** Refused at accept: the peer's address holds `maxConnectionsPerIp`. */
  PerIpLimit: 'per_ip_limit',
  /** Nothing received for `idleTimeoutMs`. */
  IdleTimeout: 'idle_timeout',
  /** A frame (or the first frame after connecting) did not complete within `frameTimeoutMs`. */
  FrameTimeout: 'frame_timeout',
  /**
   * The input budget was spent, new connections were waiting, and this connection's partial
   * frame had been stalled longest.
   */
  OverBudget: 'over_budget',
  /** Bytes that break the protocol's framing or envelope. */
  Malformed: 'malformed',
  /** The socket reported an error (reset, broken pipe). */
  SocketError: 'socket_error',
  /** A bug in a connection handler; it cost this one connection. */
  HandlerError: 'handler_error',
  /** The server is shutting down. */
  ServerClosing: 'server_closing',
  /** The protocol ended the connection on purpose (e.g. a handler called `close()`). */
  ClosedByServer: 'closed_by_server',
} as const;
export type CloseReasonName = (typeof CloseReason)[keyof typeof CloseReason];

/** Payload of the `gamewire:connection:open|close|drop` diagnostics channels. */
export interface ConnectionEvent {
  /** The protocol module's name (`rmc`, `js5`, …). */
  protocol: string;
  transport: 'tcp' | 'udp' | 'websocket' | 'prudp';
  /** `address:port` of the peer (`[v6]:port` for IPv6). */
  remote: string;
  /** For `close` and `drop`: one of `CloseReason` or a protocol's own. */
  reason?: string;
}

/**
 * `node:diagnostics_channel` channels every TCP server publishes on: `open` when a connection is
 * accepted, `close` once when it ends (with its reason), `drop` when one is refused at accept.
 * Subscribing costs the servers nothing until someone subscribes.
 */
export const connectionChannels = {
  open: diagnosticsChannel.channel('gamewire:connection:open'),
  close: diagnosticsChannel.channel('gamewire:connection:close'),
  drop: diagnosticsChannel.channel('gamewire:connection:drop'),
} as const;

/** `address:port`, with brackets around IPv6 addresses. */
export function formatRemote(address: string | undefined, port: number | undefined): string {
  const a = address ?? '?';
  return a.includes(':') ? `[${a}]:${port ?? 0}` : `${a}:${port ?? 0}`;
}

/**
 * The key per-address limits count under: an IPv4 address (also when mapped into IPv6), or the
 * /64 prefix of an IPv6 address, since one IPv6 host usually holds a whole /64.
 */
export function addressKey(address: string | undefined): string {
  if (address === undefined || address === '') return '?';
  if (address.startsWith('::ffff:') && address.includes('.')) return address.slice(7);
  if (!address.includes(':')) return address;
  const zone = address.indexOf('%');
  const a = zone >= 0 ? address.slice(0, zone) : address;
  const halves = a.split('::');
  const head = halves[0] === '' ? [] : halves[0]!.split(':');
  const tail = halves.length > 1 && halves[1] !== '' ? halves[1]!.split(':') : [];
  const groups =
    halves.length > 1
      ? [...head, ...new Array<string>(8 - head.length - tail.length).fill('0'), ...tail]
      : head;
  return `${groups
    .slice(0, 4)
    .map((g) => Number.parseInt(g || '0', 16).toString(16))
    .join(':')}::/64`;
}

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
  /** Attaches the protocol's handlers. Socket errors are already handled (logged, counted, closed). */
  onConnection(socket: net.Socket): void;
}

export interface TcpListener {
  server: net.Server;
  port: number;
  sockets: ReadonlySet<net.Socket>;
  /** Open connections per address key (see `addressKey`). */
  readonly perIp: ReadonlyMap<string, number>;
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
 * The TCP transport every gamewire TCP server shares: connection cap, per-address cap at
 * accept, idle timeout, no Nagle, lifecycle diagnostics, and errors isolated to their own
 * connection so one bad peer never reaches the others.
 */
export function listenTcp(options: TcpListenOptions): Promise<TcpListener> {
  const { metrics, log } = options;
  const protocol = options.protocol ?? metrics.protocol;
  const maxPerIp = options.maxConnectionsPerIp ?? 0;
  const sockets = new Set<net.Socket>();
  const perIp = new Map<string, number>();
  let closing = false;
  const refuse = (socket: net.Socket, reason: string) => {
    metrics.close(reason);
    if (connectionChannels.drop.hasSubscribers) {
      connectionChannels.drop.publish({
        protocol,
        transport: 'tcp',
        remote: formatRemote(socket.remoteAddress, socket.remotePort),
        reason,
      } satisfies ConnectionEvent);
    }
    socket.on('error', () => {});
    socket.destroy();
  };
  const server = net.createServer({ pauseOnConnect: options.pauseOnConnect === true }, (socket) => {
    if (closing) {
      refuse(socket, CloseReason.ServerClosing);
      return;
    }
    if (sockets.size >= options.maxConnections) {
      refuse(socket, CloseReason.OverCapacity);
      return;
    }
    const key = addressKey(socket.remoteAddress);
    const fromIp = perIp.get(key) ?? 0;
    if (maxPerIp > 0 && fromIp >= maxPerIp) {
      refuse(socket, CloseReason.PerIpLimit);
      return;
    }
    perIp.set(key, fromIp + 1);
    sockets.add(socket);
    metrics.open = sockets.size;
    const remote = formatRemote(socket.remoteAddress, socket.remotePort);
    if (connectionChannels.open.hasSubscribers) {
      connectionChannels.open.publish({ protocol, transport: 'tcp', remote } satisfies ConnectionEvent);
    }
    socket.setNoDelay(true);
    if (options.idleTimeoutMs > 0) {
      socket.setTimeout(options.idleTimeoutMs, () => closeSocket(socket, CloseReason.IdleTimeout, metrics));
    }
    socket.on('error', (err) => {
      if (!closeReasons.has(socket)) {
        closeReasons.set(socket, CloseReason.SocketError);
        metrics.close(CloseReason.SocketError);
      }
      log.debug({ err: err.message, remote }, 'socket error');
    });
    socket.on('close', () => {
      sockets.delete(socket);
      const left = (perIp.get(key) ?? 1) - 1;
      if (left <= 0) perIp.delete(key);
      else perIp.set(key, left);
      metrics.open = sockets.size;
      if (connectionChannels.close.hasSubscribers) {
        connectionChannels.close.publish({
          protocol,
          transport: 'tcp',
          remote,
          reason: closeReasons.get(socket) ?? CloseReason.PeerClosed,
        } satisfies ConnectionEvent);
      }
    });
    try {
      trafficRecorder()?.tcpConnection(socket);
      options.onConnection(socket);
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
        perIp,
        close(graceMs = 2000) {
          closing = true;
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
