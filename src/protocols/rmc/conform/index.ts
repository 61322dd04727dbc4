/**
 * `gamewire conform rmc`: the Rendez-Vous checks (checks.ts) over PRUDP V0 or u32-framed TCP,
 * in the RMC variant given. docs/conform.md lists the checks and their sources.
 */
import { type ConformSuite, parseTarget } from '../../../core/conform.js';
import { UsageError } from '../../../core/errors.js';
import { accessKeyByte } from '../prudp/checksum.js';
import { rmcChecks } from './checks.js';
import { packMethods } from './pack.js';
import type { RmcConformContext, RmcConformVariant } from './session.js';

const VARIANTS: readonly RmcConformVariant[] = ['hyperscape', 'classic', 'nex-verbose'];

export const rmcConform: ConformSuite<RmcConformContext> = {
  protocol: 'rmc',
  options: [
    {
      flag: '--transport <name>',
      key: 'transport',
      description: 'PRUDP over UDP (what game clients speak) or u32-framed TCP',
      choices: ['prudp', 'tcp'],
      defaultValue: 'prudp',
    },
    {
      flag: '--variant <name>',
      key: 'variant',
      description:
        'RMC layout: HyperScape string-named (ECDH CONNECT), classic packed (Kerberos), nex-verbose (TCP only)',
      choices: VARIANTS,
      defaultValue: 'hyperscape',
    },
    {
      flag: '--access-key <key>',
      key: 'accessKey',
      description: "the game's PRUDP access key (checksums)",
      defaultValue: 'yl4NG7qZ',
    },
    {
      flag: '--checksum <width>',
      key: 'checksum',
      description: 'PRUDP checksum bytes',
      choices: ['1', '4'],
      defaultValue: '1',
    },
    {
      flag: '--user <name>',
      key: 'user',
      description: 'classic: the account the Kerberos login uses',
      defaultValue: 'conform',
    },
    {
      flag: '--password <password>',
      key: 'password',
      description: "classic: that account's password (its ticket key derives from it)",
      defaultValue: 'gamewire',
    },
    {
      flag: '--protocols <files>',
      key: 'protocols',
      description:
        'protocol packs (gamewire rmc ddl import), comma-separated: rmc.pack calls their methods by name (or id, classic)',
    },
    {
      flag: '--method <names>',
      key: 'method',
      description: 'with --protocols: only these pack methods (Protocol::Method, comma-separated)',
    },
  ],
  concurrency: 4,
  // A classic login derives its ticket key with 65 000+ MD5 rounds: give the server time.
  defaultTimeoutMs: 30_000,
  describe: (ctx) =>
    `${ctx.transport}, ${ctx.variant}${ctx.transport === 'prudp' ? `, access key ${ctx.accessKey}, ${ctx.checksum.width}-byte checksum` : ''}`,
  prepare: async (target, options) => {
    const transport = String(options.transport ?? 'prudp') as 'prudp' | 'tcp';
    const variant = String(options.variant ?? 'hyperscape') as RmcConformVariant;
    if (!VARIANTS.includes(variant)) throw new UsageError(`--variant takes ${VARIANTS.join(', ')}`);
    if (transport === 'prudp' && variant === 'nex-verbose')
      throw new UsageError(
        'nex-verbose rides on Nintendo PRUDP, which gamewire does not speak: use --transport tcp',
      );
    const accessKey = String(options.accessKey ?? 'yl4NG7qZ');
    const width = Number(options.checksum ?? '1') as 1 | 4;
    const { packs, methods } = packMethods(
      typeof options.protocols === 'string' ? options.protocols : undefined,
      typeof options.method === 'string' ? options.method : undefined,
    );
    return {
      packs,
      packMethods: methods,
      target,
      transport,
      variant,
      accessKey,
      checksum: { width, keyByte: accessKeyByte(accessKey) },
      user: String(options.user ?? 'conform'),
      password: String(options.password ?? 'gamewire'),
      secureTarget:
        typeof options.secureTarget === 'string'
          ? parseTarget(options.secureTarget, '--secure-target')
          : undefined,
    };
  },
  checks: rmcChecks,
};
