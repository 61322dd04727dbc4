/**
 * Options that only mean something in a fleet (issue 21 item 11): `rmc --drain` without `--redis`
 * was accepted and did nothing. Every option declared `requires: 'redis'` is refused without it,
 * and `serve --help` says which protocols a shared flag drives.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Option } from 'commander';
import { describe, expect, it } from 'vitest';
import { resolveServeOptions } from '../../src/cli/serve.js';
import { envName } from '../../src/core/config.js';
import type { ServeOption } from '../../src/core/server.js';
import { loadProtocols } from '../../src/protocols/registry.js';
import { errorOf, runCli } from '../helpers/cli.js';

const servers = (await loadProtocols()).filter((p) => p.server !== undefined);

/** A value other than the option's default, as a flag would give it. */
function notDefault(o: ServeOption): unknown {
  if (o.type === 'bool') return o.default !== true;
  if (o.type === 'int') return typeof o.default === 'number' ? o.default + 1 : (o.min ?? 0) + 1;
  if (o.type === 'list') return ['x'];
  return o.choices?.find((c) => c !== o.default) ?? 'fleet-only-value';
}

describe('fleet-only options need --redis', () => {
  const fleetOnly = servers.flatMap((p) =>
    p.server!.options.filter((o) => o.requires !== undefined).map((o) => ({ p, o })),
  );

  it('every protocol declares the options that need another', () => {
    const names = fleetOnly.map(({ p, o }) => `${p.name}.${o.key} → ${o.requires}`).sort();
    expect(names).toEqual(
      [
        // Without --preload nothing is framed at start: nothing to bound.
        'js5.preloadMaxMb → preload',
        'rmc.connectionIdBlock → redis',
        'rmc.drain → redis',
        'rmc.heartbeatTtlMs → redis',
        'rmc.nodeId → redis',
        'rmc.redisPrefix → redis',
        'rmc.region → redis',
        'rmc.role → redis',
        'rmc.storeTimeoutMs → redis',
        'unity-relay.heartbeatTtlMs → redis',
        'unity-relay.nodeId → redis',
        'unity-relay.redisPrefix → redis',
        'unity-relay.region → redis',
        'unity-relay.role → redis',
        'unity-relay.workers → redis',
        // A certificate without its key (or the reverse) cannot serve wss.
        'unity-relay.wssCert → wssKey',
        'unity-relay.wssKey → wssCert',
      ].sort(),
    );
    // Every one names an option that exists in its section.
    for (const { p, o } of fleetOnly) expect(p.server!.options.some((x) => x.key === o.requires)).toBe(true);
  });

  for (const { p, o } of fleetOnly) {
    const needed = p.server!.options.find((x) => x.key === o.requires)!;
    it(`${p.name} ${o.flag.split(' ')[0]}: refused without ${needed.key} (flag, config, environment), accepted with it or at its default`, () => {
      const value = notDefault(o);
      const neededValue = needed.key === 'redis' ? 'redis://127.0.0.1:6379' : notDefault(needed);
      const env = {};
      const message = new RegExp(
        `${p.name}: ${o.flag.split(' ')[0]} \\(config ${p.name}\\.${o.key}\\) needs ${needed.flag.split(' ')[0]}`,
      );
      // Flags are looked up under commander's name for the flag (`--rmc-drain` → rmcDrain).
      const flag = new Option(o.flag).attributeName();
      expect(() => resolveServeOptions(p, {}, { [flag]: value }, '127.0.0.1', env)).toThrow(message);
      expect(() => resolveServeOptions(p, { [o.key]: value }, {}, '127.0.0.1', env)).toThrow(message);
      // With the option it needs from the environment (where it has one), the config file or a
      // flag: accepted.
      const neededEnv = envName(p.name, needed);
      if (neededEnv !== undefined)
        expect(
          resolveServeOptions(p, { [o.key]: value }, {}, '127.0.0.1', { [neededEnv]: String(neededValue) })[
            o.key
          ],
        ).toEqual(value);
      expect(
        resolveServeOptions(p, { [o.key]: value, [needed.key]: neededValue }, {}, '127.0.0.1', env)[o.key],
      ).toEqual(value);
      const neededFlag = new Option(needed.flag).attributeName();
      expect(
        resolveServeOptions(p, { [o.key]: value }, { [neededFlag]: neededValue }, '127.0.0.1', env)[o.key],
      ).toEqual(value);
      // Its default (what every config example has) is never refused.
      if (o.default !== undefined)
        expect(resolveServeOptions(p, { [o.key]: o.default }, {}, '127.0.0.1', env)[o.key]).toEqual(
          o.default,
        );
    });
  }

  it('gamewire serve rmc --drain without --redis: exit 2, one line naming both flags, nothing started', () => {
    const r = runCli([
      'serve',
      'rmc',
      '--drain',
      '--host',
      '127.0.0.1',
      '--port',
      '0',
      '--log-level',
      'silent',
    ]);
    expect(r.code).toBe(2);
    expect(r.stdout).toBe('');
    const e = errorOf(r);
    expect(e.code).toBe('ERR_CONFIG');
    expect(e.message).toBe(
      'rmc: --drain (config rmc.drain) needs --redis (config rmc.redis): without it, it does nothing',
    );
  });

  it('with several protocols, the refusal comes before any of them starts', () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'gamewire-fleet-only-'));
    const file = path.join(dir, 'config.json');
    writeFileSync(file, JSON.stringify({ js5: { port: 0 }, rmc: { port: 0 } }));
    const r = runCli([
      'serve',
      'js5',
      'rmc',
      '--drain',
      '--host',
      '127.0.0.1',
      '--config',
      file,
      '--data-dir',
      dir,
    ]);
    rmSync(dir, { recursive: true, force: true });
    expect(r.code).toBe(2);
    // No js5 endpoint line: js5 never started.
    expect(r.stdout).toBe('');
    expect(errorOf(r).message).toMatch(/^rmc: --drain .* needs --redis/);
  });

  it('unity-relay --drain needs no Redis (it drains the single process too)', () => {
    const relay = servers.find((p) => p.name === 'unity-relay')!;
    expect(resolveServeOptions(relay, {}, { drain: true }, '127.0.0.1', {}).drain).toBe(true);
  });
});

describe('serve --help', () => {
  it('names every protocol a shared flag drives', () => {
    const r = runCli(['serve', '--help']);
    expect(r.code).toBe(0);
    // One entry per option: its first line and the wrapped lines under it (help wraps at 100).
    const entries = r.stdout.split(/\n(?=\s{2}-)/).map((e) => e.replace(/\s*\n\s+/g, ' '));
    for (const flag of ['--redis', '--node-id', '--region', '--drain', '--heartbeat-ttl-ms']) {
      const entry = entries.find((l) => l.trimStart().startsWith(`${flag} `));
      expect(entry, flag).toBeDefined();
      expect(entry, flag).toMatch(/rmc: .*; unity-relay: /);
    }
  });
});
