/** The command-line contract (docs/cli.md), through the real spawned command. */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { Command } from 'commander';
import { describe, expect, it } from 'vitest';
import { buildProgram } from '../../src/cli/main.js';
import { errorOf, runCli, runCliAsync } from '../helpers/cli.js';

const SEED = '00000040460000000f00057072696e7473000548656c6c6f';
const SEED_JSON = {
  type: 'ServerData',
  identifier: 0x40000000,
  item: { type: 'call', tag: 'F', name: 'print', args: [{ type: 'string', value: 'Hello' }] },
};

describe('gamewire decode / encode', () => {
  it('decodes the LibRPC seed to the print("Hello") call', () => {
    const r = runCli(['decode', 'vcmp-rpc', '--hex', SEED]);
    expect(r.code).toBe(0);
    expect(r.stderr).toBe('');
    expect(JSON.parse(r.stdout)).toEqual(SEED_JSON);
  });

  it('encodes that JSON back to the same bytes', () => {
    const r = runCli(['encode', 'vcmp-rpc', '--json', JSON.stringify(SEED_JSON)]);
    expect(r.code).toBe(0);
    expect(r.stdout).toBe(`${SEED}\n`);
  });

  it('accepts hex with spaces, a file of raw bytes, and stdin', () => {
    const spaced = SEED.replace(/(..)/g, '$1 ');
    expect(JSON.parse(runCli(['decode', 'vcmp-rpc', '--hex', spaced]).stdout)).toEqual(SEED_JSON);
    const dir = mkdtempSync(path.join(tmpdir(), 'gamewire-cli-'));
    const file = path.join(dir, 'seed.bin');
    writeFileSync(file, Buffer.from(SEED, 'hex'));
    expect(JSON.parse(runCli(['decode', 'vcmp-rpc', file]).stdout)).toEqual(SEED_JSON);
    expect(JSON.parse(runCli(['decode', 'vcmp-rpc', '-'], Buffer.from(SEED, 'hex')).stdout)).toEqual(
      SEED_JSON,
    );
    const jsonFile = path.join(dir, 'seed.json');
    writeFileSync(jsonFile, JSON.stringify(SEED_JSON));
    expect(runCli(['encode', 'vcmp-rpc', jsonFile]).stdout).toBe(`${SEED}\n`);
    expect(runCli(['encode', 'vcmp-rpc', '-'], JSON.stringify(SEED_JSON)).stdout).toBe(`${SEED}\n`);
  });

  it('reports input that ends early as ERR_INCOMPLETE with exit 1 and nothing on stdout', () => {
    const r = runCli(['decode', 'vcmp-rpc', '--hex', SEED.slice(0, 30)]);
    expect(r.code).toBe(1);
    expect(r.stdout).toBe('');
    expect(errorOf(r)).toMatchObject({ code: 'ERR_INCOMPLETE', offset: 9 });
  });

  it('reports malformed input with its code and offset, never a stack trace', () => {
    const cases: [string, string][] = [
      ['01000040460000000400016678', 'ERR_UNKNOWN_TYPE'],
      ['0100004046000000050001666202', 'ERR_BAD_VALUE'],
      ['01000040460000000300016669070000 00', 'ERR_TRAILING_BYTES'],
      ['zz', 'ERR_BAD_VALUE'],
    ];
    for (const [hex, code] of cases) {
      const r = runCli(['decode', 'vcmp-rpc', '--hex', hex]);
      expect(r.code).toBe(1);
      expect(r.stdout).toBe('');
      expect(errorOf(r).code).toBe(code);
      expect(r.stderr).not.toMatch(/\n\s+at /);
    }
  });

  it('the lenient variant accepts what the C++ plugin accepts', () => {
    const r = runCli([
      'decode',
      'vcmp-rpc',
      '--variant',
      'lenient',
      '--hex',
      '0100004046000000030001666907000000',
    ]);
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout).item.args).toEqual([{ type: 'int', value: 7 }]);
  });

  it('rejects bad JSON for encode with exit 1', () => {
    expect(errorOf(runCli(['encode', 'vcmp-rpc', '--json', '{nope']))).toMatchObject({
      code: 'ERR_BAD_JSON',
    });
    const r = runCli(['encode', 'vcmp-rpc', '--json', JSON.stringify({ ...SEED_JSON, identifier: 5 })]);
    expect(r.code).toBe(1);
    expect(errorOf(r).code).toBe('ERR_BAD_INPUT');
  });

  it('exits 2 with ERR_USAGE for bad usage', () => {
    for (const args of [
      ['decode', 'nope', '--hex', '00'],
      ['decode', 'vcmp-rpc'],
      ['decode', 'vcmp-rpc', '--from', 'sideways', '--hex', SEED],
      ['decode', 'vcmp-rpc', '--variant', 'nope', '--hex', SEED],
      ['frobnicate'],
      ['serve', 'vcmp-rpc'],
    ]) {
      const r = runCli(args);
      expect(r.code, args.join(' ')).toBe(2);
      expect(errorOf(r).code).toBe('ERR_USAGE');
    }
  });

  it('builds ServerData like RFC(name)(args) from the command line', () => {
    const r = runCli(['vcmp-rpc', 'build', 'print', '["Hello"]', '--legacy']);
    expect(r.stdout).toBe(`${SEED}\n`);
  });
});

describe('--help', () => {
  // Every command and subcommand the program defines, found by walking it.
  const commands: { path: string[]; cmd: Command }[] = [];
  const walk = (cmd: Command, prefix: string[]) => {
    for (const sub of cmd.commands) {
      commands.push({ path: [...prefix, sub.name()], cmd: sub });
      walk(sub, [...prefix, sub.name()]);
    }
  };

  it('exists on the program and every command', async () => {
    walk(await buildProgram(), []);
    expect(commands.length).toBeGreaterThanOrEqual(4);
    // Every command's help text, from the program the CLI builds (in-process: one spawn per
    // command cost 40 s of CPU for what the same code prints).
    for (const { path, cmd } of commands)
      expect(cmd.helpInformation(), path.join(' ')).toMatch(new RegExp(`Usage: gamewire ${path.join(' ')}`));
    // And through the real command: the program, each top-level command and one nested command,
    // each exiting 0 with its usage line.
    const spawned = [[], ...commands.filter((c) => c.path.length === 1).map((c) => c.path)];
    const nested = commands.find((c) => c.path.length > 1);
    if (nested !== undefined) spawned.push(nested.path);
    const results = await Promise.all(spawned.map((p) => runCliAsync([...p, '--help'])));
    results.forEach((r, i) => {
      const p = spawned[i]!;
      expect(r.code, p.join(' ')).toBe(0);
      // On a pipe, help wraps at 100 columns.
      expect(
        r.stdout.split('\n').filter((l) => l.length > 100),
        p.join(' '),
      ).toEqual([]);
      expect(r.stdout, p.join(' ')).toMatch(
        new RegExp(`Usage: gamewire${p.length > 0 ? ` ${p.join(' ')}` : ''}`),
      );
    });
  }, 120_000);
});
