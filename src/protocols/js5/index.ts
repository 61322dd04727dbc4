/**
 * JS5: the RuneScape cache download protocol and on-disk cache. See docs/js5.md.
 */

import fs from 'node:fs';
import path from 'node:path';
import { defineServer, option } from '../../core/options.js';
import type { ProtocolModule } from '../../core/protocol.js';
import type { RunningServer } from '../../core/server.js';
import { js5Admin } from './admin.js';
import { createDemoCache, type DemoProfile } from './cache/demo.js';
import { MASTER_INDEX_FORMATS } from './cache/master-index.js';
import { openStore } from './cache/store.js';
import { registerCommands } from './cli.js';
import { js5Codec, js5ContainerCodec, js5IndexCodec, js5MasterIndexCodec } from './codec.js';
import { PROFILE_NAMES, PROFILES } from './profiles.js';
import {
  DEFAULT_MAX_HANDSHAKING,
  DEFAULT_MAX_INPUT_BYTES,
  DEFAULT_MAX_INPUT_BYTES_PER_IP,
  DEFAULT_TURNS_PER_IP,
  Js5Server,
  MIN_SLICE_BYTES,
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
 * `gamewire serve js5`'s options, declared once: flag, config key (with the former names it is
 * still read under), checks, default and the type `start()` receives. Defaults left out (`build`,
 * `maxPerIp`, `masterIndex`) are the profile's or the server's own.
 */
const JS5_OPTIONS = {
  cache: option.string({
    flag: '--cache <dir>',
    description: 'js5: cache folder (default: a demo cache in the data dir)',
  }),
  build: option.int({
    min: 0,
    flag: '--build <n>',
    description: "js5: accepted client build (default: the profile's)",
  }),
  profile: option.string({
    choices: PROFILE_NAMES,
    flag: '--profile <profile>',
    description: 'js5: 435, 530 or osrs',
    default: '530',
  }),
  preload: option.bool({
    flag: '--preload',
    description: 'js5: frame every group into memory at start',
  }),
  missingGroup: option.string({
    choices: ['close', 'drop'],
    flag: '--missing-group <mode>',
    description: 'js5: close (default) or drop on a request for a missing group',
    default: 'close',
  }),
  maxClients: option.int({
    min: 1,
    aliases: ['js5MaxClients'],
    flag: '--js5-max-clients <n>',
    description: 'js5: sessions before replying 7 (full)',
    default: 1000,
  }),
  cacheMb: option.int({
    min: 1,
    unit: 'MiB',
    aliases: ['js5CacheMb'],
    flag: '--js5-cache-mb <n>',
    description: 'js5: memory for framed groups (MiB)',
    default: 64,
  }),
  sliceBytes: option.int({
    min: MIN_SLICE_BYTES,
    unit: 'bytes',
    aliases: ['js5SliceBytes'],
    flag: '--js5-slice-bytes <n>',
    description: 'js5: bytes per client per scheduler turn (at least 512)',
    default: 16384,
  }),
  maxPerIp: option.int({
    min: 0,
    aliases: ['js5MaxPerIp'],
    flag: '--js5-max-per-ip <n>',
    description:
      'js5: connections per address, counted from accept; one more gets 9 (IP limit). 0 = no limit (behind a proxy). Default max(8, max-clients/4)',
  }),
  turnsPerIp: option.int({
    min: 0,
    flag: '--js5-turns-per-ip <n>',
    description:
      "js5: output turns the connections of one address share per round (a crowd behind one address gets that many players' bandwidth when the server is busy); 0 = one per connection",
    default: DEFAULT_TURNS_PER_IP,
  }),
  maxHandshaking: option.int({
    min: 1,
    flag: '--js5-max-handshaking <n>',
    description: 'js5: connections still in their handshake; one more closes the oldest of them',
    default: DEFAULT_MAX_HANDSHAKING,
  }),
  handshakeTimeoutMs: option.int({
    min: 1,
    unit: 'ms',
    flag: '--js5-handshake-timeout-ms <ms>',
    description: 'js5: close a connection that has not completed its handshake this long after accept',
    default: 10_000,
  }),
  logIntervalMs: option.int({
    min: 0,
    unit: 'ms',
    flag: '--js5-log-interval-ms <ms>',
    description:
      'js5: at most one info line per refusal reason (wrong build, full, IP limit, missing group) per this',
    default: 10_000,
  }),
  idleTimeoutMs: option.int({
    min: 0,
    unit: 'ms',
    flag: '--js5-idle-timeout-ms <ms>',
    description: 'js5: close a session with no request for this long (keep-alives do not count; 0 = never)',
    default: 30_000,
  }),
  preloadMaxMb: option.int({
    min: 1,
    unit: 'MiB',
    aliases: ['js5PreloadMaxMb'],
    flag: '--js5-preload-max-mb <n>',
    description: 'js5: refuse --preload beyond this many MiB of framed groups',
    default: 1024,
    requires: 'preload',
    requiresWhy: 'it only bounds what --preload frames',
  }),
  maxInputBytes: option.int({
    min: 1024,
    unit: 'bytes',
    flag: '--js5-max-input-bytes <n>',
    description:
      'js5: request bytes held across all connections (partial requests, requests behind a full queue)',
    default: DEFAULT_MAX_INPUT_BYTES,
  }),
  maxInputBytesPerIp: option.int({
    min: 0,
    unit: 'bytes',
    flag: '--js5-max-input-bytes-per-ip <n>',
    description: 'js5: request bytes held for the connections of one address (0 = only the global budget)',
    default: DEFAULT_MAX_INPUT_BYTES_PER_IP,
  }),
  masterIndex: option.string({
    choices: MASTER_INDEX_FORMATS,
    aliases: ['js5MasterIndex'],
    flag: '--js5-master-index <format>',
    description: "js5: master index format: original, versioned or digests (default: the profile's)",
  }),
};

const MIB = 1024 * 1024;

export const js5Server = defineServer({
  summary: 'serves a dat2/idx or flat-file cache with fair, sliced scheduling',
  defaultPort: 43594,
  options: JS5_OPTIONS,
  async start(options, ctx): Promise<RunningServer> {
    const { profile } = options;
    const build = options.build ?? PROFILES[profile].defaultBuild;
    let dir = options.cache;
    if (dir === undefined) {
      dir = path.join(ctx.dataDir, demoDirName(profile));
      fs.mkdirSync(ctx.dataDir, { recursive: true });
      ensureDemo(dir, profile);
      ctx.log.info({ dir, profile }, 'serving the demo cache');
    }
    const store = openStore(dir);
    const server = new Js5Server({
      host: options.host,
      port: options.port,
      store,
      profile,
      build,
      ...(options.masterIndex === undefined ? {} : { masterIndexFormat: options.masterIndex }),
      maxClients: options.maxClients,
      ...(options.maxPerIp === undefined ? {} : { maxPerIp: options.maxPerIp }),
      turnsPerIp: options.turnsPerIp,
      maxHandshaking: options.maxHandshaking,
      handshakeTimeoutMs: options.handshakeTimeoutMs,
      idleTimeoutMs: options.idleTimeoutMs,
      logIntervalMs: options.logIntervalMs,
      missingGroup: options.missingGroup,
      sliceBytes: options.sliceBytes,
      cacheBytes: options.cacheMb * MIB,
      preload: options.preload,
      preloadMaxBytes: options.preloadMaxMb * MIB,
      maxInputBytes: options.maxInputBytes,
      maxInputBytesPerIp: options.maxInputBytesPerIp,
      log: ctx.log,
      metrics: ctx.metrics,
    });
    await server.listen();
    if (server.responses.groups === 0) ctx.log.warn({ dir }, 'the js5 cache has no indexed groups');
    return {
      endpoints: [
        {
          transport: 'tcp',
          host: options.host,
          port: server.port,
          description: `JS5 (profile ${profile}, build ${build}, ${server.responses.groups} groups)`,
        },
      ],
      admin: js5Admin(server, store),
      close: () => server.close(),
    };
  },
});

export const js5: ProtocolModule = {
  name: 'js5',
  summary: 'RuneScape JS5 cache download protocol (435, 530, OSRS) and on-disk cache',
  codecs: [js5Codec, js5ContainerCodec, js5IndexCodec, js5MasterIndexCodec],
  conform: async () => (await import('./conform/index.js')).js5Conform,
  inspection: async () => (await import('./inspect.js')).inspection,
  dashboard: { dir: protocolPageDir(import.meta.url) },
  server: js5Server,
  registerCommands,
  load: async () => (await import('./load.js')).js5Load,
};
