/**
 * `gamewire serve` (what `npm start` runs): every server starts with embedded defaults, prints
 * where it listens, and stops cleanly with exit 0 on SIGTERM and SIGINT. Ports are 0 here so the
 * test never collides with anything else on the machine.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { resolveServeOptions } from '../../src/cli/serve.js';
import type { ProtocolModule } from '../../src/core/protocol.js';
import type { ServerDefinition } from '../../src/core/server.js';
import { loadProtocols } from '../../src/protocols/registry.js';
import { BIN, ROOT } from '../helpers/cli.js';

const servers = (await loadProtocols()).filter((p) => p.server !== undefined);

function ephemeralConfig(dir: string): string {
  const config: Record<string, Record<string, unknown>> = {};
  for (const p of servers) {
    const section: Record<string, unknown> = { host: '127.0.0.1', port: 0 };
    for (const o of p.server!.options) if (/port$/i.test(o.key) && o.type === 'int') section[o.key] = 0;
    config[p.name] = section;
  }
  const file = path.join(dir, 'config.json');
  writeFileSync(file, JSON.stringify(config));
  return file;
}

function runUntilListening(
  signal: NodeJS.Signals,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const dir = mkdtempSync(path.join(tmpdir(), 'gamewire-serve-'));
  const child = spawn(
    process.execPath,
    [BIN, 'serve', '--config', ephemeralConfig(dir), '--data-dir', dir, '--log-level', 'warn'],
    {
      cwd: ROOT,
      stdio: ['ignore', 'pipe', 'pipe'],
    },
  );
  let stdout = '';
  let stderr = '';
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`serve did not start in time; stdout: ${stdout}; stderr: ${stderr}`));
    }, 60_000);
    let signalled = false;
    child.stdout.on('data', (d: Buffer) => {
      stdout += d.toString();
      const started = servers.every((p) => stdout.includes(`gamewire: ${p.name} `));
      if (!signalled && (started || stdout.includes('nothing to serve'))) {
        signalled = true;
        child.kill(signal);
      }
    });
    child.stderr.on('data', (d: Buffer) => {
      stderr += d.toString();
    });
    child.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

describe('gamewire serve (npm start)', () => {
  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    it(`starts every server, prints each endpoint, and exits 0 on ${signal}`, async () => {
      const r = await runUntilListening(signal);
      expect(r.code, r.stderr).toBe(0);
      if (servers.length === 0) {
        expect(r.stdout).toMatch(/nothing to serve/);
        return;
      }
      for (const p of servers) {
        expect(r.stdout).toMatch(new RegExp(`gamewire: ${p.name} (tcp|udp|http) 127\\.0\\.0\\.1:[1-9]\\d*`));
      }
      expect(r.stdout).toMatch(/gamewire: stopped/);
    });
  }
});

describe('serve option precedence', () => {
  const def: ServerDefinition = {
    summary: 'test',
    defaultPort: 1234,
    options: [
      {
        key: 'idleTimeoutMs',
        flag: '--unity-idle-timeout <ms>',
        description: '',
        type: 'int',
        default: 10_000,
      },
      { key: 'cache', flag: '--cache <dir>', description: '', type: 'string' },
    ],
    start: () => Promise.reject(new Error('not started here')),
  };

  const p: ProtocolModule = { name: 'test', summary: 'test', codecs: [], server: def };

  it('applies defaults, then the config section, then flags (under their own flag names)', () => {
    expect(resolveServeOptions(p, {}, {}, '0.0.0.0')).toEqual({
      host: '0.0.0.0',
      port: 1234,
      idleTimeoutMs: 10_000,
    });
    expect(resolveServeOptions(p, { idleTimeoutMs: 5, cache: 'a', port: 1 }, {}, '0.0.0.0')).toEqual({
      host: '0.0.0.0',
      port: 1,
      idleTimeoutMs: 5,
      cache: 'a',
    });
    expect(
      resolveServeOptions(
        p,
        { idleTimeoutMs: 5, cache: 'a' },
        { unityIdleTimeout: 7, cache: 'b', port: 2, host: '::1' },
        '0.0.0.0',
      ),
    ).toEqual({ host: '::1', port: 2, idleTimeoutMs: 7, cache: 'b' });
  });
});
