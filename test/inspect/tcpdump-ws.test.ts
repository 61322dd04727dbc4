/**
 * Unity Relay over WebSocket, captured with tcpdump: the upgrade, then one relay message per
 * binary frame (client frames masked), decoded by `gamewire inspect` like the UDP transport.
 * The client is the relay tests' raw WebSocket client, written like Unity Transport's and
 * sharing no code with gamewire.
 */
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { startUnityRelay, type UnityRelayInstance } from '../../src/protocols/unity-relay/composition.js';
import {
  type AllocationJson,
  UtpDriver,
  utpBind,
  utpConnectRequest,
  utpRelay,
} from '../protocols/unity-relay/utp.js';
import { RawWsClient } from '../protocols/unity-relay/wsraw.js';
import { haveProgram, inspectJson, Tcpdump, tempDir } from './helpers.js';

const HAVE_TCPDUMP = haveProgram('tcpdump');

const cleanups: (() => Promise<unknown> | unknown)[] = [];
afterEach(async () => {
  for (const f of cleanups.splice(0).reverse()) await f();
});

describe('inspect: Unity Relay over WebSocket', () => {
  it('decodes the upgrade and every relay message in the binary frames, both ways', async (ctx) => {
    if (!HAVE_TCPDUMP) return ctx.skip();
    const relay: UnityRelayInstance = await startUnityRelay({
      host: '127.0.0.1',
      port: 0,
      apiPort: 0,
      wsPort: 0,
      dataDir: tempDir(),
    });
    cleanups.push(() => relay.close());
    const wsPort = relay.endpoints.find((e) => e.description.includes('(ws)'))!.port;
    const post = async (p: string, body: unknown) =>
      (await (
        await fetch(`${relay.apiUrl}${p}`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify(body),
        })
      ).json()) as any;
    const hostAlloc: AllocationJson = (await post('/v1/allocate', { maxConnections: 2 })).data.allocation;
    const code = (await post('/v1/joincode', { allocationId: hostAlloc.allocationId })).data.joinCode;
    const join: AllocationJson = (await post('/v1/join', { joinCode: code })).data.allocation;
    const host = await UtpDriver.create(hostAlloc);
    cleanups.push(() => host.close());
    expect(await host.bind()).toBe(true);

    const dump = await Tcpdump.start(`tcp port ${wsPort}`, path.join(tempDir(), 'ws.pcap'));
    cleanups.push(() => dump.kill());
    const c = await RawWsClient.connect(wsPort);
    cleanups.push(() => c.close());
    const pad = (b: Buffer) => Buffer.concat([b, Buffer.alloc(255 - b.length)]);
    const id = Buffer.from(join.allocationIdBytes, 'base64');
    c.sendBinary(
      utpBind(0, pad(Buffer.from(join.connectionData, 'base64')), Buffer.from(join.key, 'base64')),
    );
    expect((await c.nextOfType(1))?.payload.toString('hex')).toBe('da720001');
    c.sendBinary(utpConnectRequest(id, pad(Buffer.from(hostAlloc.connectionData, 'base64'))));
    expect(await c.nextOfType(6)).toBeDefined();
    const hello = Buffer.from('hello over ws');
    c.sendBinary(utpRelay(id, host.id, hello));
    expect(await host.peer.nextOfType(10, 2000)).toBeDefined();
    host.relay(id, Buffer.from('and back'));
    expect(await c.nextOfType(10)).toBeDefined();
    await dump.stop();

    const records = inspectJson(dump.file, ['--port', `${wsPort}/tcp=unity-relay`]);
    expect(records.filter((r) => r.error !== undefined)).toEqual([]);
    const up = records.filter((r) => r.direction === 'client').map((r) => r.message);
    const down = records.filter((r) => r.direction === 'server').map((r) => r.message);
    expect(up[0]).toMatchObject({ type: 'http-request' });
    expect(up[0].line).toMatch(/^GET \S+ HTTP\/1\.1$/);
    expect(up.slice(1).map((m) => m.type)).toEqual(['BIND', 'CONNECT_REQUEST', 'RELAY']);
    expect(up[3]).toEqual({
      type: 'RELAY',
      fromAllocationId: id.toString('hex'),
      toAllocationId: host.id.toString('hex'),
      data: hello.toString('hex'),
    });
    expect(down[0]).toEqual({ type: 'http-response', line: 'HTTP/1.1 101 Switching Protocols' });
    expect(down.map((m) => m.type)).toEqual(['http-response', 'BIND_RECEIVED', 'ACCEPTED', 'RELAY']);
    expect(down[3].data).toBe(Buffer.from('and back').toString('hex'));
  });
});
