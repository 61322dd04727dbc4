/**
 * A scripted TCP server on 127.0.0.1 for client tests: each accepted socket goes to `onSocket`,
 * which plays whatever misbehaviour the test needs; `close()` destroys the sockets and stops it.
 */
import net from 'node:net';

export interface ScriptedTcpServer {
  port: number;
  close(): Promise<void>;
}

export async function scriptedTcpServer(onSocket: (socket: net.Socket) => void): Promise<ScriptedTcpServer> {
  const sockets: net.Socket[] = [];
  const server = net.createServer((socket) => {
    sockets.push(socket);
    socket.on('error', () => {});
    onSocket(socket);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as net.AddressInfo).port,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}
