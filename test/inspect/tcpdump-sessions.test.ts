/**
 * `tcpdump -i lo` captures of NoxVR (TCP and UDP), Unity Relay and RMC sessions, driven by raw
 * clients that share no code with gamewire (./raw-clients.ts, and the Unity Transport-like
 * driver of the relay's own tests), decoded by `gamewire inspect --json`.
 */
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { NoxRelayServer } from '../../src/protocols/nox-relay/server.js';
import { startUnityRelay, type UnityRelayInstance } from '../../src/protocols/unity-relay/composition.js';
import { waitFor } from '../helpers/wait.js';
import { startServer as startNox } from '../protocols/nox-relay/helpers.js';
import { startServer as startRmc, type TestServer } from '../protocols/rmc/helpers.js';
import type { AllocationJson } from '../protocols/unity-relay/utp.js';
import { UtpDriver } from '../protocols/unity-relay/utp.js';
import { haveProgram, inspectJson, type JsonRecord, TCPDUMP_LIVE, Tcpdump, tempDir } from './helpers.js';
import {
  noxAuth,
  noxHandshake,
  noxLatency,
  noxPacket,
  noxRead,
  noxReliable,
  noxSegment,
  qString,
  RawTcp,
  RawUdp,
  rmcRead,
  rmcRequest,
} from './raw-clients.js';
import { expectTsharkAgrees } from './tshark.js';

const HAVE_TCPDUMP = haveProgram('tcpdump');
const HAVE_TSHARK = haveProgram('tshark');

const cleanups: (() => Promise<unknown> | unknown)[] = [];
afterEach(async () => {
  for (const f of cleanups.splice(0).reverse()) await f();
});

function messages(records: JsonRecord[], d: 'client' | 'server'): any[] {
  return records.filter((r) => r.direction === d).map((r) => r.message ?? { error: r.error });
}

async function capture(filter: string, name: string): Promise<Tcpdump> {
  const dump = await Tcpdump.start(filter, path.join(tempDir(), name));
  cleanups.push(() => dump.kill());
  return dump;
}

describe('inspect: tcpdump captures of NoxVR', () => {
  async function session(send: (p: Buffer) => void, read: () => Promise<Buffer>): Promise<void> {
    send(noxHandshake('raw-engine', 'raw-platform'));
    expect((await read())[4]).toBe(0x01);
    send(noxAuth('4242'));
    expect((await read())[4]).toBe(0x05);
    send(noxLatency(123_456_789n));
    expect((await read())[4]).toBe(0x04);
    // A Latency packet cut in two segments (sent out of order), then a Reliable batch of two.
    const inner = noxLatency(555n);
    send(noxSegment(7, 2, 1, inner.subarray(6)));
    send(noxSegment(7, 2, 0, inner.subarray(0, 6)));
    expect((await read())[4]).toBe(0x04);
    send(noxReliable([noxLatency(1n), noxLatency(2n)]));
    expect((await read())[4]).toBe(0x04);
    expect((await read())[4]).toBe(0x04);
    send(noxPacket(0x00, Buffer.alloc(0)));
  }

  function checkClient(up: any[]): void {
    expect(up.map((m) => m.type)).toEqual([
      'Handshake',
      'Authentification',
      'Latency',
      'Segmentation',
      'Segmentation',
      'Latency',
      'Reliable',
      'Latency',
      'Latency',
      'Disconnect',
    ]);
    expect(up[0]).toMatchObject({ uid: 0xffff, protocol: 1, engine: 'raw-engine', platform: 'raw-platform' });
    expect(up[1]).toMatchObject({ flags: 0, accessToken: '4242' });
    expect(up[2].timestamp).toBe(123_456_789);
    expect(up[3]).toMatchObject({ segmentId: 7, totalSegments: 2, currentSegment: 1 });
    expect(up[4]).toMatchObject({ segmentId: 7, totalSegments: 2, currentSegment: 0 });
    expect(up[5].timestamp).toBe(555);
    expect([up[7].timestamp, up[8].timestamp]).toEqual([1, 2]);
  }

  it('decodes a raw TCP session: handshake, auth, latency, segmentation and reliable unpacked', async (ctx) => {
    if (!HAVE_TCPDUMP) return ctx.skip();
    const server: NoxRelayServer = await startNox();
    cleanups.push(() => server.close());
    const dump = await capture(`tcp port ${server.port}`, 'nox-tcp.pcap');
    const c = await RawTcp.connect(server.port);
    await session(
      (p) => c.send(p),
      () => noxRead(c),
    );
    await c.close();
    await dump.stop();

    const records = inspectJson(dump.file, ['--port', `${server.port}=nox-relay`]);
    expect(records.filter((r) => r.error !== undefined)).toEqual([]);
    if (HAVE_TSHARK) expectTsharkAgrees(dump.file, records, [`tcp.port==${server.port},gw_nox`]);
    expect(records.every((r) => r.transport === 'tcp' && r.protocol === 'nox-relay')).toBe(true);
    checkClient(messages(records, 'client'));
    const down = messages(records, 'server');
    expect(down[0]).toMatchObject({ type: 'Handshake', protocol: 1 });
    expect(down[1]).toMatchObject({ type: 'Authentification', result: 0, userId: 4242 });
    expect(down.filter((m) => m.type === 'Latency').map((m) => m.clientTimestamp)).toEqual([
      123_456_789, 555, 1, 2,
    ]);
  });

  it('decodes a raw UDP session (padded handshake) found by content on an unmapped port', async (ctx) => {
    if (!HAVE_TCPDUMP) return ctx.skip();
    const server: NoxRelayServer = await startNox();
    cleanups.push(() => server.close());
    const dump = await capture(`udp port ${server.port}`, 'nox-udp.pcap');
    const c = await RawUdp.open(server.port);
    cleanups.push(() => c.close());
    let first = true;
    await session(
      (p) => {
        // The server answers a first UDP Handshake only from a datagram as large as its reply.
        c.send(first ? Buffer.concat([p, Buffer.alloc(512 - p.length)]) : p);
        first = false;
      },
      () => c.next(),
    );
    await dump.stop();

    const records = inspectJson(dump.file);
    expect(records.filter((r) => r.error !== undefined)).toEqual([]);
    if (HAVE_TSHARK) expectTsharkAgrees(dump.file, records);
    expect(records.every((r) => r.transport === 'udp' && r.protocol === 'nox-relay')).toBe(true);
    checkClient(messages(records, 'client'));
    expect(records[0]!.flow.endsWith(`127.0.0.1:${server.port}`)).toBe(true);
  });
});

describe('inspect: tcpdump capture of Unity Relay', () => {
  it('decodes allocate/bind/connect/relay with the payload as hex, per flow', async (ctx) => {
    if (!HAVE_TCPDUMP) return ctx.skip();
    const relay: UnityRelayInstance = await startUnityRelay({ host: '127.0.0.1', port: 0, apiPort: 0 });
    cleanups.push(() => relay.close());
    const udpPort = relay.endpoints.find((e) => e.transport === 'udp')!.port;
    const dump = await capture(`udp port ${udpPort}`, 'unity.pcap');
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
    const joinAlloc: AllocationJson = (await post('/v1/join', { joinCode: code })).data.allocation;
    const host = await UtpDriver.create(hostAlloc);
    const client = await UtpDriver.create(joinAlloc);
    cleanups.push(
      () => host.close(),
      () => client.close(),
    );
    expect(await host.bind()).toBe(true);
    expect(await client.bind()).toBe(true);
    expect((await client.connect())?.[3]).toBe(6);
    const hello = Buffer.from('hello host');
    client.relay(client.hostId!, hello);
    expect(await host.peer.nextOfType(10, 2000)).toBeDefined();
    host.relay(client.id, Buffer.from('hello client'));
    expect(await client.peer.nextOfType(10, 2000)).toBeDefined();
    await dump.stop();

    const records = inspectJson(dump.file, ['--port', `${udpPort}/udp=unity-relay`]);
    expect(records.filter((r) => r.error !== undefined)).toEqual([]);
    if (HAVE_TSHARK) expectTsharkAgrees(dump.file, records, [`udp.port==${udpPort},gw_unity`]);
    const flows = new Set(records.map((r) => r.flow));
    expect(flows.size).toBe(2);
    const clientFlow = records.filter((r) => r.flow.startsWith(`127.0.0.1:${client.peer.port} `));
    const up = messages(clientFlow, 'client');
    expect(up.map((m) => m.type).filter((t, i, a) => a.indexOf(t) === i)).toEqual([
      'BIND',
      'CONNECT_REQUEST',
      'RELAY',
    ]);
    expect(up.find((m) => m.type === 'BIND')).toMatchObject({
      acceptMode: 0,
      connectionDataLength: 255,
      connectionData: client.connectionData.toString('hex'),
    });
    expect(up.find((m) => m.type === 'RELAY')).toEqual({
      type: 'RELAY',
      fromAllocationId: client.id.toString('hex'),
      toAllocationId: client.hostId!.toString('hex'),
      data: hello.toString('hex'),
    });
    const down = messages(clientFlow, 'server').map((m) => m.type);
    expect(down).toContain('BIND_RECEIVED');
    expect(down).toContain('ACCEPTED');
    expect(down.at(-1)).toBe('RELAY');
    const hostFlow = records.filter((r) => r.flow.startsWith(`127.0.0.1:${host.peer.port} `));
    expect(messages(hostFlow, 'server').find((m) => m.type === 'RELAY')?.data).toBe(hello.toString('hex'));
  });
});

describe('inspect: tcpdump capture of RMC over TCP', () => {
  it('decodes a raw client request and the server reply with named arguments and results', async (ctx) => {
    if (!HAVE_TCPDUMP) return ctx.skip();
    const rmc: TestServer = await startRmc();
    cleanups.push(() => rmc.server.close());
    const dump = await capture(`tcp port ${rmc.port}`, 'rmc.pcap');
    const c = await RawTcp.connect(rmc.port);
    const urls = ['prudp:/address=10.0.0.1;port=9103;sid=15', 'prudp:/address=10.0.0.2;port=9104;sid=15'];
    const count = Buffer.alloc(4);
    count.writeUInt32LE(urls.length);
    c.send(
      rmcRequest(
        'LoginProtocol',
        6,
        'LoginProtocol::Register_V1',
        Buffer.concat([count, ...urls.map(qString)]),
      ),
    );
    const reply = await rmcRead(c);
    // Unknown method: an error reply.
    c.send(rmcRequest('LoginProtocol', 7, 'LoginProtocol::Nope_V1', Buffer.alloc(0)));
    await rmcRead(c);
    await c.close();
    // stop() waits until the capture file stops growing: the close is in it.
    await dump.stop();

    const records = inspectJson(dump.file, ['--port', `${rmc.port}=rmc`]);
    expect(records.filter((r) => r.error !== undefined)).toEqual([]);
    if (HAVE_TSHARK) {
      expectTsharkAgrees(dump.file, records, [`tcp.port==${rmc.port},gw_rmc`]);
      // The comparison is real: one changed value is caught.
      const altered = structuredClone(records);
      altered[0]!.message.args.vecMyURLs[1] = 'prudp:/address=10.9.9.9';
      expect(() => expectTsharkAgrees(dump.file, altered, [`tcp.port==${rmc.port},gw_rmc`])).toThrow();
    }
    const up = messages(records, 'client');
    expect(up).toEqual([
      {
        type: 'request',
        protocol: 'LoginProtocol',
        callId: 6,
        method: 'LoginProtocol::Register_V1',
        classVersions: [],
        args: { vecMyURLs: urls },
      },
      {
        type: 'request',
        protocol: 'LoginProtocol',
        callId: 7,
        method: 'LoginProtocol::Nope_V1',
        classVersions: [],
        args: '',
      },
    ]);
    const down = messages(records, 'server');
    expect(down[0]).toMatchObject({ type: 'response', protocol: 'LoginProtocol', callId: 6 });
    expect(Object.keys(down[0].results)).toEqual(['retval', 'pidConnectionID', 'urlPublic']);
    // The reply's last bytes are the public URL the client read.
    expect(reply.toString('latin1')).toContain(down[0].results.urlPublic);
    expect(down[1]).toMatchObject({ type: 'error', protocol: 'LoginProtocol', callId: 7 });
  });
});

describe('inspect --follow -', () => {
  it('prints messages of a live tcpdump stream as they arrive', async (ctx) => {
    if (!HAVE_TCPDUMP) return ctx.skip();
    const server: NoxRelayServer = await startNox();
    cleanups.push(() => server.close());
    const { spawn } = await import('node:child_process');
    const { BIN } = await import('../helpers/cli.js');
    const tcpdump = spawn('tcpdump', ['-i', 'lo', ...TCPDUMP_LIVE, '-w', '-', `tcp port ${server.port}`], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    cleanups.push(() => {
      if (tcpdump.exitCode === null) tcpdump.kill('SIGKILL');
    });
    const inspect = spawn(
      process.execPath,
      [BIN, 'inspect', '--follow', '-', '--json', '--port', `${server.port}=nox-relay`],
      {
        stdio: ['pipe', 'pipe', 'pipe'],
      },
    );
    cleanups.push(() => {
      if (inspect.exitCode === null) inspect.kill('SIGKILL');
    });
    tcpdump.stdout.pipe(inspect.stdin);
    const lines: JsonRecord[] = [];
    let partial = '';
    inspect.stdout.on('data', (d: Buffer) => {
      partial += d.toString();
      const parts = partial.split('\n');
      partial = parts.pop()!;
      for (const l of parts) if (l !== '') lines.push(JSON.parse(l));
    });
    await new Promise<void>((resolve, reject) => {
      let err = '';
      const timer = setTimeout(() => reject(new Error(`tcpdump did not start: ${err}`)), 20_000);
      tcpdump.stderr.on('data', (d: Buffer) => {
        err += d.toString();
        if (err.includes('listening on')) {
          clearTimeout(timer);
          resolve();
        }
      });
    });
    const c = await RawTcp.connect(server.port);
    cleanups.push(() => c.close());
    c.send(noxHandshake('live', 'follow'));
    await noxRead(c);
    // The handshake shows up while tcpdump is still running: printed as it arrived.
    await waitFor(() => lines.some((l) => l.message?.type === 'Handshake' && l.direction === 'server'), {
      what: () => `the Handshake printed live (${JSON.stringify(lines)})`,
      timeoutMs: 20_000,
    });
    expect(tcpdump.exitCode).toBe(null);
    expect(lines[0]!.message).toMatchObject({ type: 'Handshake', engine: 'live', platform: 'follow' });
    tcpdump.kill('SIGINT');
    const code = await new Promise<number | null>((r) => inspect.once('exit', (c) => r(c)));
    expect(code).toBe(0);
  });
});
