/** The real `gamewire` command (bin/gamewire.js on the project's Node), as cli-contract.md fixes it. */
import { type ChildProcess, spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { NoxRelayClient } from '../../../src/protocols/nox-relay/client.js';
import type { NoxRelayServer } from '../../../src/protocols/nox-relay/server.js';
import { BIN as bin, ROOT as root, runCli as run } from '../../helpers/cli.js';
import { startServer } from './helpers.js';

describe('gamewire decode/encode nox-relay', () => {
  const handshake = '0017000101 0001 0005756e697479 000777696e646f7773';

  it('decodes a client Handshake to one JSON object', () => {
    const r = run(['decode', 'nox-relay', '--from', 'client', '--hex', handshake]);
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual({
      type: 'Handshake',
      uid: 1,
      protocol: 1,
      engine: 'unity',
      platform: 'windows',
      addressCookie: null,
    });
  });

  it('reads 0x11 by direction: Sessions going up, Leave coming down', () => {
    const up = run(['decode', 'nox-relay', '--from', 'client', '--hex', '000600001102']);
    expect(JSON.parse(up.stdout)).toEqual({ type: 'Sessions', uid: 0, page: 2 });
    const down = run(['decode', 'nox-relay', '--from', 'server', '--hex', '00090000110500 0003']);
    expect(JSON.parse(down.stdout)).toEqual({
      type: 'Leave',
      uid: 0,
      instanceId: 5,
      quitType: 0,
      playerId: 3,
      moderatorId: null,
      reason: null,
    });
  });

  it('decodes several packets to an array and encodes it back to the same bytes', () => {
    const hex = '000d00070400000191fb3e3a83' + '0006000811' + '00';
    const d = run(['decode', 'nox-relay', '--hex', hex]);
    expect(d.code).toBe(0);
    const json = JSON.parse(d.stdout);
    expect(json).toEqual([
      { type: 'Latency', uid: 7, timestamp: 1726497045123 },
      { type: 'Sessions', uid: 8, page: 0 },
    ]);
    const e = run(['encode', 'nox-relay', '--from', 'client', '-'], d.stdout);
    expect(e.code).toBe(0);
    expect(e.stdout.trim()).toBe(hex);
  });

  it('reports a packet cut short as ERR_INCOMPLETE with exit 1 and no stack', () => {
    const r = run(['decode', 'nox-relay', '--from', 'server', '--hex', '0024000101000100']);
    expect(r.code).toBe(1);
    expect(r.stdout).toBe('');
    const err = JSON.parse(r.stderr.trim()).error;
    expect(err.code).toBe('ERR_INCOMPLETE');
    expect(typeof err.offset).toBe('number');
  });

  it('rejects bad JSON fields with exit 1', () => {
    const r = run([
      'encode',
      'nox-relay',
      '--from',
      'client',
      '--json',
      '{"type":"Enter","uid":1,"instanceId":300,"flags":0}',
    ]);
    expect(r.code).toBe(1);
    expect(JSON.parse(r.stderr.trim()).error.code).toBe('ERR_BAD_INPUT');
  });
});

describe('gamewire serve nox-relay and nox-relay bots', () => {
  let child: ChildProcess | undefined;
  let relay: NoxRelayServer | undefined;
  afterAll(async () => {
    child?.kill('SIGKILL');
    await relay?.close();
  });

  it('serves TCP and UDP on one port with an instance file, and stops on SIGINT with exit 0', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'nox-'));
    const file = path.join(dir, 'instances.json');
    writeFileSync(file, JSON.stringify([{ id: 7, name: 'lobby', capacity: 4 }]));
    child = spawn(
      process.execPath,
      [
        bin,
        'serve',
        'nox-relay',
        '--port',
        '0',
        '--host',
        '127.0.0.1',
        '--instances',
        file,
        '--log-level',
        'silent',
      ],
      {
        cwd: root,
      },
    );
    let out = '';
    child.stdout!.on('data', (d) => (out += d));
    const ports = await new Promise<number[]>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no listen lines: ${out}`)), 10_000);
      child!.stdout!.on('data', () => {
        const m = [...out.matchAll(/nox-relay (tcp|udp) 127\.0\.0\.1:(\d+)/g)];
        if (m.length === 2) {
          clearTimeout(timer);
          resolve(m.map((x) => Number(x[2])));
        }
      });
    });
    expect(ports[0]).toBe(ports[1]);
    expect(ports[0]).toBeGreaterThan(0);
    for (const transport of ['tcp', 'udp'] as const) {
      const c = new NoxRelayClient({ port: ports[0]!, transport, keepAliveMs: 0 });
      await c.connect();
      await c.handshake();
      const s = await c.sessions(0);
      expect(s.instances.map((i) => i.internalId)).toEqual([7]);
      await c.disconnect();
    }
    const exit = new Promise<number | null>((resolve) => child!.once('exit', (code) => resolve(code)));
    child.kill('SIGINT');
    expect(await exit).toBe(0);
    expect(out).toContain('gamewire: stopped');
    child = undefined;
  });

  // Retried once: one CI run of ~5 saw the bots exit 1 within a second under full load (stderr was
  // not kept then; the message now shows it). A broken swarm fails both tries.
  it('runs a bot swarm that enters, streams transforms and stops after --duration', {
    retry: 1,
  }, async () => {
    await relay?.close(); // a retry's relay replaces the failed try's
    relay = await startServer();
    // Asynchronous spawn: the relay runs in this process and must keep serving meanwhile.
    const bots = spawn(
      process.execPath,
      [
        bin,
        'nox-relay',
        'bots',
        '--port',
        String(relay.port),
        '--count',
        '4',
        '--instance',
        '0',
        '--duration',
        '2',
        '--rate',
        '20',
      ],
      { cwd: root },
    );
    let stdout = '';
    let stderr = '';
    bots.stdout.on('data', (d) => (stdout += d));
    bots.stderr.on('data', (d) => (stderr += d));
    const status = await new Promise<number | null>((resolve) => bots.once('exit', (code) => resolve(code)));
    const r = { status, stdout };
    expect(r.status, `${stdout}\n${stderr}`).toBe(0);
    const lines = r.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    const summary = lines.at(-1).summary;
    expect(summary).toMatchObject({ connected: 4, entered: 4, errors: 0 });
    expect(summary.transformsSent).toBeGreaterThan(50);
    expect(summary.transformsReceived).toBeGreaterThan(50);
    expect(lines.some((l) => l.receivedPerS > 0)).toBe(true);
    expect(relay.clients.size).toBe(0); // every bot said goodbye
  });

  it('stops the bot swarm on SIGINT, before --duration, with a summary and exit 0', async () => {
    relay ??= await startServer();
    const bots = spawn(
      process.execPath,
      [
        bin,
        'nox-relay',
        'bots',
        '--port',
        String(relay.port),
        '--count',
        '2',
        '--duration',
        '60',
        '--transport',
        'tcp',
      ],
      {
        cwd: root,
      },
    );
    let stdout = '';
    let sent = false;
    bots.stdout.on('data', (d) => {
      stdout += d;
      // Interrupted once both bots are in (a progress line says so), as a user would after watching.
      if (/"bots":2\b/.test(stdout) && !sent) {
        sent = true;
        bots.kill('SIGINT');
      }
    });
    const started = Date.now();
    const status = await new Promise<number | null>((resolve) => bots.once('exit', (code) => resolve(code)));
    expect(status).toBe(0);
    expect(Date.now() - started).toBeLessThan(15_000);
    const summary = JSON.parse(stdout.trim().split('\n').at(-1)!).summary;
    expect(summary).toMatchObject({ connected: 2, entered: 2 });
  });
});
