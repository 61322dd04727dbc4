/**
 * The relay on both data planes. This file's default run uses `auto` (native where it is built);
 * vitest.config.ts runs it, and every unity-relay file whose traffic the plane carries, again as
 * the project with GAMEWIRE_DATAPLANE=js, so every relay test passes on both.
 */
import { spawn } from 'node:child_process';
import { afterEach, describe, expect, it } from 'vitest';
import {
  startUnityRelay,
  type UnityRelayInstance,
  type UnityRelayOptions,
} from '../../../src/protocols/unity-relay/index.js';
import {
  loadNativeDataplane,
  NativeRelaySocket,
} from '../../../src/protocols/unity-relay/native-dataplane.js';
import { BIN } from '../../helpers/cli.js';
import { startUnityRelayServe } from '../../helpers/serve.js';
import { elapse } from '../../helpers/wait.js';
import { type AllocationJson, UtpDriver } from './utp.js';

const nativeBuilt = loadNativeDataplane().addon !== undefined;

let server: UnityRelayInstance | undefined;
const drivers: UtpDriver[] = [];

afterEach(async () => {
  await Promise.all(drivers.splice(0).map((d) => d.close()));
  await server?.close();
  server = undefined;
});

async function start(options: UnityRelayOptions = {}): Promise<UnityRelayInstance> {
  server = await startUnityRelay({ host: '127.0.0.1', port: 0, apiPort: 0, ...options });
  return server;
}

async function post(path: string, body: unknown): Promise<any> {
  const res = await fetch(`${server!.apiUrl}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return res.json();
}

/** A host and a client, bound and connected like Unity Transport does it. */
async function pair(): Promise<[UtpDriver, UtpDriver]> {
  const hostAlloc: AllocationJson = (await post('/v1/allocate', { maxConnections: 2 })).data.allocation;
  const code = (await post('/v1/joincode', { allocationId: hostAlloc.allocationId })).data.joinCode;
  const clientAlloc: AllocationJson = (await post('/v1/join', { joinCode: code })).data.allocation;
  const host = await UtpDriver.create(hostAlloc);
  const client = await UtpDriver.create(clientAlloc);
  drivers.push(host, client);
  expect(await host.bind()).toBe(true);
  expect(await client.bind()).toBe(true);
  expect((await client.connect())?.[3]).toBe(6);
  return [host, client];
}

describe('unity-relay data planes', () => {
  it('auto picks the native data plane where it is built (Linux, IPv4)', async () => {
    if (process.platform === 'linux') expect(nativeBuilt).toBe(true);
    const s = await start();
    const expected = process.env.GAMEWIRE_DATAPLANE === 'js' || !nativeBuilt ? 'js' : 'native';
    expect(s.dataplane).toBe(expected);
    expect(s.endpoints[0]!.description).toMatch(
      expected === 'native' ? /native data plane/ : /JavaScript data plane/,
    );
  });

  it('on the native plane, RELAYs between UDP peers never reach JavaScript, and the counters still add up', async () => {
    const s = await start({ dataplane: 'native' });
    const native = s.relay.socket as NativeRelaySocket;
    expect(native).toBeInstanceOf(NativeRelaySocket);
    const [host, client] = await pair();
    const before = native.stats();
    for (let i = 0; i < 100; i++) client.relay(host.id, Buffer.from(`m${i}`));
    for (let i = 0; i < 100; i++)
      expect((await host.peer.nextOfType(10))?.subarray(38).toString()).toBe(`m${i}`);
    const after = native.stats();
    expect(after.forwarded - before.forwarded).toBe(100);
    expect(after.toJs - before.toJs).toBe(0);
    // The sweep brings the native counters and last-seen times back.
    await expect.poll(() => s.metrics.sent, { timeout: 3000 }).toBeGreaterThanOrEqual(100);
    const a = s.store.find(client.id, 0)!;
    expect(s.store.now() - a.lastSeen).toBeLessThan(2000);
    // A RELAY to an unlinked peer still gets ERROR 5 from JavaScript.
    const stranger = await pair();
    client.relay(stranger[0].id, Buffer.from('x'));
    const err = await client.peer.nextOfType(12);
    expect(err?.[20]).toBe(5);
  });

  it('keeps an allocation alive on native traffic alone (last-seen mirrored for the idle timeout)', async () => {
    const s = await start({ dataplane: 'native', idleTimeoutMs: 1200, hostAloneTimeoutMs: 1200 });
    const [host, client] = await pair();
    const end = Date.now() + 3000;
    while (Date.now() < end) {
      client.relay(host.id, Buffer.from('keep'));
      host.relay(client.id, Buffer.from('alive'));
      await elapse(150, 'traffic every 150 ms for 3 s, past the idle timeout');
    }
    expect(s.store.find(client.id, 0)!.state).toBe('bound');
    expect(s.store.find(host.id, 0)!.state).toBe('bound');
  });

  it('--dataplane native refuses what it cannot run, with the way out', async () => {
    await expect(startUnityRelay({ host: '::1', port: 0, apiPort: 0, dataplane: 'native' })).rejects.toThrow(
      /--dataplane js or auto/,
    );
    // auto falls back to JavaScript on IPv6.
    server = await startUnityRelay({ host: '::1', port: 0, apiPort: 0 });
    expect(server.dataplane).toBe('js');
    expect(server.dataplaneReason).toMatch(
      process.env.GAMEWIRE_DATAPLANE === 'js' ? /GAMEWIRE_DATAPLANE/ : /IPv4/,
    );
  });

  it('the start-up line names the data plane', async () => {
    for (const mode of ['native', 'js'] as const) {
      const child = spawn(
        process.execPath,
        [
          BIN,
          'serve',
          'unity-relay',
          '--host',
          '127.0.0.1',
          '--port',
          '0',
          '--api-port',
          '0',
          '--dtls-port',
          '0',
          '--ws-port',
          '0',
          '--wss-port',
          '0',
          '--log-level',
          'warn',
          '--dataplane',
          mode,
        ],
        { stdio: ['ignore', 'pipe', 'pipe'] },
      );
      let out = '';
      child.stdout.on('data', (d: Buffer) => {
        out += d.toString();
      });
      child.stderr.on('data', (d: Buffer) => {
        out += d.toString();
      });
      await expect.poll(() => out, { timeout: 20_000 }).toMatch(/unity-relay udp 127\.0\.0\.1:\d+/);
      expect(out).toMatch(mode === 'native' ? /native data plane/ : /JavaScript data plane/);
      const exited = new Promise((r) => child.once('exit', r));
      child.kill('SIGTERM');
      expect(await exited).toBe(0);
    }
  }, 60_000);

  it.runIf(nativeBuilt)(
    '--native-coalesce-us reaches the native plane, whose start-up line says so',
    async () => {
      const { relay } = await startUnityRelayServe(['--dataplane', 'native', '--native-coalesce-us', '75']);
      try {
        // The log is written asynchronously: it may follow the ready message.
        await expect
          .poll(() => relay.stderr(), { timeout: 10_000 })
          .toMatch(/unity-relay data plane: native/);
        const line = relay
          .stderr()
          .split('\n')
          .find((l) => l.includes('unity-relay data plane: native'));
        expect(line).toMatch(/coalesceUs\W+75\b/);
        expect(line).toMatch(/coalesceMinPps\W+40000\b/);
      } finally {
        await relay.stop();
      }
    },
    60_000,
  );
});
