/**
 * JS5: the RuneScape cache download protocol and on-disk cache. See docs/js5.md.
 */

import fs from 'node:fs';
import path from 'node:path';
import { UsageError } from '../../core/errors.js';
import type { ProtocolModule } from '../../core/protocol.js';
import type { RunningServer, ServerContext } from '../../core/server.js';
import { js5Admin } from './admin.js';
import { createDemoCache, type DemoProfile } from './cache/demo.js';
import { MASTER_INDEX_FORMATS } from './cache/master-index.js';
import { openStore } from './cache/store.js';
import { masterFormat, registerCommands } from './cli.js';
import { js5Codec, js5ContainerCodec, js5IndexCodec, js5MasterIndexCodec } from './codec.js';
import { PROFILE_NAMES, PROFILES, parseProfile } from './profiles.js';
import {
  DEFAULT_MAX_HANDSHAKING,
  DEFAULT_MAX_INPUT_BYTES,
  DEFAULT_MAX_INPUT_BYTES_PER_IP,
  DEFAULT_TURNS_PER_IP,
  Js5Server,
  MIN_SLICE_BYTES,
  type MissingGroupBehaviour,
} from './server.js';

export { CacheWriter, cacheInfo, readArchiveIndex, verifyCache } from './cache/cache.js';
export { decodeContainer, encodeContainer, splitTrailer } from './cache/container.js';
export { createDemoCache, createSyntheticCache, DEMO_ARCHIVES } from './cache/demo.js';
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

import { protocolPageDir } from '../../core/admin/static.js';

export { downloadCache, Js5Client, Js5HandshakeError, probeServerBuild } from './client.js';
export { Js5Error } from './errors.js';
export { framedLength, frameResponse, unframeResponse, xorInPlace } from './framing.js';
export { PROFILES } from './profiles.js';
export { Js5Server } from './server.js';

/**
 * Folder of the demo cache for a profile, inside the data dir. The name carries the layout
 * version, so a demo built by an older gamewire (7 archives, a hole at 5) is never served again.
 */
export function demoDirName(profile: DemoProfile): string {
  return `js5-demo-cache-${profile}-v2`;
}

/** Creates the demo cache in `dir` unless a complete one is there. */
function ensureDemo(dir: string, profile: DemoProfile): void {
  const marker = path.join(dir, 'main_file_cache.idx255');
  if (fs.existsSync(marker)) return;
  // A half-built demo (interrupted run) is rebuilt from scratch.
  fs.rmSync(dir, { recursive: true, force: true });
  const tmp = `${dir}.tmp-${process.pid}`;
  fs.rmSync(tmp, { recursive: true, force: true });
  createDemoCache(tmp, { kind: 'disk', profile });
  fs.renameSync(tmp, dir);
}

/**
 * Keys renamed to the config naming rule (no protocol prefix) are still read under their former
 * names: a former key in a config file counts while the new key holds its default.
 */
const FORMER_KEYS: Readonly<Record<string, string>> = {
  sliceBytes: 'js5SliceBytes',
  masterIndex: 'js5MasterIndex',
  maxClients: 'js5MaxClients',
  maxPerIp: 'js5MaxPerIp',
  cacheMb: 'js5CacheMb',
  preloadMaxMb: 'js5PreloadMaxMb',
};

function opt(options: Record<string, unknown>, key: string): unknown {
  const former = FORMER_KEYS[key];
  const declared = js5.server!.options.find((o) => o.key === key);
  if (former !== undefined && options[former] !== undefined && options[key] === declared?.default) {
    return options[former];
  }
  return options[key];
}

function positive(value: unknown, flag: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) throw new UsageError(`${flag} takes a whole number of at least 1`);
  return n;
}

async function start(options: Record<string, unknown>, ctx: ServerContext): Promise<RunningServer> {
  const profile = parseProfile(options.profile ?? '530');
  const build = options.build === undefined ? PROFILES[profile].defaultBuild : Number(options.build);
  const sliceBytes = Number(opt(options, 'sliceBytes') ?? 16 * 1024);
  if (!Number.isInteger(sliceBytes) || sliceBytes < MIN_SLICE_BYTES) {
    throw new UsageError(`--js5-slice-bytes takes an integer of at least ${MIN_SLICE_BYTES}`);
  }
  let dir = options.cache as string | undefined;
  if (dir === undefined) {
    dir = path.join(ctx.dataDir, demoDirName(profile));
    fs.mkdirSync(ctx.dataDir, { recursive: true });
    ensureDemo(dir, profile);
    ctx.log.info({ dir, profile }, 'serving the demo cache');
  }
  const missing = String(options.missingGroup ?? 'close');
  if (missing !== 'close' && missing !== 'drop') throw new UsageError('--missing-group takes close or drop');
  const store = openStore(dir);
  const server = new Js5Server({
    host: String(options.host ?? '0.0.0.0'),
    port: Number(options.port ?? 43594),
    store,
    profile,
    build,
    ...(opt(options, 'masterIndex') === undefined
      ? {}
      : { masterIndexFormat: masterFormat(opt(options, 'masterIndex')) }),
    maxClients: Number(opt(options, 'maxClients') ?? 1000),
    ...(opt(options, 'maxPerIp') === undefined ? {} : { maxPerIp: Number(opt(options, 'maxPerIp')) }),
    turnsPerIp: Number(opt(options, 'turnsPerIp') ?? DEFAULT_TURNS_PER_IP),
    maxHandshaking: positive(
      opt(options, 'maxHandshaking') ?? DEFAULT_MAX_HANDSHAKING,
      '--js5-max-handshaking',
    ),
    handshakeTimeoutMs: positive(opt(options, 'handshakeTimeoutMs') ?? 10_000, '--js5-handshake-timeout-ms'),
    idleTimeoutMs: Number(opt(options, 'idleTimeoutMs') ?? 30_000),
    logIntervalMs: Number(opt(options, 'logIntervalMs') ?? 10_000),
    missingGroup: missing as MissingGroupBehaviour,
    sliceBytes,
    cacheBytes: Number(opt(options, 'cacheMb') ?? 64) * 1024 * 1024,
    preload: options.preload === true,
    preloadMaxBytes: Number(opt(options, 'preloadMaxMb') ?? 1024) * 1024 * 1024,
    maxInputBytes: Number(opt(options, 'maxInputBytes') ?? DEFAULT_MAX_INPUT_BYTES),
    maxInputBytesPerIp: Number(opt(options, 'maxInputBytesPerIp') ?? DEFAULT_MAX_INPUT_BYTES_PER_IP),
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
    admin: js5Admin(server, store),
    close: () => server.close(),
  };
}

export const js5: ProtocolModule = {
  name: 'js5',
  summary: 'RuneScape JS5 cache download protocol (435, 530, OSRS) and on-disk cache',
  codecs: [js5Codec, js5ContainerCodec, js5IndexCodec, js5MasterIndexCodec],
  conform: async () => (await import('./conform/index.js')).js5Conform,
  inspection: async () => (await import('./inspect.js')).inspection,
  dashboard: { dir: protocolPageDir(import.meta.url) },
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
        min: 0,
        flag: '--build <n>',
        description: "js5: accepted client build (default: the profile's)",
        type: 'int',
      },
      {
        key: 'profile',
        choices: PROFILE_NAMES,
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
        choices: ['close', 'drop'],
        flag: '--missing-group <mode>',
        description: 'js5: close (default) or drop on a request for a missing group',
        type: 'string',
        default: 'close',
      },
      {
        key: 'maxClients',
        min: 1,
        aliases: ['js5MaxClients'],
        flag: '--js5-max-clients <n>',
        description: 'js5: sessions before replying 7 (full)',
        type: 'int',
        default: 1000,
      },
      {
        key: 'cacheMb',
        min: 1,
        unit: 'MiB',
        aliases: ['js5CacheMb'],
        flag: '--js5-cache-mb <n>',
        description: 'js5: memory for framed groups (MiB)',
        type: 'int',
        default: 64,
      },
      {
        key: 'sliceBytes',
        min: MIN_SLICE_BYTES,
        unit: 'bytes',
        aliases: ['js5SliceBytes'],
        flag: '--js5-slice-bytes <n>',
        description: 'js5: bytes per client per scheduler turn (at least 512)',
        type: 'int',
        default: 16384,
      },
      {
        key: 'maxPerIp',
        min: 0,
        aliases: ['js5MaxPerIp'],
        flag: '--js5-max-per-ip <n>',
        description:
          'js5: connections per address, counted from accept; one more gets 9 (IP limit). 0 = no limit (behind a proxy). Default max(8, max-clients/4)',
        type: 'int',
      },
      {
        key: 'turnsPerIp',
        min: 0,
        flag: '--js5-turns-per-ip <n>',
        description:
          "js5: output turns the connections of one address share per round (a crowd behind one address gets that many players' bandwidth when the server is busy); 0 = one per connection",
        type: 'int',
        default: DEFAULT_TURNS_PER_IP,
      },
      {
        key: 'maxHandshaking',
        min: 1,
        flag: '--js5-max-handshaking <n>',
        description: 'js5: connections still in their handshake; one more closes the oldest of them',
        type: 'int',
        default: DEFAULT_MAX_HANDSHAKING,
      },
      {
        key: 'handshakeTimeoutMs',
        min: 1,
        unit: 'ms',
        flag: '--js5-handshake-timeout-ms <ms>',
        description: 'js5: close a connection that has not completed its handshake this long after accept',
        type: 'int',
        default: 10_000,
      },
      {
        key: 'logIntervalMs',
        min: 0,
        unit: 'ms',
        flag: '--js5-log-interval-ms <ms>',
        description:
          'js5: at most one info line per refusal reason (wrong build, full, IP limit, missing group) per this',
        type: 'int',
        default: 10_000,
      },
      {
        key: 'idleTimeoutMs',
        min: 0,
        unit: 'ms',
        flag: '--js5-idle-timeout-ms <ms>',
        description:
          'js5: close a session with no request for this long (keep-alives do not count; 0 = never)',
        type: 'int',
        default: 30_000,
      },
      {
        key: 'preloadMaxMb',
        min: 1,
        unit: 'MiB',
        aliases: ['js5PreloadMaxMb'],
        flag: '--js5-preload-max-mb <n>',
        description: 'js5: refuse --preload beyond this many MiB of framed groups',
        type: 'int',
        default: 1024,
      },
      {
        key: 'maxInputBytes',
        min: 1024,
        unit: 'bytes',
        flag: '--js5-max-input-bytes <n>',
        description:
          'js5: request bytes held across all connections (partial requests, requests behind a full queue)',
        type: 'int',
        default: DEFAULT_MAX_INPUT_BYTES,
      },
      {
        key: 'maxInputBytesPerIp',
        min: 0,
        unit: 'bytes',
        flag: '--js5-max-input-bytes-per-ip <n>',
        description:
          'js5: request bytes held for the connections of one address (0 = only the global budget)',
        type: 'int',
        default: DEFAULT_MAX_INPUT_BYTES_PER_IP,
      },
      {
        key: 'masterIndex',
        choices: MASTER_INDEX_FORMATS,
        aliases: ['js5MasterIndex'],
        flag: '--js5-master-index <format>',
        description: "js5: master index format: original, versioned or digests (default: the profile's)",
        type: 'string',
      },
    ],
    start,
  },
  registerCommands,
  load: async () => (await import('./load.js')).js5Load,
};
