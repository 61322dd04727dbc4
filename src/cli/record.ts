/**
 * `gamewire serve --record DIR` (rotating pcapng files of every server's traffic) and
 * `gamewire replay FILE --target HOST:PORT`.
 */

import fs from 'node:fs';
import type { Command } from 'commander';
import { setTrafficRecorder } from '../core/recording.js';
import { PcapngRecorder } from '../inspect/recorder.js';
import { replay } from '../inspect/replay.js';
import { CliError, connectFailure, parseIntOption, UsageError } from './errors.js';
import { addDecoderFlags, checkFlowName, flowNames, parsePortMapping } from './inspect.js';
import { writeOut } from './stdio.js';

/** The recording flags of `serve`. */
export function addRecordOptions(cmd: Command): void {
  cmd
    .option('--record <dir>', "write every server's traffic to rotating pcapng files in <dir>")
    .option(
      '--record-max-file-bytes <n>',
      'size of one recording file before the next starts',
      parseIntOption,
      64 << 20,
    )
    .option('--record-max-files <n>', 'recording files kept (the oldest is deleted)', parseIntOption, 10);
}

/** Installs the recorder when `--record` was given; returns what stops it. */
export function startRecording(flags: Record<string, unknown>): { close(): void } | undefined {
  if (flags.record === undefined) return undefined;
  const maxFileBytes = flags.recordMaxFileBytes as number;
  const maxFiles = flags.recordMaxFiles as number;
  if (maxFileBytes < 4096) throw new UsageError('--record-max-file-bytes takes at least 4096');
  if (maxFiles < 1) throw new UsageError('--record-max-files takes at least 1');
  let recorder: PcapngRecorder;
  try {
    recorder = new PcapngRecorder(String(flags.record), { maxFileBytes, maxFiles });
  } catch (err) {
    throw new CliError('ERR_RECORD', `cannot record into ${String(flags.record)}: ${(err as Error).message}`);
  }
  setTrafficRecorder(recorder);
  writeOut(`gamewire: recording into ${recorder.dir}\n`);
  return {
    close() {
      setTrafficRecorder(undefined);
      recorder.close();
    },
  };
}

function parseTarget(value: string): { host: string; port: number } {
  const m = /^(.+):(\d{1,5})$/.exec(value);
  if (m === null || Number(m[2]) > 65_535 || Number(m[2]) === 0)
    throw new UsageError(`--target takes HOST:PORT (port 1..65535), got "${value}"`);
  return { host: m[1]!.replace(/^\[(.*)\]$/, '$1'), port: Number(m[2]) };
}

type ReplayFlags = {
  target: string;
  port: any[];
  ignore?: string;
  compareAll?: boolean;
  pace: boolean;
  stepTimeoutMs: number;
} & Record<string, unknown>;

export async function addReplayCommand(program: Command): Promise<void> {
  const cmd = program
    .command('replay')
    .description(
      "play a recording's client side back to a server and report where its replies differ, field by field",
    )
    .argument('<file>', 'a pcap or pcapng capture (gamewire serve --record, tcpdump)')
    .requiredOption('--target <host:port>', 'the server to replay to')
    .option(
      '--port <port=protocol>',
      'map a port of the recording to a protocol (repeatable)',
      parsePortMapping,
      [],
    )
    .option(
      '--ignore <fields>',
      "field names never compared (comma-separated), on top of each protocol's server-made fields",
    )
    .option(
      '--compare-all',
      "compare every field exactly, server-made ones too (each protocol's replay defaults off)",
    )
    .option('--no-pace', 'send as soon as the replies are in, not as far apart as recorded')
    .option(
      '--step-timeout-ms <n>',
      "longest wait for the server's replies before each send",
      parseIntOption,
      2000,
    );
  // Each protocol's own decoder flags (`--rmc-variant`, …), declared in its folder.
  const decoderOptions = await addDecoderFlags(cmd, 'replayFlags');
  cmd.action(async (file: string, flags: ReplayFlags) => {
    const target = parseTarget(flags.target);
    const decoder = decoderOptions(flags);
    const known = await flowNames();
    for (const m of flags.port) checkFlowName(m.protocol, known);
    let capture: Buffer;
    try {
      capture = fs.readFileSync(file);
    } catch (err) {
      throw new CliError('ERR_READ', `cannot read ${file}: ${(err as Error).message}`);
    }
    const ignore = new Set(
      (flags.ignore ?? '')
        .split(',')
        .map((s) => s.trim())
        .filter((s) => s !== ''),
    );
    const result = await replay(capture, {
      host: target.host,
      port: target.port,
      stepTimeoutMs: flags.stepTimeoutMs,
      ignore,
      compareAll: flags.compareAll === true,
      pace: flags.pace,
      ports: flags.port,
      decoder,
    }).catch((err: unknown) => {
      // A target that cannot be reached (refused, a name that does not resolve): say which.
      const hint = connectFailure(err, flags.target, '--target');
      throw hint instanceof CliError ? hint : err;
    });
    for (const d of result.differences) process.stdout.write(`${JSON.stringify({ difference: d })}\n`);
    process.stderr.write(
      `${JSON.stringify({ replay: { flows: result.flows, messages: result.messages, differences: result.differences.length } })}\n`,
    );
    if (result.differences.length > 0) {
      throw new CliError(
        'ERR_REPLAY_DIFFERS',
        `${result.differences.length} difference(s) from the recording`,
      );
    }
  });
}
