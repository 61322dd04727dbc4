import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import dgram from 'node:dgram';
import { NativeRelaySocket } from '../../../src/protocols/unity-relay/native-dataplane.js';
import { NativeDtlsRecords } from '../../../src/protocols/unity-relay/native-dtls.js';
import {
  type DtlsAssociation,
  DtlsServer,
  type DtlsServerOptions,
} from '../../../src/transports/dtls/index.js';
import { elapse, waitFor as waitUntil } from '../../helpers/wait.js';

/**
 * Which record layer the echo servers of these tests use: `js` (the default: the server's own
 * socket and its JavaScript record layer) or `native` (GAMEWIRE_DATAPLANE=native: the relay's
 * native data plane owns the socket and runs the record layer of established associations, as
 * `gamewire serve unity-relay` does). vitest.config.ts runs every file here on the native plane
 * too (a project of its own).
 */
export const recordPlane: 'js' | 'native' = process.env.GAMEWIRE_DATAPLANE === 'native' ? 'native' : 'js';

/**
 * Whether a real program is installed. In CI (CI=true) a missing program fails the test that
 * needs it instead of skipping it.
 */
/** Under CI a suite that needs a program runs (and fails) rather than skips: `runIf(has || IN_CI)`. */
export const IN_CI = process.env.CI === 'true';

export function hasProgram(name: string): boolean {
  try {
    execFileSync('sh', ['-c', `command -v ${name}`], { stdio: 'ignore' });
    return true;
  } catch {
    if (process.env.CI === 'true') throw new Error(`${name} is required in CI but is not installed`);
    return false;
  }
}

/**
 * A PSK identity like a 16-byte Unity allocation id, without 0x00 bytes (it travels through
 * argv) and without 0x0a: the gnutls-cli tests pass it through the shell's `$(printf …)`, which
 * strips trailing newlines, so an id ending in 0x0a reached the server one byte short (unknown
 * PSK identity, about one test in 255).
 */
export function testIdentity(): Buffer {
  const id = randomBytes(16);
  for (let i = 0; i < id.length; i++) if (id[i] === 0 || id[i] === 0x0a) id[i] = 1;
  return id;
}

export interface EchoServer {
  server: DtlsServer;
  port: number;
  identity: Buffer;
  psk: Buffer;
  associations: DtlsAssociation[];
  messages: Buffer[];
  closes: string[];
  drops: string[];
  close(): Promise<void>;
  /** The native socket, when the native record layer runs (its counters say what it did). */
  native?: NativeRelaySocket;
  /** The native record layer the server hands its associations to. */
  offload?: NativeDtlsRecords;
}

/**
 * A DtlsServer on 127.0.0.1:0 that knows one identity (64-byte key, as Unity Relay uses) and echoes
 * every application record back as `echo:` + the bytes.
 */
export async function startEchoServer(options: Partial<DtlsServerOptions> = {}): Promise<EchoServer> {
  const identity = testIdentity();
  const psk = randomBytes(64);
  const server = new DtlsServer({
    pskFor: (id) => (id.equals(identity) ? psk : undefined),
    ...options,
  });
  const associations: DtlsAssociation[] = [];
  const messages: Buffer[] = [];
  const closes: string[] = [];
  const drops: string[] = [];
  server.on('association', (a) => associations.push(a));
  server.on('message', (a, m) => {
    messages.push(m);
    a.send(Buffer.concat([Buffer.from('echo:'), m]));
  });
  server.on('close', (_a, reason) => closes.push(reason));
  server.on('drop', (reason) => drops.push(reason));
  if (recordPlane === 'native') {
    // A DTLS-only native plane: the C worker owns the socket, the server is fed from it.
    const native = NativeRelaySocket.open({ host: '127.0.0.1', port: null, dtlsPort: 0 });
    const records = new NativeDtlsRecords(native);
    records.serve(server);
    const close = async () => {
      await server.close();
      native.close();
    };
    return {
      server,
      port: native.dtlsPort!,
      identity,
      psk,
      associations,
      messages,
      closes,
      drops,
      close,
      native,
      offload: records,
    };
  }
  const { port } = await server.listen(0, '127.0.0.1');
  return { server, port, identity, psk, associations, messages, closes, drops, close: () => server.close() };
}

/**
 * On the native plane, checks that the record layer ran natively: the server's messages were
 * opened and its sends sealed by the native side (on the JavaScript plane there is nothing to see).
 */
export function expectRecordPlane(srv: EchoServer, opened: number, sealed: number): void {
  if (srv.native === undefined) return;
  const s = srv.native.stats();
  if (s.dtlsDecryptedToJs < opened || s.dtlsSealedForJs < sealed)
    throw new Error(`the native record layer did not run: ${JSON.stringify(s)}`);
}

/** Resolves when `predicate` holds, polling; rejects after `timeoutMs` with `what` in the message. */
export async function waitFor(
  predicate: () => boolean,
  what: string | (() => string),
  timeoutMs = 20_000,
): Promise<void> {
  await waitUntil(predicate, { what, timeoutMs, intervalMs: 20 });
}

/**
 * Sends with `send` until `predicate` holds, again every `everyMs`. Application data over DTLS is
 * a datagram: on a loaded machine loopback drops some (its backlog queue overflows while other
 * tests flood), and DTLS does not resend it, so a test of one message retries as an app would.
 */
export async function sendUntil(
  send: () => void,
  predicate: () => boolean,
  what: string | (() => string),
  timeoutMs = 20_000,
  everyMs = 2_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    send();
    const left = deadline - Date.now();
    try {
      await waitFor(predicate, what, Math.max(1, Math.min(everyMs, left)));
      return;
    } catch (err) {
      if (Date.now() >= deadline) throw err;
    }
  }
}

/** A spawned program with its stdout/stderr collected, killed by `stop()`. */
export interface Spawned {
  child: ChildProcess;
  stdout(): Buffer;
  stderr(): string;
  stop(): Promise<void>;
}

export function spawnProgram(cmd: string, args: string[], env?: NodeJS.ProcessEnv): Spawned {
  const child = spawn(cmd, args, { stdio: ['pipe', 'pipe', 'pipe'], env: env ?? process.env });
  const out: Buffer[] = [];
  const err: Buffer[] = [];
  child.stdout!.on('data', (d: Buffer) => out.push(d));
  child.stderr!.on('data', (d: Buffer) => err.push(d));
  child.stdin!.on('error', () => {});
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  return {
    child,
    stdout: () => Buffer.concat(out),
    stderr: () => Buffer.concat(err).toString('latin1'),
    stop: async () => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await exited;
    },
  };
}

/**
 * A UDP proxy between a client and the server that can drop chosen datagrams (by direction and
 * index) and counts every datagram it forwards.
 */
export interface UdpProxy {
  port: number;
  /** Datagrams seen from the client / from the server (forwarded or dropped). */
  fromClient: Buffer[];
  fromServer: Buffer[];
  /** Sends a datagram to the server from the proxy's socket: the 5-tuple the server knows the client by. */
  inject(datagram: Buffer): void;
  close(): Promise<void>;
}

export async function startProxy(
  serverPort: number,
  shouldDrop: (direction: 'to-server' | 'to-client', datagram: Buffer, index: number) => boolean = () =>
    false,
): Promise<UdpProxy> {
  const socket = dgram.createSocket('udp4');
  const fromClient: Buffer[] = [];
  const fromServer: Buffer[] = [];
  let client: { address: string; port: number } | undefined;
  socket.on('message', (msg, rinfo) => {
    if (rinfo.port === serverPort && rinfo.address === '127.0.0.1') {
      fromServer.push(Buffer.from(msg));
      if (client && !shouldDrop('to-client', msg, fromServer.length - 1))
        socket.send(msg, client.port, client.address);
    } else {
      client = { address: rinfo.address, port: rinfo.port };
      fromClient.push(Buffer.from(msg));
      if (!shouldDrop('to-server', msg, fromClient.length - 1)) socket.send(msg, serverPort, '127.0.0.1');
    }
  });
  await new Promise<void>((resolve) => socket.bind(0, '127.0.0.1', () => resolve()));
  return {
    port: socket.address().port,
    fromClient,
    fromServer,
    inject: (datagram) => socket.send(datagram, serverPort, '127.0.0.1'),
    close: () => new Promise((resolve) => socket.close(() => resolve())),
  };
}

/** Record content types in a datagram (a walk over the record headers). */
export function recordTypes(datagram: Buffer): number[] {
  const types: number[] = [];
  let at = 0;
  while (at + 13 <= datagram.length) {
    types.push(datagram[at]!);
    at += 13 + datagram.readUInt16BE(at + 11);
  }
  return types;
}

/** Handshake message types in the epoch-0 handshake records of a datagram. */
export function plaintextHandshakeTypes(datagram: Buffer): number[] {
  const types: number[] = [];
  let at = 0;
  while (at + 13 <= datagram.length) {
    const len = datagram.readUInt16BE(at + 11);
    if (datagram[at] === 22 && datagram.readUInt16BE(at + 3) === 0) types.push(datagram[at + 13]!);
    at += 13 + len;
  }
  return types;
}

/**
 * Sends `datagrams` to the port and collects the replies: those of one burst (the first, and any
 * that follow it within `quietMs`: a flight sent as several datagrams goes out at once), or none
 * if nothing comes within `waitMs`. What `sendAndCollect` sees, without waiting out its window
 * once an answer is in (a reply that came later than `quietMs` after the first would be a
 * retransmission, which a window of `sendAndCollect`'s length does not wait for either).
 */
export async function sendAndCollectBurst(
  port: number,
  datagrams: Buffer[],
  { waitMs, quietMs }: { waitMs: number; quietMs: number },
  socket: dgram.Socket,
): Promise<Buffer[]> {
  const replies: Buffer[] = [];
  let onMessage: (m: Buffer) => void = () => {};
  const done = new Promise<void>((resolve) => {
    let quiet: NodeJS.Timeout | undefined;
    const none = setTimeout(resolve, waitMs);
    onMessage = (m: Buffer) => {
      replies.push(Buffer.from(m));
      clearTimeout(none);
      clearTimeout(quiet);
      quiet = setTimeout(resolve, quietMs);
    };
  });
  socket.on('message', onMessage);
  for (const d of datagrams) socket.send(d, port, '127.0.0.1');
  await done;
  socket.off('message', onMessage);
  return replies;
}

/** A one-shot UDP socket that sends `datagram` to the port and collects what comes back for `waitMs`. */
export async function sendAndCollect(
  port: number,
  datagrams: Buffer[],
  waitMs: number,
  socket?: dgram.Socket,
): Promise<Buffer[]> {
  const own = socket === undefined;
  const s = socket ?? dgram.createSocket('udp4');
  if (own) await new Promise<void>((resolve) => s.bind(0, '127.0.0.1', () => resolve()));
  const replies: Buffer[] = [];
  const onMessage = (m: Buffer) => replies.push(Buffer.from(m));
  s.on('message', onMessage);
  for (const d of datagrams) s.send(d, port, '127.0.0.1');
  await elapse(waitMs, 'every reply within the window is collected (the caller checks how many)');
  s.off('message', onMessage);
  if (own) await new Promise<void>((resolve) => s.close(() => resolve()));
  return replies;
}
