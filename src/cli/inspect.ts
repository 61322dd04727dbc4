/**
 * `gamewire inspect`: decode a capture (or a live pcap stream) across every protocol.
 */
import fs from 'node:fs';
import path from 'node:path';
import { type Command, Option } from 'commander';
import { CommandError, EXIT_USAGE } from '../core/errors.js';
import type { DecoderFlag } from '../core/flow.js';
import { generateDissectors } from '../inspect/dissector.js';
import type { InspectRecord, PortMapping } from '../inspect/inspector.js';
import { accepts, type RecordFilter, recordJson, tableLine } from '../inspect/output.js';
import { loadFlowProtocols, loadInspections } from '../inspect/protocols.js';
import { inspectChunks } from '../inspect/run.js';
import { registry } from '../protocols/registry.js';
import { CliError, parseIntOption, UsageError } from './errors.js';

/** The names `--port` and `--protocol` accept: every protocol's flows (a protocol may have several), tls and dtls. */
export async function flowNames(): Promise<string[]> {
  return (await loadFlowProtocols()).map((p) => p.name);
}

/** `a`, `a or b`, `a, b or c`. */
function orList(values: readonly string[]): string {
  return values.length <= 1 ? values.join('') : `${values.slice(0, -1).join(', ')} or ${values.at(-1)}`;
}

/**
 * Adds every protocol's own flags of one command (`inspectFlags` of `gamewire inspect`,
 * `replayFlags` of `gamewire replay`, declared in its inspection and reached through its registry
 * entry) to `cmd`, in registry order. Returns what turns the parsed values into the decoder
 * options (each flag checked, then applied). A flag another protocol or the command already has
 * is refused (ERR_PLUGIN, exit 2).
 */
export async function addDecoderFlags(
  cmd: Command,
  kind: 'inspectFlags' | 'replayFlags' | 'dissectorFlags',
): Promise<(values: Record<string, unknown>) => Record<string, unknown>> {
  const declared: { flag: DecoderFlag; option: Option }[] = [];
  for (const { protocol, inspection } of await loadInspections()) {
    for (const flag of inspection[kind] ?? []) {
      const option = new Option(flag.flag, flag.description);
      if (flag.default !== undefined) option.default(flag.default);
      if (flag.repeatable === true)
        option.argParser((v: string, previous: string | undefined) =>
          previous === undefined || previous === flag.default ? v : `${previous},${v}`,
        );
      const taken = cmd.options.find(
        (o) =>
          (o.long !== undefined && o.long === option.long) || o.attributeName() === option.attributeName(),
      );
      if (taken !== undefined) {
        throw new CommandError(
          'ERR_PLUGIN',
          `${protocol}: the flag ${option.long ?? flag.flag} of \`gamewire ${cmd.name()}\` is already taken`,
          EXIT_USAGE,
        );
      }
      cmd.addOption(option);
      declared.push({ flag, option });
    }
  }
  return (values) => {
    const options: Record<string, unknown> = {};
    for (const { flag, option } of declared) {
      const raw = values[option.attributeName()];
      const value = raw === true ? true : typeof raw === 'string' ? raw : undefined;
      if (flag.choices !== undefined && typeof value === 'string' && !flag.choices.includes(value)) {
        throw new UsageError(`${option.long} takes ${orList(flag.choices)}`);
      }
      Object.assign(options, flag.apply(value));
    }
    return options;
  };
}

/** Refuses a name no flow protocol has, listing the known ones. */
export function checkFlowName(name: string, known: readonly string[]): void {
  if (!known.includes(name)) throw new UsageError(`unknown protocol "${name}" (known: ${known.join(', ')})`);
}

/** `40000=js5`, `40000/udp=nox-relay` (the protocol's name is checked by the command, against the registry). */
export function parsePortMapping(value: string, previous: PortMapping[] = []): PortMapping[] {
  const m = /^(\d{1,5})(?:\/(tcp|udp))?=([a-z0-9-]+)$/.exec(value);
  if (m === null) throw new UsageError(`--port takes PORT=PROTOCOL or PORT/tcp=PROTOCOL, got "${value}"`);
  const port = Number(m[1]);
  if (port > 65_535) throw new UsageError(`port ${port} is out of range`);
  const mapping: PortMapping = { port, protocol: m[3]! };
  if (m[2] !== undefined) mapping.transport = m[2] as 'tcp' | 'udp';
  return [...previous, mapping];
}

function list(value: string | undefined): Set<string> | undefined {
  if (value === undefined) return undefined;
  return new Set(
    value
      .split(',')
      .map((s) => s.trim())
      .filter((s) => s !== ''),
  );
}

interface InspectFlags {
  json?: boolean;
  follow?: boolean;
  port: PortMapping[];
  protocol?: string;
  flow?: string;
  type?: string;
  detect: boolean;
  maxRecordBytes: number;
  maxFlows: number;
  maxOutOfOrderBytes: number;
  stats?: boolean;
}

/** Reads a file that may still be growing (tcpdump -U -w FILE), until SIGINT or SIGTERM. */
async function* followFile(file: string): AsyncGenerator<Buffer> {
  let stop = false;
  const onSignal = () => {
    stop = true;
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  let handle: fs.promises.FileHandle;
  try {
    handle = await fs.promises.open(file, 'r');
  } catch (err) {
    throw new CliError('ERR_READ', `cannot read ${file}: ${(err as Error).message}`);
  }
  const buf = Buffer.allocUnsafe(1 << 20);
  let position = 0;
  try {
    while (!stop) {
      const { bytesRead } = await handle.read(buf, 0, buf.length, position);
      if (bytesRead > 0) {
        position += bytesRead;
        yield Buffer.from(buf.subarray(0, bytesRead));
      } else await new Promise((r) => setTimeout(r, 200));
    }
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    await handle.close();
  }
}

async function* chunksOf(source: string): AsyncGenerator<Buffer> {
  const stream = source === '-' ? process.stdin : fs.createReadStream(source, { highWaterMark: 1 << 20 });
  try {
    for await (const chunk of stream) yield chunk as Buffer;
  } catch (err) {
    throw new CliError(
      'ERR_READ',
      `cannot read ${source === '-' ? 'stdin' : source}: ${(err as Error).message}`,
    );
  }
}

export async function addInspectCommand(program: Command): Promise<void> {
  // Flow names that are no registered protocol's (a protocol's second flow, the transports).
  const extraNames = (await flowNames()).filter((n) => !registry.some((e) => e.name === n));
  const cmd = program
    .command('inspect')
    .description('decode a pcap/pcapng capture (or a live stream with --follow -) across every protocol')
    .argument('[file]', 'a pcap or pcapng file, or - for stdin')
    .option(
      '--json',
      'one JSON object per line: time, flow, transport, direction, protocol, message or error',
    )
    .option(
      '--follow',
      'keep reading: a file still being written, or a live stream on stdin (tcpdump -U -w - … | gamewire inspect --follow -)',
    )
    .option(
      '--port <port=protocol>',
      'map a port to a protocol (repeatable): 40000=js5, 5000/udp=nox-relay',
      parsePortMapping,
      [],
    )
    .option(
      '--protocol <list>',
      `only these protocols (comma-separated: the names of \`gamewire protocols\`${extraNames.map((n) => `, ${n}`).join('')})`,
    )
    .option('--flow <flow>', 'only this flow: its label, one endpoint (host:port) or a port')
    .option('--type <list>', 'only these message types (comma-separated; "error" for decode failures)');
  // Each protocol's own decoder flags (`--rmc-variant`, …), declared in its folder.
  const decoderOptions = await addDecoderFlags(cmd, 'inspectFlags');
  cmd
    .option('--no-detect', 'do not guess protocols from content for flows on unmapped ports')
    .option('--max-record-bytes <n>', 'largest capture record accepted', parseIntOption, 1 << 20)
    .option('--max-flows <n>', 'flows tracked at once', parseIntOption, 65_536)
    .option(
      '--max-out-of-order-bytes <n>',
      'TCP bytes held out of order per direction',
      parseIntOption,
      4 << 20,
    )
    .option('--stats', 'print a summary (packets, flows, messages, errors) on stderr at the end')
    .action(async (file: string | undefined, flags: InspectFlags) => {
      const source = file ?? (flags.follow === true ? '-' : undefined);
      if (source === undefined) throw new UsageError('give a capture FILE, or - for stdin');
      const decoder = decoderOptions(flags as unknown as Record<string, unknown>);
      const known = await flowNames();
      for (const m of flags.port) checkFlowName(m.protocol, known);
      const protocols = list(flags.protocol);
      for (const p of protocols ?? []) checkFlowName(p, known);
      const filter: RecordFilter = {};
      if (protocols !== undefined) filter.protocols = protocols;
      if (flags.flow !== undefined) filter.flow = flags.flow;
      const types = list(flags.type);
      if (types !== undefined) filter.types = types;
      // `gamewire inspect big.pcap | head`: a closed pipe ends the run quietly.
      process.stdout.on('error', (err: NodeJS.ErrnoException) => {
        if (err.code === 'EPIPE') process.exit(0);
        throw err;
      });
      const width = process.stdout.isTTY ? (process.stdout.columns ?? 200) : 400;
      const print = (r: InspectRecord): void => {
        if (!accepts(r, filter)) return;
        process.stdout.write(`${flags.json ? JSON.stringify(recordJson(r)) : tableLine(r, width)}\n`);
      };
      const chunks = flags.follow === true && source !== '-' ? followFile(source) : chunksOf(source);
      const stats = await inspectChunks(chunks, print, {
        ports: flags.port,
        detect: flags.detect,
        maxFlows: flags.maxFlows,
        capture: { maxRecordBytes: flags.maxRecordBytes },
        tcp: { maxOutOfOrderBytes: flags.maxOutOfOrderBytes },
        decoder,
      });
      if (flags.stats) process.stderr.write(`${JSON.stringify({ stats })}\n`);
    });
}

export async function addDissectorCommand(program: Command): Promise<void> {
  const cmd = program
    .command('dissector')
    .description('write Wireshark Lua dissectors for every protocol, generated from the message declarations')
    .requiredOption('--out <dir>', 'folder to write the .lua files into (created if missing)');
  // Each protocol's own dissector flags, declared in its folder.
  const dissectorOptions = await addDecoderFlags(cmd, 'dissectorFlags');
  cmd.action(async (flags: { out: string }) => {
    const dissectors = await generateDissectors(
      dissectorOptions(flags as unknown as Record<string, unknown>),
    );
    try {
      fs.mkdirSync(flags.out, { recursive: true });
      for (const d of dissectors) {
        const file = path.join(flags.out, d.file);
        fs.writeFileSync(file, d.lua);
        process.stdout.write(`${file}\n`);
      }
    } catch (err) {
      throw new CliError('ERR_WRITE', `cannot write the dissectors: ${(err as Error).message}`);
    }
  });
}
