import dgram from 'node:dgram';
import net from 'node:net';
import { trafficRecorder } from './recording.js';

export interface UdpBindOptions {
  host: string;
  port: number;
  /** SO_REUSEPORT: several processes share the port, the kernel spreads flows (Node ≥ 22.12). */
  reusePort?: boolean;
  recvBufferSize?: number;
  sendBufferSize?: number;
}

/** Binds a UDP socket (udp4 or udp6 from the host) and resolves once it listens. */
export function bindUdp(options: UdpBindOptions): Promise<dgram.Socket> {
  const type = net.isIPv6(options.host) ? 'udp6' : 'udp4';
  const socket = dgram.createSocket({ type, reuseAddr: false, reusePort: options.reusePort ?? false });
  return new Promise((resolve, reject) => {
    socket.once('error', reject);
    socket.bind(options.port, options.host, () => {
      socket.off('error', reject);
      try {
        if (options.recvBufferSize !== undefined) socket.setRecvBufferSize(options.recvBufferSize);
        if (options.sendBufferSize !== undefined) socket.setSendBufferSize(options.sendBufferSize);
      } catch {
        // The kernel caps buffer sizes (net.core.rmem_max); the default still works.
      }
      trafficRecorder()?.udpSocket(socket);
      resolve(socket);
    });
  });
}

export function closeUdp(socket: dgram.Socket): Promise<void> {
  return new Promise((resolve) => {
    try {
      socket.close(() => resolve());
    } catch {
      resolve();
    }
  });
}
