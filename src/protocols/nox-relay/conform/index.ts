/**
 * `gamewire conform nox-relay`: the NoxVR relay checks (checks.ts) over TCP or UDP.
 * docs/conform.md lists the checks and their sources.
 */
import type { ConformSuite } from '../../../core/conform.js';
import { parseIntOption, UsageError } from '../../../core/errors.js';
import { type NoxConformContext, noxChecks } from './checks.js';
import type { NoxTransport } from './peer.js';

export const noxRelayConform: ConformSuite<NoxConformContext> = {
  protocol: 'nox-relay',
  options: [
    {
      flag: '--transport <name>',
      key: 'transport',
      description: 'the transport the client uses for its session',
      choices: ['tcp', 'udp'],
      defaultValue: 'udp',
    },
    {
      flag: '--token <token>',
      key: 'token',
      description: 'access token of the first player (an offline server takes any)',
      defaultValue: '1066',
    },
    {
      flag: '--second-token <token>',
      key: 'secondToken',
      description: 'access token of the second player',
      defaultValue: '1067',
    },
    {
      flag: '--instance <id>',
      key: 'instance',
      description: 'the instance to enter (default: the first one Sessions lists)',
    },
    {
      flag: '--max-wait-s <s>',
      key: 'maxWaitS',
      description: 'longest a timeout check may wait (the advertised connection timeout plus a few seconds)',
      defaultValue: '30',
    },
  ],
  concurrency: 4,
  describe: (ctx) =>
    `transport ${ctx.transport}${ctx.instance === undefined ? '' : `, instance ${ctx.instance}`}`,
  prepare: async (target, options) => {
    const transport = (options.transport ?? 'udp') as NoxTransport;
    if (transport !== 'tcp' && transport !== 'udp') throw new UsageError('--transport takes tcp or udp');
    const instance = options.instance === undefined ? undefined : parseIntOption(String(options.instance));
    if (instance !== undefined && instance > 255) throw new UsageError('--instance must be 0-255');
    const maxWait = parseIntOption(String(options.maxWaitS ?? '30'));
    if (maxWait < 1 || maxWait > 600) throw new UsageError('--max-wait-s must be 1-600');
    const tokens: [string, string] = [String(options.token ?? '1066'), String(options.secondToken ?? '1067')];
    if (tokens[0] === '' || tokens[1] === '')
      throw new UsageError('--token and --second-token must not be empty');
    return { target, transport, tokens, instance, maxWaitMs: maxWait * 1000 };
  },
  checks: noxChecks,
};
