/**
 * The `gamewire` command, as docs/cli.md describes it: decode, encode, serve, config, plus the
 * protocols' own subcommands. Errors are one JSON line on stderr; exit 1 for bad input, 2 for
 * bad usage; never a stack trace.
 *
 * Start-up time matters (`--help`, `--version` and `decode` answer in well under 150 ms): this
 * module imports only commander and light modules. A protocol's code is imported when a command
 * uses it (`decode js5` loads the js5 codecs), and whole protocol modules (servers, clients and
 * their dependencies) only for `serve`, `config`, `protocols` and the protocols' subcommands.
 */
import { readFile } from 'node:fs/promises';
import { Command, CommanderError, InvalidArgumentError } from 'commander';
import { CommandError, connectFailure, UsageError } from '../core/errors.js';
import type { CodecOptions, Direction, ProtocolCodec, ProtocolModule } from '../core/protocol.js';
import { loadPlugins } from '../protocols/plugins.js';
import { codecFlags, codecNames, loadCodec, loadProtocols, registry } from '../protocols/registry.js';
import { DecodeError, EncodeError, GamewireError } from '../wire/errors.js';
import { parseHex } from '../wire/hex.js';
import { printError } from './errors.js';
import { guardProcess } from './stdio.js';

export const VERSION = '0.1.0';

/** Reads all of stdin asynchronously (works on pipes, files and terminals alike). */
async function readStdin(): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

async function readInput(file: string | undefined, what: string): Promise<Buffer> {
  if (file === undefined) throw new UsageError(`give the ${what} with its option, a FILE, or - for stdin`);
  try {
    return file === '-' ? await readStdin() : await readFile(file);
  } catch (err) {
    throw new CommandError(
      'ERR_READ',
      `cannot read ${file === '-' ? 'stdin' : file}: ${(err as Error).message}`,
    );
  }
}

function codecOptions(
  codec: ProtocolCodec,
  opts: { from?: string; variant?: string } & Record<string, unknown>,
): CodecOptions {
  const out: CodecOptions = {};
  // A codec's own flags (prudp's --access-key …) only go to that codec.
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
      throw new UsageError(`--from takes client or server, not "${opts.from}"`);
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

async function lookupCodec(name: string, forEncode: boolean): Promise<ProtocolCodec> {
  const codec = await loadCodec(name);
  if (codec === undefined)
    throw new UsageError(`unknown protocol "${name}" (known: ${codecNames().join(', ')})`);
  if (forEncode && !codec.canEncode)
    throw new UsageError(`${name} is decode-only (it can be decoded, not encoded)`);
  return codec;
}

function printJson(value: unknown): void {
  const text = process.stdout.isTTY ? JSON.stringify(value, null, 2) : JSON.stringify(value);
  process.stdout.write(`${text}\n`);
}

/**
 * Commands that live in their own modules. They are listed here with a one-line summary so
 * `--help` shows them without loading them; a module is imported only when its command runs
 * (or for `help`). Add a command by adding a line.
 */
const LAZY_COMMANDS: readonly {
  name: string;
  summary: string;
  register(program: Command, argv?: readonly string[]): Promise<void>;
}[] = [
  {
    name: 'inspect',
    summary: 'decode a pcap/pcapng capture (or a live stream with --follow -) across every protocol',
    register: async (program) => (await import('./inspect.js')).addInspectCommand(program),
  },
  {
    name: 'dissector',
    summary: 'write Wireshark Lua dissectors for every protocol, generated from the message declarations',
    register: async (program) => (await import('./inspect.js')).addDissectorCommand(program),
  },
  {
    name: 'replay',
    summary: "play a recording's client side back to a server and report where its replies differ",
    register: async (program) => (await import('./record.js')).addReplayCommand(program),
  },
  {
    name: 'conform',
    summary:
      'check a server against what the real clients do (gamewire conform <protocol> --target HOST:PORT)',
    register: async (program, argv) => (await import('./conform.js')).addConformCommand(program, argv),
  },
  {
    name: 'load',
    summary:
      'drive a server with a crowd of clients and measure it (gamewire load <protocol> --target HOST:PORT)',
    register: async (program, argv) => (await import('./load.js')).addLoadCommand(program, argv),
  },
];

/** The first word that is not an option: the command to run (`serve`, `js5`, `decode`, …). */
function commandWord(argv: readonly string[]): string | undefined {
  return argv.find((a) => !a.startsWith('-'));
}

/** Commands that need every protocol module loaded (servers, clients, their dependencies). */
function needsProtocolModules(word: string | undefined): boolean {
  if (word === undefined) return false;
  if (word === 'serve' || word === 'config' || word === 'protocols' || word === 'help') return true;
  return registry.some((p) => p.name === word && p.hasCommands);
}

/**
 * Builds the command tree. With `argv`, protocol modules are loaded only when the command needs
 * them; without, everything is loaded (for tests that walk every command).
 */
export async function buildProgram(argv?: readonly string[]): Promise<Command> {
  const modules: ProtocolModule[] | undefined =
    argv === undefined || needsProtocolModules(commandWord(argv)) ? await loadProtocols() : undefined;
  const program = new Command('gamewire');
  program
    .description('Codecs, servers and clients for five game network protocols')
    .version(VERSION)
    .exitOverride()
    // Help wraps at the terminal's width, and at 100 columns on a pipe or a file (commander's
    // default there is not to wrap, which left serve --help with 100 lines over 100 columns).
    .configureOutput({ outputError: () => {}, getOutHelpWidth: () => process.stdout.columns || 100 })
    .showHelpAfterError(false);

  const decodeCmd = program
    .command('decode')
    .description('decode bytes into JSON (one object per message; an array for several)')
    .argument('<protocol>', `one of: ${codecNames().join(', ')}`)
    .argument('[file]', 'a file of raw bytes, or - for stdin')
    .option('--hex <hex>', 'the bytes as hex (spaces allowed)')
    .option('--from <side>', 'who sent the bytes: client or server')
    .option('--variant <name>', 'protocol variant')
    .action(
      async (
        name: string,
        file: string | undefined,
        opts: { hex?: string; from?: string; variant?: string },
      ) => {
        const codec = await lookupCodec(name, false);
        const options = codecOptions(codec, opts);
        const bytes = opts.hex !== undefined ? parseHex(opts.hex) : await readInput(file, 'bytes (--hex)');
        printJson(codec.decode(bytes, options));
      },
    );

  for (const f of codecFlags()) decodeCmd.option(f.flag, f.description);

  const encodeCmd = program
    .command('encode')
    .description('encode the JSON that decode prints back into bytes (printed as hex)')
    .argument('<protocol>', `one of: ${codecNames().join(', ')}`)
    .argument('[file]', 'a JSON file, or - for stdin')
    .option('--json <json>', 'the message(s) as JSON')
    .option('--from <side>', 'who sends the bytes: client or server')
    .option('--variant <name>', 'protocol variant')
    .action(
      async (
        name: string,
        file: string | undefined,
        opts: { json?: string; from?: string; variant?: string },
      ) => {
        const codec = await lookupCodec(name, true);
        const options = codecOptions(codec, opts);
        const text = opts.json ?? (await readInput(file, 'JSON (--json)')).toString('utf8');
        let json: unknown;
        try {
          json = JSON.parse(text);
        } catch (err) {
          throw new CommandError('ERR_BAD_JSON', `input is not JSON: ${(err as Error).message}`);
        }
        process.stdout.write(`${codec.encode(json, options).toString('hex')}\n`);
      },
    );

  for (const f of codecFlags()) encodeCmd.option(f.flag, f.description);

  program
    .command('protocols')
    .description('list the protocols, their formats and servers')
    .action(() => {
      for (const p of modules ?? []) {
        const formats = p.codecs.map((c) => c.name + (c.canEncode ? '' : ' (decode only)')).join(', ');
        const server = p.server ? `serve: port ${p.server.defaultPort}` : 'no server';
        process.stdout.write(
          `${p.name.padEnd(12)} ${p.summary}\n${''.padEnd(12)} formats: ${formats}; ${server}\n`,
        );
      }
    });

  if (modules !== undefined) {
    const [{ addServeCommand }, { addConfigCommand }] = await Promise.all([
      import('./serve.js'),
      import('./config.js'),
    ]);
    addServeCommand(program, modules);
    addConfigCommand(program, modules);
    for (const p of modules) p.registerCommands?.(program);
  }
  const word = argv === undefined ? undefined : commandWord(argv);
  for (const c of LAZY_COMMANDS) {
    if (argv === undefined || word === c.name || word === 'help') await c.register(program, argv);
    else program.command(c.name).description(c.summary);
  }
  if (modules === undefined) {
    // Light placeholders so `gamewire --help` lists every command without loading any protocol.
    program.command('serve').description('start servers (all of them when no protocol is named)');
    program.command('config').description('print an example config file, the reference, or check a file');
    for (const p of registry) if (p.hasCommands) program.command(p.name).description(p.summary);
  }
  requireSubcommands(program);
  return program;
}

/**
 * A command that only groups subcommands (`gamewire js5`) fails as a usage error listing them,
 * instead of commander printing its help and then `(outputHelp)`.
 */
function requireSubcommands(cmd: Command, prefix = 'gamewire'): void {
  for (const sub of cmd.commands) {
    const name = `${prefix} ${sub.name()}`;
    if (sub.commands.length > 0) {
      const choices = sub.commands.map((c) => c.name()).join(', ');
      // Unknown options too: `conform vcmp-rpc --target …` is about vcmp-rpc, not about --target.
      sub
        .allowExcessArguments(true)
        .allowUnknownOption(true)
        .action((_opts: unknown, self: Command) => {
          const given = self.args.find((a) => !a.startsWith('-'));
          const protocol = given === undefined ? undefined : registry.find((p) => p.name === given);
          throw new UsageError(
            given === undefined
              ? `${name} needs a command: one of ${choices} (see ${name} --help)`
              : protocol !== undefined && !protocol.hasServer
                ? `${given} has no server (it rides inside its game's own traffic), so there is nothing for ${name} to reach: ${name} works on ${choices}`
                : `unknown command "${given}" for ${name}: one of ${choices}`,
          );
        });
      requireSubcommands(sub, name);
    }
  }
}

/** Prints the error line for anything a command threw and returns the exit status. */
export function reportError(err: unknown): number {
  if (err instanceof CommanderError) {
    if (err.exitCode === 0) return 0; // --help, --version
    printError('ERR_USAGE', err.message.replace(/^error: /, ''));
    return 2;
  }
  if (err instanceof InvalidArgumentError) {
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
  if (err instanceof CommandError) {
    printError(err.code, err.message);
    return err.exitCode;
  }
  if (err instanceof GamewireError) {
    const code = (err as GamewireError<string | number>).code;
    printError(
      typeof code === 'string' ? code : `ERR_${err.name.replace(/Error$/, '').toUpperCase()}_${code}`,
      err.message,
    );
    return 1;
  }
  // A client command that let a connection error through: say what to do, not `ECONNREFUSED`.
  const e = err as NodeJS.ErrnoException & { address?: unknown; port?: unknown };
  if (typeof e?.address === 'string') {
    const hint = connectFailure(err, `${e.address}:${String(e.port)}`);
    if (hint instanceof CommandError) return reportError(hint);
  }
  printError('ERR_INTERNAL', err instanceof Error ? err.message : String(err));
  return 1;
}

/** Runs the CLI and returns the exit code. */
export async function main(argv: readonly string[]): Promise<number> {
  guardProcess();
  try {
    await loadPlugins();
    const program = await buildProgram(argv);
    await program.parseAsync(argv as string[], { from: 'user' });
    return 0;
  } catch (err) {
    return reportError(err);
  }
}
