/**
 * JS5: the RuneScape cache download protocol and on-disk cache. See docs/js5.md.
 */
import fs from 'node:fs';
import path from 'node:path';
import cliProgress from 'cli-progress';
import type { Command } from 'commander';
import { CliError, parseIntOption, UsageError } from '../../cli/errors.js';
import type { ProtocolModule } from '../../core/protocol.js';
import type { RunningServer, ServerContext } from '../../core/server.js';
import { cacheInfo, countGroups, verifyCache } from './cache/cache.js';
import { createDemoCache } from './cache/demo.js';
import { MASTER_INDEX_FORMATS, type MasterIndexFormat } from './cache/master-index.js';
import { openStore } from './cache/store.js';
import { downloadCache } from './client.js';
import { js5Codec, js5ContainerCodec, js5IndexCodec, js5MasterIndexCodec } from './codec.js';
import { PROFILE_NAMES, PROFILES, parseProfile } from './profiles.js';
import { Js5Server, MIN_SLICE_BYTES, type MissingGroupBehaviour } from './server.js';

export { CacheWriter, cacheInfo, readArchiveIndex, verifyCache } from './cache/cache.js';
export { decodeContainer, encodeContainer, splitTrailer } from './cache/container.js';
export { createDemoCache, createSyntheticCache } from './cache/demo.js';
export { packGroup, unpackGroup } from './cache/group.js';
export { nameHash, readIndex, writeIndex } from './cache/js5-index.js';
export {
  createMasterIndex,
  masterIndexContainer,
  readMasterIndex,
  writeMasterIndex,
} from './cache/master-index.js';
export {
  createStore,
  DiskStore,
  FlatFileStore,
  openStore,
  StoreCorruptError,
  StoreReadError,
} from './cache/store.js';
export { downloadCache, Js5Client, Js5HandshakeError } from './client.js';
export { framedLength, frameResponse, unframeResponse, xorInPlace } from './framing.js';
export { PROFILES } from './profiles.js';
export { Js5Server } from './server.js';

const DEMO_DIR = 'js5-demo-cache';

/** Opens `dir` as a cache, creating the demo cache there first when `demo` and it is absent. */
function ensureDemo(dir: string): void {
  const marker = path.join(dir, 'main_file_cache.idx255');
  if (fs.existsSync(marker)) return;
  // A half-built demo (interrupted run) is rebuilt from scratch.
  fs.rmSync(dir, { recursive: true, force: true });
  const tmp = `${dir}.tmp-${process.pid}`;
  fs.rmSync(tmp, { recursive: true, force: true });
  createDemoCache(tmp, { kind: 'disk' });
  fs.renameSync(tmp, dir);
}

function masterFormat(value: unknown): MasterIndexFormat {
  const f = String(value) as MasterIndexFormat;
  if (!MASTER_INDEX_FORMATS.includes(f))
    throw new UsageError(`master index format must be one of ${MASTER_INDEX_FORMATS.join(', ')}`);
  return f;
}

async function start(options: Record<string, unknown>, ctx: ServerContext): Promise<RunningServer> {
  const profile = parseProfile(options.profile ?? '530');
  const build = options.build === undefined ? PROFILES[profile].defaultBuild : Number(options.build);
  const sliceBytes = Number(options.js5SliceBytes ?? 16 * 1024);
  if (!Number.isInteger(sliceBytes) || sliceBytes < MIN_SLICE_BYTES) {
    throw new UsageError(`--js5-slice-bytes takes an integer of at least ${MIN_SLICE_BYTES}`);
  }
  let dir = options.cache as string | undefined;
  if (dir === undefined) {
    dir = path.join(ctx.dataDir, DEMO_DIR);
    fs.mkdirSync(ctx.dataDir, { recursive: true });
    ensureDemo(dir);
    ctx.log.info({ dir }, 'serving the demo cache');
  }
  const missing = String(options.missingGroup ?? 'close');
  if (missing !== 'close' && missing !== 'drop') throw new UsageError('--missing-group takes close or drop');
  const server = new Js5Server({
    host: String(options.host ?? '0.0.0.0'),
    port: Number(options.port ?? 43594),
    store: openStore(dir),
    profile,
    build,
    ...(options.js5MasterIndex === undefined
      ? {}
      : { masterIndexFormat: masterFormat(options.js5MasterIndex) }),
    maxClients: Number(options.js5MaxClients ?? 1000),
    maxPerIp: Number(options.js5MaxPerIp ?? 0),
    missingGroup: missing as MissingGroupBehaviour,
    sliceBytes,
    cacheBytes: Number(options.js5CacheMb ?? 64) * 1024 * 1024,
    preload: options.preload === true,
    preloadMaxBytes: Number(options.js5PreloadMaxMb ?? 1024) * 1024 * 1024,
    log: ctx.log,
    metrics: ctx.metrics,
  });
  await server.listen();
  if (server.responses.groups === 0) ctx.log.warn({ dir }, 'the js5 cache has no indexed groups');
  return {
    endpoints: [
      {
        transport: 'tcp',
        host: String(options.host ?? '0.0.0.0'),
        port: server.port,
        description: `JS5 (profile ${profile}, build ${build}, ${server.responses.groups} groups)`,
      },
    ],
    close: () => server.close(),
  };
}

function progressBar(label: string): cliProgress.SingleBar {
  return new cliProgress.SingleBar(
    {
      stream: process.stderr,
      format: `${label} [{bar}] {percentage}% {value}/{total} groups`,
      hideCursor: true,
    },
    cliProgress.Presets.shades_classic,
  );
}

function storeOrFail(dir: string) {
  try {
    return openStore(dir);
  } catch (e) {
    throw new CliError('ERR_JS5_NO_CACHE', (e as Error).message);
  }
}

function registerCommands(program: Command): void {
  const js5 = program.command('js5').description('JS5 cache tools and downloader');
  const cache = js5.command('cache').description('inspect, check and create JS5 caches');

  cache
    .command('create-demo')
    .description('build a synthetic cache (several archives, marker-boundary sizes, mixed compression)')
    .argument('<dir>', 'where to create it')
    .option('--flat', 'write a flat-file store (<archive>/<group>.dat) instead of dat2/idx')
    .action((dir: string, opts: { flat?: boolean }) => {
      if (fs.existsSync(dir) && fs.readdirSync(dir).length > 0)
        throw new UsageError(`${dir} exists and is not empty`);
      const summary = createDemoCache(dir, { kind: opts.flat === true ? 'flat' : 'disk' });
      process.stdout.write(`${JSON.stringify(summary)}\n`);
    });

  cache
    .command('verify')
    .description('check the CRC and version of every group against its index')
    .argument('<dir>', 'cache folder (dat2/idx or flat files)')
    .action((dir: string) => {
      const store = storeOrFail(dir);
      try {
        const bar = progressBar('verify');
        bar.start(countGroups(store), 0);
        const result = verifyCache(store, () => bar.increment());
        bar.stop();
        process.stdout.write(`${JSON.stringify({ ok: result.problems.length === 0, ...result })}\n`);
        if (result.problems.length > 0) {
          throw new CliError('ERR_JS5_VERIFY', `${result.problems.length} group(s) failed verification`);
        }
      } finally {
        store.close();
      }
    });

  cache
    .command('info')
    .description('print a summary of a cache')
    .argument('<dir>', 'cache folder')
    .action((dir: string) => {
      const store = storeOrFail(dir);
      try {
        process.stdout.write(`${JSON.stringify(cacheInfo(store))}\n`);
      } finally {
        store.close();
      }
    });

  js5
    .command('download')
    .description('download a whole cache from a JS5 server (resumes where a previous run stopped)')
    .requiredOption('--out <dir>', 'cache folder to write')
    .option('--host <host>', 'server address', '127.0.0.1')
    .option('--port <port>', 'server port', parseIntOption, 43594)
    .option('--profile <profile>', `client family: ${PROFILE_NAMES.join(', ')}`, '530')
    .option('--build <n>', "client build (default: the profile's)", parseIntOption)
    .option('--xor <key>', 'ask for XOR-encoded responses with this key (1-255)', parseIntOption)
    .option('--flat', 'write a flat-file store instead of dat2/idx')
    .option(
      '--master-index <format>',
      "master index format: original, versioned or digests (default: the profile's)",
    )
    .action(
      async (opts: {
        out: string;
        host: string;
        port: number;
        profile: string;
        build?: number;
        xor?: number;
        flat?: boolean;
        masterIndex?: string;
      }) => {
        let profile: ReturnType<typeof parseProfile>;
        try {
          profile = parseProfile(opts.profile);
        } catch (e) {
          throw new UsageError((e as Error).message);
        }
        if (opts.xor !== undefined && opts.xor > 255) throw new UsageError('--xor takes 0..255');
        const bar = progressBar('download');
        try {
          const summary = await downloadCache({
            host: opts.host,
            port: opts.port,
            profile,
            build: opts.build ?? PROFILES[profile].defaultBuild,
            xorKey: opts.xor ?? 0,
            ...(opts.masterIndex === undefined ? {} : { masterIndexFormat: masterFormat(opts.masterIndex) }),
            out: opts.out,
            kind: opts.flat === true ? 'flat' : 'disk',
            onTotal: (total) => bar.start(total, 0),
            onProgress: (done) => bar.update(done),
          });
          bar.stop();
          process.stdout.write(`${JSON.stringify(summary)}\n`);
        } catch (e) {
          bar.stop();
          if (e instanceof CliError) throw e;
          throw new CliError((e as { code?: string }).code ?? 'ERR_JS5_DOWNLOAD', (e as Error).message);
        }
      },
    );
}

export const js5: ProtocolModule = {
  name: 'js5',
  summary: 'RuneScape JS5 cache download protocol (435, 530, OSRS) and on-disk cache',
  codecs: [js5Codec, js5ContainerCodec, js5IndexCodec, js5MasterIndexCodec],
  server: {
    summary: 'serves a dat2/idx or flat-file cache with fair, sliced scheduling',
    defaultPort: 43594,
    options: [
      {
        key: 'cache',
        flag: '--cache <dir>',
        description: 'js5: cache folder (default: a demo cache in the data dir)',
        type: 'string',
      },
      {
        key: 'build',
        flag: '--build <n>',
        description: "js5: accepted client build (default: the profile's)",
        type: 'int',
      },
      {
        key: 'profile',
        flag: '--profile <profile>',
        description: 'js5: 435, 530 or osrs',
        type: 'string',
        default: '530',
      },
      {
        key: 'preload',
        flag: '--preload',
        description: 'js5: frame every group into memory at start',
        type: 'bool',
      },
      {
        key: 'missingGroup',
        flag: '--missing-group <mode>',
        description: 'js5: close (default) or drop on a request for a missing group',
        type: 'string',
        default: 'close',
      },
      {
        key: 'js5MaxClients',
        flag: '--js5-max-clients <n>',
        description: 'js5: sessions before replying 7 (full)',
        type: 'int',
        default: 1000,
      },
      {
        key: 'js5CacheMb',
        flag: '--js5-cache-mb <n>',
        description: 'js5: memory for framed groups (MiB)',
        type: 'int',
        default: 64,
      },
      {
        key: 'js5SliceBytes',
        flag: '--js5-slice-bytes <n>',
        description: 'js5: bytes per client per scheduler turn (at least 512)',
        type: 'int',
        default: 16384,
      },
      {
        key: 'js5MaxPerIp',
        flag: '--js5-max-per-ip <n>',
        description: 'js5: sessions per address before replying 9 (0 = no limit)',
        type: 'int',
        default: 0,
      },
      {
        key: 'js5PreloadMaxMb',
        flag: '--js5-preload-max-mb <n>',
        description: 'js5: refuse --preload beyond this many MiB of framed groups',
        type: 'int',
        default: 1024,
      },
      {
        key: 'js5MasterIndex',
        flag: '--js5-master-index <format>',
        description: "js5: master index format: original, versioned or digests (default: the profile's)",
        type: 'string',
      },
    ],
    start,
  },
  registerCommands,
};
