/**
 * Each protocol's server options are declared once (its `defineOptions`/`defineServer`
 * declaration, src/core/options.ts): defaults, derived defaults and checks. The library classes
 * the servers are built from resolve what they are given through that declaration, and neither
 * they nor `start()` hold a default of their own.
 */
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { silentLogger } from '../../src/core/logger.js';
import { ProtocolMetrics } from '../../src/core/metrics.js';
import { openStore } from '../../src/protocols/js5/cache/store.js';
import { JS5_OPTIONS, js5Options } from '../../src/protocols/js5/options.js';
import { Js5Server } from '../../src/protocols/js5/server.js';
import { NOX_RELAY_OPTIONS, noxRelayOptions } from '../../src/protocols/nox-relay/options.js';
import { NoxRelayServer } from '../../src/protocols/nox-relay/server.js';
import { rmcOptions } from '../../src/protocols/rmc/options.js';
import { RmcServer } from '../../src/protocols/rmc/server.js';
import { demoCache } from '../protocols/js5/helpers.js';

const ROOT = path.resolve(import.meta.dirname, '../..');

/** Every option name of a set, library-only ones, `host` and `port` included. */
const keysOf = (set: { allOptions: readonly { key: string }[] }) => [
  'host',
  'port',
  ...set.allOptions.map((o) => o.key),
];
const NOX_KEYS = keysOf(noxRelayOptions);
const RMC_KEYS = keysOf(rmcOptions);

/** Declared option names of each scanned file: `key ?? <number>` or `options.key ?? <literal>` there is a second default. */
const SCANNED: { file: string; keys: readonly string[] }[] = [
  { file: 'src/protocols/js5/server.ts', keys: Object.keys(JS5_OPTIONS) },
  { file: 'src/protocols/js5/index.ts', keys: Object.keys(JS5_OPTIONS) },
  { file: 'src/protocols/nox-relay/options.ts', keys: NOX_KEYS },
  { file: 'src/protocols/nox-relay/server.ts', keys: NOX_KEYS },
  { file: 'src/protocols/nox-relay/index.ts', keys: NOX_KEYS },
  { file: 'src/protocols/rmc/options.ts', keys: RMC_KEYS },
  { file: 'src/protocols/rmc/index.ts', keys: RMC_KEYS },
  { file: 'src/protocols/rmc/server.ts', keys: RMC_KEYS },
  { file: 'src/protocols/rmc/store.ts', keys: RMC_KEYS },
  { file: 'src/protocols/rmc/protocols/session.ts', keys: RMC_KEYS },
];

/** Lines of `source` that give a declared option a default of their own. */
function literalDefaults(source: string, keys: readonly string[]): string[] {
  const literal = String.raw`(?:-?\d[\d_.]*(?:\s*\*\s*[\d_.]+)*|'[^']*'|"[^"]*"|true|false)`;
  const found = new Set<string>();
  for (const line of source.split('\n')) {
    // Comments, and a value given to something else under the same name (marked so).
    if (/^\s*(\/\/|\*|\/\*)/.test(line) || line.includes('not the option')) continue;
    for (const key of keys) {
      // `options.maxClients ?? 1000`, `maxClients ?? 16 * 1024`, `x.missingGroup ?? 'close'`;
      // `maxClients: 1000` in an object of defaults.
      if (
        new RegExp(String.raw`\b${key}\s*\?\?\s*${literal}`).test(line) ||
        new RegExp(String.raw`^\s*${key}:\s*${literal}\s*,?\s*$`).test(line)
      )
        found.add(line.trim());
    }
  }
  return [...found];
}

describe('options are declared once', () => {
  it.each(SCANNED)('$file holds no default of a declared option', ({ file, keys }) => {
    const source = readFileSync(path.join(ROOT, file), 'utf8');
    expect(literalDefaults(source, keys)).toEqual([]);
  });

  it('the scan finds what it looks for', () => {
    expect(literalDefaults('const n = options.maxClients ?? 1000;', ['maxClients'])).toHaveLength(1);
    expect(literalDefaults('  sliceBytes: 16 * 1024,', ['sliceBytes'])).toHaveLength(1);
    expect(literalDefaults("  x = o.missingGroup ?? 'close';", ['missingGroup'])).toHaveLength(1);
    expect(literalDefaults('  maxClients: options.maxClients,', ['maxClients'])).toEqual([]);
  });

  it('new Js5Server({ store }) runs with exactly the declaration’s defaults', () => {
    const server = new Js5Server({
      store: openStore(demoCache()),
      log: silentLogger(),
      metrics: new ProtocolMetrics('js5'),
    });
    const defaults = js5Options.resolve();
    expect(server.settings).toMatchObject(defaults);
    for (const [key, d] of Object.entries(JS5_OPTIONS))
      if (d.default !== undefined)
        expect(server.settings[key as keyof typeof JS5_OPTIONS], key).toEqual(d.default);
    // Derived defaults come from the declaration too: the profile's build, a quarter of the server.
    expect(server.build).toBe(defaults.build);
    expect(server.settings.maxPerIp).toBe(Math.max(8, Math.floor(server.settings.maxClients / 4)));
    expect(server.settings).toMatchObject({ host: '0.0.0.0', port: 43594, profile: '530', build: 530 });
    // What a library caller gives is checked by the same declaration, with the same code.
    expect(
      () =>
        new Js5Server({
          store: openStore(demoCache()),
          log: silentLogger(),
          metrics: new ProtocolMetrics('js5'),
          maxHandshaking: 0,
        }),
    ).toThrow(
      expect.objectContaining({
        code: 'ERR_JS5_BAD_OPTION',
        message: expect.stringMatching(/js5\.maxHandshaking/),
      }),
    );
  });

  it('rmc: a derived default is the declaration’s, not start()’s', () => {
    expect(rmcOptions.resolve().maxConnectionsPerIp).toBe(
      Math.max(64, Math.floor(rmcOptions.resolve().maxConnections / 4)),
    );
    expect(rmcOptions.resolve({ maxConnections: 1000 }).maxConnectionsPerIp).toBe(250);
    expect(rmcOptions.resolve({ maxConnections: 100 }).maxConnectionsPerIp).toBe(64);
    expect(rmcOptions.resolve({ maxConnectionsPerIp: 3 }).maxConnectionsPerIp).toBe(3);
    // PRUDP's per-address cap is derived by the declaration too, never by the transport's start-up.
    expect(rmcOptions.resolve({ prudpMaxConnections: 4000 }).prudpMaxConnectionsPerIp).toBe(1000);
    expect(rmcOptions.resolve({ prudpMaxConnections: 10 }).prudpMaxConnectionsPerIp).toBe(64);
    expect(rmcOptions.resolve({ prudpMaxConnectionsPerIp: 5 }).prudpMaxConnectionsPerIp).toBe(5);
  });

  it('new NoxRelayServer() runs with exactly the declaration’s defaults, library-only ones included', () => {
    const server = new NoxRelayServer();
    const defaults = noxRelayOptions.resolve();
    expect(server.options).toEqual(defaults);
    for (const [key, d] of Object.entries(NOX_RELAY_OPTIONS))
      if (d.default !== undefined)
        expect(server.options[key as keyof typeof NOX_RELAY_OPTIONS], key).toEqual(d.default);
    // Derived defaults come from the declaration too.
    expect(server.options).toMatchObject({
      port: 23032,
      host: '0.0.0.0',
      connectionTimeoutMs: 15_000,
      frameTimeoutMs: 30_000,
      halfOpenTimeoutMs: 5000,
      maxUdpPerIp: 1024,
      maxTcpPerIp: 1024,
      maxHalfOpenUdp: 4096,
      maxHalfOpenUdpPerIp: 128,
      maxRequestBurst: 4000,
      maxReassemblyBytesPerIp: 4 * 1024 * 1024,
      congestion: { softBytes: 64 * 1024, hardBytes: 256 * 1024, closeBytes: 1024 * 1024 },
      master: undefined,
    });
    expect(server.instances.size).toBe(1);
    // Library-only options are declared but not flags or config keys.
    expect(noxRelayOptions.options.map((o) => o.key)).not.toContain('keepAliveIntervalMs');
    expect(noxRelayOptions.allOptions.map((o) => o.key)).toContain('keepAliveIntervalMs');
    // What a library caller gives is checked by the same declaration, and derived from.
    expect(new NoxRelayServer({ maxClients: 100, connectionTimeoutSeconds: 2 }).options).toMatchObject({
      maxUdpPerIp: 64,
      maxHalfOpenUdp: 100,
      maxHalfOpenUdpPerIp: 12,
      connectionTimeoutMs: 2000,
      frameTimeoutMs: 4000,
    });
    expect(new NoxRelayServer({ congestion: { softBytes: 100 } }).options.congestion).toEqual({
      softBytes: 100,
      hardBytes: 400,
      closeBytes: 1600,
    });
    expect(() => new NoxRelayServer({ maxClients: 0 })).toThrow(
      expect.objectContaining({
        code: 'ERR_CONFIG',
        message: expect.stringMatching(/nox-relay\.maxClients/),
      }),
    );
    expect(() => new NoxRelayServer({ congestion: { softBytes: 100, hardBytes: 50 } })).toThrow(
      /nox-relay\.congestion: hardBytes/,
    );
    // The former library name of maxPacketBytes is still read.
    expect(new NoxRelayServer({ maxPacketSize: 2048 }).options.maxPacketBytes).toBe(2048);
  });

  it('new RmcServer() runs with exactly the declaration’s defaults', () => {
    const server = new RmcServer();
    const defaults = rmcOptions.resolve();
    expect(server.settings).toEqual(defaults);
    // The per-address cap is the declaration's derived one, not the framed TCP layer's.
    expect(server.settings).toMatchObject({
      port: 9103,
      host: '0.0.0.0',
      maxConnectionsPerIp: Math.max(64, Math.floor(defaults.maxConnections / 4)),
    });
    for (const [key, d] of Object.entries(rmcOptions.declarations))
      if (d.default !== undefined && d.parse === undefined)
        expect(server.settings[key as keyof typeof defaults], key).toEqual(d.default);
    expect(new RmcServer({ maxConnections: 1000 }).settings.maxConnectionsPerIp).toBe(250);
    expect(() => new RmcServer({ maxInFlight: 0 })).toThrow(
      expect.objectContaining({ code: 'ERR_CONFIG', message: expect.stringMatching(/rmc\.maxInFlight/) }),
    );
  });
});
