/**
 * Joining over wss a relay with its generated self-signed certificate (issue 21 item 11): the
 * error names --ca and --insecure, and the certificate is where docs/unity-relay.md says
 * (`data/unity-relay-wss-cert.pem` under the folder `serve` started in), so the documented
 * command works verbatim from that folder.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { RelayApiClient, UnityRelayClient } from '../../../src/protocols/unity-relay/index.js';
import { BIN, cliEnv } from '../../helpers/cli.js';
import { fast } from './fleet-helpers.js';

const cwd = mkdtempSync(path.join(tmpdir(), 'gamewire-wss-trust-'));
let relay: ChildProcess | undefined;

afterAll(async () => {
  if (relay !== undefined && relay.exitCode === null) {
    const exited = new Promise((r) => relay!.once('exit', r));
    relay.kill('SIGTERM');
    await exited;
  }
  rmSync(cwd, { recursive: true, force: true });
});

/** `gamewire serve unity-relay` from `cwd` with its default data folder; resolves with the API URL. */
function serveRelay(): Promise<string> {
  relay = spawn(process.execPath, [BIN, 'serve', 'unity-relay', '--host', '127.0.0.1', '--port', '0'], {
    cwd,
    env: cliEnv(),
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  return new Promise((resolve, reject) => {
    relay!.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      const api = /unity-relay http (\S+):(\d+) /.exec(out);
      if (api !== null && /gamewire: dashboard /.test(out)) resolve(`http://${api[1]}:${api[2]}`);
    });
    relay!.once('exit', (code) => reject(new Error(`serve exited ${code}: ${out}`)));
  });
}

function join(code: string, api: string, extra: string[]) {
  const r = spawnSync(
    process.execPath,
    [BIN, 'unity-relay', 'join', code, '--api', api, '--transport', 'wss', ...extra],
    // stdin ends at once: a join that connects leaves the chat straight away.
    { cwd, env: cliEnv(), input: '', encoding: 'utf8', timeout: 60_000 },
  );
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

describe('unity-relay join --transport wss against a self-signed relay', () => {
  it('fails with one line naming --ca and --insecure; the documented --ca path then works', async () => {
    const api = await serveRelay();
    // Where the docs say the generated certificate is.
    expect(existsSync(path.join(cwd, 'data', 'unity-relay-wss-cert.pem'))).toBe(true);
    // A host bound over UDP, for joiners to connect to.
    const { client: host, joinCode: code } = await UnityRelayClient.host(new RelayApiClient(api), 4, fast);
    try {
      const refused = join(code, api, []);
      expect(refused.code).toBe(1);
      const lines = refused.stderr.trim().split('\n');
      expect(lines).toHaveLength(1);
      const e = (JSON.parse(lines[0]!) as { error: { code: string; message: string } }).error;
      expect(e.code).toBe('ERR_RELAY_TLS');
      expect(e.message).toMatch(/self-signed certificate/);
      expect(e.message).toMatch(/--ca/);
      expect(e.message).toMatch(/--insecure/);
      expect(e.message).toMatch(/data\//);

      // docs/unity-relay.md: `… join K7Q2MZ --transport wss --ca data/unity-relay-wss-cert.pem`
      const trusted = join(code, api, ['--ca', 'data/unity-relay-wss-cert.pem']);
      expect(trusted.stderr).toMatch(/connected to host .* over wss/);
      expect(trusted.stderr).not.toMatch(/ERR_RELAY_TLS/);
      const insecure = join(code, api, ['--insecure']);
      expect(insecure.stderr).toMatch(/connected to host .* over wss/);
    } finally {
      await host.close();
    }
  }, 120_000);
});
