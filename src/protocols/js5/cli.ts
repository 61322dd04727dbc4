/**
 * `gamewire js5 …`: cache tools (create-demo, verify, info) and the downloader. Every failure is
 * one line that says what to do next; the progress bars load only when a command runs.
 */
import fs from 'node:fs';
import type { Command } from 'commander';
import {
  CommandError as CliError,
  connectFailure,
  parseIntOption,
  parsePortOption,
  UsageError,
} from '../../core/errors.js';
import { cacheInfo, countGroups, verifyCache } from './cache/cache.js';
import { createDemoCache, DEMO_ARCHIVES } from './cache/demo.js';
import { MASTER_INDEX_FORMATS, type MasterIndexFormat } from './cache/master-index.js';
import { openStore, type Store } from './cache/store.js';
import { downloadCache, Js5HandshakeError, probeServerBuild } from './client.js';
import { Js5Error } from './errors.js';
import { HandshakeStatus } from './messages.js';
import { type Js5Profile, PROFILE_NAMES, PROFILES, parseProfile } from './profiles.js';

/** A progress bar on stderr, only when stderr is a terminal (pipes and logs stay clean). */
async function progressBar(label: string): Promise<{
  start(total: number): void;
  update(done: number): void;
  stop(): void;
}> {
  if (!process.stderr.isTTY) return { start() {}, update() {}, stop() {} };
  const { default: cliProgress } = await import('cli-progress');
  const bar = new cliProgress.SingleBar(
    {
      stream: process.stderr,
      format: `${label} [{bar}] {percentage}% {value}/{total} groups`,
      hideCursor: true,
    },
    cliProgress.Presets.shades_classic,
  );
  return {
    start: (total) => bar.start(total, 0),
    update: (done) => bar.update(done),
    stop: () => bar.stop(),
  };
}

export function masterFormat(value: unknown): MasterIndexFormat {
  const f = String(value) as MasterIndexFormat;
  if (!MASTER_INDEX_FORMATS.includes(f))
    throw new UsageError(`master index format must be one of ${MASTER_INDEX_FORMATS.join(', ')}`);
  return f;
}

function profileOption(value: string): Js5Profile {
  try {
    return parseProfile(value);
  } catch (e) {
    throw new UsageError((e as Error).message);
  }
}

function storeOrFail(dir: string): Store {
  if (!fs.existsSync(dir)) {
    throw new CliError('ERR_JS5_NO_CACHE', `${dir} does not exist: pass the folder that holds the cache`);
  }
  if (!fs.statSync(dir).isDirectory()) {
    throw new CliError('ERR_JS5_NO_CACHE', `${dir} is not a folder: pass the folder that holds the cache`);
  }
  try {
    return openStore(dir);
  } catch (e) {
    throw new CliError('ERR_JS5_NO_CACHE', `cannot open the cache in ${dir}: ${(e as Error).message}`);
  }
}

/** Refuses a folder with no index at all: not a cache, or a download that wrote none yet. */
function noIndexes(dir: string, store: Store): CliError {
  const others = store.archives().filter((a) => a !== 255 && store.list(a).length > 0);
  return new CliError(
    'ERR_JS5_EMPTY_CACHE',
    others.length > 0
      ? `${dir} holds groups but no index (archive 255): an interrupted download? Run \`gamewire js5 download --out ${dir}\` again to finish it`
      : `${dir} holds no JS5 cache (no main_file_cache.dat2/idx255, no 255/ folder of indexes): pass a cache folder, or make one with \`gamewire js5 cache create-demo\``,
  );
}

function describeFailure(e: unknown, target: string): CliError {
  if (e instanceof CliError) return e;
  // A host that does not resolve: say which flag to fix, as the other client commands do.
  const hint = connectFailure((e as { cause?: unknown }).cause ?? e, target);
  if (hint instanceof CliError && /resolve/.test(hint.message))
    return new CliError('ERR_JS5_CONNECTION', hint.message);
  if (e instanceof Js5Error) return new CliError(e.code, e.message);
  const err = e as { code?: string; message?: string };
  return new CliError(err.code ?? 'ERR_JS5_DOWNLOAD', err.message ?? String(e));
}

export function registerCommands(program: Command): void {
  const js5 = program.command('js5').description('JS5 cache tools and downloader');
  const cache = js5.command('cache').description('inspect, check and create JS5 caches');

  cache
    .command('create-demo')
    .description(
      'build a synthetic cache laid out for a client family (every archive it expects; marker-boundary sizes, mixed compression)',
    )
    .argument('<dir>', 'where to create it')
    .option(
      '--profile <profile>',
      `client family: ${PROFILE_NAMES.map((p) => `${p} (${DEMO_ARCHIVES[p]} archives)`).join(', ')}`,
      profileOption,
      '530' as Js5Profile,
    )
    .option('--flat', 'write a flat-file store (<archive>/<group>.dat) instead of dat2/idx')
    .action((dir: string, opts: { flat?: boolean; profile: Js5Profile }) => {
      if (fs.existsSync(dir) && fs.readdirSync(dir).length > 0)
        throw new UsageError(`${dir} exists and is not empty: pass a new or empty folder`);
      const summary = createDemoCache(dir, {
        kind: opts.flat === true ? 'flat' : 'disk',
        profile: opts.profile,
      });
      process.stdout.write(`${JSON.stringify(summary)}\n`);
    });

  cache
    .command('verify')
    .description(
      'check the CRC and version of every group against its index (storedBytes: groups as stored, trailers included)',
    )
    .argument('<dir>', 'cache folder (dat2/idx or flat files)')
    .action(async (dir: string) => {
      const store = storeOrFail(dir);
      try {
        const total = countGroups(store);
        const bar = await progressBar('verify');
        bar.start(total);
        let done = 0;
        const result = verifyCache(store, () => bar.update(++done));
        bar.stop();
        if (result.archives === 0 && result.problems.length === 0 && result.unfinishedDownload === undefined)
          throw noIndexes(dir, store);
        const ok = result.problems.length === 0 && result.unfinishedDownload === undefined;
        process.stdout.write(`${JSON.stringify({ ok, ...result })}\n`);
        if (result.unfinishedDownload !== undefined) {
          const d = result.unfinishedDownload;
          throw new CliError(
            'ERR_JS5_INCOMPLETE',
            `${dir} holds a download from ${d.host}:${d.port} (started ${d.startedAt}) that did not finish: run \`gamewire js5 download --out ${dir}\` again to resume it`,
          );
        }
        if (result.problems.length > 0) {
          throw new CliError(
            'ERR_JS5_VERIFY',
            `${result.problems.length} bad index(es) or group(s), listed in "problems" (index problems have archive 255): \`gamewire serve js5\` serves every other group and answers these as missing; a downloaded cache is repaired by \`gamewire js5 download --out ${dir}\` run again`,
          );
        }
      } finally {
        store.close();
      }
    });

  cache
    .command('info')
    .description('print a summary of a cache (storedBytes: groups as stored, trailers included)')
    .argument('<dir>', 'cache folder')
    .action((dir: string) => {
      const store = storeOrFail(dir);
      try {
        const info = cacheInfo(store);
        if (info.archives.length === 0 && info.problems.length === 0) throw noIndexes(dir, store);
        process.stdout.write(`${JSON.stringify(info)}\n`);
      } finally {
        store.close();
      }
    });

  js5
    .command('download')
    .description('download a whole cache from a JS5 server (resumes where a previous run stopped)')
    .requiredOption('--out <dir>', 'cache folder to write')
    .option('--host <host>', 'server address', '127.0.0.1')
    .option('--port <port>', 'server port', parsePortOption, 43594)
    .option(
      '--profile <profile>',
      `client family: ${PROFILE_NAMES.join(', ')}`,
      profileOption,
      '530' as Js5Profile,
    )
    .option('--build <n>', "client build (default: the profile's)", parseIntOption)
    .option('--xor <key>', 'ask for XOR-encoded responses with this key (1-255)', parseIntOption)
    .option('--flat', 'write a flat-file store instead of dat2/idx')
    .option(
      '--timeout-ms <ms>',
      'give up when the server does not answer the handshake within this long (a request in flight: 30 s without a byte)',
      parseIntOption,
      10_000,
    )
    .option(
      '--master-index <format>',
      "master index format: original, versioned or digests (default: the profile's)",
    )
    .action(
      async (opts: {
        out: string;
        host: string;
        port: number;
        profile: Js5Profile;
        build?: number;
        xor?: number;
        flat?: boolean;
        masterIndex?: string;
        timeoutMs: number;
      }) => {
        if (opts.timeoutMs < 1) throw new UsageError('--timeout-ms takes at least 1');
        if (opts.xor !== undefined && opts.xor > 255) throw new UsageError('--xor takes 0..255');
        const build = opts.build ?? PROFILES[opts.profile].defaultBuild;
        const target = `${opts.host}:${opts.port}`;
        const bar = await progressBar('download');
        try {
          const summary = await downloadCache({
            host: opts.host,
            port: opts.port,
            profile: opts.profile,
            build,
            xorKey: opts.xor ?? 0,
            timeoutMs: opts.timeoutMs,
            ...(opts.masterIndex === undefined ? {} : { masterIndexFormat: masterFormat(opts.masterIndex) }),
            out: opts.out,
            kind: opts.flat === true ? 'flat' : 'disk',
            onTotal: (total) => bar.start(total),
            onProgress: (done) => bar.update(done),
          });
          bar.stop();
          process.stdout.write(`${JSON.stringify(summary)}\n`);
          if (summary.missing.length > 0) {
            const n = summary.missing.length;
            const some = summary.missing
              .slice(0, 5)
              .map((m) => `${m.archive}/${m.group}`)
              .join(', ');
            throw new CliError(
              'ERR_JS5_SERVER_MISSING',
              `${target} would not send ${n} group(s) its indexes list (${some}${n > 5 ? ', …' : ''}; all in "missing"): every other group is downloaded and ${opts.out} serves as a cache that lacks them; \`gamewire js5 download --host ${opts.host} --port ${opts.port} --out ${opts.out}\` run again asks for them again`,
            );
          }
        } catch (e) {
          bar.stop();
          if (e instanceof Js5HandshakeError && e.status === HandshakeStatus.outOfDate) {
            // Say which build the server wants: try each profile's default build.
            const expected = await probeServerBuild({ host: opts.host, port: opts.port });
            throw describeFailure(new Js5HandshakeError(e.status, build, expected), target);
          }
          throw describeFailure(e, target);
        }
      },
    );
}
