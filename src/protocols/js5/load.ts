/**
 * `gamewire load js5`: clients that download a whole cache as the 530 client does. Each one
 * handshakes, fetches the master index and every archive index at urgent priority, then
 * prefetches every group with the profile's in-flight caps (20 + 20 for 530) while the "game"
 * asks for groups it needs now at urgent priority (an upgrade: the 530 client sends an urgent
 * request even while the prefetch of the same group is in flight, and keeps whichever answer
 * comes first). Every index and group is CRC-checked against the master index and its index.
 *
 * On a connection error it reconnects and asks again for everything not yet received, as
 * Js5NetQueue re-queues its in-flight requests onto a new socket; a group whose CRC does not
 * match is an integrity violation, after which it reconnects with a random XOR key as the 530
 * client does. After `--max-errors` errors in a row without a good group in between (reply 7 or
 * 9, a refused or dropped connection), the client gives up: the session fails.
 */
import { randomInt } from 'node:crypto';
import { UsageError } from '../../core/errors.js';
import {
  codeOf,
  type LoadClient,
  type LoadDefinition,
  type LoadRun,
  LoadUnfinished,
  pause,
} from '../../core/load/index.js';
import { decodeContainer } from './cache/container.js';
import { readIndex } from './cache/js5-index.js';
import { crc32, readMasterIndex } from './cache/master-index.js';
import { Js5Client } from './client.js';
import { Js5Error } from './errors.js';
import { type Js5Profile, PROFILE_NAMES, PROFILES } from './profiles.js';

/** The 435 and 530 clients connect to 43594; servers give the port. */
const DEFAULT_PORT = 43594;

interface Js5LoadOptions {
  profile: Js5Profile;
  build: number;
  urgentRate: number;
  maxErrors: number;
}

/** What every session downloads and checks: built once from the server's own indexes. */
interface CacheTable {
  masterCrc: number;
  /** Archive ids with an index, and each index's CRC from the master index. */
  archives: { archive: number; crc: number }[];
  /** Every group: archive, group id and CRC, flattened. */
  archive: Uint16Array;
  group: Uint16Array;
  crc: Int32Array;
  /** Group number by request key (archive << 16 | group). */
  byKey: Map<number, number>;
  bytes: number;
}

async function readTable(o: Js5LoadOptions, host: string, port: number): Promise<CacheTable> {
  const c = await Js5Client.connect({ host, port, build: o.build, profile: o.profile, timeoutMs: 10_000 });
  try {
    const masterContainer = await c.request(255, 255, true);
    const master = readMasterIndex(
      decodeContainer(masterContainer, 'none').data,
      PROFILES[o.profile].masterIndexFormat,
    );
    const archives: CacheTable['archives'] = [];
    const groups: { archive: number; group: number; crc: number }[] = [];
    let bytes = masterContainer.length;
    await Promise.all(
      master.entries.map(async (entry, archive) => {
        if (entry.checksum === 0 && entry.version === 0) return;
        const container = await c.request(255, archive, true);
        bytes += container.length;
        if (crc32(container) !== entry.checksum)
          throw new Js5Error('ERR_JS5_CRC', `index ${archive}: its crc does not match the master index`);
        archives.push({ archive, crc: entry.checksum });
        for (const g of readIndex(decodeContainer(container, 'none').data).groups)
          if (g.id <= 0xffff) groups.push({ archive, group: g.id, crc: g.checksum });
      }),
    );
    archives.sort((a, b) => a.archive - b.archive);
    groups.sort((a, b) => a.archive - b.archive || a.group - b.group);
    const table: CacheTable = {
      masterCrc: crc32(masterContainer),
      archives,
      archive: new Uint16Array(groups.map((g) => g.archive)),
      group: new Uint16Array(groups.map((g) => g.group)),
      crc: new Int32Array(groups.map((g) => g.crc)),
      byKey: new Map(groups.map((g, i) => [(g.archive << 16) | g.group, i])),
      bytes,
    };
    return table;
  } finally {
    await c.close();
  }
}

/** The connection ended in a way the 530 client handles by reconnecting with a new XOR key. */
class CrcMismatch extends Js5Error {
  constructor(what: string) {
    super('ERR_JS5_CRC', `${what}: the crc does not match`);
  }
}

async function prepare(run: LoadRun) {
  const raw = run.options;
  const profile = raw.profile as Js5Profile;
  const o: Js5LoadOptions = {
    profile,
    build: (raw.build as number | undefined) ?? PROFILES[profile].defaultBuild,
    urgentRate: raw.urgentRate as number,
    maxErrors: raw.maxErrors as number,
  };
  const target = run.settings.target;
  if (target === undefined) throw new UsageError('gamewire load js5 needs --target HOST:PORT');
  const table = await readTable(o, target.host, target.port);
  const total = table.crc.length;
  const { stats } = run;
  const join = stats.latency('join');
  const urgentLatency = stats.latency('group');
  const download = stats.latency('download');
  const groupsDone = stats.counter('groups');
  const upgrades = stats.counter('upgrades');
  const twice = stats.counter('answeredTwice');
  const downloads = stats.counter('downloads');
  const reconnects = stats.counter('reconnects');
  const indexes = stats.counter('indexes');

  const session = async (client: LoadClient): Promise<void> => {
    const done = new Uint8Array(total);
    let remaining = total;
    let haveIndexes = false;
    let errors = 0;
    let xorKey = 0;
    let joined = false;
    const started = performance.now();
    let conn: Js5Client | undefined;
    const onStop = () => conn?.socket.destroy();
    client.signal.addEventListener('abort', onStop, { once: true });

    /** One connection's work: resolves when every group is in, rejects when the connection fails. */
    const over = (c: Js5Client): Promise<void> =>
      new Promise<void>((resolve, reject) => {
        let failed = false;
        let counted = 0;
        const fail = (err: unknown) => {
          if (failed) return;
          failed = true;
          clearInterval(upgrader);
          reject(err);
        };
        const countBytes = () => {
          stats.bytesIn.add(c.bytesReceived - counted);
          counted = c.bytesReceived;
        };
        const got = (i: number, container: Buffer) => {
          if (failed) return;
          countBytes();
          if (crc32(container) !== table.crc[i]) {
            stats.violation(
              'crc_mismatch',
              `group ${table.archive[i]}/${table.group[i]} from session ${client.index}`,
            );
            fail(new CrcMismatch(`group ${table.archive[i]}/${table.group[i]}`));
            return;
          }
          if (done[i] === 1) {
            twice.add();
            return;
          }
          done[i] = 1;
          remaining--;
          errors = 0;
          groupsDone.add();
          if (remaining === 0) {
            clearInterval(upgrader);
            resolve();
          }
        };
        const requestGroup = (i: number, urgent: boolean) => {
          const asked = performance.now();
          c.request(table.archive[i]!, table.group[i]!, urgent).then((container) => {
            if (urgent) urgentLatency.record(performance.now() - asked);
            got(i, container);
          }, fail);
        };
        /** The game needs a group now: one not here yet, asked for urgently. */
        const upgrade = (i: number) => {
          let n = 0;
          for (; n < total && done[i] === 1; n++) i = (i + 1) % total;
          if (done[i] === 1) return -1;
          upgrades.add();
          requestGroup(i, true);
          return i;
        };
        const upgrader =
          o.urgentRate > 0
            ? setInterval(() => {
                if (remaining === 0 || failed) return;
                upgrade(randomInt(total));
              }, 1000 / o.urgentRate)
            : undefined;
        const start = async () => {
          if (!haveIndexes) {
            const master = await c.request(255, 255, true);
            if (crc32(master) !== table.masterCrc) {
              stats.violation('crc_mismatch', `master index from session ${client.index}`);
              throw new CrcMismatch('master index');
            }
            await Promise.all(
              table.archives.map(async ({ archive, crc }) => {
                const index = await c.request(255, archive, true);
                if (crc32(index) !== crc) {
                  stats.violation('crc_mismatch', `index ${archive} from session ${client.index}`);
                  throw new CrcMismatch(`index ${archive}`);
                }
                indexes.add();
              }),
            );
            countBytes();
            haveIndexes = true;
          }
          if (remaining === 0) {
            clearInterval(upgrader);
            resolve();
            return;
          }
          // As the game does on entering a region: one group it needs at once, asked for urgently
          // before the prefetch list (so every connection with work left makes an upgrade, however
          // fast the server answers), the one furthest down the prefetch order.
          const first = o.urgentRate > 0 ? upgrade(total - 1) : -1;
          // Everything else not here yet, in order; the client keeps 20 in flight and queues the rest.
          for (let i = 0; i < total; i++) if (done[i] === 0 && i !== first) requestGroup(i, false);
        };
        start().catch(fail);
      });

    try {
      while (remaining > 0 || !haveIndexes) {
        if (client.signal.aborted) throw new LoadUnfinished();
        const connectStarted = performance.now();
        try {
          conn = await Js5Client.connect({
            host: target.host,
            port: target.port,
            build: o.build,
            profile: o.profile,
            xorKey,
            ...(client.localAddress === undefined ? {} : { localAddress: client.localAddress }),
          });
          if (!joined) {
            joined = true;
            join.record(performance.now() - connectStarted);
            client.joined();
          }
          if (client.signal.aborted) throw new LoadUnfinished();
          await over(conn);
        } catch (err) {
          if (client.signal.aborted) throw new LoadUnfinished();
          errors++;
          // The last error fails the session (the runner counts it); earlier ones are steps it survived.
          if (errors >= o.maxErrors) throw err;
          stats.error(codeOf(err), (err as Error).message);
          if (err instanceof CrcMismatch) xorKey = randomInt(1, 256);
          reconnects.add();
          // 0.5 s, 1 s, 2 s, … at most 8 s between tries.
          await pause(Math.min(8000, 500 * 2 ** (errors - 1)), client.signal);
        } finally {
          conn?.socket.destroy();
          conn = undefined;
        }
      }
      download.record(performance.now() - started);
      downloads.add();
    } finally {
      client.signal.removeEventListener('abort', onStop);
    }
  };

  return { session };
}

export const js5Load: LoadDefinition = {
  summary:
    'clients downloading the whole cache as the 530 client does (prefetch, urgent upgrades, reconnects)',
  clientNoun: 'download',
  defaultPort: DEFAULT_PORT,
  options: [
    {
      flag: '--profile <name>',
      key: 'profile',
      description: 'client family: 435, 530 or osrs (in-flight caps, master index format, handshake)',
      type: 'string',
      choices: PROFILE_NAMES,
      default: '530',
    },
    {
      flag: '--build <n>',
      key: 'build',
      description: "build sent in the handshake (default: the profile's)",
      type: 'int',
      min: 1,
      max: 0x7fffffff,
    },
    {
      flag: '--urgent-rate <per-second>',
      key: 'urgentRate',
      description: 'urgent requests per second per client for groups not downloaded yet (0: prefetch only)',
      type: 'number',
      min: 0,
      max: 1000,
      default: 2,
    },
    {
      flag: '--max-errors <n>',
      key: 'maxErrors',
      description: 'errors in a row (refusals, dropped connections) before a client gives up',
      type: 'int',
      min: 1,
      max: 1000,
      default: 4,
    },
  ],
  progress: { rates: ['groups', 'downloads'], latencies: ['group'] },
  prepare,
};
