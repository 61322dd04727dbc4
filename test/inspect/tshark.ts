/**
 * Compares what tshark shows with the generated Lua dissectors against `gamewire inspect --json`
 * for every message of a capture, field by field.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { expect } from 'vitest';
import { runCli } from '../helpers/cli.js';
import type { JsonRecord } from './helpers.js';
import { tempDir } from './helpers.js';

const ABBREV: Record<string, string> = {
  js5: 'gw_js5',
  rmc: 'gw_rmc',
  prudp: 'gw_prudp',
  'unity-relay': 'gw_unity',
  'nox-relay': 'gw_nox',
};

const generated = new Map<string, string>();

/** `gamewire dissector --out DIR` (with `extra` flags, such as `--protocols PACK`), once per test file. */
export function dissectorDir(extra: readonly string[] = []): string {
  const key = extra.join('\0');
  let dir = generated.get(key);
  if (dir === undefined) {
    dir = tempDir('gamewire-dissectors-');
    const r = runCli(['dissector', '--out', dir, ...extra]);
    if (r.code !== 0) throw new Error(`dissector failed: ${r.stderr}`);
    generated.set(key, dir);
  }
  return dir;
}

export interface FieldBag {
  type: string;
  direction: string | undefined;
  /** Field name → values in order. */
  fields: Map<string, string[]>;
}

function add(bag: FieldBag, name: string, value: string): void {
  const list = bag.fields.get(name);
  if (list === undefined) bag.fields.set(name, [value]);
  else list.push(value);
}

/** The inspector's message as a bag of (field name, value): arrays and objects flattened. */
export function inspectBag(r: JsonRecord): FieldBag {
  const bag: FieldBag = { type: r.message.type, direction: r.direction, fields: new Map() };
  const walk = (key: string, v: unknown): void => {
    if (v === null || v === undefined) return;
    if (Array.isArray(v)) {
      for (const x of v) walk(key, x);
      return;
    }
    if (typeof v === 'object') {
      for (const [k, x] of Object.entries(v as Record<string, unknown>)) walk(k, x);
      return;
    }
    add(bag, key, typeof v === 'boolean' ? (v ? '1' : '0') : String(v));
  };
  for (const [k, v] of Object.entries(r.message as Record<string, unknown>)) if (k !== 'type') walk(k, v);
  return bag;
}

/** tshark's view of one protocol item: leaf fields by their last name; structure items skipped. */
function tsharkBag(item: Record<string, unknown>, prefix: string): FieldBag {
  const bag: FieldBag = { type: '', direction: undefined, fields: new Map() };
  const walk = (key: string, v: unknown): void => {
    if (Array.isArray(v)) {
      for (const x of v) walk(key, x);
      return;
    }
    if (v !== null && typeof v === 'object') {
      for (const [k, x] of Object.entries(v as Record<string, unknown>)) walk(k, x);
      return;
    }
    if (!key.startsWith(`${prefix}.`) || key.endsWith('_tree')) return;
    const value = String(v);
    if (key === `${prefix}.message`) bag.type = value;
    else if (key === `${prefix}.hdr.direction`) bag.direction = value;
    else if (key.includes('.hdr.') || /_(list|struct|u8)$/.test(key)) return;
    else {
      // Bytes come as aa:bb:cc.
      const bytes = /^[0-9a-f]{2}(:[0-9a-f]{2})*$/.test(value) ? value.replace(/:/g, '') : value;
      add(bag, key.slice(key.lastIndexOf('.') + 1), bytes);
    }
  };
  for (const [k, v] of Object.entries(item)) walk(k, v);
  return bag;
}

/** Every message tshark shows for `protocol`, in capture order. */
export function tsharkMessages(
  file: string,
  protocol: string,
  decodeAs: string[] = [],
  dissectorFlags: readonly string[] = [],
): FieldBag[] {
  const dir = dissectorDir(dissectorFlags);
  const scripts = fs
    .readdirSync(dir)
    .filter((f) => f.endsWith('.lua'))
    .flatMap((f) => ['-X', `lua_script:${path.join(dir, f)}`]);
  const args = [
    ...scripts,
    '-o',
    'tcp.desegment_tcp_streams:TRUE',
    '-o',
    'tcp.reassemble_out_of_order:TRUE',
    ...decodeAs.flatMap((d) => ['-d', d]),
    '-r',
    file,
    '-T',
    'json',
    '--no-duplicate-keys',
  ];
  const r = spawnSync('tshark', args, { encoding: 'utf8', maxBuffer: 256 << 20, timeout: 120_000 });
  if (r.status !== 0) throw new Error(`tshark failed (${r.status}): ${r.stderr}`);
  // Lua errors are reported on stderr or as expert notes; both fail the comparison.
  expect(r.stderr).not.toMatch(/Lua: Error|error during loading|attempt to/i);
  const prefix = ABBREV[protocol]!;
  const out: FieldBag[] = [];
  for (const packet of JSON.parse(r.stdout) as any[]) {
    const layers = packet._source.layers as Record<string, unknown>;
    const items = layers[prefix];
    if (items === undefined) continue;
    for (const item of Array.isArray(items) ? items : [items])
      out.push(tsharkBag(item as Record<string, unknown>, prefix));
  }
  expect(r.stdout).not.toMatch(/_ws\.malformed|_ws\.lua\.text/);
  return out;
}

function sameValue(a: string, b: string): boolean {
  if (a === b) return true;
  const x = Number(a);
  const y = Number(b);
  // Floats: tshark prints f32 values rounded; compare to float precision.
  return (
    Number.isFinite(x) &&
    Number.isFinite(y) &&
    Math.abs(x - y) <= 1e-6 * Math.max(1, Math.abs(x), Math.abs(y))
  );
}

/** Asserts that tshark shows the same messages, with the same fields and values, as the inspector. */
export function expectTsharkAgrees(
  file: string,
  records: JsonRecord[],
  decodeAs: string[] = [],
  dissectorFlags: readonly string[] = [],
): void {
  const byProtocol = new Map<string, JsonRecord[]>();
  for (const r of records) {
    if (r.message === undefined) continue;
    const list = byProtocol.get(r.protocol) ?? [];
    list.push(r);
    byProtocol.set(r.protocol, list);
  }
  for (const [protocol, list] of byProtocol) {
    const shown = tsharkMessages(file, protocol, decodeAs, dissectorFlags);
    expect(
      shown.map((b) => b.type),
      `${protocol} message types`,
    ).toEqual(list.map((r) => r.message.type));
    list.forEach((r, i) => {
      const want = inspectBag(r);
      const got = shown[i]!;
      if (got.direction !== undefined) expect(got.direction, `${protocol} #${i} direction`).toBe(r.direction);
      expect([...got.fields.keys()].sort(), `${protocol} #${i} ${want.type} field names`).toEqual(
        [...want.fields.keys()].sort(),
      );
      for (const [name, values] of want.fields) {
        const other = got.fields.get(name)!;
        expect(other.length, `${protocol} #${i} ${want.type}.${name} count`).toBe(values.length);
        values.forEach((v, j) => {
          if (!sameValue(v, other[j]!)) {
            expect(other[j], `${protocol} #${i} ${want.type}.${name}[${j}]`).toBe(v);
          }
        });
      }
    });
  }
}
