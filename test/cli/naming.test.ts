/**
 * The config-key and flag naming rule of docs/decisions.md ("Config keys and flags"), checked on
 * every protocol's options so new ones follow it. The few names that break it are listed below.
 */
import { describe, expect, it } from 'vitest';
import { flagName } from '../../src/core/config.js';
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
 * Names kept as they are (`section.key` or `section --flag`): older ones that scripts and config
 * files already use, and ones added while the rule was being introduced.
 */
const LEGACY = new Set([
  'unity-relay --unity-idle-timeout',
  'unity-relay --unity-host-alone-timeout',
  'unity-relay --unity-max-datagram',
  'nox-relay.maxPacketSize',
  'nox-relay.connectionTimeout',
]);

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
