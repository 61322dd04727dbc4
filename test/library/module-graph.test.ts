/**
 * What a process loads: the CLI's quick commands load no protocol server code and no heavy
 * dependency, and a script importing `gamewire/wire` and codecs loads no server dependency.
 * Checked on the module graph itself (every module resolved, ESM or CommonJS), not on timings.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { BIN, ROOT } from '../helpers/cli.js';

const HOOK = path.join(ROOT, 'test/library/module-log.mjs');
const dir = mkdtempSync(path.join(tmpdir(), 'gamewire-graph-'));
let n = 0;

/** Runs node with the module logger; returns the packages and gamewire files it loaded. */
function loaded(args: string[]): { packages: string[]; files: string[]; stdout: string } {
  const log = path.join(dir, `log-${n++}`);
  const r = spawnSync(process.execPath, ['--import', HOOK, ...args], {
    cwd: ROOT,
    encoding: 'utf8',
    env: { ...process.env, GAMEWIRE_MODULE_LOG: log },
  });
  expect(r.status, r.stderr).toBe(0);
  const urls = readFileSync(log, 'utf8').split('\n');
  const packages = new Set<string>();
  const files: string[] = [];
  for (const url of urls) {
    const m = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
    if (m !== null) packages.add(m[1]!);
    else if (url.includes('/dist/src/')) files.push(url.slice(url.indexOf('/dist/src/') + 10));
  }
  return { packages: [...packages].sort(), files, stdout: r.stdout };
}

const SERVER_DEPS = ['fastify', 'pino', 'pino-pretty', 'prom-client', 'cli-progress', 'ws', 'ioredis'];
const HEX = '00000040460000000f00057072696e7473000548656c6c6f';

describe('the CLI loads only what a command needs', () => {
  for (const args of [
    ['--version'],
    ['--help'],
    ['decode', 'vcmp-rpc', '--hex', HEX],
    ['decode', 'js5', '--from', 'client', '--hex', '0f00000212'],
  ]) {
    it(`gamewire ${args.join(' ')}: commander only; no server, client or other protocol`, () => {
      const { packages, files } = loaded([BIN, ...args]);
      expect(packages).toEqual(['commander']);
      expect(
        files.filter(
          (f) => /\/(server|client|index|api|relay|dispatcher)\.js$/.test(f) && f.startsWith('protocols/'),
        ),
      ).toEqual([]);
      if (args[0] === 'decode') {
        const other = args[1] === 'js5' ? 'vcmp-rpc' : 'js5';
        expect(files.some((f) => f.startsWith(`protocols/${other}/`))).toBe(false);
      }
    });
  }
});

describe('library imports load no server dependency', () => {
  it('gamewire/wire and every gamewire/<protocol>/codec', () => {
    const script = [
      "import * as wire from 'gamewire/wire';",
      "import { rmcCodec } from 'gamewire/rmc/codec';",
      "import { js5Codec } from 'gamewire/js5/codec';",
      "import { unityRelayCodec } from 'gamewire/unity-relay/codec';",
      "import { vcmpRpcCodec } from 'gamewire/vcmp-rpc/codec';",
      "import { noxRelayCodec } from 'gamewire/nox-relay/codec';",
      'console.log(typeof wire.decode, [rmcCodec, js5Codec, unityRelayCodec, vcmpRpcCodec, noxRelayCodec].map((c) => c.name).join());',
    ].join('\n');
    const { packages, stdout } = loaded(['--input-type=module', '-e', script]);
    expect(stdout.trim()).toBe('function rmc,js5,unity-relay,vcmp-rpc,nox-relay');
    for (const dep of SERVER_DEPS) expect(packages).not.toContain(dep);
    expect(packages).toEqual([]);
  });

  it('the package root: decode/encode by protocol name', () => {
    const script = `import { decode, encode } from 'gamewire'; const j = decode('vcmp-rpc', Buffer.from('${HEX}', 'hex')); console.log(encode('vcmp-rpc', j).toString('hex'));`;
    const { packages, stdout } = loaded(['--input-type=module', '-e', script]);
    expect(stdout.trim()).toBe(HEX);
    expect(packages).toEqual([]);
  });
});
