/**
 * Done-when of the hardening review: a spawned RMC server with its default limits stays under
 * 100 MB of RSS while 200 connections hold partial 1 MiB frames, and a player from another
 * address still logs in. The server process runs the library's RmcServer with the built-in
 * protocols (the compiled package), not the whole CLI, whose code alone takes about 89 MB; the
 * growth is asserted too, so the figure means the same either way.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LoginProtocol } from '../../../src/protocols/rmc/index.js';
import { ROOT } from '../../helpers/cli.js';
import { elapse } from '../../helpers/wait.js';
import { RawPeer, typedRequestFrame } from './helpers.js';

function rssBytes(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const m = /VmRSS:\s+(\d+) kB/.exec(status);
  if (m === null) throw new Error('no VmRSS in /proc status');
  return Number(m[1]) * 1024;
}

describe('rmc: memory under partial-frame floods (spawned server, default limits)', () => {
  let child: ChildProcess;
  let port = 0;
  const sockets: net.Socket[] = [];

  beforeAll(async () => {
    const index = path.join(ROOT, 'dist', 'src', 'protocols', 'rmc', 'index.js');
    const script = `
      const { RmcServer, registerBuiltins } = await import(${JSON.stringify(index)});
      const server = new RmcServer();
      registerBuiltins(server);
      const l = await server.listen({ host: '127.0.0.1', port: 0 });
      process.stdout.write('rmc tcp 127.0.0.1:' + l.port + '\\n');
      setInterval(() => {}, 60_000);`;
    child = spawn(process.execPath, ['--input-type=module', '-e', script], {
      cwd: ROOT,
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    port = await new Promise<number>((resolve, reject) => {
      let out = '';
      const timer = setTimeout(() => reject(new Error(`serve did not start: ${out}`)), 25_000);
      child.once('exit', (code) => {
        clearTimeout(timer);
        reject(new Error(`serve exited with ${code}: ${out}`));
      });
      child.stdout!.on('data', (d: Buffer) => {
        out += d.toString();
        const m = /rmc tcp 127\.0\.0\.1:(\d+)/.exec(out);
        if (m !== null) {
          clearTimeout(timer);
          resolve(Number(m[1]));
        }
      });
    });
  }, 30_000);

  afterAll(async () => {
    for (const s of sockets) s.destroy();
    if (child.exitCode === null) {
      const exited = new Promise((r) => child.once('exit', r));
      child.kill('SIGKILL');
      await exited;
    }
  });

  it('stays under 100 MB RSS with 200 connections holding partial 1 MiB frames', async () => {
    if (process.platform !== 'linux') return; // RSS is read from /proc
    const baseline = rssBytes(child.pid!);
    // 8 addresses × 25 connections (under the default per-address cap of 64), each sending a
    // length announcing a 1 MiB frame and all of it but the last 64 bytes, then nothing.
    const partial = Buffer.alloc(1024 * 1024 - 64, 0x41);
    partial.writeUInt32LE(1024 * 1024 - 4, 0);
    for (let a = 1; a <= 8; a++) {
      for (let i = 0; i < 25; i++) {
        const s = await new Promise<net.Socket>((resolve, reject) => {
          const x = net.connect({ host: '127.0.0.1', port, localAddress: `127.0.0.${a}` }, () => resolve(x));
          x.once('error', reject);
        });
        s.on('error', () => {});
        s.write(partial);
        sockets.push(s);
      }
    }
    // Give the server time to read everything it is willing to hold.
    let holding = 0;
    for (let i = 0; i < 20; i++) {
      await elapse(150, 'the peak is sampled over three seconds');
      holding = Math.max(holding, rssBytes(child.pid!));
    }
    // 200 × 1 MiB would be over 200 MB (the code before the input budgets reached 293 MB).
    expect(holding).toBeLessThan(100 * 1024 * 1024);
    // A player from another address is served meanwhile (once the longest-stalled partial
    // frames are closed to make room, after about 5 s).
    const player = await RawPeer.connect(port, '127.0.0.9');
    try {
      const m = await player.call(
        typedRequestFrame(LoginProtocol.byName.get('LoginWithToken_V1')!, 1, {
          token: 'memory-test',
          clientVersionInfo: { major: 1, minor: 0, patch: 0, build: 0, custom: '' },
          connectionData: {
            urlRegularProtocols: 'prudp:/',
            lstSpecialProtocols: [],
            urlSpecialProtocols: 'prudp:/',
          },
        }),
        1,
        20_000,
      );
      expect(m?.type).toBe('response');
    } finally {
      player.destroy();
    }
    // Making room for the player recycles some buffers; growth stays bounded all along (the
    // allocator keeps freed memory, so this is a peak, not what is live).
    const peak = Math.max(holding, rssBytes(child.pid!));
    expect(peak - baseline).toBeLessThan(48 * 1024 * 1024);
    process.stdout.write(
      `rmc memory: baseline ${(baseline / 1048576).toFixed(1)} MiB, holding ${(holding / 1048576).toFixed(1)} MiB, peak ${(peak / 1048576).toFixed(1)} MiB (200 partial 1 MiB frames)\n`,
    );
  }, 60_000);
});
