/**
 * `gamewire conform unity-relay`: the Unity Relay checks (checks.ts) over the transport chosen
 * with --transport, with allocations from the API at --api. docs/conform.md lists the checks.
 */
import { readFileSync } from 'node:fs';
import type { ConformSuite } from '../../../core/conform.js';
import { parseIntOption, UsageError } from '../../../core/errors.js';
import { type ConnectionType, RelayApiClient } from '../client.js';
import { unityChecks } from './checks.js';
import type { UnityConformContext } from './context.js';

const TRANSPORTS: readonly ConnectionType[] = ['udp', 'dtls', 'ws', 'wss'];

export const unityRelayConform: ConformSuite<UnityConformContext> = {
  protocol: 'unity-relay',
  options: [
    {
      flag: '--transport <type>',
      key: 'transport',
      description: "the connection type a game picks, and the --target port's",
      choices: TRANSPORTS,
      defaultValue: 'udp',
    },
    {
      flag: '--api <url>',
      key: 'api',
      description: 'the allocation API (default: http://TARGET-HOST:37080)',
    },
    {
      flag: '--api-key <key>',
      key: 'apiKey',
      description: "the API's bearer key, if it needs one (env GAMEWIRE_UNITY_RELAY_API_KEY)",
    },
    { flag: '--ca <file>', key: 'ca', description: 'wss: trust this CA (PEM) instead of the system store' },
    { flag: '--insecure', key: 'insecure', description: 'wss: accept any certificate (local tests only)' },
    {
      flag: '--idle-timeout-ms <ms>',
      key: 'idleTimeoutMs',
      description: "the relay's idle timeout, which the expiry check waits out",
      defaultValue: '10000',
    },
  ],
  concurrency: 4,
  describe: (ctx) => `transport ${ctx.transport}, API ${ctx.apiUrl}`,
  prepare: async (target, options) => {
    const transport = (options.transport ?? 'udp') as ConnectionType;
    if (!TRANSPORTS.includes(transport)) throw new UsageError(`--transport takes ${TRANSPORTS.join(', ')}`);
    const idle = parseIntOption(String(options.idleTimeoutMs ?? '10000'));
    if (idle < 1000 || idle > 600_000) throw new UsageError('--idle-timeout-ms must be 1000-600000');
    const host = target?.host ?? '127.0.0.1';
    const apiUrl =
      typeof options.api === 'string'
        ? options.api
        : `http://${host.includes(':') ? `[${host}]` : host}:37080`;
    if (!/^https?:\/\//.test(apiUrl)) throw new UsageError(`--api takes an http(s) URL, not "${apiUrl}"`);
    const apiKey =
      typeof options.apiKey === 'string' ? options.apiKey : process.env.GAMEWIRE_UNITY_RELAY_API_KEY;
    let ca: Buffer | undefined;
    if (typeof options.ca === 'string') {
      try {
        ca = readFileSync(options.ca);
      } catch (err) {
        throw new UsageError(`--ca ${options.ca}: ${(err as Error).message}`);
      }
    }
    return {
      target,
      apiUrl,
      api: new RelayApiClient(apiUrl, { apiKey }),
      transport,
      link: { transport, ...(ca !== undefined ? { ca } : {}), insecure: options.insecure === true },
      idleTimeoutMs: idle,
    };
  },
  checks: unityChecks,
};
