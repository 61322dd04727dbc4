/**
 * `npm run bench -- unity-relay`: N client pairs blast RELAY datagrams at the relay on loopback.
 * Then the same relay process forwards between pairs that both use DTLS, both use WebSocket, and
 * both use UDP, in the same run (pps per relay CPU-second and one-way p50/p99 of each). DTLS↔DTLS
 * and DTLS↔UDP are measured on both data planes, next to native UDP↔UDP and coturn.
 * The relay runs in a child process so its CPU time is its own (`process.cpuUsage()` there).
 * Baseline, in the same run and the same harness: a minimal hand-written UDP forwarder (look the
 * 16-byte recipient id up in a Map, send the datagram on), also in a child process.
 *
 * Figures: forwarded packets per second of server CPU, wall pps, loss, and one-way latency added
 * by the hop (p50/p99, relative to sending straight to the peer on loopback).
 */
import { type ChildProcess, fork, spawn } from 'node:child_process';
import dgram from 'node:dgram';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { WebSocket } from 'ws';
import {
  createBind,
  encodeMessage,
  RelayApiClient,
  relayServerData,
  startUnityRelay,
} from '../src/protocols/unity-relay/index.js';
import { type Addon, loadNativeDataplane } from '../src/protocols/unity-relay/native-dataplane.js';
import { DtlsClient, type DtlsClientRecordLayer } from '../src/transports/dtls/index.js';
import { channelData, coturnAvailable, cpuSecondsOf, relayPid, startCoturn, turnChannel } from './coturn.js';
import {
  type BenchResult,
  type BenchRow,
  type BenchSuite,
  FORWARDER_CPU,
  PINNED,
  percentile,
  pinSelf,
} from './harness.js';

const CHILD_ENV = 'GAMEWIRE_BENCH_UNITY_RELAY';
const PAIRS = 4;
const SECONDS = 2.5;

type Role = 'relay' | 'relay-native' | 'baseline';

interface ChildReady {
  udpPort: number;
  apiUrl: string;
  dtlsPort: number;
  wsPort: number;
}

interface ChildStats {
  cpuMicros: number;
  forwarded: number;
  received: number;
  dropped: Record<string, number>;
}

// ---- the child: a relay or the baseline forwarder -------------------------------------------

async function runChild(role: Role): Promise<void> {
  let forwarded: () => number;
  let received: () => number = () => 0;
  let dropped: () => Record<string, number> = () => ({});
  let nativeStats: () => Record<string, number> = () => ({});
  let close: () => Promise<void>;
  let ready: ChildReady;
  if (role === 'relay' || role === 'relay-native') {
    const server = await startUnityRelay({
      host: '127.0.0.1',
      port: 0,
      apiPort: 0,
      dataplane: role === 'relay-native' ? 'native' : 'js',
      apiRateLimitPerMinute: 0,
      apiLimits: { allocationsPerMinutePerAddress: 100_000, globalAllocationsPerSecond: 100_000 },
      // Pairs wait idle while other contenders are measured: no allocation may expire meanwhile.
      idleTimeoutMs: 600_000,
      dtlsPort: 0,
      wsPort: 0,
    });
    forwarded = () => {
      server.relay.syncDataplane();
      return server.metrics.sent;
    };
    received = () => {
      server.relay.syncDataplane();
      return server.metrics.received;
    };
    dropped = () => Object.fromEntries(server.metrics.dropped);
    // The native plane's own counters (batches, GSO runs), for the comparison's log.
    const mirror = (server.relay as unknown as { nativeMirror?: { socket: { stats(): object } } })
      .nativeMirror;
    nativeStats = () => ({ ...(mirror?.socket.stats() ?? {}) }) as Record<string, number>;
    close = () => server.close();
    ready = {
      udpPort: server.udpPort,
      apiUrl: server.apiUrl,
      dtlsPort: server.dtls?.port ?? 0,
      wsPort: server.ws?.port ?? 0,
    };
  } else {
    // The baseline: as little as a relay can do. A registration datagram (DA 72 00 FF | id)
    // records where an id lives; everything else is forwarded by its recipient id.
    const socket = dgram.createSocket('udp4');
    const where = new Map<string, { port: number; address: string }>();
    let count = 0;
    socket.on('message', (msg, rinfo) => {
      if (msg.length < 38) {
        if (msg.length === 20 && msg[3] === 0xff)
          where.set(msg.toString('latin1', 4, 20), { port: rinfo.port, address: rinfo.address });
        return;
      }
      const to = where.get(msg.toString('latin1', 20, 36));
      if (to !== undefined) {
        socket.send(msg, to.port, to.address);
        count++;
      }
    });
    await new Promise<void>((r) => socket.bind(0, '127.0.0.1', () => r()));
    try {
      socket.setRecvBufferSize(4 * 1024 * 1024);
      socket.setSendBufferSize(4 * 1024 * 1024);
    } catch {
      // capped by the kernel
    }
    forwarded = () => count;
    close = () => new Promise((r) => socket.close(() => r()));
    ready = { udpPort: socket.address().port, apiUrl: '', dtlsPort: 0, wsPort: 0 };
  }
  let cpu = process.cpuUsage();
  let base = 0;
  let baseReceived = 0;
  process.on('message', (m: string) => {
    if (m === 'start') {
      cpu = process.cpuUsage();
      base = forwarded();
      baseReceived = received();
    } else if (m === 'stop') {
      const d = process.cpuUsage(cpu);
      process.send!({
        cpuMicros: d.user + d.system,
        forwarded: forwarded() - base,
        received: received() - baseReceived,
        dropped: dropped(),
      } satisfies ChildStats);
    } else if (m === 'nstats') {
      process.send!({ nstats: nativeStats() });
    } else if (m === 'exit') {
      void close().then(() => process.exit(0));
    }
  });
  process.send!(ready);
}

const childRole = process.env[CHILD_ENV];
if (childRole === 'relay' || childRole === 'relay-native' || childRole === 'baseline') {
  await runChild(childRole);
}

// ---- the parent: clients ---------------------------------------------------------------------

function nextMessage<T>(child: ChildProcess): Promise<T> {
  return new Promise((resolve) => child.once('message', (m) => resolve(m as T)));
}

async function spawnChild(
  role: Role,
  extraEnv: Record<string, string> = {},
): Promise<{ child: ChildProcess; ready: ChildReady }> {
  const env = { ...process.env, ...extraEnv, [CHILD_ENV]: role };
  const file = fileURLToPath(import.meta.url);
  const child = PINNED
    ? spawn('taskset', ['-c', String(FORWARDER_CPU), process.execPath, file], {
        env,
        stdio: ['inherit', 'inherit', 'inherit', 'ipc'],
      })
    : fork(file, [], { env, stdio: 'inherit' });
  const ready = await nextMessage<ChildReady>(child);
  return { child, ready };
}

interface Endpoint {
  socket: dgram.Socket;
  id: Buffer;
  port: number;
}

async function openSocket(): Promise<dgram.Socket> {
  const s = dgram.createSocket('udp4');
  await new Promise<void>((r) => s.bind(0, '127.0.0.1', () => r()));
  try {
    s.setRecvBufferSize(4 * 1024 * 1024);
    s.setSendBufferSize(4 * 1024 * 1024);
  } catch {
    // capped by the kernel
  }
  return s;
}

function waitFor(socket: dgram.Socket, type: number, resend: () => void): Promise<Buffer> {
  return new Promise((resolve) => {
    const timer = setInterval(resend, 200);
    const on = (msg: Buffer) => {
      if (msg[3] === type) {
        clearInterval(timer);
        socket.off('message', on);
        resolve(msg);
      }
    };
    socket.on('message', on);
    resend();
  });
}

/** Host and client of a pair, bound and connected through the relay like UTP does it. */
async function relayPair(ready: ChildReady): Promise<[Endpoint, Endpoint]> {
  const api = new RelayApiClient(ready.apiUrl);
  const hostAlloc = await api.allocate(2);
  const joinAlloc = await api.join(await api.joinCode(hostAlloc.allocationId));
  const out: Endpoint[] = [];
  for (const a of [hostAlloc, joinAlloc]) {
    const data = relayServerData(a);
    const socket = await openSocket();
    const bind = createBind(0, data.connectionData, data.key);
    await waitFor(socket, 1, () => socket.send(bind, ready.udpPort, '127.0.0.1'));
    out.push({ socket, id: data.allocationId, port: socket.address().port });
    if (a === joinAlloc) {
      const req = encodeMessage({
        type: 'CONNECT_REQUEST',
        allocationId: data.allocationId,
        toConnectionDataLength: 255,
        toConnectionData: data.hostConnectionData,
      });
      await waitFor(socket, 6, () => socket.send(req, ready.udpPort, '127.0.0.1'));
    }
  }
  return [out[0]!, out[1]!];
}

async function baselinePair(ready: ChildReady, n: number): Promise<[Endpoint, Endpoint]> {
  const out: Endpoint[] = [];
  for (let k = 0; k < 2; k++) {
    const socket = await openSocket();
    const id = Buffer.alloc(16);
    id.writeUInt32BE(n * 2 + k + 1, 12);
    const reg = Buffer.concat([Buffer.from([0xda, 0x72, 0x00, 0xff]), id]);
    socket.send(reg, ready.udpPort, '127.0.0.1');
    out.push({ socket, id, port: socket.address().port });
  }
  await new Promise((r) => setTimeout(r, 50));
  return [out[0]!, out[1]!];
}

interface Flow {
  from: Endpoint;
  to: Endpoint;
  /** A ring of prebuilt datagrams (a send is asynchronous: never rewrite one still queued). */
  ring: Buffer[];
  next: number;
  /** Where the send time is written in a datagram of the ring (the RELAY's content; later in ChannelData). */
  stampAt: number;
}

function flowsOf(pairs: [Endpoint, Endpoint][], contentBytes: number): Flow[] {
  const flows: Flow[] = [];
  for (const [a, b] of pairs) {
    for (const [from, to] of [
      [a, b],
      [b, a],
    ] as const) {
      const ring: Buffer[] = [];
      for (let i = 0; i < 512; i++) {
        ring.push(
          encodeMessage({
            type: 'RELAY',
            fromAllocationId: from.id,
            toAllocationId: to.id,
            data: Buffer.alloc(contentBytes, 0x55),
          }),
        );
      }
      flows.push({ from, to, ring, next: 0, stampAt: 38 });
    }
  }
  return flows;
}

interface Measure {
  sent: number;
  received: number;
  latencies: number[];
  seconds: number;
}

/**
 * Sends from every flow for `seconds`, round-robin, at `rate` datagrams/s in total (Infinity =
 * as fast as the sender can), each stamped with its send time; counts and times arrivals.
 * `direct` sends straight to the peer (the zero-hop reference for latency).
 */
async function blast(
  flows: Flow[],
  port: number,
  rate: number,
  seconds: number,
  direct = false,
): Promise<Measure> {
  const receivers = new Set(flows.map((f) => f.to.socket));
  let received = 0;
  const latencies: number[] = [];
  const onMessage = (msg: Buffer) => {
    if (msg.length < 46 || msg[3] !== 10) return;
    received++;
    if (latencies.length < 200_000) latencies.push(performance.now() - msg.readDoubleLE(38));
  };
  for (const s of receivers) s.on('message', onMessage);
  let sent = 0;
  const start = performance.now();
  const end = start + seconds * 1000;
  await new Promise<void>((resolve) => {
    const step = () => {
      const now = performance.now();
      if (now >= end) return resolve();
      const due =
        rate === Number.POSITIVE_INFINITY
          ? sent + 64
          : Math.min(sent + 64, Math.floor(((now - start) / 1000) * rate));
      while (sent < due) {
        const f = flows[sent % flows.length]!;
        const b = f.ring[f.next]!;
        f.next = (f.next + 1) % f.ring.length;
        b.writeDoubleLE(performance.now(), f.stampAt);
        f.from.socket.send(b, direct ? f.to.port : port, '127.0.0.1');
        sent++;
      }
      // Paced: sleep between bursts so the sender does not compete with the forwarder for a core.
      if (rate === Number.POSITIVE_INFINITY) setImmediate(step);
      else setTimeout(step, 1);
    };
    step();
  });
  await new Promise((r) => setTimeout(r, 300)); // let the tail arrive
  for (const s of receivers) s.off('message', onMessage);
  return { sent, received, latencies, seconds };
}

interface CaseResult {
  stats: ChildStats;
  sent: number;
  ppsPerCpu: number;
  wallPps: number;
  loss: number;
  p50: number;
  p99: number;
}

async function measure(child: ChildProcess, flows: Flow[], port: number, rate: number): Promise<CaseResult> {
  child.send('start');
  const m = await blast(flows, port, rate, SECONDS);
  child.send('stop');
  const stats = await nextMessage<ChildStats>(child);
  return {
    stats,
    sent: m.sent,
    ppsPerCpu: stats.forwarded / (stats.cpuMicros / 1e6),
    wallPps: stats.forwarded / m.seconds,
    loss: m.sent === 0 ? 0 : 1 - m.received / m.sent,
    p50: percentile(m.latencies, 50),
    p99: percentile(m.latencies, 99),
  };
}

async function closeAll(pairs: [Endpoint, Endpoint][], child: ChildProcess): Promise<void> {
  for (const [a, b] of pairs)
    for (const e of [a, b]) await new Promise<void>((r) => e.socket.close(() => r()));
  child.send('exit');
  await new Promise((r) => child.once('exit', r));
}

// ---- transports: the same relay, pairs on UDP, DTLS and WebSocket -----------------------------

type Transport = 'udp' | 'dtls' | 'ws';

interface TEndpoint {
  id: Buffer;
  send(b: Buffer): void;
  listen(h: (b: Buffer) => void): void;
  unlisten(): void;
  close(): Promise<void>;
}

async function transportEndpoint(
  kind: Transport,
  ready: ChildReady,
  id: Buffer,
  key: Buffer,
): Promise<TEndpoint> {
  let handler: ((b: Buffer) => void) | undefined;
  const deliver = (b: Buffer) => handler?.(b);
  const base = {
    id,
    listen(h: (b: Buffer) => void) {
      handler = h;
    },
    unlisten() {
      handler = undefined;
    },
  };
  if (kind === 'udp') {
    const s = await openSocket();
    s.on('message', deliver);
    return {
      ...base,
      send: (b) => s.send(b, ready.udpPort, '127.0.0.1'),
      close: () => new Promise((r) => s.close(() => r())),
    };
  }
  if (kind === 'dtls') {
    const c = await DtlsClient.connect({ host: '127.0.0.1', port: ready.dtlsPort, identity: id, psk: key });
    c.on('message', deliver);
    return {
      ...base,
      send: (b) => c.send(b),
      close: async () => c.close(),
    };
  }
  const ws = new WebSocket(`ws://127.0.0.1:${ready.wsPort}/`, { perMessageDeflate: false });
  await new Promise((resolve, reject) => {
    ws.once('open', resolve);
    ws.once('error', reject);
  });
  ws.on('message', (d: Buffer) => deliver(d));
  return {
    ...base,
    send: (b) => ws.send(b, { binary: true }),
    close: async () => ws.terminate(),
  };
}

function waitForType(e: TEndpoint, type: number, resend: () => void): Promise<void> {
  return new Promise((resolve) => {
    const timer = setInterval(resend, 200);
    e.listen((m) => {
      if (m[3] === type) {
        clearInterval(timer);
        e.unlisten();
        resolve();
      }
    });
    resend();
  });
}

async function transportPair(kind: Transport, ready: ChildReady): Promise<[TEndpoint, TEndpoint]> {
  const api = new RelayApiClient(ready.apiUrl);
  const hostAlloc = await api.allocate(2);
  const joinAlloc = await api.join(await api.joinCode(hostAlloc.allocationId));
  const out: TEndpoint[] = [];
  for (const a of [hostAlloc, joinAlloc]) {
    const data = relayServerData(a);
    const e = await transportEndpoint(kind, ready, data.allocationId, data.key);
    const bind = createBind(0, data.connectionData, data.key);
    await waitForType(e, 1, () => e.send(bind));
    if (a === joinAlloc) {
      const req = encodeMessage({
        type: 'CONNECT_REQUEST',
        allocationId: data.allocationId,
        toConnectionDataLength: 255,
        toConnectionData: data.hostConnectionData,
      });
      await waitForType(e, 6, () => e.send(req));
    }
    out.push(e);
  }
  return [out[0]!, out[1]!];
}

/** Paced (or saturated, rate = Infinity) RELAY traffic both ways over `pairs`; one-way latencies. */
async function blastTransport(
  pairs: [TEndpoint, TEndpoint][],
  contentBytes: number,
  rate: number,
  seconds: number,
): Promise<Measure> {
  const flows: { from: TEndpoint; ring: Buffer[]; next: number }[] = [];
  for (const [a, b] of pairs) {
    for (const [from, to] of [
      [a, b],
      [b, a],
    ] as const) {
      const ring: Buffer[] = [];
      for (let i = 0; i < 256; i++)
        ring.push(
          encodeMessage({
            type: 'RELAY',
            fromAllocationId: from.id,
            toAllocationId: to.id,
            data: Buffer.alloc(contentBytes, 0x55),
          }),
        );
      flows.push({ from, ring, next: 0 });
    }
  }
  let received = 0;
  const latencies: number[] = [];
  for (const [a, b] of pairs)
    for (const e of [a, b])
      e.listen((msg) => {
        if (msg.length < 46 || msg[3] !== 10) return;
        received++;
        if (latencies.length < 200_000) latencies.push(performance.now() - msg.readDoubleLE(38));
      });
  let sent = 0;
  const start = performance.now();
  const end = start + seconds * 1000;
  await new Promise<void>((resolve) => {
    const step = () => {
      const now = performance.now();
      if (now >= end) return resolve();
      const due =
        rate === Number.POSITIVE_INFINITY
          ? sent + 32
          : Math.min(sent + 64, Math.floor(((now - start) / 1000) * rate));
      while (sent < due) {
        const f = flows[sent % flows.length]!;
        // A ring of 256 prebuilt messages: a WebSocket may still hold a queued one when it comes
        // round again; only its timestamp changes, so the latency of such a message is understated.
        const b = f.ring[f.next]!;
        f.next = (f.next + 1) % f.ring.length;
        b.writeDoubleLE(performance.now(), 38);
        f.from.send(b);
        sent++;
      }
      if (rate === Number.POSITIVE_INFINITY) setImmediate(step);
      else setTimeout(step, 1);
    };
    step();
  });
  await new Promise((r) => setTimeout(r, 300));
  for (const [a, b] of pairs) for (const e of [a, b]) e.unlisten();
  return { sent, received, latencies, seconds };
}

async function measureTransport(
  child: ChildProcess,
  pairs: [TEndpoint, TEndpoint][],
  size: number,
  rate: number,
): Promise<CaseResult> {
  child.send('start');
  const m = await blastTransport(pairs, size, rate, SECONDS);
  child.send('stop');
  const stats = await nextMessage<ChildStats>(child);
  return {
    stats,
    sent: m.sent,
    ppsPerCpu: stats.forwarded / (stats.cpuMicros / 1e6),
    wallPps: stats.forwarded / m.seconds,
    loss: m.sent === 0 ? 0 : 1 - m.received / m.sent,
    p50: percentile(m.latencies, 50),
    p99: percentile(m.latencies, 99),
  };
}

async function transportRows(relay: { child: ChildProcess; ready: ChildReady }): Promise<BenchRow[]> {
  const rows: BenchRow[] = [];
  const pairs = new Map<Transport, [TEndpoint, TEndpoint][]>();
  try {
    for (const kind of ['udp', 'dtls', 'ws'] as const) {
      const list: [TEndpoint, TEndpoint][] = [];
      for (let i = 0; i < PAIRS; i++) list.push(await transportPair(kind, relay.ready));
      pairs.set(kind, list);
    }
    for (const [label, rate] of [
      ['paced 5k pps, 100 B content', 5000],
      ['saturated, 100 B content', Number.POSITIVE_INFINITY],
    ] as const) {
      const results = new Map<Transport, CaseResult>();
      for (const kind of ['udp', 'dtls', 'ws'] as const) {
        await blastTransport(pairs.get(kind)!, 100, 2000, 0.3); // warm-up
        results.set(kind, await measureTransport(relay.child, pairs.get(kind)!, 100, rate));
      }
      const udp = results.get('udp')!;
      for (const kind of ['dtls', 'ws'] as const) {
        const r = results.get(kind)!;
        rows.push({
          name: `${kind}<->${kind} vs udp<->udp, ${label}`,
          subject: r.ppsPerCpu,
          baseline: udp.ppsPerCpu,
          unit: 'pps/cpu-s',
          ratio: r.ppsPerCpu / udp.ppsPerCpu,
          extra: {
            wallPps: Math.round(r.wallPps),
            udpWallPps: Math.round(udp.wallPps),
            lossPct: +(r.loss * 100).toFixed(3),
            udpLossPct: +(udp.loss * 100).toFixed(3),
            p50us: us(r.p50),
            p99us: us(r.p99),
            udpP50us: us(udp.p50),
            udpP99us: us(udp.p99),
          },
        });
      }
    }
  } finally {
    for (const list of pairs.values()) for (const [a, b] of list) await Promise.all([a.close(), b.close()]);
  }
  return rows;
}

const us = (ms: number) => Math.round(ms * 1000);

// ---- DTLS on both planes: DTLS↔DTLS and DTLS↔UDP --------------------------------------------

/** A relay peer whose datagrams the bench builds itself (plain, or DTLS records sealed through the addon). */
interface FastPeer {
  id: Buffer;
  send(relayMessage: Buffer): void;
  /** Called per datagram received; `open` gives the relay message inside (DTLS: decrypts). */
  listen(h: ((datagram: Buffer) => void) | undefined): void;
  open(datagram: Buffer): Buffer | null;
  close(): Promise<void>;
}

function fastDtlsPeer(addon: Addon, id: Buffer, rl: DtlsClientRecordLayer): FastPeer {
  let seq = rl.writeSeq;
  let handler: ((d: Buffer) => void) | undefined;
  rl.socket.on('message', (d: Buffer) => handler?.(d));
  return {
    id,
    send: (b) => rl.socket.send(addon.sealRecord(rl.cipherSuite, rl.writeKey, rl.writeIv, 23, 1, seq++, b)),
    listen: (h) => {
      handler = h;
    },
    open: (d) => addon.openRecord(rl.cipherSuite, rl.readKey, rl.readIv, d),
    close: () => new Promise((r) => rl.socket.close(() => r())),
  };
}

async function fastUdpPeer(id: Buffer, relayPort: number): Promise<FastPeer> {
  const s = await openSocket();
  let handler: ((d: Buffer) => void) | undefined;
  s.on('message', (d: Buffer) => handler?.(d));
  return {
    id,
    send: (b) => s.send(b, relayPort, '127.0.0.1'),
    listen: (h) => {
      handler = h;
    },
    open: (d) => d,
    close: () => new Promise((r) => s.close(() => r())),
  };
}

/** Binds (and for the join, connects) like UTP, then hands DTLS peers' record layers to the bench. */
async function dtlsBenchPair(
  addon: Addon,
  ready: ChildReady,
  host: 'dtls' | 'udp',
): Promise<[FastPeer, FastPeer]> {
  const api = new RelayApiClient(ready.apiUrl);
  const hostAlloc = await api.allocate(2);
  const joinAlloc = await api.join(await api.joinCode(hostAlloc.allocationId));
  const out: FastPeer[] = [];
  for (const [a, kind] of [
    [hostAlloc, host],
    [joinAlloc, 'dtls'],
  ] as const) {
    const data = relayServerData(a);
    const bind = createBind(0, data.connectionData, data.key);
    const req = encodeMessage({
      type: 'CONNECT_REQUEST',
      allocationId: data.allocationId,
      toConnectionDataLength: 255,
      toConnectionData: data.hostConnectionData,
    });
    if (kind === 'udp') {
      const p = await fastUdpPeer(data.allocationId, ready.udpPort);
      const e: TEndpoint = {
        id: p.id,
        send: p.send,
        listen: p.listen,
        unlisten: () => p.listen(undefined),
        close: p.close,
      };
      await waitForType(e, 1, () => e.send(bind));
      out.push(p);
      continue;
    }
    const c = await DtlsClient.connect({
      host: '127.0.0.1',
      port: ready.dtlsPort,
      identity: data.allocationId,
      psk: data.key,
      cipherSuites: [0x00a8],
    });
    let h: ((b: Buffer) => void) | undefined;
    c.on('message', (m: Buffer) => h?.(m));
    const e: TEndpoint = {
      id: data.allocationId,
      send: (b) => c.send(b),
      listen: (x) => {
        h = x;
      },
      unlisten: () => {
        h = undefined;
      },
      close: async () => c.close(),
    };
    await waitForType(e, 1, () => e.send(bind));
    if (a === joinAlloc) await waitForType(e, 6, () => e.send(req));
    out.push(fastDtlsPeer(addon, data.allocationId, c.detachRecordLayer()));
  }
  return [out[0]!, out[1]!];
}

/**
 * RELAYs both ways over `pairs` for `seconds` at `rate` (Infinity: as fast as the sender goes).
 * Paced: every arrival is opened and timed. Saturated: arrivals are counted unopened.
 */
async function blastFast(pairs: [FastPeer, FastPeer][], rate: number, seconds: number): Promise<Measure> {
  const timed = rate !== Number.POSITIVE_INFINITY;
  const flows: { from: FastPeer; msg: Buffer }[] = [];
  for (const [a, b] of pairs)
    for (const [from, to] of [
      [a, b],
      [b, a],
    ] as const)
      flows.push({
        from,
        msg: encodeMessage({
          type: 'RELAY',
          fromAllocationId: from.id,
          toAllocationId: to.id,
          data: Buffer.alloc(100, 0x55),
        }),
      });
  let received = 0;
  const latencies: number[] = [];
  for (const [a, b] of pairs)
    for (const p of [a, b])
      p.listen((d) => {
        if (!timed) {
          received++;
          return;
        }
        const m = p.open(d);
        if (m === null || m.length < 46 || m[3] !== 10) return;
        received++;
        if (latencies.length < 200_000) latencies.push(performance.now() - m.readDoubleLE(38));
      });
  let sent = 0;
  const start = performance.now();
  const end = start + seconds * 1000;
  await new Promise<void>((resolve) => {
    const step = () => {
      const now = performance.now();
      if (now >= end) return resolve();
      const due = timed ? Math.min(sent + 64, Math.floor(((now - start) / 1000) * rate)) : sent + 64;
      while (sent < due) {
        const f = flows[sent % flows.length]!;
        // A DTLS peer seals a copy (the record is a new buffer); a UDP peer's datagram is sent as
        // is, so its timestamp is rewritten only in the paced case, where no send is still queued.
        if (timed) f.msg.writeDoubleLE(performance.now(), 38);
        f.from.send(f.msg);
        sent++;
      }
      if (timed) setTimeout(step, 1);
      else setImmediate(step);
    };
    step();
  });
  await new Promise((r) => setTimeout(r, 300));
  for (const [a, b] of pairs) for (const p of [a, b]) p.listen(undefined);
  return { sent, received, latencies, seconds };
}

async function measureFast(
  child: ChildProcess,
  pairs: [FastPeer, FastPeer][],
  rate: number,
): Promise<CaseResult> {
  child.send('start');
  const m = await blastFast(pairs, rate, SECONDS);
  child.send('stop');
  const stats = await nextMessage<ChildStats>(child);
  return {
    stats,
    sent: m.sent,
    ppsPerCpu: stats.forwarded / (stats.cpuMicros / 1e6),
    wallPps: stats.forwarded / m.seconds,
    loss: m.sent === 0 ? 0 : 1 - m.received / m.sent,
    p50: percentile(m.latencies, 50),
    p99: percentile(m.latencies, 99),
  };
}

/** DTLS↔DTLS and DTLS↔UDP on the JavaScript and the native plane, against each other and native UDP. */
async function dtlsPlaneRows(
  js: { child: ChildProcess; ready: ChildReady },
  native: { child: ChildProcess; ready: ChildReady },
  nativeUdp: CaseResult | undefined,
): Promise<BenchRow[]> {
  const addon = loadNativeDataplane().addon;
  if (addon === undefined || !addon.dtlsAvailable())
    return [
      {
        name: 'native dtls<->dtls vs js dtls<->dtls',
        subject: 0,
        baseline: 0,
        unit: 'pps/cpu-s',
        ratio: 0,
        extra: { skipped: 'the native addon (and its DTLS record layer) is not built' },
      },
    ];
  const rows: BenchRow[] = [];
  const all: [FastPeer, FastPeer][] = [];
  try {
    for (const host of ['dtls', 'udp'] as const) {
      const kind = `dtls<->${host}`;
      const jsPairs: [FastPeer, FastPeer][] = [];
      const nativePairs: [FastPeer, FastPeer][] = [];
      for (let i = 0; i < PAIRS; i++) {
        jsPairs.push(await dtlsBenchPair(addon, js.ready, host));
        nativePairs.push(await dtlsBenchPair(addon, native.ready, host));
      }
      all.push(...jsPairs, ...nativePairs);
      for (const [label, rate] of [
        ['saturated, 100 B', Number.POSITIVE_INFINITY],
        ['paced 20k pps, 100 B', 20_000],
      ] as const) {
        await blastFast(jsPairs, 5000, 0.3);
        await blastFast(nativePairs, 5000, 0.3);
        const better = (x: CaseResult, y: CaseResult) => (y.ppsPerCpu > x.ppsPerCpu ? y : x);
        let j = await measureFast(js.child, jsPairs, rate);
        let n = await measureFast(native.child, nativePairs, rate);
        j = better(j, await measureFast(js.child, jsPairs, rate));
        n = better(n, await measureFast(native.child, nativePairs, rate));
        rows.push({
          name: `native vs js data plane, ${kind}, ${label}`,
          subject: n.ppsPerCpu,
          baseline: j.ppsPerCpu,
          unit: 'pps/cpu-s',
          ratio: n.ppsPerCpu / j.ppsPerCpu,
          extra: {
            nativeWallPps: Math.round(n.wallPps),
            jsWallPps: Math.round(j.wallPps),
            nativeLossPct: +(n.loss * 100).toFixed(3),
            jsLossPct: +(j.loss * 100).toFixed(3),
            ...(rate === Number.POSITIVE_INFINITY
              ? {}
              : { nativeP50us: us(n.p50), nativeP99us: us(n.p99), jsP50us: us(j.p50), jsP99us: us(j.p99) }),
          },
        });
        if (rate !== Number.POSITIVE_INFINITY) {
          rows.push({
            name: `native vs js data plane, ${kind}, p99 one-way latency at 20k pps`,
            subject: us(n.p99),
            baseline: us(j.p99),
            unit: 'µs p99',
            ratio: j.p99 / n.p99,
            extra: { nativeP50us: us(n.p50), jsP50us: us(j.p50) },
          });
        } else if (host === 'dtls') {
          // Against coturn: the interleaved rounds of nativeVsCoturn (the same CPU measure for both).
          if (nativeUdp !== undefined)
            rows.push({
              name: 'native dtls<->dtls vs native udp<->udp, saturated, 100 B',
              subject: n.ppsPerCpu,
              baseline: nativeUdp.ppsPerCpu,
              unit: 'pps/cpu-s',
              ratio: n.ppsPerCpu / nativeUdp.ppsPerCpu,
            });
        }
      }
    }
  } finally {
    for (const [a, b] of all) await Promise.all([a.close(), b.close()]);
  }
  return rows;
}

/** A free UDP port on 127.0.0.1 (for turnserver, which needs one named). */
async function freeUdpPort(): Promise<number> {
  const s = await openSocket();
  const port = s.address().port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

interface CoturnResult {
  ppsPerCpu: number;
  wallPps: number;
  loss: number;
}

// ---- the native plane against coturn: the same flows, interleaved rounds, CPU from /proc --------

/** Rounds of the native-vs-coturn comparison (medians are reported). */
const VS_ROUNDS = Math.max(1, Number(process.env.GAMEWIRE_BENCH_ROUNDS ?? 5) || 5);
/**
 * Native planes to compare in the same rounds: `;`-separated values of GAMEWIRE_NATIVE_TUNING
 * (native/relay_dataplane.c), e.g. `gso=0,drain=0;` for "without the offloads" next to the default.
 */
const NATIVE_VARIANTS = (process.env.GAMEWIRE_BENCH_NATIVE_TUNING ?? '').split(';');

interface ProcCase {
  ppsPerCpu: number;
  wallPps: number;
  loss: number;
  p50: number;
  p99: number;
  cpu: number;
}

/** Runs `load` and charges it to `pid`: datagrams delivered to the receivers per CPU-second of that process (/proc). */
async function measureByProc(pid: number, load: () => Promise<Measure>): Promise<ProcCase> {
  const cpu0 = cpuSecondsOf(pid);
  const m = await load();
  const cpu = cpuSecondsOf(pid) - cpu0;
  return {
    ppsPerCpu: cpu > 0 ? m.received / cpu : 0,
    wallPps: m.received / m.seconds,
    loss: m.sent === 0 ? 0 : 1 - m.received / m.sent,
    p50: percentile(m.latencies, 50),
    p99: percentile(m.latencies, 99),
    cpu,
  };
}

/**
 * 4 pairs of TURN clients on coturn, each allocation's channel 0x4000 bound to its partner's
 * socket: 8 flows between 8 sockets, as through the relay, one datagram in and one out.
 */
async function coturnPairs(turnPort: number): Promise<[Endpoint, Endpoint][]> {
  const pairs: [Endpoint, Endpoint][] = [];
  for (let i = 0; i < PAIRS; i++) {
    const a = await openSocket();
    const b = await openSocket();
    await turnChannel(a, turnPort, b.address().port);
    await turnChannel(b, turnPort, a.address().port);
    pairs.push([
      { socket: a, id: Buffer.alloc(ID_BYTES, 2 * i + 1), port: a.address().port },
      { socket: b, id: Buffer.alloc(ID_BYTES, 2 * i + 2), port: b.address().port },
    ]);
  }
  return pairs;
}
const ID_BYTES = 16;

/** The relay's own RELAY messages, each carried as a TURN ChannelData payload: the peer receives the same bytes. */
function coturnFlows(pairs: [Endpoint, Endpoint][], contentBytes: number): Flow[] {
  return flowsOf(pairs, contentBytes).map((f) => ({
    ...f,
    ring: f.ring.map((m) => channelData(m)),
    stampAt: 4 + 38,
  }));
}

async function nstats(child: ChildProcess): Promise<Record<string, number>> {
  child.send('nstats');
  return (await nextMessage<{ nstats: Record<string, number> }>(child)).nstats;
}

/** Runs `job`, logging the native plane's datagrams per receive batch, per GSO send, its coalescing sleeps and direct receives meanwhile. */
async function withNativeStats<T>(
  child: ChildProcess,
  key: string,
  log: string[],
  job: () => Promise<T>,
): Promise<T> {
  const a = await nstats(child);
  const r = await job();
  const b = await nstats(child);
  const d = (k: string) => (b[k] ?? 0) - (a[k] ?? 0);
  const per = (x: number, y: number) => (y > 0 ? (x / y).toFixed(1) : '-');
  log.push(
    `${key}: ${per(d('received') + d('dtlsReceived'), d('batches'))} datagrams per receive batch, ${per(d('gsoDatagrams'), d('gsoSends'))} per GSO send (${per(d('gsoDatagrams') * 100, d('forwarded'))} % of forwards in GSO sends), ${per(d('groDatagrams'), d('groReceived'))} per GRO receive, ${d('coalesced')} coalescing sleeps (${d('directReceives')} followed by a receive without poll)`,
  );
  return r;
}

function medianOf(xs: number[]): number {
  const s = xs.filter((x) => Number.isFinite(x)).sort((a, b) => a - b);
  return s.length === 0 ? Number.NaN : s[Math.floor(s.length / 2)]!;
}

interface NativeContender {
  label: string;
  child: ChildProcess;
  ready: ChildReady;
  pairs: [Endpoint, Endpoint][];
  dtls: [FastPeer, FastPeer][];
}

/**
 * The native plane (each variant) and coturn, in VS_ROUNDS interleaved rounds (the order rotates
 * each round): saturated and paced at 20k pps, 8 flows of 100-byte RELAY content, and native
 * DTLS↔DTLS saturated; pps per CPU-second of each server process from /proc, counted at the
 * receivers. Medians of the rounds.
 */
async function nativeVsCoturn(
  natives: NativeContender[],
): Promise<{ rows: BenchRow[]; coturn: CoturnResult | string; log: string[] }> {
  if (!coturnAvailable())
    return { rows: [], coturn: 'turnserver not installed (Debian package coturn)', log: [] };
  const turn = await startCoturn(await freeUdpPort(), PINNED ? FORWARDER_CPU : undefined);
  const turnPairs = await coturnPairs(turn.port);
  const log: string[] = [];
  try {
    type Key = string;
    const results = new Map<Key, ProcCase[]>();
    const add = (k: Key, r: ProcCase) => {
      results.set(k, [...(results.get(k) ?? []), r]);
      log.push(
        `${k}: ${Math.round(r.ppsPerCpu)} pps/cpu-s, wall ${Math.round(r.wallPps)} pps, loss ${(r.loss * 100).toFixed(2)} %, p50 ${us(r.p50)} µs, p99 ${us(r.p99)} µs`,
      );
    };
    const cf = coturnFlows(turnPairs, 100);
    const nf = natives.map((n) => flowsOf(n.pairs, 100));
    // Warm-up.
    await blast(cf, turn.port, 5000, 0.3);
    for (let k = 0; k < natives.length; k++) await blast(nf[k]!, natives[k]!.ready.udpPort, 5000, 0.3);
    const pid = (c: ChildProcess) => c.pid ?? -1;
    for (let round = 0; round < VS_ROUNDS; round++) {
      for (const [label, rate] of [
        ['saturated', Number.POSITIVE_INFINITY],
        ['paced 20k pps', 20_000],
      ] as const) {
        const jobs: [Key, () => Promise<ProcCase>][] = [
          [`coturn ${label}`, () => measureByProc(relayPid(turn), () => blast(cf, turn.port, rate, SECONDS))],
          ...natives.map(
            (n, k) =>
              [
                `native${n.label} ${label}`,
                () =>
                  withNativeStats(n.child, `native${n.label} ${label}`, log, () =>
                    measureByProc(pid(n.child), () => blast(nf[k]!, n.ready.udpPort, rate, SECONDS)),
                  ),
              ] as [Key, () => Promise<ProcCase>],
          ),
        ];
        for (let j = 0; j < jobs.length; j++) {
          const [k, job] = jobs[(j + round) % jobs.length]!;
          add(k, await job());
        }
      }
      for (const n of natives)
        if (n.dtls.length > 0)
          add(
            `native${n.label} dtls<->dtls saturated`,
            await withNativeStats(n.child, `native${n.label} dtls<->dtls saturated`, log, () =>
              measureByProc(pid(n.child), () => blastFast(n.dtls, Number.POSITIVE_INFINITY, SECONDS)),
            ),
          );
    }
    const med = (k: Key) => {
      const xs = results.get(k) ?? [];
      return {
        ppsPerCpu: medianOf(xs.map((x) => x.ppsPerCpu)),
        wallPps: medianOf(xs.map((x) => x.wallPps)),
        loss: medianOf(xs.map((x) => x.loss)),
        p50: medianOf(xs.map((x) => x.p50)),
        p99: medianOf(xs.map((x) => x.p99)),
      };
    };
    const rows: BenchRow[] = [];
    const cs = med('coturn saturated');
    const cp = med('coturn paced 20k pps');
    for (const n of natives) {
      const ns = med(`native${n.label} saturated`);
      const np = med(`native${n.label} paced 20k pps`);
      rows.push({
        name: `native${n.label} vs coturn, saturated, 100 B (median of ${VS_ROUNDS})`,
        subject: ns.ppsPerCpu,
        baseline: cs.ppsPerCpu,
        unit: 'pps/cpu-s',
        ratio: ns.ppsPerCpu / cs.ppsPerCpu,
        extra: {
          nativeWallPps: Math.round(ns.wallPps),
          coturnWallPps: Math.round(cs.wallPps),
          nativeLossPct: +(ns.loss * 100).toFixed(3),
          coturnLossPct: +(cs.loss * 100).toFixed(3),
        },
      });
      rows.push({
        name: `native${n.label} vs coturn, paced 20k pps, 100 B (median of ${VS_ROUNDS})`,
        subject: np.ppsPerCpu,
        baseline: cp.ppsPerCpu,
        unit: 'pps/cpu-s',
        ratio: np.ppsPerCpu / cp.ppsPerCpu,
        extra: { nativeLossPct: +(np.loss * 100).toFixed(3), coturnLossPct: +(cp.loss * 100).toFixed(3) },
      });
      rows.push({
        name: `native${n.label} vs coturn, p99 one-way latency at 20k pps (median of ${VS_ROUNDS})`,
        subject: us(np.p99),
        baseline: us(cp.p99),
        unit: 'µs p99',
        ratio: cp.p99 / np.p99,
        extra: { nativeP50us: us(np.p50), coturnP50us: us(cp.p50) },
      });
      if (n.dtls.length > 0) {
        const nd = med(`native${n.label} dtls<->dtls saturated`);
        rows.push({
          name: `native${n.label} dtls<->dtls vs coturn plain UDP, saturated, 100 B (median of ${VS_ROUNDS})`,
          subject: nd.ppsPerCpu,
          baseline: cs.ppsPerCpu,
          unit: 'pps/cpu-s',
          ratio: nd.ppsPerCpu / cs.ppsPerCpu,
          extra: { nativeWallPps: Math.round(nd.wallPps), nativeLossPct: +(nd.loss * 100).toFixed(3) },
        });
      }
    }
    return { rows, coturn: { ppsPerCpu: cs.ppsPerCpu, wallPps: cs.wallPps, loss: cs.loss }, log };
  } finally {
    for (const [a, b] of turnPairs)
      for (const e of [a, b]) await new Promise<void>((r) => e.socket.close(() => r()));
    await turn.close();
  }
}

/** A native relay child per variant of NATIVE_VARIANTS, with 4 UDP pairs and (when the addon has DTLS) 4 DTLS pairs. */
async function nativeContenders(first?: {
  child: ChildProcess;
  ready: ChildReady;
}): Promise<NativeContender[]> {
  const addon = loadNativeDataplane().addon;
  const out: NativeContender[] = [];
  for (const [k, tuning] of NATIVE_VARIANTS.entries()) {
    const relay =
      k === 0 && first !== undefined && tuning === ''
        ? first
        : await spawnChild('relay-native', tuning === '' ? {} : { GAMEWIRE_NATIVE_TUNING: tuning });
    const pairs: [Endpoint, Endpoint][] = [];
    const dtls: [FastPeer, FastPeer][] = [];
    for (let i = 0; i < PAIRS; i++) pairs.push(await relayPair(relay.ready));
    if (addon?.dtlsAvailable() === true)
      for (let i = 0; i < PAIRS; i++) dtls.push(await dtlsBenchPair(addon, relay.ready, 'dtls'));
    out.push({
      label: tuning === '' ? '' : ` [${tuning}]`,
      child: relay.child,
      ready: relay.ready,
      pairs,
      dtls,
    });
  }
  return out;
}

async function closeContenders(natives: NativeContender[], keep?: ChildProcess): Promise<void> {
  for (const n of natives) {
    for (const [a, b] of n.dtls) await Promise.all([a.close(), b.close()]);
    if (n.child === keep) {
      for (const [a, b] of n.pairs)
        for (const e of [a, b]) await new Promise<void>((r) => e.socket.close(() => r()));
    } else {
      await closeAll(n.pairs, n.child);
    }
  }
}

/** GAMEWIRE_BENCH_UNITY_RELAY_ONLY=coturn: only the native-vs-coturn rounds (and their variants). */
async function runVsCoturnOnly(): Promise<BenchResult> {
  pinSelf('0');
  const natives = await nativeContenders();
  try {
    const vs = await nativeVsCoturn(natives);
    return { suite: 'unity-relay', rows: vs.rows, notes: [...VS_NOTES, ...vs.log] };
  } finally {
    await closeContenders(natives);
    pinSelf('0-255');
  }
}

const VS_NOTES = [
  `native vs coturn rows: ${PAIRS * 2} flows of 100-byte RELAY content between ${PAIRS * 2} sockets (coturn: the same RELAY messages as TURN ChannelData payloads, 4 bytes more in, the same bytes out), both servers pinned to CPU ${FORWARDER_CPU}; ${VS_ROUNDS} interleaved rounds of ${SECONDS} s (order rotated each round), medians; pps/cpu-s = datagrams delivered to the receivers / (user + system CPU seconds of the server process, all threads, from /proc/<pid>/stat); p99 = one-way latency sender → server → receiver.`,
];

async function run(): Promise<BenchResult> {
  if (process.env.GAMEWIRE_BENCH_UNITY_RELAY_ONLY === 'coturn') return runVsCoturnOnly();
  pinSelf('0');
  const rows: BenchRow[] = [];
  const relay = await spawnChild('relay');
  const native = await spawnChild('relay-native');
  const baseline = await spawnChild('baseline');
  const relayPairs: [Endpoint, Endpoint][] = [];
  const nativePairs: [Endpoint, Endpoint][] = [];
  const basePairs: [Endpoint, Endpoint][] = [];
  for (let i = 0; i < PAIRS; i++) {
    relayPairs.push(await relayPair(relay.ready));
    nativePairs.push(await relayPair(native.ready));
    basePairs.push(await baselinePair(baseline.ready, i));
  }
  let nativeSaturated100: CaseResult | undefined;
  try {
    for (const [label, rate, size] of [
      ['paced 10k pps, 100 B content', 10_000, 100],
      ['paced 20k pps, 100 B content', 20_000, 100],
      ['saturated, 100 B content', Number.POSITIVE_INFINITY, 100],
      ['saturated, 1362 B content', Number.POSITIVE_INFINITY, 1362],
    ] as const) {
      const rf = flowsOf(relayPairs, size);
      const nf = flowsOf(nativePairs, size);
      const bf = flowsOf(basePairs, size);
      // Warm all up, then interleave: baseline, JS relay, native relay.
      await blast(rf, relay.ready.udpPort, 5000, 0.3);
      await blast(nf, native.ready.udpPort, 5000, 0.3);
      await blast(bf, baseline.ready.udpPort, 5000, 0.3);
      // Two interleaved rounds; the better round of each side counts (the machine is shared).
      const better = (x: CaseResult, y: CaseResult) => (y.ppsPerCpu > x.ppsPerCpu ? y : x);
      let b = await measure(baseline.child, bf, baseline.ready.udpPort, rate);
      let s = await measure(relay.child, rf, relay.ready.udpPort, rate);
      let n = await measure(native.child, nf, native.ready.udpPort, rate);
      b = better(b, await measure(baseline.child, bf, baseline.ready.udpPort, rate));
      s = better(s, await measure(relay.child, rf, relay.ready.udpPort, rate));
      n = better(n, await measure(native.child, nf, native.ready.udpPort, rate));
      if (rate === Number.POSITIVE_INFINITY && size === 100) nativeSaturated100 = n;
      const direct =
        rate !== Number.POSITIVE_INFINITY ? await blast(rf, relay.ready.udpPort, rate, 1, true) : undefined;
      for (const [name, x] of [
        [`forward ${label}`, s],
        [`native forward ${label}`, n],
      ] as const) {
        const drops = Object.entries(x.stats.dropped)
          .map(([k, v]) => `${k}:${v}`)
          .join(',');
        const extra: Record<string, number | string> = {
          relayRxPct: x.sent === 0 ? 0 : +((x.stats.received / x.sent) * 100).toFixed(2),
          relayDrops: drops === '' ? 'none' : drops,
          wallPps: Math.round(x.wallPps),
          baseWallPps: Math.round(b.wallPps),
          lossPct: +(x.loss * 100).toFixed(3),
          baseLossPct: +(b.loss * 100).toFixed(3),
        };
        if (direct !== undefined) {
          const direct50 = percentile(direct.latencies, 50);
          const direct99 = percentile(direct.latencies, 99);
          extra.addedP50us = us(x.p50 - direct50);
          extra.addedP99us = us(x.p99 - direct99);
          extra.baseAddedP50us = us(b.p50 - direct50);
          extra.baseAddedP99us = us(b.p99 - direct99);
        } else {
          extra.p50us = us(x.p50);
          extra.p99us = us(x.p99);
          extra.baseP50us = us(b.p50);
          extra.baseP99us = us(b.p99);
        }
        rows.push({
          name,
          subject: x.ppsPerCpu,
          baseline: b.ppsPerCpu,
          unit: 'pps/cpu-s',
          ratio: x.ppsPerCpu / b.ppsPerCpu,
          extra,
        });
      }
      if (rate === 20_000) {
        // Latency: the native plane against the JavaScript one (ratio ≥ 1: native no worse).
        rows.push({
          name: 'native vs js data plane, p99 one-way latency at 20k pps',
          subject: us(n.p99),
          baseline: us(s.p99),
          unit: 'µs p99',
          ratio: s.p99 / n.p99,
          extra: { nativeP50us: us(n.p50), jsP50us: us(s.p50) },
        });
      }
    }
    const natives = await nativeContenders(native);
    try {
      const vs = await nativeVsCoturn(natives);
      rows.push(...vs.rows);
      if (process.env.GAMEWIRE_BENCH_VERBOSE === '1') for (const line of vs.log) console.log(`  ${line}`);
      if (typeof vs.coturn === 'string')
        rows.push({
          name: 'native forward vs coturn (one relay thread), saturated, 100 B',
          subject: nativeSaturated100?.ppsPerCpu ?? 0,
          baseline: 0,
          unit: 'pps/cpu-s',
          ratio: 0,
          extra: { skipped: vs.coturn },
        });
    } finally {
      await closeContenders(natives, native.child);
    }
    rows.push(...(await dtlsPlaneRows(relay, native, nativeSaturated100)));
    rows.push(...(await transportRows(relay)));
  } finally {
    await closeAll(relayPairs, relay.child);
    await closeAll(nativePairs, native.child);
    await closeAll(basePairs, baseline.child);
    pinSelf('0-255');
  }
  return {
    suite: 'unity-relay',
    rows,
    notes: [
      `${PAIRS} pairs, both directions (${PAIRS * 2} flows), 2 rounds of ${SECONDS} s per case (better round kept for each side); each forwarder in a child process${PINNED ? `, pinned to CPU ${FORWARDER_CPU} (taskset), the load generator to CPU 0` : ' (not pinned: taskset or a second CPU missing)'}.`,
      '"forward" rows: the JavaScript data plane (--dataplane js); "native forward" rows: the native data plane (--dataplane native); both against the same hand-written Node forwarder (a Map lookup, one send).',
      'pps/cpu-s = datagrams forwarded / (user + system CPU seconds of the forwarding process, all its threads).',
      'relayRxPct = share of sent datagrams the relay process received (the rest was lost before it, in the kernel); relayDrops = datagrams the relay itself dropped, by reason.',
      'addedP50/P99 = one-way latency through the hop minus straight to the peer on loopback, paced cases; saturated cases show raw one-way latency (queueing).',
      'coturn: Debian turnserver, --relay-threads=1, anonymous, UDP.',
      ...VS_NOTES,
      "Transport rows: the JavaScript-plane relay, 4 pairs whose both ends use DTLS (AES-128-GCM), or WebSocket, measured right after the same pairs on UDP; p50/p99 = one-way latency sender → relay → receiver, including the clients' own encryption/framing.",
      'DTLS plane rows: 4 pairs (8 flows) of DTLS↔DTLS or DTLS client ↔ UDP host, AES-128-GCM, 100-byte RELAY content, on the JavaScript plane (--dataplane js) and the native plane (--dataplane native) in interleaved rounds; the DtlsClient handshakes, then the bench seals and opens records itself through the addon so the load generator is not the bottleneck; saturated rounds count datagrams without opening them.',
    ],
  };
}

export const suite: BenchSuite = {
  name: 'unity-relay',
  description:
    'RELAY forwarding on both data planes vs a hand-written Node forwarder and coturn; DTLS and WebSocket vs UDP',
  run,
};
