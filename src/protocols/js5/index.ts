/**
 * JS5: the RuneScape cache download protocol and on-disk cache. See docs/js5.md.
 */

import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { defineServer } from '../../core/options.js';
import type { ProtocolModule } from '../../core/protocol.js';
import type { RunningServer } from '../../core/server.js';
import { js5Admin } from './admin.js';
import { createDemoCache, type DemoProfile } from './cache/demo.js';
import { openStore } from './cache/store.js';
import { registerCommands } from './cli.js';
import { js5Codec, js5ContainerCodec, js5IndexCodec, js5MasterIndexCodec } from './codec.js';
import { js5Options } from './options.js';
import { Js5Server } from './server.js';

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
export { type Js5Options, js5Options } from './options.js';
export { PROFILES } from './profiles.js';
export { Js5Server } from './server.js';

/**
 * Folder of the demo cache for a profile, inside the data dir. The name carries the layout
 * version, so a demo built by an older gamewire (7 archives, a hole at 5) is never served again.
 */
export function demoDirName(profile: DemoProfile): string {
  return `js5-demo-cache-${profile}-v2`;
}

/**
 * Creates the demo cache in `dir` unless a complete one is there. It is built in a folder of its
 * own and renamed into place whole, so `dir` never appears half built. Processes started together
 * on one data folder each build one: the first rename wins, a later one fails as the name is taken,
 * and every process then serves the one in place.
 */
function ensureDemo(dir: string, profile: DemoProfile): void {
  const marker = path.join(dir, 'main_file_cache.idx255');
  if (fs.existsSync(marker)) return;
  const tmp = `${dir}.tmp-${process.pid}-${randomBytes(4).toString('hex')}`;
  try {
    createDemoCache(tmp, { kind: 'disk', profile });
    for (let attempt = 1; ; attempt++) {
      try {
        fs.renameSync(tmp, dir);
        return;
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code ?? '';
        if (!['ENOTEMPTY', 'EEXIST', 'EPERM'].includes(code)) throw err;
        if (fs.existsSync(marker)) return;
        if (attempt === 2) throw err;
      }
      // A folder without the marker (a build in place that was interrupted) is replaced.
      fs.rmSync(dir, { recursive: true, force: true });
    }
  } finally {
    fs.rmSync(tmp, { recursive: true, force: true });
  }
}

export const js5Server = defineServer({
  summary: 'serves a dat2/idx or flat-file cache with fair, sliced scheduling',
  options: js5Options,
  async start(options, ctx): Promise<RunningServer> {
    const { profile, build } = options;
    let dir = options.cache;
    if (dir === undefined) {
      dir = path.join(ctx.dataDir, demoDirName(profile));
      fs.mkdirSync(ctx.dataDir, { recursive: true });
      ensureDemo(dir, profile);
      ctx.log.info({ dir, profile }, 'serving the demo cache');
    }
    const store = openStore(dir);
    const server = new Js5Server({ ...options, store, log: ctx.log, metrics: ctx.metrics });
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
