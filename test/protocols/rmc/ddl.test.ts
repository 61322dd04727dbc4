/**
 * From a game's DDL to protocol packs: the import (fixtures of our own in 5th-echelon's JSON
 * shape, test/protocols/rmc/fixtures/ddl), typed decode/encode of pack methods, `serve rmc
 * --protocols` answering NotImplemented over TCP, and the bad input.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Command } from 'commander';
import fc from 'fast-check';
import { afterAll, afterEach, describe, expect, it, vi } from 'vitest';
import { silentLogger } from '../../../src/core/logger.js';
import { ProtocolMetrics } from '../../../src/core/metrics.js';
import { registerCommands } from '../../../src/protocols/rmc/cli.js';
import { decodeStream, encodeJson, rmcCodec } from '../../../src/protocols/rmc/codec.js';
import { DdlError, importDdl, readDdlInputs } from '../../../src/protocols/rmc/ddl/import.js';
import {
  loadPackFile,
  PackError,
  type ProtocolPack,
  packProtocols,
  validatePack,
} from '../../../src/protocols/rmc/ddl/pack.js';
import { registerPackProtocols } from '../../../src/protocols/rmc/ddl/register.js';
import { RmcClient, RmcError, RmcServer, rmcServer } from '../../../src/protocols/rmc/index.js';
import { rmcOptions } from '../../../src/protocols/rmc/options.js';
import { WireWriter } from '../../../src/wire/index.js';

const FIXTURES = path.join(import.meta.dirname, 'fixtures/ddl');
const tmp = mkdtempSync(path.join(tmpdir(), 'gamewire-ddl-'));
afterAll(() => rmSync(tmp, { recursive: true, force: true }));

let cleanup: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanup.reverse()) await c();
  cleanup = [];
});

function fixturePack(): ProtocolPack {
  const { docs, ids } = readDdlInputs([FIXTURES]);
  return importDdl(docs, ids === undefined ? {} : { ids });
}

function packFile(pack: ProtocolPack = fixturePack()): string {
  const file = path.join(tmp, `pack-${Math.random().toString(36).slice(2)}.json`);
  writeFileSync(file, JSON.stringify(pack));
  return file;
}

const simple = (name: string) => ({ __class__: 'SimpleType', name });
const ptype = (type: unknown) => ({ __class__: 'PType', type, unknown: 1 });
const ns = (...elements: unknown[]) => ({ __class__: 'Namespace', elements });
const cls = (name: string, base: string, variables: [string, unknown][] = []) => ({
  __class__: 'ClassDeclaration',
  name1: name,
  name2: name,
  namespace: 'T',
  properties: [],
  maybe_base: base,
  variables: variables.map(([n, t]) => ({ __class__: 'Variable', name1: n, name2: n, type: ptype(t) })),
});
const proto = (name: string, params: [string, unknown, number][]) => ({
  __class__: 'ProtocolDeclaration',
  name1: name,
  name2: name,
  namespace: 'T',
  u1: 0,
  methods: [
    {
      __class__: 'Method',
      name1: 'M',
      name2: 'M',
      elements1: params.map(([n, t, d]) => ({
        __class__: 'Parameter',
        name1: n,
        name2: n,
        dtype1: ptype(t),
        dtype2: ptype(t),
        type: d,
      })),
    },
  ],
});
const importOne = (json: unknown) => importDdl([{ file: 'x.json', json }], { ids: { P: 1 } });

describe('rmc ddl import', () => {
  it('imports classes (with their base), lists, maps and methods with in, out, in/out and a return value', () => {
    const pack = fixturePack();
    expect(pack.format).toBe('gamewire-rmc-pack');
    expect(pack.version).toBe(1);
    expect(pack.types.Player).toEqual({
      base: 'Stamp',
      fields: [
        { name: 'm_pid', type: 'u32' },
        { name: 'm_name', type: 'qString' },
        { name: 'm_tags', type: { list: 'qString' } },
      ],
    });
    expect(pack.types.Stamp).toEqual({ base: 'Data', fields: [{ name: 'm_created', type: 'dateTime' }] });
    const demo = pack.protocols.find((p) => p.name === 'DemoProtocol')!;
    expect(demo.id).toBe(42);
    expect(demo.methods.map((m) => [m.name, m.id])).toEqual([
      ['Lookup', 1],
      ['Ping', 2],
      ['Legacy', 3],
    ]);
    const lookup = demo.methods[0]!;
    expect(lookup.args).toEqual([
      { name: 'pids', type: { list: 'u32' } },
      { name: 'filter', type: { map: ['qString', 'u32'] } },
      { name: 'cursor', type: 'u32' },
    ]);
    // The return value first, then the out parameters (the dump lists it last).
    expect(lookup.results).toEqual([
      { name: 'retval', type: 'qResult' },
      { name: 'players', type: { list: { class: 'Player' } } },
      { name: 'cursor', type: 'u32' },
    ]);
  });

  it('reports, by name, a type it cannot encode and a protocol without an id; nothing is dropped', () => {
    const pack = fixturePack();
    expect(pack.problems).toEqual([
      {
        kind: 'unsupported-type',
        element: 'DemoService.json: DemoProtocol::Legacy.name',
        detail: 'cstr: gamewire has no codec for it',
      },
      {
        kind: 'no-protocol-id',
        element: 'DemoService.json: protocol UnmappedProtocol',
        detail: expect.stringContaining('no id'),
      },
    ]);
    expect(pack.protocols.map((p) => p.name)).toEqual(['DemoProtocol', 'UnmappedProtocol']);
    expect(pack.protocols[1]!.id).toBeNull();
    expect(pack.protocols[0]!.methods[2]!.args).toEqual([{ name: 'name', type: { unsupported: 'cstr' } }]);
  });

  it('`gamewire rmc ddl import` writes the pack and names every problem on stderr', async () => {
    const out = path.join(tmp, 'cli-pack.json');
    const err: string[] = [];
    const spy = vi.spyOn(process.stderr, 'write').mockImplementation((s) => {
      err.push(String(s));
      return true;
    });
    try {
      const program = new Command().exitOverride();
      registerCommands(program);
      await program.parseAsync(
        [
          'rmc',
          'ddl',
          'import',
          path.join(FIXTURES, 'DemoService.json'),
          path.join(FIXTURES, 'DemoFoundation.json'),
          '--ids',
          path.join(FIXTURES, 'demo_mapping.json'),
          '--out',
          out,
        ],
        { from: 'user' },
      );
    } finally {
      spy.mockRestore();
    }
    const pack = validatePack(JSON.parse(readFileSync(out, 'utf8')));
    expect(pack.protocols.find((p) => p.name === 'DemoProtocol')!.id).toBe(42);
    const text = err.join('');
    expect(text).toContain('unsupported-type: DemoService.json: DemoProtocol::Legacy.name: cstr');
    expect(text).toContain('no-protocol-id: DemoService.json: protocol UnmappedProtocol');
    expect(text).toContain('2 protocols, 4 methods, 3 classes; 2 problems');
  });
});

describe('a pack as protocol declarations', () => {
  const player = (pid: number) => ({
    m_created: { year: 2013, month: 8, day: 20, hour: 1, minute: 2, second: 3 },
    m_pid: pid,
    m_name: `p${pid}`,
    m_tags: ['a', 'b'],
  });

  it('a classic call and its response decode with every parameter named and encode back byte-exactly', () => {
    const file = packFile();
    const options = { variant: 'classic', extra: { protocols: file } };
    const request = {
      type: 'request',
      protocolId: 42,
      callId: 7,
      methodId: 1,
      args: { pids: [1, 2], filter: [{ key: 'mode', value: 3 }], cursor: 9 },
    };
    const response = {
      type: 'response',
      protocolId: 42,
      callId: 7,
      methodId: 1,
      results: { retval: 0x10001, players: [player(1), player(2)], cursor: 10 },
    };
    const bytes = rmcCodec.encode([request, response], options);
    const decoded = rmcCodec.decode(bytes, options) as Record<string, unknown>[];
    // Typed only when the declaration reads the bytes exactly: no byte left over.
    expect(decoded[0]).toEqual(request);
    expect(decoded[1]).toEqual(response);
    expect(rmcCodec.encode(decoded, options).equals(bytes)).toBe(true);
    // Without the pack the same bytes are hex.
    const plain = rmcCodec.decode(bytes, { variant: 'classic' }) as Record<string, unknown>[];
    expect(typeof plain[0]!.args).toBe('string');
  });

  it('string-named variants find pack methods by name (a protocol without an id too)', () => {
    const protocols = packProtocols(fixturePack());
    const w = new WireWriter();
    const request = {
      type: 'request',
      protocol: 'UnmappedProtocol',
      callId: 1,
      method: 'UnmappedProtocol::Hello',
      classVersions: [],
      args: { who: 'sam' },
    };
    encodeJson(request, 'hyperscape', w, '', protocols);
    expect(decodeStream(w.toBuffer(), 'hyperscape', protocols)).toEqual([request]);
  });

  it('a method using a type gamewire cannot encode keeps its bytes as hex', () => {
    const file = packFile();
    const options = { variant: 'classic', extra: { protocols: file } };
    const bytes = rmcCodec.encode(
      { type: 'request', protocolId: 42, callId: 1, methodId: 3, args: '0102' },
      options,
    );
    expect((rmcCodec.decode(bytes, options) as { args: unknown }).args).toEqual({ bytes: '0102' });
  });

  it('`serve rmc --protocols`: every pack method answers NotImplemented over TCP', async () => {
    const file = packFile();
    const options = rmcOptions.resolve({
      host: '127.0.0.1',
      port: 0,
      transport: 'tcp',
      prudpProfile: 'classic',
      protocols: [file],
    } as never);
    const dataDir = mkdtempSync(path.join(tmp, 'data-'));
    const running = await rmcServer.start(options, {
      log: silentLogger(),
      metrics: new ProtocolMetrics('rmc'),
      dataDir,
    });
    cleanup.push(() => running.close());
    const port = running.endpoints.find((e) => e.transport === 'tcp')!.port;
    const c = await RmcClient.connect({ host: '127.0.0.1', port, variant: 'classic' });
    cleanup.push(() => c.close());
    const [demo] = packProtocols(fixturePack());
    const err = await c.call(demo!, 'Ping', {}).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RmcError);
    expect(err).toMatchObject({ qualifiedName: 'Core::NotImplemented' });
    // A call with arguments too, by raw ids.
    const err2 = await c.callRaw(42, 1, Buffer.alloc(0)).catch((e: unknown) => e);
    expect(err2).toMatchObject({ qualifiedName: 'Core::NotImplemented' });
  });

  it('pack protocols that clash with a built-in, or lack an id under classic, are skipped and named', () => {
    const server = new RmcServer({ log: silentLogger(), variant: 'classic' });
    const warn = vi.fn();
    const out = registerPackProtocols(server, packProtocols(fixturePack()), { warn, info: vi.fn() });
    expect(out.registered).toEqual(['DemoProtocol']);
    expect(out.skipped.map((s) => s.protocol)).toEqual(['UnmappedProtocol']);
    expect(warn).toHaveBeenCalledTimes(1);
  });
});

describe('bad DDL gives a DdlError naming the element', () => {
  const expectDdl = (json: unknown, element: RegExp, detail: RegExp) => {
    let err: unknown;
    try {
      importOne(json);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(DdlError);
    expect((err as DdlError).code).toBe('ERR_RMC_DDL');
    expect((err as DdlError).element).toMatch(element);
    expect((err as DdlError).message).toMatch(detail);
  };

  it('base classes in a cycle', () => {
    expectDdl(ns(cls('A', 'B'), cls('B', 'A')), /class A/, /cycle: A -> B -> A/);
  });

  it('a class that contains itself through its fields', () => {
    expectDdl(ns(cls('A', '', [['m_a', simple('A')]])), /types/, /contains itself/);
  });

  it('an unknown template', () => {
    const t = {
      __class__: 'TemplateType',
      name: 'weird<uint32>',
      templ_name: 'weird',
      parameters: [simple('uint32')],
    };
    expectDdl(ns(proto('P', [['x', t, 1]])), /P::M\.x/, /unknown template "weird"/);
    expectDdl(
      ns({ __class__: 'TemplateInstance', name1: 'weird<x>', templ_name: 'weird', parameters: ['x'] }),
      /elements\[0\]/,
      /unknown template/,
    );
  });

  it('absurd nesting', () => {
    let t: unknown = simple('uint32');
    for (let i = 0; i < 5000; i++)
      t = { __class__: 'TemplateType', name: 'l', templ_name: 'qlist', parameters: [t] };
    expectDdl(ns(proto('P', [['deep', t, 1]])), /P::M\.deep/, /nest deeper/);
    let n: unknown = ns();
    for (let i = 0; i < 50; i++) n = ns({ __class__: 'DDLUnitDeclaration', name1: 'u', elements: n });
    expectDdl(n, /unit/, /namespaces nest deeper/);
  });

  it('huge and hostile names', () => {
    expectDdl(ns(cls('A'.repeat(100_000), '')), /elements\[0\]/, /100000 characters long/);
    expectDdl(
      ns(proto('P', [['x"]=1;process.exit(1)//', simple('uint32'), 1]])),
      /P::M/,
      /not an identifier/,
    );
    expectDdl(ns(proto('P', [['__proto__', simple('uint32'), 1]])), /P::M/, /not an identifier/);
    expectDdl(ns(cls('constructor', '')), /elements\[0\]/, /not an identifier/);
  });

  it('not a DDL at all', () => {
    expectDdl([], /x\.json/, /Namespace/);
    expectDdl(ns({ __class__: 'Nope' }), /elements\[0\]/, /unknown element "Nope"/);
    expectDdl(ns(proto('P', [['x', simple('uint32'), 7]])), /P::M\.x/, /direction/);
  });

  it('arbitrary JSON as a DDL dump gives a DdlError or a pack, nothing else', () => {
    fc.assert(
      fc.property(fc.jsonValue({ maxDepth: 6 }), (json) => {
        try {
          importOne(json);
        } catch (e) {
          if (!(e instanceof DdlError)) throw e;
        }
      }),
      { numRuns: 300 },
    );
  });
});

describe('a pack is checked when loaded', () => {
  const typedOnly = (json: unknown) => {
    try {
      packProtocols(validatePack(json));
    } catch (e) {
      if (!(e instanceof PackError)) throw e;
    }
  };

  it('arbitrary JSON gives only PackErrors', () => {
    fc.assert(fc.property(fc.jsonValue({ maxDepth: 8 }), typedOnly), { numRuns: 500 });
  });

  it('a valid pack with any one part replaced by arbitrary JSON gives a pack or a PackError', () => {
    const base = JSON.parse(JSON.stringify(fixturePack()));
    const paths: (string | number)[][] = [];
    const walk = (v: unknown, at: (string | number)[]) => {
      paths.push(at);
      if (v !== null && typeof v === 'object')
        for (const [k, x] of Object.entries(v)) walk(x, [...at, Array.isArray(v) ? Number(k) : k]);
    };
    walk(base, []);
    fc.assert(
      fc.property(
        fc.constantFrom(...paths.filter((p) => p.length > 0)),
        fc.jsonValue({ maxDepth: 4 }),
        (p, value) => {
          const copy = JSON.parse(JSON.stringify(base));
          let o = copy;
          for (const k of p.slice(0, -1)) o = o[k];
          o[p[p.length - 1]!] = value;
          typedOnly(copy);
        },
      ),
      { numRuns: 500 },
    );
  });

  it('hostile names never reach an object key or the struct compiler', () => {
    for (const name of ['__proto__', 'constructor', 'a"]; globalThis.pwned = 1; //', 'x'.repeat(1000), '']) {
      const pack = JSON.parse(JSON.stringify(fixturePack()));
      pack.protocols[0].methods[1].args = [{ name, type: 'u32' }];
      expect(() => validatePack(pack)).toThrow(PackError);
      const pack2 = JSON.parse(JSON.stringify(fixturePack()));
      pack2.types.Player.fields[0].name = name;
      expect(() => validatePack(pack2)).toThrow(PackError);
    }
    expect((globalThis as { pwned?: unknown }).pwned).toBeUndefined();
  });

  it('a class graph too deep, a diamond of classes, a missing class, a wrong version', () => {
    const pack = JSON.parse(JSON.stringify(fixturePack()));
    for (let i = 0; i < 40; i++)
      pack.types[`C${i}`] = { base: null, fields: [{ name: 'a', type: { class: `C${i + 1}` } }] };
    pack.types.C40 = { base: null, fields: [] };
    expect(() => validatePack(pack)).toThrow(/nest deeper/);
    // 60 levels of two references each: checked once per class, not 2^60 times.
    const diamond = JSON.parse(JSON.stringify(fixturePack()));
    for (let i = 0; i < 30; i++)
      diamond.types[`D${i}`] = {
        base: null,
        fields: [
          { name: 'a', type: { class: `D${i + 1}` } },
          { name: 'b', type: { class: `D${i + 1}` } },
        ],
      };
    diamond.types.D30 = { base: null, fields: [] };
    diamond.protocols[0].methods[1].args = [{ name: 'd', type: { class: 'D0' } }];
    expect(packProtocols(validatePack(diamond)).length).toBe(2);
    const missing = JSON.parse(JSON.stringify(fixturePack()));
    missing.types.Player.base = 'Nobody';
    expect(() => validatePack(missing)).toThrow(/Nobody is not declared/);
    expect(() => validatePack({ ...fixturePack(), version: 2 })).toThrow(/version 2 is not supported/);
  });

  it('a pack file that is not JSON, or absent, is a typed error naming the file', () => {
    const bad = path.join(tmp, 'bad.json');
    writeFileSync(bad, '{');
    expect(() => loadPackFile(bad)).toThrow(PackError);
    expect(() => loadPackFile(bad)).toThrow(/bad\.json/);
    expect(() => loadPackFile(path.join(tmp, 'absent.json'))).toThrow(/cannot read protocol pack/);
  });
});
