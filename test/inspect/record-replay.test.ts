/**
 * Recording (the servers' sockets → rotating pcapng files) and replay (a recording's client
 * side played back, the replies compared field by field).
 *
 * The traffic recorder is one per process and records every server socket of this process opened
 * while it is installed: the cases that install it run one after the other, with no other server
 * of this process open. The replays' recordings are made first (`beforeAll`), then the replays,
 * which only play files back to servers of their own, run at once.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { beforeAll, describe, expect, it, type TestContext } from 'vitest';
import { setTrafficRecorder } from '../../src/core/recording.js';
import { PcapngRecorder } from '../../src/inspect/recorder.js';
import type { NoxRelayServer } from '../../src/protocols/nox-relay/server.js';
import { BIN, runChild } from '../helpers/cli.js';
import { elapse } from '../helpers/wait.js';
import { startServer as startNox } from '../protocols/nox-relay/helpers.js';
import { haveProgram, inspectJson, tempDir } from './helpers.js';
import {
  noxAuth,
  noxHandshake,
  noxLatency,
  noxRead,
  qString,
  RawTcp,
  RawUdp,
  rmcRead,
  rmcRequest,
} from './raw-clients.js';
import { expectTsharkAgrees } from './tshark.js';

const HAVE_TSHARK = haveProgram('tshark');

/** What a case started, undone when it ends (last first); the recorder is uninstalled too. */
function cleanups(
  onTestFinished: TestContext['onTestFinished'],
): (f: () => Promise<unknown> | unknown) => void {
  const list: (() => Promise<unknown> | unknown)[] = [];
  onTestFinished(async () => {
    setTrafficRecorder(undefined);
    for (const f of list.reverse()) await f();
  });
  return (f) => {
    list.push(f);
  };
}

async function noxSession(server: NoxRelayServer, udp: boolean): Promise<void> {
  if (udp) {
    const c = await RawUdp.open(server.port);
    const hs = noxHandshake('rec', 'udp');
    c.send(Buffer.concat([hs, Buffer.alloc(512 - hs.length)]));
    await c.next();
    c.send(noxAuth('77'));
    await c.next();
    c.send(noxLatency(42n));
    await c.next();
    await c.close();
    return;
  }
  const c = await RawTcp.connect(server.port);
  c.send(noxHandshake('rec', 'tcp'));
  await noxRead(c);
  c.send(noxAuth('77'));
  await noxRead(c);
  c.send(noxLatency(41n));
  await noxRead(c);
  await c.close();
}

describe('recording a server', () => {
  it("writes a server's TCP and UDP traffic to pcapng that inspect (and tshark) decode completely", async ({
    onTestFinished,
  }) => {
    const cleanup = cleanups(onTestFinished);
    const dir = tempDir();
    const recorder = new PcapngRecorder(dir);
    setTrafficRecorder(recorder);
    const server = await startNox();
    cleanup(() => server.close());
    await noxSession(server, false);
    await noxSession(server, true);
    await elapse(200, 'the server handles the peer closing its TCP session (no counter shows it)');
    await server.close();
    recorder.close();
    const files = fs.readdirSync(dir).filter((f) => f.endsWith('.pcapng'));
    expect(files).toHaveLength(1);
    const file = path.join(dir, files[0]!);
    const records = inspectJson(file, ['--port', `${server.port}=nox-relay`]);
    expect(records.filter((r) => r.error !== undefined)).toEqual([]);
    const tcp = records.filter((r) => r.transport === 'tcp');
    const udp = records.filter((r) => r.transport === 'udp');
    expect(tcp.filter((r) => r.direction === 'client').map((r) => r.message.type)).toEqual([
      'Handshake',
      'Authentification',
      'Latency',
    ]);
    expect(tcp.find((r) => r.message.type === 'Handshake')!.message).toMatchObject({
      engine: 'rec',
      platform: 'tcp',
    });
    expect(
      udp.filter((r) => r.direction === 'client').map((r) => r.message.timestamp ?? r.message.type),
    ).toEqual(['Handshake', 'Authentification', 42]);
    expect(tcp.filter((r) => r.direction === 'server').map((r) => r.message.type)).toEqual([
      'Handshake',
      'Authentification',
      'Latency',
    ]);
    if (HAVE_TSHARK)
      expectTsharkAgrees(file, records, [
        `tcp.port==${server.port},gw_nox`,
        `udp.port==${server.port},gw_nox`,
      ]);
  });

  it('rotates files at the size limit and keeps only the newest ones', async ({ onTestFinished }) => {
    const cleanup = cleanups(onTestFinished);
    const dir = tempDir();
    const recorder = new PcapngRecorder(dir, { maxFileBytes: 4096, maxFiles: 2, bufferBytes: 1 });
    setTrafficRecorder(recorder);
    const server = await startNox();
    cleanup(() => server.close());
    for (let i = 0; i < 6; i++) await noxSession(server, false);
    await server.close();
    recorder.close();
    const files = fs.readdirSync(dir).filter((f) => f.endsWith('.pcapng'));
    expect(files).toHaveLength(2);
    for (const f of files) {
      expect(fs.statSync(path.join(dir, f)).size).toBeLessThanOrEqual(4096);
      // Each file stands alone: it starts with its own section and interface.
      inspectJson(path.join(dir, f), ['--port', `${server.port}=nox-relay`]);
    }
    expect(recorder.fileList.length).toBe(2);
  });

  it('serve --record: the CLI records an RMC session until SIGINT', async ({ onTestFinished }) => {
    const cleanup = cleanups(onTestFinished);
    const dir = tempDir();
    const child: ChildProcess = spawn(
      process.execPath,
      [BIN, 'serve', 'rmc', '--port', '0', '--host', '127.0.0.1', '--record', dir, '--data-dir', tempDir()],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    cleanup(() => {
      if (child.exitCode === null) child.kill('SIGKILL');
    });
    let out = '';
    const port = await new Promise<number>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`serve did not start: ${out}`)), 30_000);
      child.stdout!.on('data', (d: Buffer) => {
        out += d.toString();
        const m = /rmc tcp [^ ]+:(\d+)/.exec(out);
        if (m !== null) {
          clearTimeout(timer);
          resolve(Number(m[1]));
        }
      });
    });
    expect(out).toContain(`recording into ${dir}`);
    const c = await RawTcp.connect(port);
    const count = Buffer.alloc(4);
    count.writeUInt32LE(1);
    c.send(
      rmcRequest(
        'LoginProtocol',
        9,
        'LoginProtocol::Register_V1',
        Buffer.concat([count, qString('prudp:/port=1')]),
      ),
    );
    await rmcRead(c);
    await c.close();
    child.kill('SIGINT');
    expect(await new Promise((r) => child.once('exit', r))).toBe(0);
    const files = fs.readdirSync(dir).filter((f) => f.endsWith('.pcapng'));
    expect(files).toHaveLength(1);
    const records = inspectJson(path.join(dir, files[0]!), ['--port', `${port}=rmc`]);
    expect(records.map((r) => [r.direction, r.message.type, r.message.callId])).toEqual([
      ['client', 'request', 9],
      ['server', 'response', 9],
    ]);
    expect(records[0]!.message.args).toEqual({ vecMyURLs: ['prudp:/port=1'] });
  });
});

/** Runs the CLI without blocking this process (the replay's target server runs here). */
function runCliAsync(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return runChild(process.execPath, [BIN, ...args], { stdin: 'pipe' });
}

/** Records the client side of two nox sessions (TCP, UDP) against a fresh server. */
async function recordNox(): Promise<{ file: string; port: number }> {
  const dir = tempDir();
  const recorder = new PcapngRecorder(dir);
  setTrafficRecorder(recorder);
  const server = await startNox();
  try {
    await noxSession(server, false);
    await noxSession(server, true);
    await elapse(200, 'the server handles the peer closing its TCP session (no counter shows it)');
  } finally {
    // Stop recording before the server says goodbye (its shutdown Disconnect is not a reply).
    setTrafficRecorder(undefined);
    recorder.close();
    await server.close();
  }
  return { file: path.join(dir, fs.readdirSync(dir)[0]!), port: server.port };
}

/**
 * The user's session: `gamewire nox-relay bots` (UDP), both in one instance, relaying
 * transforms, recorded at the server. At 10 transforms a second: the relay merges a player's
 * transforms that come closer together than 1/tps (41.7 ms at the default 24), and at the bots'
 * default 20 a second (50 ms apart) a few ms of scheduling delay on a busy machine merged two in
 * the recording, which a replay (never closer together than recorded, but maybe further apart)
 * need not merge again: a difference that is no server's.
 */
async function recordBots(): Promise<{
  bots: { code: number | null; stderr: string };
  file: string;
  port: number;
}> {
  const dir = tempDir();
  const recorder = new PcapngRecorder(dir);
  setTrafficRecorder(recorder);
  const server = await startNox();
  try {
    const bots = await runCliAsync([
      'nox-relay',
      'bots',
      '--port',
      String(server.port),
      '--count',
      '2',
      '--rate',
      '10',
      '--duration',
      '2',
    ]);
    await elapse(200, 'the last Disconnect reply is written (no counter shows it)');
    return { bots, file: path.join(dir, fs.readdirSync(dir)[0]!), port: server.port };
  } finally {
    setTrafficRecorder(undefined);
    recorder.close();
    await server.close();
  }
}

describe.concurrent('gamewire replay', () => {
  // The recordings, one after the other (each installs the recorder); the replays then run at
  // once: a replay only reads its file and plays it to servers of its own.
  let nox: { file: string; port: number };
  let botsRecording: Awaited<ReturnType<typeof recordBots>>;
  beforeAll(async () => {
    nox = await recordNox();
    botsRecording = await recordBots();
  }, 60_000);

  it("replays a recording to an equal server with no differences (the protocol's server-made fields)", async ({
    onTestFinished,
  }) => {
    const cleanup = cleanups(onTestFinished);
    const { file, port } = nox;
    const target = await startNox();
    cleanup(() => target.close());
    const r = await runCliAsync([
      'replay',
      file,
      '--target',
      `127.0.0.1:${target.port}`,
      '--port',
      `${port}=nox-relay`,
    ]);
    expect(r.stdout).toBe('');
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stderr).replay).toEqual({ flows: 2, messages: 6, differences: 0 });
  });

  it('reports where a different server answers differently, field by field', async ({ onTestFinished }) => {
    const cleanup = cleanups(onTestFinished);
    const { file, port } = nox;
    const target = await startNox({ maxPacketBytes: 2048 });
    cleanup(() => target.close());
    const r = await runCliAsync([
      'replay',
      file,
      '--target',
      `127.0.0.1:${target.port}`,
      '--port',
      `${port}=nox-relay`,
    ]);
    expect(r.stderr + r.stdout).toContain('maxPacketSize');
    expect(r.code).toBe(1);
    const diffs = r.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l).difference);
    // One per flow: the Handshake reply's maxPacketSize.
    expect(diffs).toHaveLength(2);
    for (const d of diffs) {
      expect(d).toMatchObject({
        index: 0,
        type: 'Handshake',
        path: 'maxPacketSize',
        recorded: 1024,
        replayed: 2048,
      });
    }
  });

  it('records two bots against a server and replays them to a fresh one: no difference; a changed server differs', async ({
    onTestFinished,
  }) => {
    const cleanup = cleanups(onTestFinished);
    const { bots, file, port } = botsRecording;
    expect(bots.code, bots.stderr).toBe(0);
    const replayTo = (target: number, ...extra: string[]) =>
      runCliAsync([
        'replay',
        file,
        '--target',
        `127.0.0.1:${target}`,
        '--port',
        `${port}=nox-relay`,
        ...extra,
      ]);
    const summary = (r: { stderr: string }) =>
      JSON.parse(r.stderr.trim().split('\n')[0]!).replay as {
        flows: number;
        messages: number;
        differences: number;
      };
    const fresh = async (options?: Parameters<typeof startNox>[0]) => {
      const server = await startNox(options);
      cleanup(() => server.close());
      return server;
    };

    // Three servers, each replayed to at once with the others (a replay's flows must be the only
    // ones on its server: one replay after the other on each).
    const first = async () => {
      const target = await fresh();
      const first = await replayTo(target.port);
      expect(first.stdout).toBe('');
      expect(first.code, first.stderr).toBe(0);
      expect(summary(first)).toMatchObject({ flows: 2, differences: 0 });
      // Each bot got the other's Join and transforms: the flows ran together, as recorded.
      expect(summary(first).messages).toBeGreaterThan(40);

      // Again to the same server: new client ids, display names, ports and cookies, each one kept
      // consistently within a flow, so still no difference.
      const again = await replayTo(target.port);
      expect(again.stdout).toBe('');
      expect(summary(again).differences).toBe(0);
    };
    const compareAll = async () => {
      // A server that has seen a replay already (as the one above has): those values did change,
      // and --compare-all shows them.
      const target = await fresh();
      const before = await replayTo(target.port);
      expect(before.code, before.stderr).toBe(0);
      expect(summary(before)).toMatchObject({ flows: 2, differences: 0 });
      const all = await replayTo(target.port, '--compare-all');
      expect(all.code).toBe(1);
      const changed = new Set(
        all.stdout
          .trim()
          .split('\n')
          .map((l) => (JSON.parse(l).difference as { path: string }).path),
      );
      expect([...changed]).toEqual(expect.arrayContaining(['clientId', 'clientPort', 'displayName']));
    };
    const changedServer = async () => {
      // A server that really answers differently is still reported: the Handshake's maxPacketSize,
      // twice per flow (the bots' UDP handshake and its cookie-carrying repeat), and nothing else.
      const other = await fresh({ maxPacketBytes: 2048 });
      const r = await replayTo(other.port);
      expect(r.code).toBe(1);
      const diffs = r.stdout
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l).difference);
      expect(diffs).toHaveLength(4);
      for (const d of diffs) {
        expect(d).toMatchObject({ type: 'Handshake', path: 'maxPacketSize', recorded: 1024, replayed: 2048 });
      }
    };
    await Promise.all([first(), compareAll(), changedServer()]);
  }, 60_000);

  it('a target that is not there: one error line naming it (not ERR_INTERNAL), exit 1; port 0 is bad usage', async () => {
    const { file, port } = nox;
    const probe = net.createServer();
    await new Promise<void>((r) => probe.listen(0, '127.0.0.1', () => r()));
    const closed = (probe.address() as net.AddressInfo).port;
    await new Promise<void>((r) => probe.close(() => r()));
    const cases: [string, number, string, string][] = [
      [
        'gamewire-test.invalid:4000',
        1,
        'ERR_CONNECT',
        'cannot resolve the host of gamewire-test.invalid:4000: check --target',
      ],
      [`127.0.0.1:${closed}`, 1, 'ERR_CONNECT', `no server at 127.0.0.1:${closed}`],
      ['127.0.0.1:0', 2, 'ERR_USAGE', 'port 1..65535'],
    ];
    const runs = await Promise.all(
      cases.map(([target]) =>
        runCliAsync(['replay', file, '--target', target, '--port', `${port}=nox-relay`]),
      ),
    );
    for (const [i, [, status, code, message]] of cases.entries()) {
      const r = runs[i]!;
      expect(r.code, r.stderr).toBe(status);
      const error = (JSON.parse(r.stderr.trim()) as { error: { code: string; message: string } }).error;
      expect(error.code).toBe(code);
      expect(error.message).toContain(message);
    }
  });
});
