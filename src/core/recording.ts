/**
 * The traffic recording hook. The TCP and UDP helpers ask `trafficRecorder()` once per
 * connection or socket; when nothing is installed (the default) that is the whole cost. The
 * inspector's pcapng recorder (`gamewire serve --record DIR`) installs itself here.
 */
import type dgram from 'node:dgram';
import type net from 'node:net';

export interface TrafficRecorder {
  /** A server-side TCP connection was accepted: record what it receives and sends. */
  tcpConnection(socket: net.Socket): void;
  /** A server UDP socket is bound: record its datagrams both ways. */
  udpSocket(socket: dgram.Socket): void;
}

let active: TrafficRecorder | undefined;

export function setTrafficRecorder(recorder: TrafficRecorder | undefined): void {
  active = recorder;
}

export function trafficRecorder(): TrafficRecorder | undefined {
  return active;
}
