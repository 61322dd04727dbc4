/**
 * `gamewire load` as users run it: the compiled command, its refusals (exit 2, one JSON error
 * line, no traffic), its JSON summary and progress line against a spawned server.
 */
import net from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BIN, cliEnv, errorOf, ROOT, runChild, runCli } from '../helpers/cli.js';
import { type Served, startServe } from '../helpers/serve.js';

/** Runs the CLI without blocking this process (the load needs its event loop free of nothing, but tests stay responsive). */
function runAsync(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return runChild(process.execPath, [BIN, ...args], { cwd: ROOT, env: cliEnv(), stdin: 'pipe' });
}

describe('gamewire load: refusals', () => {
  it('refuses a target outside loopback without --i-own-this-target, before sending anything', () => {
    const r = runCli(['load', 'nox-relay', '--target', '10.1.2.3:23032']);
    expect(r.code).toBe(2);
    const e = errorOf(r);
    expect(e.code).toBe('ERR_LOAD_TARGET');
    expect(e.message).toContain('--i-own-this-target');
    expect(r.stdout).toBe('');
  });

  it('refuses a --from address this machine does not have', () => {
    const r = runCli(['load', 'nox-relay', '--target', '127.0.0.1:1', '--from', '203.0.113.200']);
    expect(r.code).toBe(2);
    expect(errorOf(r).code).toBe('ERR_LOAD_FROM');
  });

  it('lists the protocols it can load when none is named', () => {
    const r = runCli(['load']);
    expect(r.code).toBe(2);
    const e = errorOf(r);
    expect(e.code).toBe('ERR_USAGE');
    for (const p of ['rmc', 'js5', 'unity-relay', 'nox-relay']) expect(e.message).toContain(p);
    expect(e.message).not.toContain('vcmp-rpc');
  });

  it('checks numbers, choices and combinations as usage errors', () => {
    for (const args of [
      ['load', 'js5', '--target', '127.0.0.1', '--clients', '0'],
      ['load', 'js5', '--target', '127.0.0.1', '--duration', 'soon'],
      ['load', 'nox-relay', '--target', '127.0.0.1', '--transport', 'carrier-pigeon'],
      ['load', 'rmc', '--target', '127.0.0.1:1', '--transport', 'tcp', '--prudp-profile', 'classic'],
      ['load', 'unity-relay'],
      ['load', 'nox-relay'],
    ]) {
      const r = runCli(args);
      expect(r.code, args.join(' ')).toBe(2);
      expect(errorOf(r).code, args.join(' ')).toBe('ERR_USAGE');
    }
  });

  it('says there is no server, in one line and exit 1, when nothing listens', async () => {
    const closed = await new Promise<number>((resolve) => {
      const s = net.createServer();
      s.listen(0, '127.0.0.1', () => {
        const port = (s.address() as net.AddressInfo).port;
        s.close(() => resolve(port));
      });
    });
    const r = runCli(['load', 'js5', '--target', `127.0.0.1:${closed}`]);
    expect(r.code).toBe(1);
    expect(errorOf(r).code).toBe('ERR_JS5_NO_SERVER');
    expect(r.stderr).not.toMatch(/\n\s+at /);
  });
});

describe('gamewire load against a server', () => {
  let relay: Served;
  beforeAll(async () => {
    relay = await startServe(['nox-relay', '--port', '0', '--host', '127.0.0.1', '--no-admin']);
  });
  afterAll(async () => {
    await relay?.stop();
  });

  it('prints one JSON summary with --json, and a progress line on stderr with --progress', async () => {
    const r = await runAsync([
      'load',
      'nox-relay',
      '--target',
      `127.0.0.1:${relay.port('udp')}`,
      '--clients',
      '3',
      '--duration',
      '2.5',
      '--json',
      '--progress',
    ]);
    expect(r.code, r.stderr).toBe(0);
    const lines = r.stdout.trim().split('\n');
    expect(lines).toHaveLength(1);
    const s = JSON.parse(lines[0]!) as Record<string, any>;
    expect(s).toMatchObject({ protocol: 'nox-relay', clients: 3, ok: true });
    expect(s.sessions.joined).toBe(3);
    expect(Object.keys(s.latencyMs)).toEqual(expect.arrayContaining(['join', 'relay']));
    for (const k of ['p50', 'p90', 'p99', 'max']) expect(typeof s.latencyMs.relay[k]).toBe('number');
    expect(r.stderr).toMatch(/clients \d+\/3 +joined 3/);
  });

  it('prints a readable summary by default, and no progress line on a pipe', async () => {
    const r = await runAsync([
      'load',
      'nox-relay',
      '--target',
      `127.0.0.1:${relay.port('udp')}`,
      '--clients',
      '2',
      '--duration',
      '1.5',
    ]);
    expect(r.code, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/^nox-relay load on 127\.0\.0\.1:\d+: 2 players/);
    expect(r.stdout).toMatch(/sessions: 2 started, 2 joined/);
    expect(r.stdout).toContain('violations: none');
    expect(r.stderr).toBe('');
  });
});
