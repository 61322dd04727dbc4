/**
 * The real command (`node bin/gamewire.js`, compiled by `npm run build`): decode/encode as the
 * CLI contract fixes them, `serve unity-relay`, and the two-terminal chat demo.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import dgram from 'node:dgram';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { BIN as bin, ROOT as root, runCli as run } from '../../helpers/cli.js';
import { UNITY_BIND_HEX, UNITY_PING_HEX, UNITY_RELAY_HEX } from './fixtures.js';
import { unityTransportScenario } from './scenario.js';

const children: ChildProcess[] = [];

beforeAll(() => {
  if (!existsSync(path.join(root, 'dist/src/protocols/unity-relay/index.js'))) {
    throw new Error('the CLI is not built: run `npm run build` first');
  }
});

afterEach(() => {
  for (const c of children.splice(0)) if (c.exitCode === null) c.kill('SIGKILL');
});

/** Starts a long-running command and resolves with it once `ready` matches its stdout so far. */
function startProcess(
  args: string[],
  ready: RegExp,
  on: 'stdout' | 'stderr' = 'stdout',
): Promise<{ child: ChildProcess; out: () => string; match: RegExpMatchArray }> {
  const child = spawn(process.execPath, [bin, ...args], { cwd: root, stdio: ['pipe', 'pipe', 'pipe'] });
  children.push(child);
  let out = '';
  let err = '';
  return new Promise((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`timed out waiting for ${ready}; stdout: ${out}; stderr: ${err}`)),
      15_000,
    );
    child.stderr!.on('data', (d) => {
      err += d;
      check();
    });
    child.stdout!.on('data', (d) => {
      out += d;
      check();
    });
    const check = () => {
      const m = (on === 'stdout' ? out : err).match(ready);
      if (m !== null) {
        clearTimeout(timer);
        resolve({ child, out: () => out, match: m });
      }
    };
    child.on('exit', (code) =>
      reject(new Error(`exited ${code} before ready; stdout: ${out}; stderr: ${err}`)),
    );
  });
}

function waitFor(get: () => string, re: RegExp, ms = 10_000): Promise<RegExpMatchArray> {
  return new Promise((resolve, reject) => {
    const start = Date.now();
    const poll = setInterval(() => {
      const m = get().match(re);
      if (m !== null) {
        clearInterval(poll);
        resolve(m);
      } else if (Date.now() - start > ms) {
        clearInterval(poll);
        reject(new Error(`no ${re} in: ${get()}`));
      }
    }, 25);
  });
}

function exited(child: ChildProcess): Promise<number | null> {
  return new Promise((resolve) => {
    if (child.exitCode !== null) resolve(child.exitCode);
    else child.on('exit', (code) => resolve(code));
  });
}

describe('gamewire decode/encode unity-relay', () => {
  it('decodes the real BIND to JSON, and encodes it back byte for byte', () => {
    const d = run(['decode', 'unity-relay', '--hex', UNITY_BIND_HEX]);
    expect(d.code).toBe(0);
    const json = JSON.parse(d.stdout);
    expect(json).toMatchObject({ type: 'BIND', acceptMode: 0, nonce: 23, connectionDataLength: 255 });
    const e = run(['encode', 'unity-relay', '--json', d.stdout]);
    expect(e.code).toBe(0);
    expect(e.stdout.trim()).toBe(UNITY_BIND_HEX);
  });

  it('several messages give an array; stdin works', () => {
    const d = run(['decode', 'unity-relay', '-'], '');
    expect(d.code).toBe(1);
    const both = run(['decode', 'unity-relay', '--hex', `${UNITY_PING_HEX} ${UNITY_RELAY_HEX}`]);
    expect(both.code).toBe(0);
    expect(JSON.parse(both.stdout).map((m: { type: string }) => m.type)).toEqual(['PING', 'RELAY']);
    const enc = run(['encode', 'unity-relay', '-'], both.stdout);
    expect(enc.stdout.trim()).toBe(UNITY_PING_HEX + UNITY_RELAY_HEX);
  });

  it('errors: one JSON line on stderr, exit 1 (ERR_INCOMPLETE with offset), exit 2 for usage', () => {
    const short = run(['decode', 'unity-relay', '--hex', UNITY_BIND_HEX.slice(0, 100)]);
    expect(short.code).toBe(1);
    expect(short.stdout).toBe('');
    const err = JSON.parse(short.stderr.trim());
    expect(err.error).toMatchObject({ code: 'ERR_INCOMPLETE', offset: 8 });
    const magic = run(['decode', 'unity-relay', '--hex', 'da730001']);
    expect(JSON.parse(magic.stderr).error.code).toBe('ERR_BAD_MAGIC');
    const bad = run([
      'encode',
      'unity-relay',
      '--json',
      '{"type":"ERROR","allocationId":"00","errorCode":4}',
    ]);
    expect(bad.code).toBe(1);
    expect(JSON.parse(bad.stderr).error).toMatchObject({ code: 'ERR_BAD_INPUT', path: 'allocationId' });
    expect(run(['decode', 'unity-relay']).code).toBe(2);
  });
});

describe('gamewire serve unity-relay and the chat demo', () => {
  it('serves on the given ports, hosts a chat, a client joins and talks, and SIGTERM stops cleanly', async () => {
    const serve = await startProcess(
      [
        'serve',
        'unity-relay',
        '--host',
        '127.0.0.1',
        '--port',
        '0',
        '--api-port',
        '0',
        '--log-level',
        'warn',
        '--public-host',
        'localhost',
        '--unity-idle-timeout',
        '5000',
        // 0 disables the other transports (their defaults are fixed ports others may use).
        '--dtls-port',
        '0',
        '--ws-port',
        '0',
        '--wss-port',
        '0',
      ],
      /unity-relay http 127\.0\.0\.1:(\d+)/,
    );
    const udpPort = Number((await waitFor(serve.out, /unity-relay udp 127\.0\.0\.1:(\d+)/))[1]);
    const api = `http://127.0.0.1:${serve.match[1]}`;
    const regions = (await (await fetch(`${api}/v1/regions`)).json()) as {
      data: { regions: { id: string }[] };
    };
    expect(regions.data.regions[0].id).toBe('local-1');
    // Allocations carry the real relay port and the --public-host.
    const res = await fetch(`${api}/v1/allocate`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{"maxConnections":2}',
    });
    const alloc = (await res.json()) as {
      data: { allocation: { relayServer: { ipV4: string; port: number } } };
    };
    expect(alloc.data.allocation.relayServer).toEqual({ ipV4: 'localhost', port: udpPort });
    // The "Done when", against the real command.
    await unityTransportScenario(api);

    const host = await startProcess(['unity-relay', 'host', '--api', api], /^([A-Z2-9]{6})$/m);
    const code = host.match[1]!;
    const client = await startProcess(
      ['unity-relay', 'join', code, '--api', api],
      /connected to host/,
      'stderr',
    );
    client.child.stdin!.write('hello host\n');
    await waitFor(host.out, /\] hello host/);
    host.child.stdin!.write('hi client\n');
    await waitFor(client.out, /\[host\] hi client/);

    client.child.stdin!.end();
    host.child.stdin!.end();
    expect(await exited(client.child)).toBe(0);
    expect(await exited(host.child)).toBe(0);
    serve.child.kill('SIGTERM');
    expect(await exited(serve.child)).toBe(0);
    expect(serve.out()).toMatch(/gamewire: stopped/);
  }, 30_000);
});

/** A port that was free a moment ago (the relay's fixed-port transports need one given). */
async function freePort(kind: 'udp' | 'tcp'): Promise<number> {
  if (kind === 'udp') {
    const s = dgram.createSocket('udp4');
    await new Promise<void>((r) => s.bind(0, '127.0.0.1', () => r()));
    const p = s.address().port;
    await new Promise<void>((r) => s.close(() => r()));
    return p;
  }
  const srv = net.createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', () => r()));
  const p = (srv.address() as net.AddressInfo).port;
  await new Promise<void>((r) => srv.close(() => r()));
  return p;
}

describe('the chat demo across transports', () => {
  it('a host over DTLS talks to clients over wss and ws (--transport), through the real command', async () => {
    const dataDir = mkdtempSync(path.join(tmpdir(), 'gamewire-chat-'));
    try {
      const [dtlsPort, wsPort, wssPort] = [
        await freePort('udp'),
        await freePort('tcp'),
        await freePort('tcp'),
      ];
      const serve = await startProcess(
        [
          'serve',
          'unity-relay',
          '--host',
          '127.0.0.1',
          '--port',
          '0',
          '--api-port',
          '0',
          '--dtls-port',
          String(dtlsPort),
          '--ws-port',
          String(wsPort),
          '--wss-port',
          String(wssPort),
          '--data-dir',
          dataDir,
          '--log-level',
          'warn',
        ],
        /unity-relay http 127\.0\.0\.1:(\d+)/,
      );
      const api = `http://127.0.0.1:${serve.match[1]}`;
      const host = await startProcess(
        ['unity-relay', 'host', '--api', api, '--transport', 'dtls'],
        /^([A-Z2-9]{6})$/m,
      );
      const code = host.match[1]!;
      const viaWss = await startProcess(
        [
          'unity-relay',
          'join',
          code,
          '--api',
          api,
          '--transport',
          'wss',
          '--ca',
          path.join(dataDir, 'unity-relay-wss-cert.pem'),
        ],
        /connected to host .* over wss/,
        'stderr',
      );
      const viaWs = await startProcess(
        ['unity-relay', 'join', code, '--api', api, '--transport', 'ws'],
        /connected to host .* over ws/,
        'stderr',
      );
      // The host learns of a client from its first message (as UTP hosts do).
      viaWs.child.stdin!.write('ws here\n');
      await waitFor(host.out, /\] ws here/);
      viaWss.child.stdin!.write('hello from wss\n');
      await waitFor(host.out, /\] hello from wss/);
      // The host relays it on to the other client (dtls -> ws).
      await waitFor(viaWs.out, /hello from wss/);
      host.child.stdin!.write('hi everyone\n');
      await waitFor(viaWss.out, /\[host\] hi everyone/);
      await waitFor(viaWs.out, /\[host\] hi everyone/);
      for (const p of [viaWss, viaWs, host]) {
        p.child.stdin!.end();
        expect(await exited(p.child)).toBe(0);
      }
      serve.child.kill('SIGTERM');
      expect(await exited(serve.child)).toBe(0);
    } finally {
      rmSync(dataDir, { recursive: true, force: true });
    }
  }, 60_000);

  it('an unknown --transport is a usage error (exit 2)', () => {
    const r = run([
      'unity-relay',
      'join',
      'ABCDEF',
      '--transport',
      'carrier-pigeon',
      '--api',
      'http://127.0.0.1:9',
    ]);
    expect(r.code).toBe(2);
  });
});
