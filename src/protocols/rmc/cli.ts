/**
 * `gamewire rmc …` subcommands: `rmc call` (one call against a server, results as JSON) and
 * `rmc methods` (the built-in signatures and how much of each layout is public).
 */
import { writeFileSync } from 'node:fs';
import type { Command } from 'commander';
import {
  CommandError,
  connectFailure,
  parseIntOption,
  parsePortOption,
  UsageError,
} from '../../core/errors.js';
import { decode, parseHex, WireWriter } from '../../wire/index.js';
import { RmcClient, RmcClientError } from './client.js';
import { findBuiltinByFullName, findMethodById } from './codec.js';
import { importDdl, readDdlInputs } from './ddl/import.js';
import { loadPacks } from './ddl/pack.js';
import { summarizeProtocol } from './describe.js';
import { RmcError } from './errors.js';
import { RMC_VARIANTS, type RmcVariant } from './messages.js';
import { BUILTIN_PROTOCOLS } from './protocols/index.js';
import { connectForCall } from './prudp/call.js';
import type { MethodDef } from './signature.js';

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
  protocols?: string;
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
    throw new UsageError(
      `${name} is not a built-in method nor one of a --protocols pack: give --args as a JSON string of hex bytes`,
    );
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
  const protocols =
    flags.protocols === undefined ? BUILTIN_PROTOCOLS : [...loadPacks(flags.protocols), ...BUILTIN_PROTOCOLS];
  let target: [string | number, string | number];
  let def: MethodDef | undefined;
  if (variant === 'classic') {
    const m = /^(\d+)::(\d+)$/.exec(name);
    if (m === null)
      throw new UsageError(`with --variant classic the method is protocolId::methodId, got "${name}"`);
    target = [Number(m[1]), Number(m[2])];
    if ((target[0] as number) > 0xffff || (target[1] as number) > 0x7fff)
      throw new UsageError('id out of range');
    def = findMethodById(target[0], target[1], protocols);
  } else {
    def = findBuiltinByFullName(name, protocols);
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
    const target = `${flags.host}:${flags.port}`;
    const hint = connectFailure(err, target);
    if (hint instanceof CommandError) throw hint;
    const code = (err as { code?: string }).code ?? 'ERR_RMC_CONNECTION';
    if (code === 'ERR_PRUDP_TIMEOUT')
      throw new CommandError(
        code,
        `${err.message}: is \`gamewire serve rmc\` running at ${target} (UDP), and is --access-key the server's?`,
      );
    throw new CommandError(code, err.message);
  });
  try {
    const raw = await client.callRaw(target[0], target[1], argBytes);
    const results = def === undefined ? raw.toString('hex') : def.results.toJson(decode(def.results, raw));
    const out = variant === 'classic' ? { methodId: target[1], results } : { method: `${name}*`, results };
    process.stdout.write(`${JSON.stringify(out)}\n`);
  } catch (err) {
    if (err instanceof RmcError) {
      const hex = `0x${err.code.toString(16).padStart(4, '0')}`;
      throw new CommandError('ERR_RMC_FAILURE', `${err.qualifiedName} (${err.namespace}/${hex})`);
    }
    if (err instanceof RmcClientError) {
      // A call that got no answer: name the server it went to.
      const where =
        err.code === 'ERR_RMC_TIMEOUT' ? `: no answer from ${flags.host}:${flags.port} (--timeout)` : '';
      throw new CommandError(err.code, `${err.message}${where}`);
    }
    throw err;
  } finally {
    await client.close();
  }
}

/** Adds `gamewire rmc call` and `gamewire rmc methods`. */
export function registerCommands(program: Command): void {
  const cmd = program.command('rmc').description('Rendez-Vous RMC tools');
  cmd
    .command('call')
    .description('call an RMC method on a server and print its results as JSON')
    .argument('<method>', 'Protocol::Method_Vn, e.g. LoginProtocol::Register_V1')
    .option('--host <host>', 'server address', '127.0.0.1')
    .option('--port <port>', 'server port', parsePortOption, 9103)
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
    .option(
      '--protocols <files>',
      'protocol packs (gamewire rmc ddl import), comma-separated: named args and results',
    )
    .action((name: string, flags: CallFlags) => runCall(name, flags));
  cmd
    .command('methods')
    .description('list the built-in methods, their signatures and how much of each layout is public')
    .option('--json', 'print JSON')
    .option(
      '--protocols <files>',
      'protocol packs (gamewire rmc ddl import), comma-separated: list theirs too',
    )
    .action((flags: { json?: boolean; protocols?: string }) => {
      const protocols =
        flags.protocols === undefined
          ? BUILTIN_PROTOCOLS
          : [...loadPacks(flags.protocols), ...BUILTIN_PROTOCOLS];
      const all = protocols.map((p) => ({
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
  const ddl = cmd.command('ddl').description("a game's DDL (its protocol declarations) as protocol packs");
  ddl
    .command('import')
    .description(
      "read DDL dumps (5th-echelon's JSON form) and write a protocol pack for --protocols; reports what it cannot carry over",
    )
    .argument('<paths...>', 'DDL JSON files, or folders of them (an id mapping file beside them is used)')
    .option('--ids <file>', 'protocol name -> classic id mapping (JSON object), e.g. sc_bl_mapping.json')
    .option('--out <file>', 'write the pack here (default: stdout)')
    .action((paths: string[], flags: { ids?: string; out?: string }) => runImport(paths, flags));
}

function runImport(paths: readonly string[], flags: { ids?: string; out?: string }): void {
  const { docs, ids } = readDdlInputs(paths, flags.ids);
  const pack = importDdl(docs, ids === undefined ? {} : { ids });
  const text = `${JSON.stringify(pack, null, 1)}\n`;
  if (flags.out === undefined) process.stdout.write(text);
  else {
    try {
      writeFileSync(flags.out, text);
    } catch (err) {
      throw new CommandError('ERR_WRITE', `cannot write ${flags.out}: ${(err as Error).message}`);
    }
  }
  // Nothing is dropped silently: every type and protocol the pack could not carry is named.
  for (const p of pack.problems) process.stderr.write(`${p.kind}: ${p.element}: ${p.detail}\n`);
  const methods = pack.protocols.reduce((n, p) => n + p.methods.length, 0);
  process.stderr.write(
    `${pack.protocols.length} protocols, ${methods} methods, ${Object.keys(pack.types).length} classes; ${pack.problems.length} problems${flags.out === undefined ? '' : ` -> ${flags.out}`}\n`,
  );
}
