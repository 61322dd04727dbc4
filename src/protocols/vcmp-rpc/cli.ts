/** `gamewire vcmp-rpc …`: the builder on the command line. */
import type { Command } from 'commander';
import { UsageError } from '../../core/errors.js';
import { EncodeError, ErrorCode } from '../../wire/index.js';
import { createRpc, type RpcArg } from './builder.js';

export function registerCommands(program: Command): void {
  const cmd = program.command('vcmp-rpc').description('VC-MP NPC LibRPC tools');
  cmd
    .command('build')
    .description('build ServerData bytes like RFC(name)(args…) or RFCa(name)(env, args…); prints hex')
    .argument('<function>', 'function name')
    .argument('[args]', 'JSON array of arguments (numbers: integers → i, others → f)', '[]')
    .option('--method', 'RFCa: call <function> on the first argument (tag E)')
    .option('--legacy', 'write the v1.6 beta..beta4 identifier 0x40000000')
    .option('--keep-nul', 'keep characters after an embedded NUL (the real builder cuts there)')
    .action(
      (name: string, argsText: string, opts: { method?: boolean; legacy?: boolean; keepNul?: boolean }) => {
        let args: unknown;
        try {
          args = JSON.parse(argsText);
        } catch {
          throw new UsageError(`args must be a JSON array, such as '["Hello", 5]'`);
        }
        if (!Array.isArray(args)) throw new UsageError(`args must be a JSON array, such as '["Hello", 5]'`);
        if (args.some((a) => typeof a === 'object' && a !== null && !Array.isArray(a))) {
          throw new EncodeError(
            ErrorCode.BAD_INPUT,
            'Unknown type of parameter given (tables are not supported)',
          );
        }
        const rpc = createRpc({ legacy: opts.legacy === true, cutStringsAtNul: opts.keepNul !== true });
        const bytes = (opts.method ? rpc.RFCa(name) : rpc.RFC(name))(...(args as RpcArg[]));
        process.stdout.write(`${bytes.toString('hex')}\n`);
      },
    );
}
