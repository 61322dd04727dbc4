/**
 * `gamewire conform js5`: the JS5 checks (checks.ts) and their options. docs/conform.md lists
 * the checks and their sources.
 */
import type { ConformSuite } from '../../../core/conform.js';
import { parseIntOption, UsageError } from '../../../core/errors.js';
import { handshakeIsSeeded, PROFILE_NAMES, PROFILES, parseProfile } from '../profiles.js';
import { js5Checks } from './checks.js';
import { type Js5ConformContext, SharedDownloads } from './context.js';

/** Archives each client family creates at start, so its master index needs at least these. */
const MIN_ARCHIVES = { '435': 13, '530': 28, osrs: 21 } as const;

function intOption(value: unknown, flag: string, min: number, max: number): number | undefined {
  if (value === undefined) return undefined;
  const n = parseIntOption(String(value));
  if (n < min || n > max) throw new UsageError(`${flag} must be ${min}-${max}, not ${n}`);
  return n;
}

export const js5Conform: ConformSuite<Js5ConformContext> = {
  protocol: 'js5',
  options: [
    {
      flag: '--profile <name>',
      key: 'profile',
      description: 'client family to check for',
      choices: PROFILE_NAMES,
      defaultValue: '530',
    },
    {
      flag: '--build <n>',
      key: 'build',
      description: "the build the server serves (default: the profile's)",
    },
    {
      flag: '--archives <n>',
      key: 'archives',
      description:
        "master index entries the client needs (default: the profile's client: 435 13, 530 28, osrs 21)",
    },
    {
      flag: '--max-groups <n>',
      key: 'maxGroups',
      description: 'groups downloaded at most for the group checks',
      defaultValue: '500',
    },
    {
      flag: '--max-mb <n>',
      key: 'maxMb',
      description: 'megabytes downloaded at most for the group checks',
      defaultValue: '64',
    },
    {
      flag: '--probe-connections <n>',
      key: 'probeConnections',
      description: 'connections opened at most to see a "server full" reply',
      defaultValue: '16',
    },
  ],
  describe: (ctx) => `profile ${ctx.profile.name}, build ${ctx.build}`,
  prepare: async (target, options) => {
    const profile = PROFILES[parseProfile(options.profile ?? '530')];
    const build = intOption(options.build, '--build', 0, 0x7fffffff) ?? profile.defaultBuild;
    let ctx: Js5ConformContext | undefined;
    ctx = {
      target,
      profile,
      build,
      seeded: handshakeIsSeeded(profile.name, build),
      minArchives: intOption(options.archives, '--archives', 0, 255) ?? MIN_ARCHIVES[profile.name],
      maxGroups: intOption(options.maxGroups, '--max-groups', 1, 1_000_000) ?? 500,
      maxBytes: (intOption(options.maxMb, '--max-mb', 1, 4096) ?? 64) * 1024 * 1024,
      probeConnections: intOption(options.probeConnections, '--probe-connections', 1, 1000) ?? 16,
      // No flag sets it (the CLI passes only the options listed above): for tests.
      missingGroupQuietMs: intOption(options.missingGroupQuietMs, 'missingGroupQuietMs', 1, 60_000) ?? 2000,
      shared: new SharedDownloads(() => ctx!),
    };
    return ctx;
  },
  checks: js5Checks,
};
