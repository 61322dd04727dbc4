import net from 'node:net';
import type { Logger } from 'pino';
import type { ProtocolMetrics } from './metrics.js';

export interface TcpListenOptions {
  host: string;
  port: number;
  /** Connections beyond this are closed at once (counted as `over_capacity`). */
  maxConnections: number;
  /** A connection silent for this long is closed (counted as `idle_timeout`). 0 disables. */
  idleTimeoutMs: number;
  metrics: ProtocolMetrics;
  log: Logger;
  /** Attaches the protocol's handlers. Socket errors are already handled (logged, counted, closed). */
  onConnection(socket: net.Socket): void;
}

export interface TcpListener {
  server: net.Server;
  port: number;
  sockets: ReadonlySet<net.Socket>;
  /** Stops accepting, ends every connection (flushing queued writes), then resolves. */
  close(graceMs?: number): Promise<void>;
}

/**
 * The TCP transport every gamewire TCP server shares: connection cap, idle timeout, no Nagle,
 * and errors isolated to their own connection so one bad peer never reaches the others.
 */
export function listenTcp(options: TcpListenOptions): Promise<TcpListener> {
  const { metrics, log } = options;
  const sockets = new Set<net.Socket>();
  const server = net.createServer((socket) => {
    if (sockets.size >= options.maxConnections) {
      metrics.close('over_capacity');
      socket.destroy();
      return;
    }
    sockets.add(socket);
    metrics.open = sockets.size;
    socket.setNoDelay(true);
    if (options.idleTimeoutMs > 0) {
      socket.setTimeout(options.idleTimeoutMs, () => {
        metrics.close('idle_timeout');
        socket.destroy();
      });
    }
    socket.on('error', (err) => {
      metrics.close('socket_error');
      log.debug({ err: err.message, remote: socket.remoteAddress }, 'socket error');
    });
    socket.on('close', () => {
      sockets.delete(socket);
      metrics.open = sockets.size;
    });
    try {
      options.onConnection(socket);
    } catch (err) {
      // A handler bug costs this one connection, never the server.
      metrics.close('handler_error');
      log.error({ err }, 'connection handler failed');
      socket.destroy();
    }
  });
  server.on('error', (err) => log.error({ err }, 'tcp server error'));
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port, options.host, () => {
      server.off('error', reject);
      const address = server.address() as net.AddressInfo;
      let closing: Promise<void> | undefined;
      resolve({
        server,
        port: address.port,
        sockets,
        close(graceMs = 2000) {
          closing ??= new Promise<void>((done) => {
            server.close(() => done());
            for (const s of sockets) s.end();
            const timer = setTimeout(() => {
              for (const s of sockets) s.destroy();
            }, graceMs);
            timer.unref();
          });
          return closing;
        },
      });
    });
  });
}
