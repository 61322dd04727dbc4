/**
 * Rendez-Vous RMC (Ubisoft/Quazal remote method calls): HyperScape's string-named variant by
 * default, the classic packed variant for decoding, a server framework with typed handlers,
 * the built-in HyperScape protocols, and a client. See docs/rmc.md.
 */
import type { Command } from 'commander';
import { CliError, parseIntOption, UsageError } from '../../cli/errors.js';
import type { ProtocolModule } from '../../core/protocol.js';
import { decode, parseHex, WireWriter } from '../../wire/index.js';
import { RmcClient, RmcClientError } from './client.js';
import { findBuiltinByFullName, rmcCodec } from './codec.js';
import { summarizeProtocol } from './describe.js';
import { RmcError } from './errors.js';
import { DEFAULT_MAX_FRAME_BYTES, RMC_VARIANTS, type RmcVariant } from './messages.js';
import { BUILTIN_PROTOCOLS, parseDatacenters } from './protocols/index.js';
import { connectForCall } from './prudp/call.js';
import { prudpCodec } from './prudp/codec.js';
import { PRUDP_SERVE_OPTIONS, profileOf, startRmcTransports } from './prudp/serve.js';
import { RmcServer } from './server.js';
import type { MethodDef } from './signature.js';
import { DEFAULT_MAX_ACCOUNTS, MemoryStore } from './store.js';

export * from './client.js';
export * from './codec.js';
export * from './describe.js';
export * from './dispatcher.js';
export * from './errors.js';
export * from './messages.js';
export * from './protocols/index.js';
export * from './prudp/index.js';
export * from './server.js';
export * from './signature.js';
export * from './store.js';
export * from './types.js';

interface CallFlags {
  host: string;
  port: number;
  args?: string;
  timeout: number;
  variant: string;
  transport: string;
  accessKey?: string;
  checksum?: string;
  user?: string;
  password?: string;
}

function argsFromJson(flags: CallFlags, def: MethodDef | undefined, name: string): Buffer {
  let argsJson: unknown = def === undefined ? '' : {};
  if (flags.args !== undefined) {
    try {
      argsJson = JSON.parse(flags.args);
    } catch (err) {
      throw new UsageError(`--args is not JSON: ${(err as Error).message}`);
    }
  }
  if (typeof argsJson === 'string') return parseHex(argsJson);
  if (def === undefined) {
    throw new UsageError(`${name} is not a built-in method: give --args as a JSON string of hex bytes`);
  }
  const w = new WireWriter();
  def.args.write(w, def.args.fromJson(argsJson, 'args'));
  return w.toBuffer();
}

async function runCall(name: string, flags: CallFlags): Promise<void> {
  const variant = flags.variant as RmcVariant;
  if (!RMC_VARIANTS.includes(variant)) {
    throw new UsageError(`unknown variant "${flags.variant}" (variants: ${RMC_VARIANTS.join(', ')})`);
  }
  const i = name.indexOf('::');
  if (i <= 0) throw new UsageError(`method must be Protocol::Method_Vn, got "${name}"`);
  let target: [string | number, string | number];
  let def: MethodDef | undefined;
  if (variant === 'classic') {
    const m = /^(\d+)::(\d+)$/.exec(name);
    if (m === null)
      throw new UsageError(`with --variant classic the method is protocolId::methodId, got "${name}"`);
    target = [Number(m[1]), Number(m[2])];
    if ((target[0] as number) > 0xffff || (target[1] as number) > 0x7fff)
      throw new UsageError('id out of range');
  } else {
    def = findBuiltinByFullName(name);
    target = [name.slice(0, i), name];
  }
  const argBytes = argsFromJson(flags, def, name);
  if (flags.transport !== 'tcp' && flags.transport !== 'prudp')
    throw new UsageError('--transport takes tcp or prudp');
  const base = { host: flags.host, port: flags.port, timeoutMs: flags.timeout, variant };
  const client = await (flags.transport === 'prudp'
    ? connectForCall(base, flags)
    : RmcClient.connect(base)
  ).catch((err: Error) => {
    if (err instanceof UsageError || err instanceof RmcError) throw err;
    throw new CliError((err as { code?: string }).code ?? 'ERR_RMC_CONNECTION', err.message);
  });
  try {
    const raw = await client.callRaw(target[0], target[1], argBytes);
    const results = def === undefined ? raw.toString('hex') : def.results.toJson(decode(def.results, raw));
    const out = variant === 'classic' ? { methodId: target[1], results } : { method: `${name}*`, results };
    process.stdout.write(`${JSON.stringify(out)}\n`);
  } catch (err) {
    if (err instanceof RmcError) {
      const hex = `0x${err.code.toString(16).padStart(4, '0')}`;
      throw new CliError('ERR_RMC_FAILURE', `${err.qualifiedName} (${err.namespace}/${hex})`);
    }
    if (err instanceof RmcClientError) throw new CliError(err.code, err.message);
    throw err;
  } finally {
    await client.close();
  }
}

/** A whole-number option (from a flag or the config file), at least `min`. */
function intOption(options: Record<string, unknown>, key: string, min: number): number {
  const v = options[key];
  if (typeof v !== 'number' || !Number.isSafeInteger(v) || v < min) {
    throw new CliError('ERR_CONFIG', `rmc: ${key} must be a whole number ≥ ${min}, got ${JSON.stringify(v)}`);
  }
  return v;
}

export const rmc: ProtocolModule = {
  name: 'rmc',
  summary: 'Rendez-Vous RMC (HyperScape string-named variant by default; nex-verbose and classic packed)',
  codecs: [rmcCodec, prudpCodec],
  server: {
    summary: 'RMC server with LoginProtocol, CloudServersProtocol, SessionProtocol, ApexAntitoxicityProtocol',
    defaultPort: 9103,
    options: [
      ...PRUDP_SERVE_OPTIONS,
      {
        key: 'datacenters',
        flag: '--datacenters <list>',
        description:
          'rmc: CloudServersProtocol datacenters, id=host:port,… (config: objects {id,name,region,host,port})',
        type: 'list',
      },
      {
        key: 'rmcStore',
        flag: '--rmc-store <file>',
        description: 'rmc: persist accounts to this JSON file (default: in memory only)',
        type: 'string',
      },
      {
        key: 'rmcSecureUrl',
        flag: '--rmc-secure-url <url>',
        description: 'rmc: StationURL LoginWithToken_V1 sends clients to (default prudp:/)',
        type: 'string',
      },
      {
        key: 'rmcMaxAccounts',
        flag: '--rmc-max-accounts <n>',
        description: 'rmc: most accounts in the store; logins that would create more are refused',
        type: 'int',
        default: DEFAULT_MAX_ACCOUNTS,
      },
      {
        key: 'rmcIdleTimeout',
        flag: '--rmc-idle-timeout <ms>',
        description: 'rmc: close connections silent this long (0 disables)',
        type: 'int',
        default: 120_000,
      },
      {
        key: 'rmcMaxConnections',
        flag: '--rmc-max-connections <n>',
        description: 'rmc: most simultaneous connections',
        type: 'int',
        default: 10_000,
      },
      {
        key: 'rmcMaxFrameBytes',
        flag: '--rmc-max-frame-bytes <n>',
        description: 'rmc: largest RMC frame accepted',
        type: 'int',
        default: DEFAULT_MAX_FRAME_BYTES,
      },
    ],
    async start(options, ctx) {
      let datacenters: ReturnType<typeof parseDatacenters>;
      try {
        datacenters = parseDatacenters(options.datacenters);
      } catch (err) {
        throw new CliError('ERR_CONFIG', `rmc: ${(err as Error).message}`);
      }
      const server = new RmcServer({
        log: ctx.log,
        metrics: ctx.metrics,
        variant: profileOf(options) === 'classic' ? 'classic' : 'hyperscape',
        maxFrameBytes: intOption(options, 'rmcMaxFrameBytes', 16),
        idleTimeoutMs: intOption(options, 'rmcIdleTimeout', 0),
        maxConnections: intOption(options, 'rmcMaxConnections', 1),
      });
      const store = new MemoryStore(typeof options.rmcStore === 'string' ? options.rmcStore : undefined, {
        maxAccounts: intOption(options, 'rmcMaxAccounts', 1),
      });
      const secureUrl = typeof options.rmcSecureUrl === 'string' ? options.rmcSecureUrl : undefined;
      // PRUDP and/or TCP per --rmc-transport; the profile picks the built-ins (see prudp/serve.ts).
      const listening = await startRmcTransports(
        server,
        options,
        ctx,
        store,
        secureUrl === undefined ? { store, datacenters } : { store, datacenters, secureUrl },
      );
      return {
        endpoints: listening.endpoints,
        close: async (graceMs?: number) => {
          await listening.close(graceMs);
          await store.flush();
        },
      };
    },
  },
  registerCommands(program: Command) {
    const cmd = program.command('rmc').description('Rendez-Vous RMC tools');
    cmd
      .command('call')
      .description('call an RMC method on a server and print its results as JSON')
      .argument('<method>', 'Protocol::Method_Vn, e.g. LoginProtocol::Register_V1')
      .option('--host <host>', 'server address', '127.0.0.1')
      .option('--port <port>', 'server port', parseIntOption, 9103)
      .option('--args <json>', 'arguments as JSON (declared methods), or a JSON string of hex bytes')
      .option('--timeout <ms>', 'call timeout in milliseconds', parseIntOption, 10_000)
      .option(
        '--variant <name>',
        'hyperscape, nex-verbose, or classic (method given as protocolId::methodId)',
        'hyperscape',
      )
      .option('--transport <t>', 'tcp (u32-framed) or prudp (UDP)', 'tcp')
      .option('--access-key <key>', 'PRUDP sandbox access key')
      .option('--checksum <width>', 'PRUDP checksum width, 1 or 4', '1')
      .option(
        '--user <name>',
        'classic over PRUDP: log in with TicketGranting and call on the secure connection',
      )
      .option('--password <pass>', 'classic over PRUDP: the password for --user')
      .action((name: string, flags: CallFlags) => runCall(name, flags));
    cmd
      .command('methods')
      .description('list the built-in methods, their signatures and how much of each layout is public')
      .option('--json', 'print JSON')
      .action((flags: { json?: boolean }) => {
        const all = BUILTIN_PROTOCOLS.map((p) => ({
          protocol: p.name,
          doc: p.doc,
          methods: summarizeProtocol(p),
        }));
        if (flags.json === true) {
          process.stdout.write(`${JSON.stringify(all)}\n`);
          return;
        }
        for (const p of all) {
          process.stdout.write(`${p.protocol}: ${p.doc}\n`);
          for (const m of p.methods) {
            process.stdout.write(`  ${m.method}(${m.args}) -> (${m.results})  [layout ${m.layout}]\n`);
          }
          if (p.methods.length === 0)
            process.stdout.write('  (no declared methods: every call is acknowledged)\n');
        }
      });
  },
};
