/** The dissector generator's pieces that need no tshark: condition recovery and the files written. */
import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { generateDissectors, inferCondition } from '../../src/inspect/dissector.js';
import { message, t } from '../../src/wire/codec.js';
import { runCli } from '../helpers/cli.js';
import { tempDir } from './helpers.js';

const fields = message('m', { flags: t.u8, kind: t.u16be, other: t.u8 }).info as any;

describe('dissector generator', () => {
  it('recovers single-field conditions written as functions, exactly', () => {
    const before = fields.fields;
    expect(inferCondition((m) => m.kind === 3, before)).toEqual({ op: 'eq', field: 'kind', value: 3 });
    expect(inferCondition((m) => m.kind !== 0, before)).toEqual({ op: 'ne', field: 'kind', value: 0 });
    expect(inferCondition((m) => (m.flags & 0x04) !== 0, before)).toEqual({
      op: 'anyBits',
      field: 'flags',
      mask: 4,
    });
    expect(inferCondition((m) => (m.flags & 0x01) === 0, before)).toEqual({
      op: 'noBits',
      field: 'flags',
      mask: 1,
    });
    expect(inferCondition((m) => (m.flags & 0x06) === 0x06, before)).toEqual({
      op: 'allBits',
      field: 'flags',
      mask: 6,
    });
  });

  it('refuses what it cannot express exactly (two fields, ranges) instead of guessing', () => {
    const before = fields.fields;
    expect(inferCondition((m) => m.kind === 1 && m.flags === 2, before)).toBeUndefined();
    expect(inferCondition((m) => m.kind > 10, before)).toBeUndefined();
  });

  it('writes one Lua file per protocol with its fields, value names and ports', async () => {
    const dir = tempDir();
    const r = runCli(['dissector', '--out', dir]);
    expect(r.code).toBe(0);
    const files = fs.readdirSync(dir).sort();
    expect(files).toEqual((await generateDissectors()).map((d) => d.file).sort());
    expect(files).toEqual([
      'gamewire-js5.lua',
      'gamewire-nox-relay.lua',
      'gamewire-prudp.lua',
      'gamewire-rmc.lua',
      'gamewire-unity-relay.lua',
    ]);
    const nox = fs.readFileSync(path.join(dir, 'gamewire-nox-relay.lua'), 'utf8');
    expect(nox).toContain('"gw_nox.Handshake.engine"');
    expect(nox).toContain('[5] = "Authentification"');
    expect(nox).toContain('DissectorTable.get("udp.port"):add(23032, P)');
    expect(nox).toContain('register_heuristic("udp"');
    const js5 = fs.readFileSync(path.join(dir, 'gamewire-js5.lua'), 'utf8');
    expect(js5).toContain('"gw_js5.urgent.group"');
    expect(js5).toContain('DESEGMENT_ONE_MORE_SEGMENT');
  });
});
