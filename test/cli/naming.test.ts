/**
 * The config-key and flag naming rule of docs/decisions.md ("Config keys and flags"), checked on
 * every protocol's options so new ones follow it. The few names that break it are listed below.
 */
import { Command } from 'commander';
import { describe, expect, it } from 'vitest';
import { addServeCommand, configSchema, resolveServeOptions } from '../../src/cli/serve.js';
import { checkConfigFile, flagName } from '../../src/core/config.js';
import { loadProtocols } from '../../src/protocols/registry.js';

const SHORT: Record<string, string> = { rmc: 'rmc', js5: 'js5', 'unity-relay': 'unity', 'nox-relay': 'nox' };
/** Flags the command-line contract fixes, whatever their key. */
const CONTRACT_FLAGS = new Set([
  '--port',
  '--host',
  '--api-port',
  '--public-host',
  '--cache',
  '--build',
  '--profile',
  '--dtls-port',
  '--ws-port',
  '--wss-port',
  '--rmc-transport',
  '--prudp-profile',
  '--prudp-access-key',
  '--role',
  '--redis',
  '--relay-secret',
  '--drain',
  '--workers',
  '--admin-port',
  '--admin-token',
  '--record',
]);
/**
 * Names kept as they are (`section.key` or `section --flag`). Empty: the former exceptions
 * (`--unity-idle-timeout`, `--unity-host-alone-timeout`, `--unity-max-datagram`,
 * `nox-relay.maxPacketSize`, `nox-relay.connectionTimeout`) were renamed to the rule, and the old
 * names live on as `aliases` (config keys) and `flagAliases` (hidden flags), accepted with a
 * warning. A name added here must say why it cannot follow the rule.
 */
const LEGACY = new Set<string>();

/** Former names and what they are called now (each still accepted). */
const RENAMED: [protocol: string, kind: 'key' | 'flag', former: string, now: string][] = [
  ['unity-relay', 'flag', '--unity-idle-timeout', '--unity-idle-timeout-ms'],
  ['unity-relay', 'flag', '--unity-host-alone-timeout', '--unity-host-alone-timeout-ms'],
  ['unity-relay', 'flag', '--unity-max-datagram', '--unity-max-datagram-bytes'],
  ['nox-relay', 'key', 'maxPacketSize', 'maxPacketBytes'],
  ['nox-relay', 'key', 'connectionTimeout', 'connectionTimeoutSeconds'],
  ['nox-relay', 'flag', '--nox-max-packet-size', '--nox-max-packet-bytes'],
  ['nox-relay', 'flag', '--nox-connection-timeout', '--nox-connection-timeout-seconds'],
];

const kebab = (key: string) => key.replace(/([a-z0-9])([A-Z])/g, '$1-$2').toLowerCase();

describe('option names follow one rule', () => {
  it('keys are camelCase, never repeat the protocol, and durations carry their unit', async () => {
    const bad: string[] = [];
    for (const p of await loadProtocols()) {
      for (const o of p.server?.options ?? []) {
        const id = `${p.name}.${o.key}`;
        if (LEGACY.has(id)) continue;
        if (!/^[a-z][a-zA-Z0-9]*$/.test(o.key)) bad.push(`${id}: not camelCase`);
        const short = SHORT[p.name];
        if (short !== undefined && o.key.toLowerCase().startsWith(short))
          bad.push(`${id}: repeats the protocol`);
        if (o.type === 'int' && /(timeout|interval|delay|ttl)$/i.test(o.key))
          bad.push(`${id}: a duration without Ms/Seconds`);
      }
    }
    expect(bad).toEqual([]);
  });

  it("a flag is its key in kebab-case, with the protocol's short name where needed", async () => {
    const bad: string[] = [];
    for (const p of await loadProtocols()) {
      for (const o of p.server?.options ?? []) {
        const flag = flagName(o);
        if (CONTRACT_FLAGS.has(flag) || LEGACY.has(`${p.name} ${flag}`)) continue;
        const plain = `--${kebab(o.key)}`;
        const prefixed = `--${SHORT[p.name]}-${kebab(o.key)}`;
        if (flag !== plain && flag !== prefixed)
          bad.push(`${p.name}.${o.key}: ${flag} (expected ${prefixed} or ${plain})`);
      }
    }
    expect(bad).toEqual([]);
  });
});

describe('renamed options keep working', () => {
  it('a former config key is read under its new key, with a warning naming it', async () => {
    const protocols = await loadProtocols();
    const { values, warnings } = checkConfigFile(
      { 'nox-relay': { maxPacketSize: 2048, connectionTimeout: 20 } },
      'old.json',
      configSchema(protocols),
    );
    expect(values.get('nox-relay')).toEqual({ maxPacketBytes: 2048, connectionTimeoutSeconds: 20 });
    expect(warnings).toEqual([
      'old.json: nox-relay.maxPacketSize is now called nox-relay.maxPacketBytes',
      'old.json: nox-relay.connectionTimeout is now called nox-relay.connectionTimeoutSeconds',
    ]);
  });

  it('a former flag is accepted (hidden from --help) and counts as the new one, with a warning', async () => {
    const protocols = await loadProtocols();
    const program = new Command().exitOverride();
    addServeCommand(program, protocols);
    const serve = program.commands.find((c) => c.name() === 'serve')!;
    const help = serve.helpInformation();
    for (const [protocol, kind, former, now] of RENAMED) {
      if (kind !== 'flag') continue;
      expect(help).toContain(`${now} `);
      expect(help).not.toMatch(new RegExp(`${former} `));
      const p = protocols.find((x) => x.name === protocol)!;
      const option = p.server!.options.find((o) => flagName(o) === now)!;
      const parsed = serve.parseOptions([former, '4321']);
      expect(parsed.unknown).toEqual([]);
      const warnings: string[] = [];
      const out = resolveServeOptions(p, {}, serve.opts(), '0.0.0.0', {}, warnings);
      expect(out[option.key]).toBe(4321);
      expect(warnings).toEqual([`${former} is now called ${now}`]);
      // Reset the parsed value before the next flag.
      serve.setOptionValue(Object.keys(serve.opts()).find((k) => serve.opts()[k] === 4321)!, undefined);
    }
  });

  it('every renamed name is declared as an alias of the new one', async () => {
    const protocols = await loadProtocols();
    for (const [protocol, kind, former, now] of RENAMED) {
      const options = protocols.find((x) => x.name === protocol)!.server!.options;
      const o =
        kind === 'key' ? options.find((x) => x.key === now) : options.find((x) => flagName(x) === now);
      expect(o, `${protocol} ${now}`).toBeDefined();
      expect(kind === 'key' ? o!.aliases : o!.flagAliases).toContain(former);
    }
  });
});
