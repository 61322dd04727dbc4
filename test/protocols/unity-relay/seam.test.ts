/**
 * unity-relay's UDP bindings, DTLS associations and WebSocket connections on the connection seam: the
 * `gamewire:connection:*` events fire for each (open, close with its reason, refusals at the
 * caps), against the real relay with real clients (the project's DtlsClient, the `ws` package)
 * on 127.0.0.x.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { WebSocket as WsClient } from 'ws';
import {
  startUnityRelay,
  type UnityRelayInstance,
  type UnityRelayOptions,
} from '../../../src/protocols/unity-relay/index.js';
import {
  loadNativeDataplane,
  type NativeRelaySocket,
} from '../../../src/protocols/unity-relay/native-dataplane.js';
import { DtlsClient } from '../../../src/transports/dtls/index.js';
import { watchConnections } from '../../helpers/connection-events.js';
import { waitFor } from '../../helpers/wait.js';
import { type AllocationJson, Peer, UtpDriver, utpBind, utpClose, utpConnectRequest } from './utp.js';

const cleanup: (() => unknown)[] = [];
let server: UnityRelayInstance | undefined;
afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
  await server?.close();
  server = undefined;
});

async function start(options: UnityRelayOptions): Promise<UnityRelayInstance> {
  server = await startUnityRelay({ host: '127.0.0.1', port: 0, apiPort: 0, ...options });
  return server;
}

async function allocate(s: UnityRelayInstance): Promise<AllocationJson> {
  const res = await fetch(`${s.apiUrl}/v1/allocate`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ maxConnections: 2 }),
  });
  expect(res.status).toBe(201);
  return ((await res.json()) as { data: { allocation: AllocationJson } }).data.allocation;
}

function keys(a: AllocationJson) {
  const cd = Buffer.from(a.connectionData, 'base64');
  return {
    id: Buffer.from(a.allocationIdBytes, 'base64'),
    key: Buffer.from(a.key, 'base64'),
    cd: Buffer.concat([cd, Buffer.alloc(255 - cd.length)]),
  };
}

function ws(port: number, localAddress = '127.0.0.1'): WsClient {
  const c = new WsClient(`ws://127.0.0.1:${port}/`, { localAddress });
  c.on('error', () => {});
  cleanup.push(() => c.terminate());
  return c;
}

function opened(c: WsClient): Promise<void> {
  return new Promise((resolve, reject) => {
    c.once('open', () => resolve());
    c.once('error', reject);
  });
}

describe('unity-relay DTLS on the connection seam', () => {
  it('an association publishes open, and close with the reason (peer closed; the server closing ends the rest)', async () => {
    const watch = watchConnections('unity-relay');
    cleanup.push(() => watch.stop());
    const s = await start({ dtlsPort: 0 });
    const k = keys(await allocate(s));
    const connect = () =>
      DtlsClient.connect({
        host: '127.0.0.1',
        port: s.dtls!.port,
        identity: k.id,
        psk: k.key,
        timeoutMs: 10_000,
      });

    const first = await connect();
    cleanup.push(() => first.close());
    const open = await watch.next('open', (e) => e.transport === 'dtls', 'the association');
    expect(open.addressKey).toBe('127.0.0.1');
    // A BIND through it: one record in, the BIND_RECEIVED out.
    const replies: Buffer[] = [];
    first.on('message', (m: Buffer) => replies.push(Buffer.from(m)));
    first.send(utpBind(1, k.cd, k.key));
    await waitFor(() => replies.length > 0, { what: 'the BIND_RECEIVED' });
    first.close();
    const closed = await watch.next('close', (e) => e.transport === 'dtls', 'the client closing');
    expect(closed).toMatchObject({ reason: 'peer_closed', messagesIn: 1, messagesOut: 1 });
    expect(closed.bytesIn).toBe(295);

    // A second association bound, then the allocation is released: the binding ends, so does it.
    const second = await connect();
    cleanup.push(() => second.close());
    second.send(utpBind(2, k.cd, k.key));
    await waitFor(() => s.dtls!.table.size === 1, { what: 'the second association' });
    await s.close();
    server = undefined;
    const last = await watch.next(
      'close',
      (e) => e !== closed && e.transport === 'dtls',
      'the server closing',
    );
    expect(['server_closing', 'unbound']).toContain(last.reason);
    expect(watch.of('open', 'dtls')).toHaveLength(2);
  });
});

describe('unity-relay WebSocket on the connection seam', () => {
  it('open at accept; close reasons: text_frame, peer_closed, server_closing', async () => {
    const watch = watchConnections('unity-relay');
    cleanup.push(() => watch.stop());
    const s = await start({ wsPort: 0 });
    const port = s.ws!.port;

    const texter = ws(port);
    await opened(texter);
    expect((await watch.next('open', (e) => e.transport === 'websocket', 'the first')).addressKey).toBe(
      '127.0.0.1',
    );
    texter.send('not binary');
    expect((await watch.next('close', () => true, 'the text frame close')).reason).toBe('text_frame');

    const leaver = ws(port);
    await opened(leaver);
    leaver.send(Buffer.from([0, 1, 2]), { binary: true });
    await waitFor(() => [...s.ws!.table.connections()].some((c) => c.messagesIn === 1), {
      what: 'one message counted',
    });
    leaver.close();
    const left = await watch.next('close', (e) => e.reason === 'peer_closed', 'the client leaving');
    expect(left).toMatchObject({ transport: 'websocket', messagesIn: 1 });

    const stayer = ws(port);
    await opened(stayer);
    await waitFor(() => s.ws!.table.size === 1, { what: 'one connection' });
    await s.close();
    server = undefined;
    await watch.next('close', (e) => e.reason === 'server_closing', 'the server closing');
    expect(watch.of('open', 'websocket')).toHaveLength(3);
  });

  it('a connection that never binds closes as never_bound', async () => {
    const watch = watchConnections('unity-relay');
    cleanup.push(() => watch.stop());
    const s = await start({ wsPort: 0, ws: { bindTimeoutMs: 200, sweepIntervalMs: 50 } });
    const silent = ws(s.ws!.port);
    await opened(silent);
    const closed = await watch.next('close', (e) => e.transport === 'websocket', 'the never-bound close');
    expect(closed.reason).toBe('never_bound');
  });

  it('refusals at the caps are drop events: per address (per_ip_limit), in all (over_capacity)', async () => {
    const watch = watchConnections('unity-relay');
    cleanup.push(() => watch.stop());
    const s = await start({ wsPort: 0, wsMaxConnections: 3, wsMaxConnectionsPerIp: 2 });
    const port = s.ws!.port;
    const bound: WsClient[] = [];
    for (const local of ['127.0.0.1', '127.0.0.1', '127.0.0.2']) {
      const c = ws(port, local);
      await opened(c);
      bound.push(c);
    }
    // Bind them all: bound connections are never evicted for a newcomer.
    for (const c of bound) {
      const k = keys(await allocate(s));
      const reply = new Promise((r) => c.once('message', r));
      c.send(utpBind(1, k.cd, k.key));
      await reply;
    }
    ws(port, '127.0.0.1');
    expect(await watch.next('drop', () => true, 'the third from 127.0.0.1')).toMatchObject({
      transport: 'websocket',
      reason: 'per_ip_limit',
      addressKey: '127.0.0.1',
    });
    ws(port, '127.0.0.3');
    await watch.next('drop', (e) => e.reason === 'over_capacity', 'the fourth, over capacity');
    expect(s.ws!.table.size).toBe(3);
  });
});

const nativeBuilt = loadNativeDataplane().addon !== undefined;
/** Both data planes; the native one wherever it is built (on Linux it must be: dataplane.test.ts). */
const planes = (['js', 'native'] as const).filter(
  (p) => p === 'js' || nativeBuilt || process.platform === 'linux',
);

async function post(s: UnityRelayInstance, path: string, body: unknown): Promise<any> {
  const res = await fetch(`${s.apiUrl}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return res.json();
}

/** One BIND, answered (no retries, so the counters are exact). */
async function bindOnce(d: UtpDriver, peer = d.peer): Promise<void> {
  peer.send(utpBind(d.nonce++, d.connectionData, d.key));
  expect(await peer.nextOfType(1, 10_000), 'BIND_RECEIVED').toBeDefined();
}

/** A host and a client bound over UDP (one BIND each) and connected (one CONNECT_REQUEST). */
async function udpPair(s: UnityRelayInstance): Promise<[UtpDriver, UtpDriver]> {
  const hostAlloc: AllocationJson = (await post(s, '/v1/allocate', { maxConnections: 2 })).data.allocation;
  const code = (await post(s, '/v1/joincode', { allocationId: hostAlloc.allocationId })).data.joinCode;
  const clientAlloc: AllocationJson = (await post(s, '/v1/join', { joinCode: code })).data.allocation;
  const host = await UtpDriver.create(hostAlloc);
  const client = await UtpDriver.create(clientAlloc);
  cleanup.push(
    () => host.close(),
    () => client.close(),
  );
  await bindOnce(host);
  await bindOnce(client);
  client.peer.send(utpConnectRequest(client.id, client.hostConnectionData));
  expect((await client.peer.nextOfType(6, 10_000))?.[3], 'ACCEPTED').toBe(6);
  return [host, client];
}

describe.each(planes)('unity-relay UDP bindings on the connection seam (%s data plane)', (dataplane) => {
  it('a BIND opens a udp connection; RELAYs count on both ends; CLOSE, a re-home, the server closing each close it with its reason', async () => {
    const watch = watchConnections('unity-relay');
    cleanup.push(() => watch.stop());
    const s = await start({ dataplane });
    expect(s.dataplane).toBe(dataplane);
    const [host, client] = await udpPair(s);
    const hostRemote = `127.0.0.1:${host.peer.port}`;
    const clientRemote = `127.0.0.1:${client.peer.port}`;
    const hostOpen = await watch.next('open', (e) => e.remote === hostRemote, 'the host binding');
    expect(hostOpen).toMatchObject({ transport: 'udp', addressKey: '127.0.0.1' });
    await watch.next('open', (e) => e.remote === clientRemote && e.transport === 'udp', 'the client binding');
    expect(s.relay.udpTable.size).toBe(2);

    const stats = () => (s.relay.socket as NativeRelaySocket).stats();
    const before = dataplane === 'native' ? stats().forwarded : 0;
    const n = 20;
    const sent = Array.from({ length: n }, (_, i) => client.relay(host.id, Buffer.from(`m${i}`)));
    for (let i = 0; i < n; i++)
      expect((await host.peer.nextOfType(10, 10_000))?.subarray(38).toString()).toBe(`m${i}`);
    // On the native plane they never entered JavaScript: the counters come from the addon's.
    if (dataplane === 'native') expect(stats().forwarded - before).toBe(n);
    const relayBytes = sent.reduce((t, b) => t + b.length, 0);

    client.peer.send(utpClose(client.id));
    const clientClosed = await watch.next('close', (e) => e.remote === clientRemote, 'the CLOSE');
    expect(clientClosed).toMatchObject({
      transport: 'udp',
      addressKey: '127.0.0.1',
      reason: 'peer_closed',
      // BIND, CONNECT_REQUEST, the RELAYs, CLOSE in; BIND_RECEIVED, ACCEPTED out.
      messagesIn: 3 + n,
      bytesIn: 295 + 276 + relayBytes + 20,
      messagesOut: 2,
      bytesOut: 4 + 36,
    });
    expect(s.store.find(client.id, 0)!.state).toBe('allocated');

    // The host's peer left: it gets the DISCONNECT, counted as sent to it with the RELAYs.
    expect(await host.peer.nextOfType(9, 10_000)).toBeDefined();
    // The host binds again from another port: the old binding closes as re-homed.
    const moved = await Peer.open('127.0.0.1', s.udpPort);
    cleanup.push(() => moved.close());
    await bindOnce(host, moved);
    const rehomed = await watch.next('close', (e) => e.remote === hostRemote, 'the re-home');
    expect(rehomed).toMatchObject({
      reason: 'rebound',
      messagesIn: 1,
      bytesIn: 295,
      messagesOut: 2 + n,
      bytesOut: 4 + relayBytes + 36,
    });
    await watch.next('open', (e) => e.remote === `127.0.0.1:${moved.port}`, 'the new binding');

    await s.close();
    server = undefined;
    const last = await watch.next(
      'close',
      (e) => e.remote === `127.0.0.1:${moved.port}`,
      'the server closing',
    );
    expect(last).toMatchObject({ reason: 'server_closing', messagesIn: 1, messagesOut: 1 });
    expect(watch.of('open', 'udp')).toHaveLength(3);
    expect(watch.of('close', 'udp')).toHaveLength(3);
  });

  it('close() on the connection unbinds the allocation as a CLOSE would (its peer told)', async () => {
    const watch = watchConnections('unity-relay');
    cleanup.push(() => watch.stop());
    const s = await start({ dataplane });
    const [host, client] = await udpPair(s);
    const clientLink = [...s.relay.udpTable.connections()].find((c) => c.port === client.peer.port)!;
    expect(clientLink).toMatchObject({ transport: 'udp', addressKey: '127.0.0.1', open: true });
    clientLink.close('closed_by_server');
    expect(clientLink.open).toBe(false);
    expect(s.store.find(client.id, 0)!.state).toBe('allocated');
    expect(
      await watch.next('close', (e) => e.remote === `127.0.0.1:${client.peer.port}`, 'the server-side close'),
    ).toMatchObject({ transport: 'udp', reason: 'closed_by_server' });
    expect(await host.peer.nextOfType(9, 10_000), 'the DISCONNECT to the host').toBeDefined();
    expect(s.relay.udpTable.size).toBe(1);
  });

  it('idle expiry closes the binding as idle_timeout', async () => {
    const watch = watchConnections('unity-relay');
    cleanup.push(() => watch.stop());
    const s = await start({ dataplane, idleTimeoutMs: 300, hostAloneTimeoutMs: 300 });
    const alloc: AllocationJson = (await post(s, '/v1/allocate', { maxConnections: 2 })).data.allocation;
    const host = await UtpDriver.create(alloc);
    cleanup.push(() => host.close());
    await bindOnce(host);
    // It says nothing more: idle expiry ends its binding.
    const idle = await watch.next(
      'close',
      (e) => e.remote === `127.0.0.1:${host.peer.port}`,
      'the idle expiry',
    );
    expect(idle).toMatchObject({ transport: 'udp', addressKey: '127.0.0.1', reason: 'idle_timeout' });
    expect(s.store.find(host.id, 0)!.state).toBe('expired');
    expect(s.relay.udpTable.size).toBe(0);
  });
});
