/**
 * The `gamewire` command, as docs/cli.md describes it: decode, encode, serve, plus the
 * protocols' own subcommands. Errors are one JSON line on stderr; exit 1 for bad input, 2 for
 * bad usage; never a stack trace.
 */
import { readFileSync } from 'node:fs';
import { Command, CommanderError, InvalidArgumentError } from 'commander';
import type { CodecFlag, CodecOptions, Direction, ProtocolCodec } from '../core/protocol.js';
import { allCodecs, findCodec, protocols } from '../protocols/registry.js';
import { DecodeError, EncodeError } from '../wire/errors.js';
import { parseHex } from '../wire/hex.js';
import { CliError, printError, UsageError } from './errors.js';
import { addInspectCommand } from './inspect.js';
import { addServeCommand } from './serve.js';

function readInput(file: string | undefined, what: string): Buffer {
  if (file === undefined) throw new UsageError(`give the ${what} with its option, a FILE, or - for stdin`);
  try {
    return readFileSync(file === '-' ? 0 : file);
  } catch (err) {
    throw new CliError('ERR_READ', `cannot read ${file === '-' ? 'stdin' : file}: ${(err as Error).message}`);
  }
}

/** Every codec's own flags, once each (codecs may share one, e.g. `--access-key`). */
function codecFlags(): CodecFlag[] {
  const seen = new Map<string, CodecFlag>();
  for (const c of allCodecs()) for (const f of c.flags ?? []) if (!seen.has(f.flag)) seen.set(f.flag, f);
  return [...seen.values()];
}

function codecOptions(
  codec: ProtocolCodec,
  opts: { from?: string; variant?: string } & Record<string, unknown>,
): CodecOptions {
  const out: CodecOptions = {};
  for (const f of codecFlags()) {
    const v = opts[f.key];
    if (typeof v !== 'string') continue;
    if (!(codec.flags ?? []).some((own) => own.key === f.key))
      throw new UsageError(`${codec.name} does not take ${f.flag.split(' ')[0]}`);
    out.extra ??= {};
    out.extra[f.key] = v;
  }
  if (opts.from !== undefined) {
    if (opts.from !== 'client' && opts.from !== 'server')
      throw new UsageError('--from takes client or server');
    out.from = opts.from as Direction;
  }
  if (opts.variant !== undefined) {
    if (codec.variants === undefined || !codec.variants.includes(opts.variant)) {
      const known = codec.variants?.join(', ') ?? 'none';
      throw new UsageError(`${codec.name} has no variant "${opts.variant}" (variants: ${known})`);
    }
    out.variant = opts.variant;
  }
  return out;
}

function lookupCodec(name: string, forEncode: boolean): ProtocolCodec {
  const codec = findCodec(name);
  if (codec === undefined) {
    throw new UsageError(
      `unknown protocol "${name}" (known: ${allCodecs()
        .map((c) => c.name)
        .join(', ')})`,
    );
  }
  if (forEncode && !codec.canEncode) throw new UsageError(`${name} is decode-only`);
  return codec;
}

function printJson(value: unknown): void {
  const text = process.stdout.isTTY ? JSON.stringify(value, null, 2) : JSON.stringify(value);
  process.stdout.write(`${text}\n`);
}

export function buildProgram(): Command {
  const program = new Command('gamewire');
  program
    .description('Codecs, servers and clients for five game network protocols')
    .version('0.1.0')
    .exitOverride()
    .configureOutput({ outputError: () => {} })
    .showHelpAfterError(false);

  const decodeCmd = program
    .command('decode')
    .description('decode bytes into JSON (one object per message; an array for several)')
    .argument(
      '<protocol>',
      `one of: ${allCodecs()
        .map((c) => c.name)
        .join(', ')}`,
    )
    .argument('[file]', 'a file of raw bytes, or - for stdin')
    .option('--hex <hex>', 'the bytes as hex (spaces allowed)')
    .option('--from <side>', 'who sent the bytes: client or server')
    .option('--variant <name>', 'protocol variant');
  for (const f of codecFlags()) decodeCmd.option(f.flag, f.description);
  decodeCmd.action(
    (name: string, file: string | undefined, opts: { hex?: string; from?: string; variant?: string }) => {
      const codec = lookupCodec(name, false);
      const options = codecOptions(codec, opts);
      const bytes = opts.hex !== undefined ? parseHex(opts.hex) : readInput(file, 'bytes (--hex)');
      printJson(codec.decode(bytes, options));
    },
  );

  const encodeCmd = program
    .command('encode')
    .description('encode the JSON that decode prints back into bytes (printed as hex)')
    .argument(
      '<protocol>',
      `one of: ${allCodecs()
        .filter((c) => c.canEncode)
        .map((c) => c.name)
        .join(', ')}`,
    )
    .argument('[file]', 'a JSON file, or - for stdin')
    .option('--json <json>', 'the message(s) as JSON')
    .option('--from <side>', 'who sends the bytes: client or server')
    .option('--variant <name>', 'protocol variant');
  for (const f of codecFlags()) encodeCmd.option(f.flag, f.description);
  encodeCmd.action(
    (name: string, file: string | undefined, opts: { json?: string; from?: string; variant?: string }) => {
      const codec = lookupCodec(name, true);
      const options = codecOptions(codec, opts);
      const text = opts.json ?? readInput(file, 'JSON (--json)').toString('utf8');
      let json: unknown;
      try {
        json = JSON.parse(text);
      } catch (err) {
        throw new CliError('ERR_BAD_JSON', `input is not JSON: ${(err as Error).message}`);
      }
      process.stdout.write(`${codec.encode(json, options).toString('hex')}\n`);
    },
  );

  program
    .command('protocols')
    .description('list the protocols, their formats and servers')
    .action(() => {
      for (const p of protocols) {
        const formats = p.codecs.map((c) => c.name + (c.canEncode ? '' : ' (decode only)')).join(', ');
        const server = p.server ? `serve: port ${p.server.defaultPort}` : 'no server';
        process.stdout.write(
          `${p.name.padEnd(12)} ${p.summary}\n${''.padEnd(12)} formats: ${formats}; ${server}\n`,
        );
      }
    });

  addServeCommand(program);
  addInspectCommand(program);
  for (const p of protocols) p.registerCommands?.(program);
  return program;
}

/** Runs the CLI and returns the exit code. */
export async function main(argv: readonly string[]): Promise<number> {
  const program = buildProgram();
  try {
    await program.parseAsync(argv as string[], { from: 'user' });
    return 0;
  } catch (err) {
    if (err instanceof CommanderError) {
      if (err.exitCode === 0) return 0; // --help, --version
      printError('ERR_USAGE', err.message.replace(/^error: /, ''));
      return 2;
    }
    if (err instanceof InvalidArgumentError || err instanceof UsageError) {
      printError('ERR_USAGE', err.message);
      return 2;
    }
    if (err instanceof DecodeError) {
      printError(err.code, err.message, err.offset, err.path);
      return 1;
    }
    if (err instanceof EncodeError) {
      printError(err.code, err.message, undefined, err.path);
      return 1;
    }
    if (err instanceof CliError) {
      printError(err.code, err.message);
      return err.exitCode;
    }
    printError('ERR_INTERNAL', err instanceof Error ? err.message : String(err));
    return 1;
  }
}
