/**
 * The real command, as the project's CLI contract fixes it: `node bin/gamewire.js …` with the
 * project's Node (process.execPath), against the compiled dist/ (`npm run build` first; `npm
 * test` does it).
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type HyperscapeMessage, hyperscapePacket, LoginProtocol } from '../../../src/protocols/rmc/index.js';
import { type Codec, decode } from '../../../src/wire/index.js';
import { BIN as bin, ROOT as root, runCli as run } from '../../helpers/cli.js';
import { elapse } from '../../helpers/wait.js';
import { SEED_ERROR_RESPONSE_HEX, SEED_REGISTER_REQUEST_HEX, SEED_URLS, seedRequest } from './fixtures.js';
import { RawPeer } from './helpers.js';

beforeAll(() => {
  expect(
    existsSync(path.join(root, 'dist/src/protocols/rmc/index.js')),
    'run `npm run build` before these tests',
  ).toBe(true);
});

describe('gamewire decode/encode rmc', () => {
  it('decodes the seed Register_V1 request (all 253 bytes) and encodes it back byte-exactly', () => {
    const d = run(['decode', 'rmc', '--hex', SEED_REGISTER_REQUEST_HEX]);
    expect(d.code).toBe(0);
    const json = JSON.parse(d.stdout);
    expect(json).toMatchObject({
      type: 'request',
      protocol: 'LoginProtocol',
      callId: 6,
      args: { vecMyURLs: SEED_URLS },
    });
    const e = run(['encode', 'rmc', '--json', d.stdout]);
    expect(e.code).toBe(0);
    expect(e.stdout.trim()).toBe(SEED_REGISTER_REQUEST_HEX);
  });

  it('decodes the seed failure response and encodes it back byte-exactly (hex with spaces accepted)', () => {
    const spaced = SEED_ERROR_RESPONSE_HEX.match(/../g)!.join(' ').toUpperCase();
    const d = run(['decode', 'rmc', '--hex', spaced]);
    expect(d.code).toBe(0);
    expect(JSON.parse(d.stdout)).toEqual({
      type: 'error',
      protocol: 'LoginProtocol',
      namespace: 'RendezVous',
      code: 129,
      callId: 5,
    });
    const e = run(['encode', 'rmc', '-'], d.stdout);
    expect(e.stdout.trim()).toBe(SEED_ERROR_RESPONSE_HEX);
  });

  it('two packets (raw bytes on stdin) give an array, in order', () => {
    const d = run(
      ['decode', 'rmc', '-'],
      Buffer.from(SEED_ERROR_RESPONSE_HEX + SEED_REGISTER_REQUEST_HEX, 'hex'),
    );
    expect(d.code).toBe(0);
    const json = JSON.parse(d.stdout);
    expect(json.map((j: { type: string }) => j.type)).toEqual(['error', 'request']);
    expect(run(['encode', 'rmc', '--json', d.stdout]).stdout.trim()).toBe(
      SEED_ERROR_RESPONSE_HEX + SEED_REGISTER_REQUEST_HEX,
    );
  });

  it('a truncated packet is exit 1 with ERR_INCOMPLETE and an offset, no stdout', () => {
    const d = run(['decode', 'rmc', '--hex', SEED_REGISTER_REQUEST_HEX.slice(0, 200)]);
    expect(d.code).toBe(1);
    expect(d.stdout).toBe('');
    const err = JSON.parse(d.stderr.trim()).error;
    expect(err.code).toBe('ERR_INCOMPLETE');
    expect(typeof err.offset).toBe('number');
  });

  it('--variant classic decodes packed RMC; an unknown variant is a usage error', () => {
    const hex = '0e0000000a01080000000280000001000100';
    const d = run(['decode', 'rmc', '--variant', 'classic', '--hex', hex]);
    expect(JSON.parse(d.stdout)).toEqual({
      type: 'response',
      protocolId: 10,
      callId: 8,
      methodId: 2,
      results: '01000100',
    });
    expect(run(['encode', 'rmc', '--variant', 'classic', '--json', d.stdout]).stdout.trim()).toBe(hex);
    const bad = run(['decode', 'rmc', '--variant', 'nope', '--hex', hex]);
    expect(bad.code).toBe(2);
    expect(JSON.parse(bad.stderr.trim()).error.code).toBe('ERR_USAGE');
  });

  it('rmc methods lists every built-in method with its layout status', () => {
    const r = run(['rmc', 'methods', '--json']);
    expect(r.code).toBe(0);
    const all = JSON.parse(r.stdout) as {
      protocol: string;
      methods: { method: string; layout: string; args: string }[];
    }[];
    expect(all.map((p) => p.protocol)).toEqual([
      'LoginProtocol',
      'CloudServersProtocol',
      'SessionProtocol',
      'ApexAntitoxicityProtocol',
    ]);
    const register = all[0]!.methods.find((m) => m.method === 'LoginProtocol::Register_V1')!;
    expect(register).toMatchObject({ layout: 'inferred', args: 'vecMyURLs: List<StationURL>' });
  });

  it('bad JSON for encode is exit 1 with a path', () => {
    const e = run([
      'encode',
      'rmc',
      '--json',
      '{"type":"error","protocol":"P","namespace":"Core","code":70000,"callId":1}',
    ]);
    expect(e.code).toBe(1);
    expect(JSON.parse(e.stderr.trim()).error).toMatchObject({ code: 'ERR_BAD_INPUT', path: 'code' });
  });
});

describe('gamewire serve rmc + gamewire rmc call', () => {
  let child: ChildProcess;
  let port = 0;

  beforeAll(async () => {
    child = spawn(
      process.execPath,
      [bin, 'serve', 'rmc', '--host', '127.0.0.1', '--port', '0', '--log-level', 'silent'],
      {
        cwd: root,
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    );
    port = await new Promise<number>((resolve, reject) => {
      let out = '';
      let err = '';
      const timer = setTimeout(() => reject(new Error(`serve did not start: ${out} ${err}`)), 25_000);
      child.stderr!.on('data', (d: Buffer) => {
        err += d.toString();
      });
      child.once('exit', (code) => {
        clearTimeout(timer);
        reject(new Error(`serve exited with ${code}: ${out} ${err}`));
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
  });

  afterAll(async () => {
    if (child.exitCode === null) {
      const exited = new Promise((r) => child.once('exit', r));
      child.kill('SIGTERM');
      await exited;
    }
  });

  it('an independent client sending the seed bytes gets one framed response for call id 6', async () => {
    const peer = await RawPeer.connect(port);
    try {
      peer.write(seedRequest());
      const frames = await peer.waitFrames(1);
      await elapse(100, 'exactly one response: no second may come');
      expect(frames).toHaveLength(1);
      const msg = decode(hyperscapePacket as Codec<HyperscapeMessage>, frames[0]!);
      expect(msg).toMatchObject({ type: 'response', callId: 6, method: 'LoginProtocol::Register_V1*' });
      expect(
        decode(LoginProtocol.methods.Register_V1.results, (msg as { results: Buffer }).results).retval,
      ).toBe(0x10001);
    } finally {
      peer.destroy();
    }
  });

  it('a 0x7FFFFFFF length closes only that connection', async () => {
    const good = await RawPeer.connect(port);
    const bad = await RawPeer.connect(port);
    try {
      bad.write(Buffer.from('ffffff7f', 'hex'));
      expect(await bad.waitClosed()).toBe(true);
      good.write(seedRequest());
      expect(await good.waitFrames(1)).toHaveLength(1);
    } finally {
      good.destroy();
      bad.destroy();
    }
  });

  it('rmc call runs a typed call and prints the results', async () => {
    const r = await new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
      const p = spawn(
        process.execPath,
        [
          bin,
          'rmc',
          'call',
          '--host',
          '127.0.0.1',
          '--port',
          String(port),
          'LoginProtocol::Register_V1',
          '--args',
          JSON.stringify({ vecMyURLs: SEED_URLS }),
        ],
        { cwd: root },
      );
      let stdout = '';
      let stderr = '';
      p.stdout.on('data', (d) => (stdout += d));
      p.stderr.on('data', (d) => (stderr += d));
      p.on('exit', (code) => resolve({ code, stdout, stderr }));
    });
    expect(r.stderr).toBe('');
    expect(r.code).toBe(0);
    const out = JSON.parse(r.stdout);
    expect(out.method).toBe('LoginProtocol::Register_V1*');
    expect(out.results.retval).toBe(0x10001);
    expect(out.results.urlPublic).toMatch(/^prudp:\/address=127\.0\.0\.1;port=\d+;sid=15$/);
  });

  it('rmc call reports an RMC failure as exit 1 with the error name', async () => {
    const r = await new Promise<{ code: number | null; stderr: string }>((resolve) => {
      const p = spawn(
        process.execPath,
        [bin, 'rmc', 'call', '--port', String(port), 'NoSuchProtocol::X_V1', '--args', '""'],
        { cwd: root },
      );
      let stderr = '';
      p.stderr.on('data', (d) => (stderr += d));
      p.on('exit', (code) => resolve({ code, stderr }));
    });
    expect(r.code).toBe(1);
    expect(JSON.parse(r.stderr.trim()).error).toMatchObject({ code: 'ERR_RMC_FAILURE' });
    expect(r.stderr).toContain('Core::NotImplemented');
  });
});
