/**
 * The JS5 conformance checks: each one a rule read from a real client (the 530 client in
 * Pazaz/RT4-Client, the 435 client in runejs/refactored-client-435, Old School in runelite's
 * deobfuscated client) or a real server's handling (openrs2), run over raw sockets.
 */
import type { CheckRun, CheckSource, ConformCheck } from '../../../core/conform.js';
import { CheckFailure, CheckSkip } from '../../../core/conform.js';
import { crc32 } from '../cache/master-index.js';
import { containerCrc, type IndexDownload, type Js5ConformContext, needs } from './context.js';
import { Js5Peer, key, markerFailure, requestBytes, type WireResponse } from './peer.js';

type Check = ConformCheck<Js5ConformContext>;

const rt4 = (file: string, symbol: string): CheckSource => ({
  repo: 'Pazaz/RT4-Client',
  path: `client/src/main/java/rt4/${file}`,
  symbol,
});
const client435: CheckSource = {
  repo: 'runejs/refactored-client-435',
  path: 'src/main/java/org/runejs/client/net/UpdateServer.java',
  symbol: 'readJS5ResponseHeader',
};
const osrs = (symbol: string): CheckSource => ({
  repo: 'runelite/runelite',
  path: 'runescape-client/src/main/java/NetCache.java',
  symbol,
});
const osrsClient = (symbol: string): CheckSource => ({
  repo: 'runelite/runelite',
  path: 'runescape-client/src/main/java/Client.java',
  symbol,
});
const openrs2 = (file: string, symbol: string): CheckSource => ({
  repo: 'openrs2/openrs2',
  path: `game/src/main/kotlin/org/openrs2/game/net/js5/${file}`,
  symbol,
});

const hex = (b: Uint8Array): string => Buffer.from(b).toString('hex');

/**
 * A pass with a warning: something the real client does not read (so it works) but that is worth
 * fixing. The core report has pass, fail and skip only; the js5 checks put `warning: …` first in a
 * passing check's detail (docs/conform.md, "js5").
 */
export const WARNING_PREFIX = 'warning: ';
const withWarnings = (warnings: readonly string[], detail: string): string =>
  warnings.length === 0 ? detail : `${WARNING_PREFIX}${warnings.join('; ')}; ${detail}`;

/** A download, or nothing when a check it needs says it cannot be had (a skip). */
async function ignoreSkip<T>(download: Promise<T>): Promise<T | undefined> {
  try {
    return await download;
  } catch (err) {
    if (err instanceof CheckSkip) return undefined;
    throw err;
  }
}

/** A download other checks judge, or nothing when it cannot be had (their failure, not ours). */
async function ifAvailable<T>(download: Promise<T>): Promise<T | undefined> {
  try {
    return await download;
  } catch (err) {
    if (err instanceof CheckFailure || err instanceof CheckSkip) return undefined;
    throw err;
  }
}

async function handshaken(ctx: Js5ConformContext, t: CheckRun): Promise<Js5Peer> {
  const peer = await Js5Peer.open(ctx.target!, t);
  await peer.open(ctx.build, ctx.seeded);
  return peer;
}

const handshakeOk: Check = {
  id: 'handshake.ok',
  title: 'the handshake of the right build is answered with exactly one byte 00',
  rule: 'The client sends 0f + its build as an int32 (Old School from revision 223 adds a 16-byte seed); the server answers one byte, 00, and nothing else until the client asks.',
  sources: [rt4('client.java', 'js5Connect'), osrsClient('doCycleJs5Connect')],
  clientReaction:
    'Any other reply counts as a connection error: the client switches ports, waits longer each time and gives up after 4 errors (js5connect); extra bytes are read as the start of a response and desynchronise the stream.',
  run: async (ctx: Js5ConformContext, t: CheckRun) => {
    const peer = await Js5Peer.open(ctx.target!, t);
    const sent = Js5Peer.handshake(ctx.build, ctx.seeded);
    const reply = await peer.handshake(ctx.build, ctx.seeded);
    if (reply !== 0)
      t.fail(`the handshake was answered ${reply}`, {
        sent,
        expected: Buffer.from([0]),
        received: Buffer.from([reply]),
      });
    if (peer.probe.available > 0 || !(await peer.probe.quietFor(300)))
      t.fail('the server sent more than the one-byte reply before any request', {
        sent,
        expected: '00, then nothing until a request',
        received: peer.probe.receivedTail(),
      });
    return `${hex(sent)} answered 00`;
  },
};

const handshakeOutOfDate: Check = {
  id: 'handshake.out-of-date',
  title: 'a handshake of another build is answered 06 (out of date)',
  rule: 'A client whose build is not the one served gets the one-byte reply 06, so it can tell its player to update.',
  sources: [
    rt4('client.java', 'js5Connect'),
    osrsClient('js5Error'),
    {
      repo: 'openrs2/openrs2',
      path: 'game/src/main/kotlin/org/openrs2/game/net/login/LoginChannelHandler.kt',
      symbol: 'handleInitJs5RemoteConnection',
    },
  ],
  clientReaction:
    'On 06 the clients stop after 2 tries with "js5connect_outofdate". A server that accepts the wrong build hands out a cache whose CRCs the client cannot use; one that just closes makes the client retry for ever as a network error.',
  requires: ['handshake.ok'],
  run: async (ctx: Js5ConformContext, t: CheckRun) => {
    const peer = await Js5Peer.open(ctx.target!, t);
    const wrong = (ctx.build + 1) >>> 0;
    const sent = Js5Peer.handshake(wrong, ctx.seeded);
    let reply: number;
    try {
      reply = await peer.handshake(wrong, ctx.seeded);
    } catch (err) {
      if (err instanceof CheckFailure && peer.probe.closed)
        t.fail(`build ${wrong} was refused by closing the connection, without the reply 06`, {
          sent,
          expected: Buffer.from([6]),
          received: Buffer.alloc(0),
        });
      throw err;
    }
    if (reply !== 6)
      t.fail(`build ${wrong} (the server serves ${ctx.build}) was answered ${reply}`, {
        sent,
        expected: Buffer.from([6]),
        received: Buffer.from([reply]),
      });
    return `build ${wrong} answered 06`;
  },
};

const handshakeFull: Check = {
  id: 'handshake.full',
  title: 'a refused connection is answered 07 (full) or 09 (too many from this address)',
  rule: 'When the server refuses a client for capacity it says so with the one-byte reply 07 (server full) or 09 (address limit) before closing.',
  sources: [
    rt4('client.java', 'js5Connect'),
    osrsClient('js5Error'),
    { repo: 'blurite/rsprot', path: 'README.md', symbol: 'JS5 address validation (reply 9)' },
  ],
  clientReaction:
    'On 07/09 the clients wait and retry, then show "js5connect_full" (after 2 refusals for 435 and Old School, 4 for 530). A close without the reply is a generic I/O error: the player sees "js5connect" or "js5io" instead of "server full".',
  requires: ['handshake.ok'],
  timeoutMs: 20_000,
  run: async (ctx: Js5ConformContext, t: CheckRun) => {
    const peers: Js5Peer[] = [];
    try {
      return await probeFull(ctx, t, peers);
    } finally {
      // Give the slots back before the next check connects: close ours, then wait until a new
      // connection is accepted again (the server may take a moment to see the closes).
      for (const p of peers) p.probe.destroy();
      if (peers.length > 0) await waitUntilAccepted(ctx, t);
    }
  },
};

async function probeFull(ctx: Js5ConformContext, t: CheckRun, peers: Js5Peer[]): Promise<string> {
  for (let i = 1; i <= ctx.probeConnections; i++) {
    const peer = await Js5Peer.open(ctx.target!, t);
    peers.push(peer);
    const sent = Js5Peer.handshake(ctx.build, ctx.seeded);
    let reply: number;
    try {
      reply = await peer.handshake(ctx.build, ctx.seeded);
    } catch (err) {
      if (err instanceof CheckFailure && peer.probe.closed)
        t.fail(`connection ${i} was closed without a reply`, {
          sent,
          expected: '07 or 09 before the close',
          received: Buffer.alloc(0),
          note: `${i - 1} connections from this address were open`,
        });
      throw err;
    }
    if (reply === 7 || reply === 9) return `connection ${i} refused with 0${reply}`;
    if (reply !== 0)
      t.fail(`connection ${i} was answered ${reply}`, {
        sent,
        expected: '00, 07 or 09',
        received: Buffer.from([reply]),
      });
  }
  t.skip(
    `no refusal within ${ctx.probeConnections} connections from this address (--probe-connections N to go further than the server's per-address cap)`,
  );
}

/** Connects until the handshake is answered 00 again (at most 5 s). */
async function waitUntilAccepted(ctx: Js5ConformContext, t: CheckRun): Promise<void> {
  const until = performance.now() + Math.min(5000, t.remainingMs());
  while (performance.now() < until) {
    const peer = await Js5Peer.open(ctx.target!, t).catch(() => undefined);
    const reply = await peer?.handshake(ctx.build, ctx.seeded).catch(() => undefined);
    peer?.probe.destroy();
    if (reply === 0) return;
    await new Promise((r) => setTimeout(r, 50));
  }
}

const masterIndex: Check = {
  id: 'master-index',
  title: 'the master index (255/255) is uncompressed and covers every archive the client creates',
  rule: "The response to 255/255 is a type-0 container the client reads raw: the entry of archive N at 5 + 4 × N (ORIGINAL, 435: CRC) or 5 + 8 × N (VERSIONED: CRC, version), for every archive the client creates, each non-zero. The client reads nothing else: a declared length that is not a whole number of entries passes with a warning, and entries past the client's archives are not read.",
  sources: [
    rt4('Js5MasterIndex.java', 'method188'),
    rt4('Js5MasterIndex.java', 'isReady'),
    { ...client435, symbol: 'readJS5CRCTableResponse' },
  ],
  clientReaction:
    'The 530 client reads entries raw at 5 + 8 × archive (435: 5 + 4 × archive): a compressed master index is read as garbage, a short one throws in createJs5 (435: reads past its end), and a (0, 0) entry makes it request that index forever (its CRC never matches).',
  requires: ['handshake.ok'],
  run: async (ctx: Js5ConformContext, t: CheckRun) => {
    const m = await ctx.shared.masterIndex(t);
    const format = ctx.profile.masterIndexFormat;
    const width = format === 'original' ? 4 : 8;
    if (m.unreadable !== undefined)
      t.fail(`the master index cannot be read by the ${ctx.profile.name} client: ${m.unreadable}`, {
        sent: requestBytes(1, 255, 255),
        expected: 'compression byte 00, then the entries',
        received: m.response.framed.subarray(0, 64),
      });
    if (m.entries.length < ctx.minArchives)
      t.fail(
        `the master index has ${m.entries.length} entries; the ${ctx.profile.name} client creates ${ctx.minArchives}`,
        {
          sent: requestBytes(1, 255, 255),
          expected: `at least ${5 + ctx.minArchives * width} container bytes (${ctx.minArchives} entries)`,
          received: m.response.framed.subarray(0, 96),
        },
      );
    const holes = m.entries.flatMap((e, a) => (e.checksum === 0 && e.version === 0 ? [a] : []));
    if (holes.length > 0)
      t.fail(
        `archive${holes.length > 1 ? 's' : ''} ${holes.join(', ')} ha${holes.length > 1 ? 've' : 's'} a (0, 0) entry`,
        {
          sent: requestBytes(1, 255, 255),
          expected: 'a CRC (and version) for every archive the client creates',
          received: m.response.framed.subarray(0, 96),
        },
      );
    const declared = m.response.container.length - 5;
    const beyond = format === 'digests' ? '' : `, ${declared} bytes declared`;
    return withWarnings(
      m.warnings,
      `${m.entries.length} archives read as the ${ctx.profile.name} client reads them (${format}${beyond})`,
    );
  },
};

const blockMarkers: Check = {
  id: 'block-markers',
  title: 'a 0xFF marker at every 512-byte boundary of a response, counted from its first byte',
  rule: 'Counting from the archive byte of each response, a 0xFF byte is inserted at every offset that is a positive multiple of 512 while more bytes follow; none after the last byte; the count restarts for every response.',
  sources: [
    rt4('Js5NetQueue.java', 'loop'),
    client435,
    {
      repo: 'openrs2/openrs2',
      path: 'protocol/src/main/kotlin/org/openrs2/protocol/js5/downstream/Js5ResponseEncoder.kt',
      symbol: 'encode',
    },
  ],
  clientReaction:
    'At each boundary the clients read one byte; anything but 0xFF makes them abandon the response silently, and the bytes that follow are then read as a new response header: the stream is lost until the 30 s watchdog reconnects.',
  requires: ['handshake.ok'],
  // It may be the check that downloads the group sample (up to --max-mb).
  timeoutMs: 60_000,
  run: async (ctx: Js5ConformContext, t: CheckRun) => {
    // Every response there is to look at: the master index, the indexes and the group sample
    // (which the group checks download anyway). A wrong marker in any of them is this check's
    // failure; the other checks skip what they cannot read.
    const master = await ctx.shared.masterIndex(t);
    const responses: WireResponse[] = [master.response];
    const indexes = await ignoreSkip(ctx.shared.allIndexes(t));
    responses.push(...[...(indexes?.values() ?? [])].map((d) => d.response));
    if (indexes !== undefined)
      responses.push(...((await ignoreSkip(ctx.shared.groupSample(t))) ?? []).map((g) => g.response));
    const long = responses.filter((r) => r.framed.length > 512);
    if (long.length === 0)
      t.skip('no response read (master index, indexes, sampled groups) is longer than 512 bytes');
    for (const r of long) if (r.badMarkers.length > 0) throw markerFailure(r);
    return `${long.length} responses over 512 bytes, every marker in place`;
  },
};

const indexCrcs: Check = {
  id: 'index-crcs',
  title: "every index's CRC (and version) matches the master index",
  rule: "The CRC32 of each index container (255/N) as sent equals the master index's entry for N, and with a VERSIONED master index the index's own version equals the entry's version.",
  sources: [rt4('Js5CachedResourceProvider.java', 'method521'), rt4('Js5MasterIndex.java', 'method188')],
  clientReaction:
    'A mismatch throws in the client: it picks a new XOR key, reconnects and downloads the index again; after 4 failures in a row it stops with "js5crc".',
  requires: ['handshake.ok'],
  run: async (ctx: Js5ConformContext, t: CheckRun) => {
    const entries = await ctx.shared.entries(t);
    const indexes = await needs(ctx.shared.allIndexes(t), 'the indexes');
    if (indexes.size === 0) t.skip('the master index lists no archive the client creates');
    for (const d of indexes.values()) {
      const entry = entries[d.archive]!;
      const got = containerCrc(d.response);
      if (got !== entry.checksum)
        t.fail(`index ${d.archive}: CRC ${u32(got)} where the master index says ${u32(entry.checksum)}`, {
          sent: requestBytes(1, 255, d.archive),
          expected: `a container whose CRC32 is ${u32(entry.checksum)}`,
          received: d.response.framed.subarray(0, 64),
        });
      if (d.index === undefined)
        t.fail(`index ${d.archive} does not decode: ${d.error}`, {
          sent: requestBytes(1, 255, d.archive),
          received: d.response.framed.subarray(0, 64),
        });
      if (ctx.profile.masterIndexFormat !== 'original' && d.index.version !== entry.version)
        t.fail(`index ${d.archive} has version ${d.index.version}; the master index says ${entry.version}`, {
          sent: requestBytes(1, 255, d.archive),
          expected: `index version ${entry.version}`,
          received: d.response.framed.subarray(0, 64),
        });
    }
    return `${indexes.size} indexes match`;
  },
};

const groupCrcs: Check = {
  id: 'groups.crc',
  title: "every group's CRC matches its index, and no version trailer is sent",
  rule: 'A group is sent as its stored container without the 2-byte version trailer; the CRC32 of what is sent equals the CRC in the archive index (the client writes the trailer itself, from the index).',
  sources: [
    rt4('Js5CachedResourceProvider.java', 'method536'),
    rt4('Js5NetQueue.java', 'loop'),
    openrs2('Js5Service.kt', 'serve (VersionTrailer.strip)'),
  ],
  clientReaction:
    'The client checks the CRC of every group it downloads; on a mismatch it rekeys, reconnects and asks again, and after 4 failures in a row stops with "js5crc".',
  requires: ['handshake.ok'],
  timeoutMs: 60_000,
  run: async (ctx: Js5ConformContext, t: CheckRun) => {
    const indexes = await ctx.shared.acceptedIndexes(t);
    const sample = await needs(ctx.shared.groupSample(t), 'the groups');
    const total = indexes.reduce(
      (n, d) => n + (d.index?.groups.filter((g) => g.id <= 0xffff).length ?? 0),
      0,
    );
    let bytes = 0;
    for (const g of sample) {
      bytes += g.response.framed.length;
      const got = containerCrc(g.response);
      if (got === g.expectedCrc) continue;
      const c = g.response.container;
      const trailer = c.length > 7 && crc32(withoutLastTwo(c)) === g.expectedCrc;
      t.fail(
        trailer
          ? `group ${key(g.archive, g.group)} carries its version trailer (${hex(c.subarray(c.length - 2))}) inside the container`
          : `group ${key(g.archive, g.group)}: CRC ${u32(got)} where its index says ${u32(g.expectedCrc)}`,
        {
          sent: requestBytes(1, g.archive, g.group),
          expected: trailer
            ? `the container without its last 2 bytes (${c.length - 2} bytes, length field ${c.readInt32BE(1) - 2})`
            : `a container whose CRC32 is ${u32(g.expectedCrc)}`,
          received: g.response.framed.subarray(0, 64),
          note: `container of ${c.length} bytes`,
        },
      );
    }
    if (sample.length === 0) t.skip('the indexes list no groups');
    return `${sample.length} of ${total} groups (${Math.round(bytes / 1024)} KiB), every CRC matches`;
  },
};

/** Two small groups from the indexes (for checks that need real groups, not indexes). */
async function smallGroups(ctx: Js5ConformContext, t: CheckRun, count: number): Promise<[number, number][]> {
  const sample = await needs(ctx.shared.groupSample(t), 'the groups');
  const bySize = [...sample].sort((a, b) => a.response.framed.length - b.response.framed.length);
  if (bySize.length === 0) t.skip('the indexes list no groups');
  return Array.from({ length: count }, (_, i) => {
    const g = bySize[i % bySize.length]!;
    return [g.archive, g.group] as [number, number];
  });
}

const prefetchFlag: Check = {
  id: 'prefetch-flag',
  title: 'the 0x80 flag marks prefetch responses for 5xx clients, and only for them',
  rule: '530: a response to a prefetch request has 0x80 ORed into its compression byte, a response to an urgent request does not. 435 and Old School: no response carries it.',
  sources: [rt4('Js5NetQueue.java', 'loop'), client435, osrs('NetCache')],
  clientReaction:
    '530 picks the in-flight list by the flag: a response matched against the wrong list is an I/O error and a reconnect. 435 and Old School do not mask the bit: they misread the header length and lose the stream.',
  requires: ['handshake.ok'],
  run: async (ctx: Js5ConformContext, t: CheckRun) => {
    const [[a1, g1], [a2, g2]] = await smallGroups(ctx, t, 2);
    const peer = await handshaken(ctx, t);
    const sent = Buffer.concat([requestBytes(0, a1!, g1!), requestBytes(1, a2!, g2!)]);
    peer.send(sent);
    const got = await peer.readAll([key(a1!, g1!), key(a2!, g2!)]);
    const prefetch = got.find((r) => key(r.archive, r.group) === key(a1!, g1!))!;
    const urgent = got.find((r) => r !== prefetch)!;
    const want = ctx.profile.prefetchFlag;
    if (((prefetch.typeByte & 0x80) !== 0) !== want)
      t.fail(`the prefetch response ${key(a1!, g1!)} ${want ? 'lacks' : 'carries'} the 0x80 flag`, {
        sent,
        expected: `compression byte ${want ? 'with' : 'without'} 0x80 for the ${ctx.profile.name} client`,
        received: prefetch.framed.subarray(0, 8),
      });
    if ((urgent.typeByte & 0x80) !== 0)
      t.fail(`the urgent response ${key(a2!, g2!)} carries the 0x80 flag`, {
        sent,
        expected: 'compression byte without 0x80',
        received: urgent.framed.subarray(0, 8),
      });
    return want ? 'prefetch flagged, urgent not' : 'no response flagged';
  },
};

const upgradedPrefetch: Check = {
  id: 'upgraded-prefetch',
  title: 'a prefetch upgraded to urgent is answered twice',
  rule: 'When a client sends an urgent request for a group whose prefetch is still in flight, the server answers both requests (for 530: one response flagged 0x80, one not).',
  sources: [
    rt4('Js5CachedResourceProvider.java', 'method536'),
    rt4('Js5NetQueue.java', 'method2330'),
    osrs('NetCache'),
  ],
  clientReaction:
    'The client keeps both requests in flight; answered once, one entry stays for ever: one of its 20 (Old School: 200) slots leaks per upgrade, until the 30 s watchdog drops the connection and it downloads again.',
  requires: ['prefetch-flag'],
  run: async (ctx: Js5ConformContext, t: CheckRun) => {
    const [[a, g]] = await smallGroups(ctx, t, 1);
    const peer = await handshaken(ctx, t);
    const sent = Buffer.concat([requestBytes(0, a!, g!), requestBytes(1, a!, g!)]);
    peer.send(sent);
    const k = key(a!, g!);
    const got = await peer.readAll([k, k], 3000);
    if (ctx.profile.prefetchFlag) {
      const flagged = got.filter((r) => (r.typeByte & 0x80) !== 0).length;
      if (flagged !== 1)
        t.fail(`${flagged} of the 2 responses carry the 0x80 flag`, {
          sent,
          expected: 'one response with 0x80 (the prefetch) and one without (the urgent)',
          received: Buffer.concat(got.map((r) => r.framed.subarray(0, 8))),
        });
    }
    return `${k} answered twice`;
  },
};

const inFlight: Check = {
  id: 'in-flight',
  title: "the client's full in-flight window is answered (20 + 20; Old School 200 + 200)",
  rule: 'A client may have its whole window in flight at once, urgent and prefetch, sent in one burst; every request is answered and each response matches one of them.',
  sources: [rt4('Js5NetQueue.java', 'method2330'), osrs('NetCache')],
  clientReaction:
    'A request never answered holds a slot until the 30 s watchdog drops the connection; a response that matches nothing in flight is an I/O error and a reconnect.',
  requires: ['prefetch-flag'],
  timeoutMs: 30_000,
  run: async (ctx: Js5ConformContext, t: CheckRun) => {
    const nu = ctx.profile.urgentCap;
    const np = ctx.profile.prefetchCap;
    const groups = await smallGroups(ctx, t, nu + np);
    const urgent = groups.slice(0, nu);
    const prefetch = groups.slice(nu);
    const peer = await handshaken(ctx, t);
    const sent = Buffer.concat([
      ...urgent.map(([a, g]) => requestBytes(1, a, g)),
      ...prefetch.map(([a, g]) => requestBytes(0, a, g)),
    ]);
    peer.send(sent);
    const urgentLeft = urgent.map(([a, g]) => key(a, g));
    const prefetchLeft = prefetch.map(([a, g]) => key(a, g));
    let read = 0;
    while (urgentLeft.length + prefetchLeft.length > 0) {
      let r: WireResponse;
      try {
        r = await peer.readResponse(5000);
      } catch (err) {
        if (err instanceof CheckFailure)
          throw new CheckFailure(`${read} of ${nu + np} requests answered: ${err.message}`, {
            ...err.evidence,
            sent,
          });
        throw err;
      }
      read++;
      const k = key(r.archive, r.group);
      // Each family's matching rule: 530 by the flag; 435 and Old School urgent list first.
      const lists = ctx.profile.prefetchFlag
        ? [(r.typeByte & 0x80) !== 0 ? prefetchLeft : urgentLeft]
        : [urgentLeft, prefetchLeft];
      const list = lists.find((l) => l.includes(k));
      if (list === undefined)
        t.fail(`response ${k} matches no request in flight (after ${read - 1} matched)`, {
          sent,
          received: r.framed.subarray(0, 8),
        });
      list.splice(list.indexOf(k), 1);
    }
    return `${nu} urgent + ${np} prefetch answered`;
  },
};

const loggedInOut: Check = {
  id: 'logged-in-out',
  title: 'the post-handshake packets (06 connected, 02 logged in, 03 logged out) are accepted',
  rule: 'Right after 00 the 530 client sends 06 000003 then 02 000000 or 03 000000 (435 and Old School only the 02/03); the server keeps the connection and keeps answering requests.',
  sources: [
    rt4('Js5NetQueue.java', 'loggedOut'),
    rt4('Js5NetQueue.java', 'writeLoggedIn'),
    {
      repo: 'openrs2/openrs2',
      path: 'protocol/src/main/kotlin/org/openrs2/protocol/js5/upstream/Js5RequestDecoder.kt',
      symbol: 'decode',
    },
  ],
  clientReaction:
    'These packets go out on every connection and every login or logout: a server that closes on them never serves a client at all.',
  requires: ['handshake.ok'],
  run: async (ctx: Js5ConformContext, t: CheckRun) => {
    const peer = await handshaken(ctx, t);
    const packets = [
      ...(ctx.profile.sendsConnected ? [Buffer.from('06000003', 'hex')] : []),
      Buffer.from('02000000', 'hex'),
      Buffer.from('03000000', 'hex'),
      requestBytes(1, 255, 255),
    ];
    peer.send(Buffer.concat(packets));
    await peer.readAll(['255/255']);
    return `${packets
      .slice(0, -1)
      .map((p) => hex(p))
      .join(' ')} then 255/255 answered`;
  },
};

const disconnect: Check = {
  id: 'disconnect',
  title: 'opcode 07 (disconnect) closes the connection',
  rule: 'The 530 client sends 07 000000 to have the server drop its JS5 connection; the server closes it.',
  sources: [rt4('Js5NetQueue.java', 'method2319'), openrs2('Js5ChannelHandler.kt', 'channelRead0')],
  clientReaction:
    'The client uses it to force a reconnect (::serverjs5drop): a server that ignores it keeps a connection the client has given up on, holding one of its per-address slots.',
  requires: ['handshake.ok'],
  applies: (ctx) =>
    ctx.profile.name === '530' ? undefined : `the ${ctx.profile.name} client never sends opcode 7`,
  run: async (ctx: Js5ConformContext, t: CheckRun) => {
    const peer = await handshaken(ctx, t);
    const sent = Buffer.from('07000000', 'hex');
    peer.send(sent);
    if (!(await peer.probe.closesWithin(5000)))
      t.fail('the connection stayed open 5 s after 07 000000', {
        sent,
        expected: 'the server closes the connection',
        received: peer.probe.receivedTail(),
      });
    return 'closed';
  },
};

const xorRekey: Check = {
  id: 'xor-rekey',
  title: 'after 04 KK 0000 every byte sent is XORed with KK, markers included',
  rule: 'Once the client sends a rekey, the server XORs every byte it sends with the key: headers, container bytes and block markers alike (the client never XORs what it sends).',
  sources: [
    rt4('Js5NetQueue.java', 'loop'),
    rt4('Js5NetQueue.java', 'method2327'),
    rt4('Js5NetQueue.java', 'loggedOut'),
  ],
  clientReaction:
    'The client rekeys only after a CRC failure, then XORs everything it reads: a server that ignores the key feeds it garbage, every download fails its CRC, and after 4 failures the client stops with "js5crc".',
  requires: ['handshake.ok'],
  run: async (ctx: Js5ConformContext, t: CheckRun) => {
    // A long index (markers to XOR) when the indexes could be read without a key; else 255/255.
    const indexes = await ifAvailable(ctx.shared.allIndexes(t));
    const long = [...(indexes?.values() ?? [])].find((d) => d.response.framed.length > 512);
    const peer = await handshaken(ctx, t);
    const k = 0x5a;
    const keys: [number, number][] = [
      [255, 255],
      ...(long === undefined ? [] : [[255, long.archive] as [number, number]]),
    ];
    const sent = Buffer.concat([Buffer.from([4, k, 0, 0]), ...keys.map(([a, g]) => requestBytes(1, a, g))]);
    peer.xorKey = k;
    peer.send(sent);
    const raw = await peer.probe.peek(3, 'response header', 5000);
    const plain = Buffer.from(raw.map((b) => b ^ k));
    const wanted = keys.map(([a, g]) => key(a, g));
    if (!wanted.includes(key(plain[0]!, plain.readUInt16BE(1)))) {
      const unxored = wanted.includes(key(raw[0]!, raw.readUInt16BE(1)));
      t.fail(
        unxored ? 'the response was sent without XOR' : 'the response header does not decode with the key',
        {
          sent,
          expected: `a header for ${wanted.join(' or ')} XORed with ${k.toString(16)}`,
          received: raw,
        },
      );
    }
    await peer.readAll(wanted);
    return `key ${k.toString(16)}: ${wanted.join(', ')} read correctly`;
  },
};

const missingGroup: Check = {
  id: 'missing-group',
  title: 'a group the server does not have gets no made-up answer, and earlier responses still arrive',
  rule: 'A request for a group the server does not hold is not answered with an empty or invented container; the server either closes the connection (after finishing the responses before it) or leaves it unanswered.',
  sources: [
    openrs2('Js5Service.kt', 'serve'),
    rt4('Js5NetQueue.java', 'loop'),
    rt4('Js5CachedResourceProvider.java', 'method536'),
  ],
  clientReaction:
    'An unanswered request waits until the connection has been silent for 30 s (the watchdog restarts on every byte), then is asked again. The 435 and 530 clients cannot see a close: they too wait for the watchdog, then re-send their in-flight requests in order, so a close at the same request cuts every connection there (a pass with a warning). An invented container fails the CRC check: the client rekeys and retries, and gives up with "js5crc" after 4.',
  requires: ['handshake.ok'],
  run: async (ctx: Js5ConformContext, t: CheckRun) => {
    const indexes: IndexDownload[] = await ctx.shared.acceptedIndexes(t);
    const d = indexes.find(
      (x) => (x.index?.groups.length ?? 0) > 0 && x.index!.groups.some((g) => g.id < 0xffff),
    );
    if (d === undefined) t.skip('no index lists a group');
    const ids = new Set(d.index!.groups.map((g) => g.id));
    let missing = 0;
    while (ids.has(missing) && missing < 0xffff) missing++;
    const present = d.index!.groups.find((g) => g.id <= 0xffff)!.id;
    const peer = await handshaken(ctx, t);
    const sent = Buffer.concat([requestBytes(1, d.archive, present), requestBytes(1, d.archive, missing)]);
    peer.send(sent);
    // Responses may come in any order: read until the present group's has come whole.
    for (;;) {
      const r = await peer.readResponse(5000);
      const k = key(r.archive, r.group);
      if (k === key(d.archive, missing))
        t.fail(`group ${k} (not in its index) was answered`, {
          sent,
          expected: 'a close, or nothing',
          received: r.framed.subarray(0, 64),
        });
      if (k !== key(d.archive, present))
        t.fail(`response ${k} matches no request in flight`, { sent, received: r.framed.subarray(0, 64) });
      if (r.badMarkers.length > 0) throw markerFailure(r, sent);
      break;
    }
    const before = peer.probe.receivedBytes;
    const closed = await peer.probe.closesWithin(ctx.missingGroupQuietMs);
    if (peer.probe.available > 0 || peer.probe.receivedBytes !== before)
      t.fail(`group ${key(d.archive, missing)} (not in its index) was answered`, {
        sent,
        expected: 'a close, or nothing',
        received: peer.probe.readAvailable().subarray(0, 64),
      });
    if (!closed) return `${key(d.archive, missing)}: left unanswered`;
    // 435 and 530 test only available() < 0, which a closed stream never gives: a close is
    // silence to them, and the request behind which the server closed is re-sent first next time.
    const blind =
      ctx.profile.name === 'osrs'
        ? []
        : [
            `the ${ctx.profile.name} client cannot see a close (it waits for its 30 s watchdog, then re-sends its in-flight requests with this one near the front, so each connection is cut at the same place); leaving the request unanswered lets it load everything else`,
          ];
    return withWarnings(
      blind,
      `${key(d.archive, missing)}: connection closed after ${key(d.archive, present)}`,
    );
  },
};

/** How long the second client waits for its one small response. */
const FAIRNESS_WAIT_MS = 5000;

/** Response bytes the slow client must have asked for before the fairness result means anything. */
const FAIRNESS_BACKLOG_BYTES = 8 * 1024 * 1024;

const fairness: Check = {
  id: 'fairness',
  title: 'a client that stops reading does not hold up another client',
  rule: "While one client has its window full of large groups and reads nothing, another client's urgent request is still answered: the server keeps a queue per connection and does not wait on one socket to serve the next.",
  sources: [
    openrs2('Js5Service.kt', 'run'),
    { repo: 'blurite/rsprot', path: 'README.md', symbol: 'JS5 (no client starved by another)' },
    rt4('Js5NetQueue.java', 'loop'),
  ],
  clientReaction:
    'A client that gets nothing for 30 s (its watchdog) drops the connection and reconnects; on a server with one queue for everyone, one slow or stalled player freezes every other download.',
  requires: ['handshake.ok'],
  exclusive: true,
  timeoutMs: 30_000,
  run: async (ctx: Js5ConformContext, t: CheckRun) => {
    const sample = await needs(ctx.shared.groupSample(t), 'the groups');
    const bySize = [...sample].sort((a, b) => b.response.framed.length - a.response.framed.length);
    if (bySize.length === 0) t.skip('the indexes list no groups');
    const n = Math.min(20, ctx.profile.urgentCap) + Math.min(20, ctx.profile.prefetchCap);
    // The largest groups (at least half the size of the largest), cycled: a window full of them.
    const largest = bySize[0]!.response.framed.length;
    const pool = bySize.filter((g) => g.response.framed.length * 2 >= largest);
    const big = Array.from({ length: n }, (_, i) => pool[i % pool.length]!);
    const backlog = big.reduce((s, g) => s + g.response.framed.length, 0);
    const slow = await handshaken(ctx, t);
    slow.send(Buffer.concat(big.map((g, i) => requestBytes(i < n / 2 ? 1 : 0, g.archive, g.group))));
    // Read the first bytes (the server has started on it), then stop reading.
    await slow.probe.waitFor(
      () => slow.probe.receivedBytes > 0,
      'the first bytes of the slow client’s responses',
    );
    slow.probe.pause();
    const small = bySize[bySize.length - 1]!;
    const other = await handshaken(ctx, t);
    const sent = requestBytes(1, small.archive, small.group);
    other.send(sent);
    try {
      await other.readAll([key(small.archive, small.group)], FAIRNESS_WAIT_MS);
    } catch (err) {
      if (err instanceof CheckFailure)
        t.fail(`a second client's urgent request was not answered while the first client read nothing`, {
          sent,
          expected: `the response to ${key(small.archive, small.group)}`,
          received: other.probe.receivedTail(),
          note: `the first client asked for ${Math.round(backlog / 1024)} KiB and stopped reading`,
        });
      throw err;
    }
    if (backlog < FAIRNESS_BACKLOG_BYTES)
      t.skip(
        `inconclusive: the largest groups add up to ${Math.round(backlog / 1024)} KiB, which socket buffers can absorb (a cache with larger groups shows starvation)`,
      );
    return `answered while another client held ${Math.round(backlog / 1024 / 1024)} MiB unread`;
  },
};

/** A container with its last 2 bytes dropped and its length field corrected. */
function withoutLastTwo(c: Buffer): Buffer {
  const out = Buffer.from(c.subarray(0, c.length - 2));
  out.writeInt32BE(out.readInt32BE(1) - 2, 1);
  return out;
}

function u32(n: number): string {
  return `0x${(n >>> 0).toString(16).padStart(8, '0')}`;
}

export const js5Checks: readonly Check[] = [
  handshakeOk,
  handshakeOutOfDate,
  handshakeFull,
  masterIndex,
  blockMarkers,
  indexCrcs,
  groupCrcs,
  prefetchFlag,
  upgradedPrefetch,
  inFlight,
  loggedInOut,
  disconnect,
  xorRekey,
  missingGroup,
  fairness,
];
