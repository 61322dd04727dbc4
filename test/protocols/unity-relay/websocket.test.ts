/**
 * The WebSocket transports (`ws`, `wss`) end to end: a raw client that sends Unity Transport's
 * exact upgrade request and applies its checks to the reply byte for byte, Node's built-in
 * WebSocket, the `ws` client over TLS, and UDP peers on the other side of the relay.
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { WebSocket as WsClient } from 'ws';
import {
  startUnityRelay,
  type UnityRelayInstance,
  type UnityRelayOptions,
} from '../../../src/protocols/unity-relay/index.js';
import { waitFor } from '../../helpers/wait.js';
import { type AllocationJson, UtpDriver, utpBind, utpConnectRequest, utpPing, utpRelay } from './utp.js';
import { RawWsClient } from './wsraw.js';

let server: UnityRelayInstance | undefined;
const cleanup: (() => unknown)[] = [];

afterEach(async () => {
  for (const c of cleanup.splice(0).reverse()) await c();
  await server?.close();
  server = undefined;
});

async function start(options: UnityRelayOptions = {}): Promise<UnityRelayInstance> {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'gamewire-ws-'));
  cleanup.push(() => rmSync(dataDir, { recursive: true, force: true }));
  server = await startUnityRelay({
    host: '127.0.0.1',
    port: 0,
    apiPort: 0,
    wsPort: 0,
    wssPort: 0,
    dataDir,
    ...options,
  });
  return server;
}

async function post(pathName: string, body: unknown): Promise<any> {
  const res = await fetch(`${server!.apiUrl}${pathName}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  expect(res.status).toBeLessThan(300);
  return res.json();
}

async function hostAndJoin(): Promise<{ host: AllocationJson; join: AllocationJson }> {
  const host = (await post('/v1/allocate', { maxConnections: 4 })).data.allocation as AllocationJson;
  const code = (await post('/v1/joincode', { allocationId: host.allocationId })).data.joinCode;
  const join = (await post('/v1/join', { joinCode: code })).data.allocation as AllocationJson;
  return { host, join };
}

function keys(a: AllocationJson) {
  const pad = (b: Buffer) => Buffer.concat([b, Buffer.alloc(255 - b.length)]);
  return {
    id: Buffer.from(a.allocationIdBytes, 'base64'),
    key: Buffer.from(a.key, 'base64'),
    cd: pad(Buffer.from(a.connectionData, 'base64')),
    hostCd: pad(Buffer.from(a.hostConnectionData ?? a.connectionData, 'base64')),
  };
}

async function udpHost(a: AllocationJson): Promise<UtpDriver> {
  const d = await UtpDriver.create(a);
  cleanup.push(() => d.close());
  expect(await d.bind()).toBe(true);
  return d;
}

async function rawClient(port: number, options: Parameters<typeof RawWsClient.connect>[1] = {}) {
  const c = await RawWsClient.connect(port, options);
  cleanup.push(() => c.close());
  return c;
}

describe('unity-relay over WebSocket', () => {
  it("UTP's exact request gets a 101 UTP accepts: no protocol or extension headers, even when offered", async () => {
    const s = await start();
    for (const extra of [
      '',
      'Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\nSec-WebSocket-Protocol: unity, chat\r\nOrigin: http://example.com\r\n',
    ]) {
      const c = await rawClient(s.ws!.port, { extra });
      expect(c.utpRejections()).toEqual([]);
      // Byte for byte: the status line and exactly these three headers, nothing else.
      expect(c.head).toBe(
        `HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ${c.expectedAccept}\r\n\r\n`,
      );
      // And the whole reply fits UTP's receive buffer (2 x 1472 bytes).
      expect(c.head.length).toBeLessThan(2 * 1472);
    }
  });

  it('binds over ws, connects to a UDP-bound host, relays both ways; frames are 0x82 unmasked; pings answered', async () => {
    const s = await start();
    const { host, join } = await hostAndJoin();
    const h = await udpHost(host);
    const j = keys(join);
    const c = await rawClient(s.ws!.port);
    c.sendBinary(utpBind(0, j.cd, j.key));
    const bound = await c.nextOfType(1);
    expect(bound?.payload.toString('hex')).toBe('da720001');
    expect(bound?.first).toBe(0x82);
    expect(bound?.masked).toBe(false);
    expect(bound?.rsv).toBe(0);
    c.sendBinary(utpConnectRequest(j.id, j.hostCd));
    const accepted = await c.nextOfType(6);
    expect(accepted?.payload.subarray(4, 20).equals(h.id)).toBe(true);
    // ws -> udp
    const up = utpRelay(j.id, h.id, Buffer.from('hello from the browser'));
    c.sendBinary(up);
    expect((await h.peer.nextOfType(10))?.equals(up)).toBe(true);
    // udp -> ws, up to the WebSocket limit (1386 bytes of relay message)
    for (const size of [1, 100, 1386 - 38]) {
      const down = h.relay(j.id, Buffer.alloc(size, 7));
      const f = await c.nextOfType(10);
      expect(f?.payload.equals(down)).toBe(true);
      expect(f?.first).toBe(0x82);
    }
    // Relay PING over ws is answered (UTP needs it: WS pings do not refresh the relay layer).
    c.sendBinary(utpPing(j.id));
    expect((await c.nextOfType(2))?.payload.equals(utpPing(j.id))).toBe(true);
    // WebSocket Ping -> Pong with the same payload.
    c.sendFrame(0x9, Buffer.from('ping!'));
    const pong = await c.next();
    expect(pong?.opcode).toBe(0xa);
    expect(pong?.payload.toString()).toBe('ping!');
  });

  it('per-recipient size limit: a message too large for a WebSocket recipient is dropped and counted, never sent', async () => {
    const s = await start({ maxMessageToWs: 1000 });
    const { host, join } = await hostAndJoin();
    const h = await udpHost(host);
    const j = keys(join);
    const c = await rawClient(s.ws!.port);
    c.sendBinary(utpBind(0, j.cd, j.key));
    expect(await c.nextOfType(1)).toBeDefined();
    c.sendBinary(utpConnectRequest(j.id, j.hostCd));
    expect(await c.nextOfType(6)).toBeDefined();
    h.relay(j.id, Buffer.alloc(1001 - 38, 1)); // 1001 bytes: too large
    const ok = h.relay(j.id, Buffer.alloc(1000 - 38, 2)); // exactly the limit
    const f = await c.nextOfType(10);
    expect(f?.payload.equals(ok)).toBe(true);
    expect(s.metrics.dropped.get('too_large_for_ws')).toBe(1);
    // The default limit is UTP's: 1400 - 14.
    expect(s.relay.maxMessageToWs).toBe(1000);
  });

  it('a text frame closes the connection with 1003', async () => {
    const s = await start();
    const c = await rawClient(s.ws!.port);
    c.sendFrame(0x1, Buffer.from('hello'));
    const f = await c.next();
    expect(f?.opcode).toBe(0x8);
    expect(f?.payload.readUInt16BE(0)).toBe(1003);
    expect(s.metrics.dropped.get('ws_text_frame')).toBe(1);
  });

  it('each connection is an address: a BIND from a second connection needs a newer nonce and gets ERROR 3 traffic right', async () => {
    const s = await start();
    const { host, join } = await hostAndJoin();
    await udpHost(host);
    const j = keys(join);
    const first = await rawClient(s.ws!.port);
    first.sendBinary(utpBind(5, j.cd, j.key));
    expect(await first.nextOfType(1)).toBeDefined();
    const second = await rawClient(s.ws!.port);
    // PING for the allocation from another connection: ERROR 3 (client player mismatch).
    second.sendBinary(utpPing(j.id));
    const err = await second.nextOfType(12);
    expect(err?.payload[20]).toBe(3);
    // Same nonce from the new connection: stale, no reply. A newer one moves the binding.
    second.sendBinary(utpBind(5, j.cd, j.key));
    expect(await second.nextOfType(1, 300)).toBeUndefined();
    second.sendBinary(utpBind(6, j.cd, j.key));
    expect(await second.nextOfType(1)).toBeDefined();
    // The first connection is no longer the allocation's address.
    first.sendBinary(utpPing(j.id));
    expect((await first.nextOfType(12))?.payload[20]).toBe(3);
  });

  it("Node's built-in WebSocket over ws, and the ws client over wss (self-signed certificate generated on first run)", async () => {
    const s = await start();
    const { host, join } = await hostAndJoin();
    const h = await udpHost(host);
    const j = keys(join);

    // ws: Node's WebSocket (undici), as a browser would use it.
    const native = new WebSocket(`ws://127.0.0.1:${s.ws!.port}/`);
    native.binaryType = 'arraybuffer';
    cleanup.push(() => native.close());
    const inbox: Buffer[] = [];
    native.addEventListener('message', (e) => inbox.push(Buffer.from(e.data as ArrayBuffer)));
    await new Promise((resolve, reject) => {
      native.addEventListener('open', resolve);
      native.addEventListener('error', reject);
    });
    expect(native.protocol).toBe('');
    expect(native.extensions).toBe('');
    const waitInbox = async (type: number) => {
      const k = await waitFor(() => inbox.findIndex((b) => b[3] === type) + 1, {
        what: `a message of type ${type}`,
      }).catch(() => 0);
      return k > 0 ? inbox.splice(k - 1, 1)[0] : undefined;
    };
    native.send(utpBind(0, j.cd, j.key));
    expect(await waitInbox(1)).toBeDefined();
    native.send(utpConnectRequest(j.id, j.hostCd));
    expect(await waitInbox(6)).toBeDefined();
    const up = utpRelay(j.id, h.id, Buffer.from('native'));
    native.send(up);
    expect((await h.peer.nextOfType(10))?.equals(up)).toBe(true);
    const down = h.relay(j.id, Buffer.from('to native'));
    expect((await waitInbox(10))?.equals(down)).toBe(true);

    // wss: the certificate was generated into the data folder; trust it explicitly.
    const host2 = await hostAndJoin();
    const h2 = await udpHost(host2.host);
    const j2 = keys(host2.join);
    const ca = readFileSync(s.wssCertPath!);
    const secure = new WsClient(`wss://localhost:${s.wss!.port}/`, { ca });
    cleanup.push(() => secure.terminate());
    const sin: Buffer[] = [];
    secure.on('message', (d: Buffer) => sin.push(d));
    await new Promise((resolve, reject) => {
      secure.once('open', resolve);
      secure.once('error', reject);
    });
    const waitSecure = async (type: number) => {
      const k = await waitFor(() => sin.findIndex((b) => b[3] === type) + 1, {
        what: `a message of type ${type}`,
      }).catch(() => 0);
      return k > 0 ? sin.splice(k - 1, 1)[0] : undefined;
    };
    secure.send(utpBind(0, j2.cd, j2.key));
    expect(await waitSecure(1)).toBeDefined();
    secure.send(utpConnectRequest(j2.id, j2.hostCd));
    expect(await waitSecure(6)).toBeDefined();
    const up2 = utpRelay(j2.id, h2.id, Buffer.from('over tls'));
    secure.send(up2);
    expect((await h2.peer.nextOfType(10))?.equals(up2)).toBe(true);
    const down2 = h2.relay(j2.id, Buffer.from('back over tls'));
    expect((await waitSecure(10))?.equals(down2)).toBe(true);
  });

  it('the allocation lists udp, ws and wss with the secure flags UTP switches TLS on from', async () => {
    const s = await start({ publicHost: '203.0.113.10', wssPublicHost: 'relay.example.com' });
    const a = (await post('/v1/allocate', { maxConnections: 2 })).data.allocation as AllocationJson;
    expect(a.serverEndpoints).toEqual([
      {
        connectionType: 'udp',
        network: 'udp',
        reliable: false,
        secure: false,
        host: '203.0.113.10',
        port: s.udpPort,
      },
      {
        connectionType: 'ws',
        network: 'tcp',
        reliable: true,
        secure: false,
        host: '203.0.113.10',
        port: s.ws!.port,
      },
      {
        connectionType: 'wss',
        network: 'tcp',
        reliable: true,
        secure: true,
        host: 'relay.example.com',
        port: s.wss!.port,
      },
    ]);
  });

  it('caps connections per IP at accept time; other addresses are still served', async () => {
    const s = await start({ wsMaxConnectionsPerIp: 3 });
    const held: RawWsClient[] = [];
    for (let i = 0; i < 3; i++) held.push(await rawClient(s.ws!.port));
    for (const c of held) expect(c.utpRejections()).toEqual([]);
    const refused = await rawClient(s.ws!.port);
    expect(refused.head).toBe('');
    expect(refused.closed).toBe(true);
    expect(s.metrics.dropped.get('ws_per_ip_cap')).toBeGreaterThanOrEqual(1);
    const other = await rawClient(s.ws!.port, { localAddress: '127.0.0.2' });
    expect(other.utpRejections()).toEqual([]);
  });
});
