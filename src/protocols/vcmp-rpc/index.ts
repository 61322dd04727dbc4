/**
 * VC-MP NPC LibRPC (`vcmp-rpc`). The wire layer is transport-free: ServerData rides inside VC-MP's
 * client-script-data messages, which gamewire does not carry, so this protocol has no `serve`.
 * Its "server" side is the builder (what the npc04relxx plugin does) and its "client" side is the
 * executor (what the NPC's LibRPC does).
 */
import type { Command } from 'commander';
import { UsageError } from '../../cli/errors.js';
import type { ProtocolModule } from '../../core/protocol.js';
import { EncodeError, ErrorCode } from '../../wire/index.js';
import { createRpc, type RpcArg } from './builder.js';
import { vcmpRpcCodec } from './codec.js';

export * from './builder.js';
export * from './codec.js';
export * from './executor.js';
export * from './messages.js';

function registerCommands(program: Command): void {
  const cmd = program.command('vcmp-rpc').description('VC-MP NPC LibRPC tools');
  cmd
    .command('build')
    .description('build ServerData bytes like RFC(name)(args…) or RFCa(name)(env, args…); prints hex')
    .argument('<function>', 'function name')
    .argument('[args]', 'JSON array of arguments (numbers: integers → i, others → f)', '[]')
    .option('--method', 'RFCa: call <function> on the first argument (tag E)')
    .option('--legacy', 'write the v1.6 beta..beta4 identifier 0x40000000')
    .action((name: string, argsText: string, opts: { method?: boolean; legacy?: boolean }) => {
      let args: unknown;
      try {
        args = JSON.parse(argsText);
      } catch {
        throw new UsageError('args must be a JSON array');
      }
      if (!Array.isArray(args)) throw new UsageError('args must be a JSON array');
      if (args.some((a) => typeof a === 'object' && a !== null && !Array.isArray(a))) {
        throw new EncodeError(
          ErrorCode.BAD_INPUT,
          'Unknown type of parameter given (tables are not supported)',
        );
      }
      const rpc = createRpc({ legacy: opts.legacy === true });
      const bytes = (opts.method ? rpc.RFCa(name) : rpc.RFC(name))(...(args as RpcArg[]));
      process.stdout.write(`${bytes.toString('hex')}\n`);
    });
}

export const vcmpRpc: ProtocolModule = {
  name: 'vcmp-rpc',
  summary: 'VC-MP NPC LibRPC: serialized function calls between a server and its NPCs',
  codecs: [vcmpRpcCodec],
  registerCommands,
};
