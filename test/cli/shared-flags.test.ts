/**
 * Protocols that share a flag with different choices (`--role`: allocator|relay|all for
 * unity-relay, auth|secure|all for rmc): `serve` accepts the union on the command line, and each
 * protocol still refuses a value that is not one of its own.
 */
import { Command } from 'commander';
import { describe, expect, it } from 'vitest';
import { addServeCommand, protocolFlags, resolveServeOptions } from '../../src/cli/serve.js';
import type { ProtocolModule } from '../../src/core/protocol.js';

function fake(name: string, choices: string[], seen: Record<string, unknown>[]): ProtocolModule {
  return {
    name,
    summary: name,
    codecs: [],
    server: {
      summary: name,
      defaultPort: 0,
      options: [
        {
          key: 'role',
          flag: '--role <role>',
          description: `${name} role`,
          type: 'string',
          choices,
          default: 'all',
        },
        { key: 'workers', flag: '--workers <n>', description: 'workers', type: 'int', min: 0 },
      ],
      async start(options) {
        seen.push(options);
        throw new Error(`${name} stops here`);
      },
    },
  };
}

function program(protocols: ProtocolModule[]): Command {
  const cmd = new Command().exitOverride().configureOutput({ writeErr: () => {}, writeOut: () => {} });
  addServeCommand(cmd, protocols);
  return cmd;
}

describe('flags shared by several protocols', () => {
  const seen: Record<string, unknown>[] = [];
  const relay = fake('relay-like', ['allocator', 'relay', 'all'], seen);
  const rmc = fake('rmc-like', ['auth', 'secure', 'all'], seen);

  it('list one flag with the union of the choices', () => {
    const flags = protocolFlags([relay, rmc]);
    const role = flags.filter((o) => o.flag.startsWith('--role'));
    expect(role).toHaveLength(1);
    expect(role[0]!.choices).toEqual(['allocator', 'relay', 'all', 'auth', 'secure']);
    expect(role[0]!.description).toBe('relay-like role; rmc-like role');
    expect(flags.filter((o) => o.flag.startsWith('--workers'))).toHaveLength(1);
  });

  it("resolve each protocol's value against its own choices", () => {
    expect(resolveServeOptions(relay, {}, { role: 'allocator' }, '127.0.0.1').role).toBe('allocator');
    expect(resolveServeOptions(rmc, {}, { role: 'secure' }, '127.0.0.1').role).toBe('secure');
    expect(() => resolveServeOptions(rmc, {}, { role: 'allocator' }, '127.0.0.1')).toThrow(
      /rmc-like --role: "allocator" is not one of auth, secure, all/,
    );
  });

  it('pass a value of either protocol through the command line to the one that owns it', async () => {
    seen.length = 0;
    await expect(
      program([relay, rmc]).parseAsync(['serve', 'relay-like', '--role', 'relay', '--log-level', 'silent'], {
        from: 'user',
      }),
    ).rejects.toThrow(/relay-like stops here/);
    expect(seen.at(-1)?.role).toBe('relay');
    await expect(
      program([relay, rmc]).parseAsync(['serve', 'rmc-like', '--role', 'auth', '--log-level', 'silent'], {
        from: 'user',
      }),
    ).rejects.toThrow(/rmc-like stops here/);
    expect(seen.at(-1)?.role).toBe('auth');
  });

  it("refuse a value no protocol knows, and a value of the other protocol's", async () => {
    await expect(
      program([relay, rmc]).parseAsync(['serve', 'rmc-like', '--role', 'nonsense', '--log-level', 'silent'], {
        from: 'user',
      }),
    ).rejects.toThrow(/nonsense/);
    seen.length = 0;
    await expect(
      program([relay, rmc]).parseAsync(['serve', 'rmc-like', '--role', 'relay', '--log-level', 'silent'], {
        from: 'user',
      }),
    ).rejects.toThrow(/rmc-like --role: "relay" is not one of auth, secure, all/);
    expect(seen).toEqual([]);
  });
});
