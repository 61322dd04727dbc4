/**
 * The transports' own limits, each enforced and tested: WebSocket connections that never bind or
 * go silent are closed, a peer that does not read gets messages dropped instead of queued without
 * bound, random frames only give counted drops, a full WebSocket endpoint evicts connections that
 * have not bound (never bound ones), and the allocation lists all four transports.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import fc from 'fast-check';
import { afterEach, describe, expect, it } from 'vitest';
import {
  RelayApiClient,
  relayServerData,
  UnityRelayClient,
} from '../../../src/protocols/unity-relay/client.js';
import {
  startUnityRelay,
  type UnityRelayInstance,
  type UnityRelayOptions,
} from '../../../src/protocols/unity-relay/index.js';
import { elapse, waitFor } from '../../helpers/wait.js';
import { hasProgram } from '../../transports/dtls/helpers.js';
import { type AllocationJson, UtpDriver, utpBind, utpConnectRequest } from './utp.js';
import { RawWsClient } from './wsraw.js';

let server: UnityRelayInstance | undefined;
const cleanup: (() => unknown)[] = [];

afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
  await server?.close();
  server = undefined;
});

async function start(options: UnityRelayOptions = {}): Promise<UnityRelayInstance> {
  server = await startUnityRelay({ host: '127.0.0.1', port: 0, apiPort: 0, wsPort: 0, ...options });
  return server;
}

async function post(pathName: string, body: unknown): Promise<any> {
  const res = await fetch(`${server!.apiUrl}${pathName}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return res.json();
}

async function rawClient(port: number): Promise<RawWsClient> {
  const c = await RawWsClient.connect(port);
  cleanup.push(() => c.close());
  return c;
}

describe('unity-relay transport limits', () => {
  it('closes a WebSocket that never binds, and one that goes silent', async () => {
    const s = await start({ ws: { bindTimeoutMs: 300, idleTimeoutMs: 5000, sweepIntervalMs: 50 } });
    const lazy = await rawClient(s.ws!.port);
    const f = await lazy.next(5000);
    expect(f?.opcode).toBe(0x8);
    expect(f?.payload.readUInt16BE(0)).toBe(1008);
    expect(s.metrics.closed.get('ws_never_bound')).toBe(1);
    await server!.close();

    const s2 = await start({ ws: { bindTimeoutMs: 60_000, idleTimeoutMs: 300, sweepIntervalMs: 50 } });
    const silent = await rawClient(s2.ws!.port);
    await waitFor(() => silent.closed, { what: 'the silent WebSocket closed for idleness' });
    expect(s2.metrics.closed.get('ws_idle')).toBe(1);
  });

  it('drops messages to a WebSocket peer that does not read, instead of queueing them without bound', async () => {
    const s = await start({ ws: { maxBufferedBytes: 64 * 1024 } });
    const host = (await post('/v1/allocate', { maxConnections: 2 })).data.allocation as AllocationJson;
    const code = (await post('/v1/joincode', { allocationId: host.allocationId })).data.joinCode;
    const join = (await post('/v1/join', { joinCode: code })).data.allocation as AllocationJson;
    const h = await UtpDriver.create(host);
    cleanup.push(() => h.close());
    expect(await h.bind()).toBe(true);
    const pad = (b: Buffer) => Buffer.concat([b, Buffer.alloc(255 - b.length)]);
    const id = Buffer.from(join.allocationIdBytes, 'base64');
    const c = await rawClient(s.ws!.port);
    c.sendBinary(
      utpBind(0, pad(Buffer.from(join.connectionData, 'base64')), Buffer.from(join.key, 'base64')),
    );
    expect(await c.nextOfType(1)).toBeDefined();
    c.sendBinary(utpConnectRequest(id, pad(Buffer.from(join.hostConnectionData!, 'base64'))));
    expect(await c.nextOfType(6)).toBeDefined();
    // The client stops reading; the host sends 1300-byte messages, paced a little, until the
    // kernel's buffers are full and the relay starts dropping (at most ~130 MB).
    c.socket.pause();
    const drops = () => s.metrics.dropped.get('ws_backpressure') ?? 0;
    for (let burst = 0; burst < 1000 && drops() <= 1000; burst++) {
      for (let i = 0; i < 100; i++) h.relay(id, Buffer.alloc(1300, i));
      await elapse(5, 'pacing: the host sends in bursts, as a game does, not in one synchronous loop');
    }
    expect(drops()).toBeGreaterThan(1000);
    // The server holds at most the limit plus what the kernel buffers, not the 8 MB.
    const link = [...s.ws!.links][0]!;
    expect(link.ws.bufferedAmount).toBeLessThan(64 * 1024 + 2 * 1400);
  });

  it('random binary frames over WebSocket only give counted drops; the connection keeps serving', async () => {
    const s = await start();
    const c = await rawClient(s.ws!.port);
    await fc.assert(
      fc.asyncProperty(fc.uint8Array({ minLength: 0, maxLength: 1472 }), async (bytes) => {
        c.sendBinary(Buffer.from(bytes));
      }),
      { numRuns: 300 },
    );
    // Valid traffic still works on the same connection afterwards.
    const a = (await post('/v1/allocate', { maxConnections: 2 })).data.allocation as AllocationJson;
    const pad = (b: Buffer) => Buffer.concat([b, Buffer.alloc(255 - b.length)]);
    c.sendBinary(utpBind(0, pad(Buffer.from(a.connectionData, 'base64')), Buffer.from(a.key, 'base64')));
    expect((await c.nextOfType(1, 5000))?.payload.toString('hex')).toBe('da720001');
    expect(s.metrics.dropped.get('internal_error')).toBeUndefined();
    expect(c.closed).toBe(false);
  });

  it('the allocation JSON lists udp, dtls, ws and wss with the right secure flags', async () => {
    const dataDir = mkdtempSync(path.join(tmpdir(), 'gamewire-four-'));
    cleanup.push(() => rmSync(dataDir, { recursive: true, force: true }));
    const s = await start({ dtlsPort: 0, wssPort: 0, dataDir, publicHost: '198.51.100.7' });
    const a = (await post('/v1/allocate', { maxConnections: 2 })).data.allocation;
    expect(
      a.serverEndpoints.map((e: any) => [e.connectionType, e.network, e.secure, e.host, e.port]),
    ).toEqual([
      ['udp', 'udp', false, '198.51.100.7', s.udpPort],
      ['dtls', 'udp', true, '198.51.100.7', s.dtls!.port],
      ['ws', 'tcp', false, '198.51.100.7', s.ws!.port],
      ['wss', 'tcp', true, '198.51.100.7', s.wss!.port],
    ]);
  });

  describe('a full WebSocket endpoint', () => {
    /** A host and a joiner over ws, from 127.0.0.1; quick to give up (a refused bind fails fast). */
    async function wsPair(s: UnityRelayInstance) {
      const api = new RelayApiClient(s.apiUrl);
      const hostAlloc = await api.allocate(1);
      const joinAlloc = await api.join(await api.joinCode(hostAlloc.allocationId));
      const options = { connectionType: 'ws' as const, retryMs: 200, maxAttempts: 10 };
      const host = new UnityRelayClient(relayServerData(hostAlloc, 'ws'), options);
      const joiner = new UnityRelayClient(relayServerData(joinAlloc, 'ws'), options);
      cleanup.push(
        () => host.close(),
        () => joiner.close(),
      );
      return { host, joiner };
    }

    /** A TCP connection that sends half an upgrade request and holds. */
    async function halfOpen(port: number, localAddress: string): Promise<net.Socket> {
      const socket = net.connect({ port, host: '127.0.0.1', localAddress });
      socket.on('error', () => {});
      cleanup.push(() => socket.destroy());
      await new Promise<void>((resolve) => socket.once('connect', () => resolve()));
      socket.write('GET / HTTP/1.1\r\nHost: relay\r\n');
      return socket;
    }

    /** Resolves with the next message `to` receives. */
    const nextMessage = (to: UnityRelayClient) =>
      new Promise<Buffer>((resolve) => to.once('message', (data: Buffer) => resolve(Buffer.from(data))));

    it('a newcomer evicts the oldest connection that has not bound; bound players keep relaying', async () => {
      const s = await start({ wsMaxConnections: 4 });
      const { host, joiner } = await wsPair(s);
      await host.bind();
      // Three half-open upgrades from other addresses take every other slot.
      const held: net.Socket[] = [];
      for (const a of ['127.0.0.2', '127.0.0.3', '127.0.0.4']) held.push(await halfOpen(s.ws!.port, a));
      // The joiner still gets in: its connection evicts the oldest half-open one.
      await joiner.bind();
      await joiner.connect();
      const toHost = nextMessage(host);
      joiner.send(Buffer.from('after the eviction'));
      expect((await toHost).toString()).toBe('after the eviction');
      expect(s.metrics.closed.get('ws_evicted')).toBe(1);
      await waitFor(() => held[0]!.destroyed || held[0]!.readableEnded, {
        what: 'the oldest half-open closed',
      });
      expect(held[1]!.destroyed || held[1]!.readableEnded).toBe(false);
      // Two newcomers more: they evict the two half-open ones left, never the bound players.
      await halfOpen(s.ws!.port, '127.0.0.5');
      await halfOpen(s.ws!.port, '127.0.0.6');
      await waitFor(() => s.metrics.closed.get('ws_evicted') === 3, { what: 'two more evictions' });
      const toJoiner = nextMessage(joiner);
      host.send(Buffer.from('still here'), joiner.data.allocationId);
      expect((await toJoiner).toString()).toBe('still here');
      expect(host.state).toBe('bound');
      expect(joiner.state).toBe('bound');
    });

    it('when every slot is held by a bound player, a newcomer is refused', async () => {
      const s = await start({ wsMaxConnections: 2 });
      const { host, joiner } = await wsPair(s);
      await host.bind();
      await joiner.bind();
      await joiner.connect();
      const refused = await halfOpen(s.ws!.port, '127.0.0.2');
      await waitFor(() => refused.destroyed || refused.readableEnded, {
        what: 'the refused connection closed',
      });
      expect(s.metrics.dropped.get('ws_connection_cap')).toBe(1);
      expect(s.metrics.closed.get('ws_evicted')).toBeUndefined();
      const toHost = nextMessage(host);
      joiner.send(Buffer.from('served'));
      expect((await toHost).toString()).toBe('served');
    });
  });

  it.runIf(hasProgram('ss'))(
    'the WebSocket endpoint and the API listen with a deep backlog: a connect burst does not drop real clients',
    async () => {
      const s = await start();
      const somaxconn = Number(readFileSync('/proc/sys/net/core/somaxconn', 'utf8'));
      // For a listening socket, ss shows the backlog in the Send-Q column.
      const backlog = (port: number) => {
        const line = execFileSync('ss', ['-Hltn', `sport = :${port}`], { encoding: 'utf8' }).trim();
        return Number(line.split(/\s+/)[2]);
      };
      const apiPort = Number(new URL(s.apiUrl).port);
      expect(backlog(s.ws!.port)).toBe(Math.min(4096, somaxconn));
      expect(backlog(apiPort)).toBe(Math.min(4096, somaxconn));
    },
  );
});
