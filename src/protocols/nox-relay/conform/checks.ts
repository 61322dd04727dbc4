/**
 * The NoxVR relay (protocol 1) conformance checks: each a rule read from the reference Unity
 * client (AtelierVR/nox.relay, its TCP/UDP era), the reference server (AtelierVR/relay) or the
 * official documentation (AtelierVR/docsite, nox.hactazia.fr/docs/relay).
 */
import type { CheckRun, CheckSource, ConformCheck, ConformTarget } from '../../../core/conform.js';
import { CheckFailure } from '../../../core/conform.js';
import { WireReader } from '../../../wire/reader.js';
import { PROTOCOL_VERSION, QuitType, SELF, TravelingAction } from '../constants.js';
import type { ServerMessage } from '../messages.js';
import { NoxPeer, type NoxTransport, type ServerPacket } from './peer.js';

export interface NoxConformContext {
  target: ConformTarget | undefined;
  transport: NoxTransport;
  /** Access tokens of the two players the checks use. */
  tokens: [string, string];
  /** The instance to enter (undefined: the first one Sessions lists). */
  instance: number | undefined;
  /** Longest wait a timeout check may take (ms). */
  maxWaitMs: number;
}

type Check = ConformCheck<NoxConformContext>;

const client = (path: string, symbol: string): CheckSource => ({ repo: 'AtelierVR/nox.relay', path, symbol });
const server = (path: string, symbol: string): CheckSource => ({
  repo: 'AtelierVR/relay',
  path: `src/${path}`,
  symbol,
});
const docs = (page: string, symbol: string): CheckSource => ({
  repo: 'AtelierVR/docsite',
  path: `content/(technical)/relay/${page}.mdx`,
  symbol,
  url: `https://nox.hactazia.fr/docs/relay/${page}`,
});

/** The Handshake reply as the reference client reads it (its fields in order; the rest ignored). */
export interface HandshakeReply {
  uid: number;
  protocol: number;
  clientId: number;
  ip: string;
  port: number;
  flags: number;
  masterAddress: string | undefined;
  maxPacketSize: number;
  connectionTimeout: number;
  keepAliveInterval: number;
  raw: Buffer;
}

function readHandshake(raw: Buffer): HandshakeReply {
  const r = new WireReader(raw);
  r.u16be();
  const uid = r.u16be();
  r.u8();
  const protocol = r.u16be();
  const clientId = r.u16be();
  const ip = [...r.bytes(4)].join('.');
  const port = r.u16be();
  const flags = r.u8();
  const masterAddress = (flags & 0x01) === 0 ? Buffer.from(r.bytes(r.u16be())).toString('utf8') : undefined;
  return {
    uid,
    protocol,
    clientId,
    ip,
    port,
    flags,
    masterAddress,
    maxPacketSize: r.u16be(),
    connectionTimeout: r.u16be(),
    keepAliveInterval: r.u16be(),
    raw,
  };
}

/** Sends a v1 Handshake and reads the reply as the reference client does. */
async function handshake(peer: NoxPeer): Promise<HandshakeReply> {
  const uid = peer.allocUid();
  const sent = peer.handshakeBytes(uid);
  peer.sendRaw(sent);
  const raw = await peer.inbox.poll((m) => m.length >= 5 && m[4] === 0x01, 3000);
  if (raw === undefined)
    throw new CheckFailure('no Handshake reply', {
      sent,
      received: peer.inbox.tail(),
      expected: 'a packet of type 01',
    });
  try {
    return readHandshake(raw);
  } catch (err) {
    throw new CheckFailure(
      `the Handshake reply does not read as protocol 1 fields: ${(err as Error).message}`,
      { sent, received: raw },
    );
  }
}

/** A player in the instance: handshaken, authenticated, entered, travelled to Ready. */
interface Player {
  peer: NoxPeer;
  hello: HandshakeReply;
  instance: number;
  playerId: number;
  tps: number;
  threshold: number;
  /** Stops what the player sends by itself (its head transform every tick, its keep-alive). */
  stop(): void;
}

/** The rig a player's own tracking streams (the head), apart from the rig 0 the checks move. */
const HEAD_RIG = 5;

async function connected(
  ctx: NoxConformContext,
  t: CheckRun,
): Promise<{ peer: NoxPeer; hello: HandshakeReply }> {
  const peer = await NoxPeer.open(ctx.target!, ctx.transport, t);
  return { peer, hello: await handshake(peer) };
}

async function authenticated(ctx: NoxConformContext, t: CheckRun, which: 0 | 1 = 0) {
  const c = await connected(ctx, t);
  const reply = await c.peer.request(
    { type: 'Authentification', flags: 0, accessToken: ctx.tokens[which] },
    'Authentification',
  );
  if (reply.message.result !== 0)
    throw new CheckFailure(
      `authentication with token ${which + 1} was refused (result ${reply.message.result})`,
      {
        sent: c.peer.sent,
        received: reply.raw,
      },
    );
  return c;
}

async function instanceOf(ctx: NoxConformContext, peer: NoxPeer): Promise<number> {
  if (ctx.instance !== undefined) return ctx.instance;
  const list = await peer.request({ type: 'Sessions', page: 0 }, 'Sessions');
  const first = list.message.instances[0];
  if (first === undefined)
    throw new CheckFailure('Sessions lists no instance to enter (pass --instance N)', {
      sent: peer.sent,
      received: list.raw,
    });
  return first.internalId;
}

async function player(ctx: NoxConformContext, t: CheckRun, which: 0 | 1): Promise<Player> {
  const { peer, hello } = await authenticated(ctx, t, which);
  const instance = await instanceOf(ctx, peer);
  const enter = await peer.request({ type: 'Enter', instanceId: instance, flags: 0 }, 'Enter');
  const m = enter.message;
  if (m.result !== 0 || m.playerId === undefined)
    throw new CheckFailure(
      `Enter ${instance} was refused (result ${m.result}${m.reason ? `: ${m.reason}` : ''})`,
      { sent: peer.sent, received: enter.raw },
    );
  const travel = await peer.request(
    { type: 'Traveling', instanceId: instance, action: TravelingAction.Travel },
    'Traveling',
  );
  if ((travel.message.result & 0x04) !== 0)
    await peer.request(
      { type: 'Traveling', instanceId: instance, action: TravelingAction.Ready },
      'Traveling',
    );
  // In the world a client streams its tracked rigs every tick and pings every keep-alive
  // interval, whether it moves or not: do the same (a head that stays still). Like the reference
  // client, it names itself 0xFFFF ("self") in its own transforms.
  const tps = m.tps ?? 24;
  const playerId = m.playerId;
  const head = { x: 0, y: 1.6, z: 0 };
  const tick = setInterval(
    () =>
      peer.post({
        type: 'Transform',
        instanceId: instance,
        transformType: 1,
        playerId: SELF,
        rig: HEAD_RIG,
        flags: 0x01,
        position: head,
      }),
    Math.ceil(1000 / Math.max(1, tps)),
  );
  const ping = setInterval(
    () => peer.post({ type: 'Latency', timestamp: BigInt(Date.now()) }),
    Math.max(1, hello.keepAliveInterval) * 1000,
  );
  const stop = (): void => {
    clearInterval(tick);
    clearInterval(ping);
  };
  t.defer(stop);
  return { peer, hello, instance, playerId, tps, threshold: m.threshold ?? 0, stop };
}

/**
 * Waits until `viewer` has been told of `other` (its Join), then forgets what came before: player
 * ids are reused, so a Leave or Transform of an earlier holder of the same id may still be queued.
 */
async function knows(viewer: Player, other: Player): Promise<void> {
  await viewer.peer.next(
    `Join for player ${other.playerId}`,
    is('Join', (m) => m.playerId === other.playerId && m.instanceId === viewer.instance),
  );
  viewer.peer.inbox.drain();
}

const is =
  <T extends ServerMessage['type']>(
    type: T,
    extra: (m: Extract<ServerMessage, { type: T }>) => boolean = () => true,
  ) =>
  (p: ServerPacket): boolean =>
    p.message.type === type && extra(p.message as Extract<ServerMessage, { type: T }>);

const handshakeFields: Check = {
  id: 'handshake.fields',
  title: 'the Handshake reply has the protocol 1 fields in order, and echoes the uid',
  rule: 'The reply to a protocol 1 Handshake carries, in order: protocol u16 = 1, client id u16, the client address (IPv4, port u16) as the server sees it, flags u8, the master address string only when IsOffline is clear, max packet size u16, connection timeout u16 (s), keep-alive interval u16 (s); with the uid of the request.',
  sources: [
    client('Core/Types/Handshakes/HandshakeResponse.cs', 'FromBuffer'),
    server('Requests/Handshake/HandshakeHandler.cs', 'OnRequest'),
    docs('handshake', 'Handshake response'),
  ],
  clientReaction:
    'The client reads the fields in this order with no way to resynchronise: a missing or extra field shifts every value after it (a master address read as the packet size), and IsValid fails on any protocol but 1.',
  run: async (ctx: NoxConformContext, t: CheckRun) => {
    const { peer, hello } = await connected(ctx, t);
    const sent = peer.handshakeBytes(hello.uid);
    if (hello.uid !== 1)
      t.fail(`the Handshake reply has uid ${hello.uid}, not the request's 1`, { sent, received: hello.raw });
    if (hello.protocol !== PROTOCOL_VERSION)
      t.fail(`the Handshake reply says protocol ${hello.protocol}`, {
        sent,
        expected: 'protocol 0001',
        received: hello.raw,
      });
    // The address and port are what the server sees (a NAT's or a proxy's), so only a port of 0
    // (never a real one) is wrong here.
    if (hello.port === 0)
      t.fail("the Handshake reply gives the client's port as 0", {
        sent,
        expected: 'the client port as the server sees it',
        received: hello.raw,
      });
    if (hello.maxPacketSize < 64 || hello.connectionTimeout < 1 || hello.keepAliveInterval < 1)
      t.fail(
        `the Handshake reply's limits cannot work: max packet ${hello.maxPacketSize}, timeout ${hello.connectionTimeout} s, keep-alive ${hello.keepAliveInterval} s`,
        { sent, received: hello.raw },
      );
    return `client ${hello.clientId}, ${hello.ip}:${hello.port}, ${hello.masterAddress === undefined ? 'offline' : `master ${hello.masterAddress}`}, packets ≤ ${hello.maxPacketSize}, timeout ${hello.connectionTimeout} s, keep-alive ${hello.keepAliveInterval} s`;
  },
};

const keepAliveAdvertised: Check = {
  id: 'keep-alive.advertised',
  title: 'the advertised keep-alive interval is shorter than the connection timeout',
  rule: 'The client sends a Latency every keep-alive interval the Handshake advertises; that interval must leave room before the connection timeout the same Handshake advertises.',
  sources: [
    client('Core/Relay.cs', 'keep-alive loop (Latency every KeepAliveInterval)'),
    docs('latency', 'keep-alive'),
  ],
  clientReaction:
    'A client that pings exactly as told is timed out anyway: every idle player drops once per timeout.',
  requires: ['handshake.fields'],
  run: async (ctx: NoxConformContext, t: CheckRun) => {
    const { hello } = await connected(ctx, t);
    if (hello.keepAliveInterval >= hello.connectionTimeout)
      t.fail(
        `keep-alive ${hello.keepAliveInterval} s is not shorter than the ${hello.connectionTimeout} s timeout`,
        {
          received: hello.raw,
          expected: 'keep-alive interval < connection timeout',
        },
      );
    return `${hello.keepAliveInterval} s < ${hello.connectionTimeout} s`;
  },
};

const latency: Check = {
  id: 'latency',
  title: 'Latency is answered with the client timestamp unchanged and the uid echoed',
  rule: 'A Latency request (DateTime ms) gets a Latency reply with the same uid: the client timestamp as sent, then the server time.',
  sources: [
    client('Core/Types/Latency/LatencyResponse.cs', 'FromBuffer'),
    server('Requests/Latency/LatencyHandler.cs', 'OnRequest'),
    docs('latency', 'response'),
  ],
  clientReaction:
    'The client computes its round trip from the timestamp it gets back; a changed timestamp or uid gives a wrong ping or an unanswered request.',
  requires: ['handshake.fields'],
  run: async (ctx: NoxConformContext, t: CheckRun) => {
    const { peer } = await connected(ctx, t);
    const ts = 1_700_000_000_123n;
    const reply = await peer.request({ type: 'Latency', timestamp: ts }, 'Latency');
    if (reply.message.clientTimestamp !== ts)
      t.fail(`the Latency reply's client timestamp is ${reply.message.clientTimestamp}, not ${ts}`, {
        sent: peer.sent,
        received: reply.raw,
      });
    return 'timestamp and uid echoed';
  },
};

const auth: Check = {
  id: 'auth',
  title: 'Authentification with a valid token succeeds: user id, server address, display name',
  rule: 'Authentification (flags, access token) is answered with the request uid: result 0 (Success), then user id u32, server address and display name strings.',
  sources: [
    client('Core/Types/Authentication/AuthenticationResponse.cs', 'FromBuffer'),
    server('Requests/Authentification/AuthentificationHandler.cs', 'OnRequest'),
    docs('authentification', 'response'),
  ],
  clientReaction:
    'Without a Success the client cannot enter any instance; a reply in another shape leaves its login waiting until its request timeout.',
  requires: ['handshake.fields'],
  run: async (ctx: NoxConformContext, t: CheckRun) => {
    const { peer } = await authenticated(ctx, t, 0);
    void peer;
    return 'Success';
  },
};

const enter: Check = {
  id: 'enter',
  title: 'Enter an instance: Success with the player id, tps and threshold',
  rule: 'After authentication, Enter (instance, flags) is answered with the request uid: the instance, result 0 and the player fields (flags, player id, user id, server address, display name, creation time, tps, threshold).',
  sources: [
    client('Core/Types/Enter/EnterResponse.cs', 'FromBuffer'),
    server('Requests/Enter/EnterHandler.cs', 'OnRequest'),
    docs('enter', 'response'),
  ],
  clientReaction:
    'The client learns its own player id here: every transform and avatar message it sends carries it.',
  requires: ['auth'],
  run: async (ctx: NoxConformContext, t: CheckRun) => {
    const p = await player(ctx, t, 0);
    return `instance ${p.instance}: player ${p.playerId}, tps ${p.tps}, threshold ${p.threshold}`;
  },
};

const joinLeave: Check = {
  id: 'join-leave',
  title: "a second player's Join reaches the first, and its Leave when it quits",
  rule: 'When a second player enters (and is ready), players already in the instance get a Join (uid 0) with its player id; when it quits, they get a Leave with the same player id, and the player that quit gets its Quit answered.',
  sources: [
    client('Core/Types/Join/JoinEvent.cs', 'FromBuffer'),
    client('Core/Types/Leave/LeaveEvent.cs', 'FromBuffer'),
    docs('join', 'event'),
    docs('leave', 'event'),
  ],
  clientReaction:
    'A missed Join and the other player is invisible; a missed Leave and a ghost stays in the world until the instance is left.',
  requires: ['enter'],
  run: async (ctx: NoxConformContext, t: CheckRun) => {
    const a = await player(ctx, t, 0);
    const b = await player(ctx, t, 1);
    await knows(a, b);
    await b.peer.request(
      { type: 'Quit', instanceId: b.instance, quitType: QuitType.Normal, reason: null },
      'Quit',
    );
    await a.peer.next(
      `Leave for player ${b.playerId}`,
      is('Leave', (m) => m.playerId === b.playerId),
    );
    return `Join and Leave for player ${b.playerId}`;
  },
};

const joinCatchUp: Check = {
  id: 'join.catch-up',
  title: 'a newcomer gets a Join for every player already in the instance',
  rule: 'A player entering an instance where others already are gets a Join (uid 0) for each of them once it is ready, so it can show them; they are not sent again later.',
  sources: [
    client('Core/Types/Join/JoinEvent.cs', 'FromBuffer'),
    server('Requests/Enter/EnterHandler.cs', 'OnRequest'),
    docs('join', 'who receives it'),
  ],
  clientReaction:
    'Players already in the world stay invisible to the newcomer for the whole session (their transforms name a player it never heard of).',
  requires: ['join-leave'],
  run: async (ctx: NoxConformContext, t: CheckRun) => {
    const a = await player(ctx, t, 0);
    const b = await player(ctx, t, 1);
    await b.peer.next(
      `Join for player ${a.playerId} (already in the instance)`,
      is('Join', (m) => m.playerId === a.playerId && m.instanceId === b.instance),
    );
    return `newcomer told of player ${a.playerId}`;
  },
};

const transformRelay: Check = {
  id: 'transform.relay',
  title: 'a player transform reaches the other player, with the sender’s player id',
  rule: 'A Transform (instance, OnPlayer, player, rig, flags, position…) from a ready player is relayed to the other ready players with uid 0, the sender’s real player id and the values it set.',
  sources: [
    client('Core/Types/Transform/TransformEvent.cs', 'FromBuffer'),
    client('Core/Types/Transform/TransformRequest.cs', 'ToBuffer'),
    server('Requests/Transform/TransformHandler.cs', 'OnRequest'),
  ],
  clientReaction: "The other players' avatars never move (or move someone else's).",
  requires: ['join.catch-up'],
  run: async (ctx: NoxConformContext, t: CheckRun) => {
    const a = await player(ctx, t, 0);
    const b = await player(ctx, t, 1);
    await knows(b, a);
    const sent = a.peer.post({
      type: 'Transform',
      instanceId: a.instance,
      transformType: 1,
      playerId: SELF,
      rig: 0,
      flags: 0x01,
      position: { x: 1.5, y: 1.75, z: -2 },
    });
    const got = await b.peer.next(
      `Transform of player ${a.playerId}`,
      is('Transform', (m) => m.playerId === a.playerId && m.rig === 0),
    );
    const m = got.message as Extract<ServerMessage, { type: 'Transform' }>;
    if (m.position?.x !== 1.5 || m.position.y !== 1.75 || m.position.z !== -2)
      t.fail('the relayed Transform does not carry the position sent', { sent, received: got.raw });
    return `relayed to player ${b.playerId}`;
  },
};

const transformThreshold: Check = {
  id: 'transform.threshold',
  title: 'a move smaller than the threshold is not relayed; a larger one is',
  rule: 'An update that changes no field by more than the instance threshold (given in the Enter reply) is not relayed; one that does is (each rig at most tps times a second).',
  sources: [
    server('Requests/Transform/TransformHandler.cs', 'threshold'),
    client('Core/Types/Enter/EnterResponse.cs', 'Threshold'),
  ],
  clientReaction:
    "Without the threshold every player receives every jitter of everyone's tracked rigs: bandwidth grows with players² for no visible change.",
  requires: ['transform.relay'],
  run: async (ctx: NoxConformContext, t: CheckRun) => {
    const a = await player(ctx, t, 0);
    const b = await player(ctx, t, 1);
    await knows(b, a);
    if (!(a.threshold > 0)) t.skip(`the instance threshold is ${a.threshold}: every change is relayed`);
    const window = Math.ceil(1000 / Math.max(1, a.tps)) + 50;
    const move = (x: number) =>
      a.peer.post({
        type: 'Transform',
        instanceId: a.instance,
        transformType: 1,
        playerId: SELF,
        rig: 0,
        flags: 0x01,
        position: { x, y: 1, z: 0 },
      });
    const of = is('Transform', (m) => m.playerId === a.playerId && m.rig === 0);
    move(0);
    await b.peer.next('the first Transform', of);
    await new Promise((r) => setTimeout(r, window));
    const tiny = move(Math.fround(a.threshold / 4));
    const relayed = await b.peer.poll(of, window * 2);
    if (relayed !== undefined)
      t.fail(`a move of ${a.threshold / 4} (threshold ${a.threshold}) was relayed`, {
        sent: tiny,
        expected: 'nothing',
        received: relayed.raw,
      });
    move(a.threshold * 10);
    await b.peer.next(`a move of ${a.threshold * 10}`, of);
    return `threshold ${a.threshold}: small move held back, large one relayed`;
  },
};

const segmentation: Check = {
  id: 'segmentation',
  title: 'a request in Segmentation packets, sent out of order, is reassembled and answered',
  rule: 'Segmentation (segment id, total, index, data) carries a packet larger than fits: the server stores segments in any order (the data is everything after byte 11), and once all are there it handles the reassembled packet as if sent whole.',
  sources: [
    docs('segmentation', 'reassembly'),
    server('Requests/Segmentation/SegmentationHandler.cs', 'OnRequest'),
  ],
  clientReaction:
    'Anything bigger than the packet size (an avatar description, a large custom event) never arrives.',
  requires: ['latency'],
  run: async (ctx: NoxConformContext, t: CheckRun) => {
    const { peer } = await connected(ctx, t);
    const uid = peer.allocUid();
    const inner = NoxPeer.encode({ type: 'Latency', timestamp: 1_234_567n }, uid);
    const half = Math.ceil(inner.length / 2);
    const segment = (index: number, data: Buffer) =>
      NoxPeer.encode(
        { type: 'Segmentation', segmentId: 7, totalSegments: 2, currentSegment: index, segmentData: data },
        0,
      );
    const second = segment(1, inner.subarray(half));
    const first = segment(0, inner.subarray(0, half));
    peer.sendRaw(second);
    peer.sendRaw(first);
    const got = await peer.next(
      `Latency reply (uid ${uid}) to the reassembled request`,
      (p) => p.uid === uid && p.message.type === 'Latency',
    );
    void got;
    return '2 segments, last first: answered';
  },
};

const reliable: Check = {
  id: 'reliable',
  title: 'a Reliable container is unpacked in order, each packet answered with its own uid',
  rule: 'Reliable (count, then count × u16 length + a whole packet) hands each inner packet to the server as if sent alone, in order.',
  sources: [docs('reliable', 'processing'), server('Requests/Reliable/ReliableHandler.cs', 'OnRequest')],
  clientReaction: 'Messages a client batches this way are lost.',
  requires: ['latency'],
  run: async (ctx: NoxConformContext, t: CheckRun) => {
    const { peer } = await connected(ctx, t);
    const u1 = peer.allocUid();
    const u2 = peer.allocUid();
    const sent = peer.post({
      type: 'Reliable',
      messages: [
        NoxPeer.encode({ type: 'Latency', timestamp: 1n }, u1),
        NoxPeer.encode({ type: 'Latency', timestamp: 2n }, u2),
      ],
    });
    const r1 = await peer.next(
      `the Latency reply to inner packet 1 (uid ${u1})`,
      (p) => p.uid === u1 && p.message.type === 'Latency',
    );
    const r2 = await peer.next(
      `the Latency reply to inner packet 2 (uid ${u2})`,
      (p) => p.uid === u2 && p.message.type === 'Latency',
    );
    const order = peer.inbox.history.indexOf(r1.raw) < peer.inbox.history.indexOf(r2.raw);
    if (!order)
      t.fail('the inner packets were answered out of order', {
        sent,
        received: Buffer.concat([r2.raw, r1.raw]),
      });
    return 'both answered, in order';
  },
};

const keepAlive: Check = {
  id: 'keep-alive.kept',
  title: 'a client that sends Latency every keep-alive interval stays connected past the timeout',
  rule: 'Any valid packet, Latency included, resets the connection timeout: a client pinging every advertised keep-alive interval is never timed out.',
  sources: [
    client('Core/Relay.cs', 'keep-alive loop (Latency every KeepAliveInterval)'),
    docs('latency', 'keep-alive'),
  ],
  clientReaction: 'Idle players (menus, loading screens) drop every time the timeout passes.',
  requires: ['latency', 'keep-alive.advertised'],
  timeoutMs: 120_000,
  run: async (ctx: NoxConformContext, t: CheckRun) => {
    const { peer, hello } = await connected(ctx, t);
    const total = (hello.connectionTimeout + 2) * 1000;
    if (total > ctx.maxWaitMs)
      t.skip(`the ${hello.connectionTimeout} s timeout is longer than --max-wait-s allows`);
    const until = performance.now() + total;
    while (performance.now() < until) {
      await new Promise((r) => setTimeout(r, hello.keepAliveInterval * 1000));
      if (peer.closed) break;
      peer.post({ type: 'Latency', timestamp: BigInt(Date.now()) });
    }
    const dropped = await peer.poll((p) => p.message.type === 'Disconnect', 0);
    if (dropped !== undefined || peer.closed)
      t.fail(`the client was disconnected although it sent Latency every ${hello.keepAliveInterval} s`, {
        sent: peer.sent,
        received: dropped?.raw ?? peer.inbox.tail(),
      });
    await peer.request({ type: 'Latency', timestamp: 5n }, 'Latency');
    return `still connected after ${total / 1000} s`;
  },
};

const timeout: Check = {
  id: 'keep-alive.timeout',
  title: 'a silent player is timed out and the others get its Leave',
  rule: 'A client that sends nothing for the advertised connection timeout is disconnected: its players leave with quit type Timeout, and the other players of the instance get the Leave.',
  sources: [
    docs('index', 'timeout'),
    docs('leave', 'Timeout'),
    client('Core/Types/Leave/LeaveEvent.cs', 'FromBuffer'),
  ],
  clientReaction:
    'Players whose game crashed or lost its network stay in the world as frozen ghosts for everyone else.',
  requires: ['join-leave', 'keep-alive.advertised'],
  timeoutMs: 120_000,
  run: async (ctx: NoxConformContext, t: CheckRun) => {
    const a = await player(ctx, t, 0);
    const b = await player(ctx, t, 1);
    await knows(a, b);
    const wait = (b.hello.connectionTimeout + 4) * 1000;
    if (wait > ctx.maxWaitMs)
      t.skip(`the ${b.hello.connectionTimeout} s timeout is longer than --max-wait-s allows`);
    // b goes silent (its game froze); a goes on as before and waits for b's Leave.
    b.stop();
    const leave = await a.peer.poll(
      is('Leave', (m) => m.playerId === b.playerId),
      wait,
    );
    if (leave === undefined)
      t.fail(
        `no Leave for player ${b.playerId} ${wait / 1000} s after it went silent (timeout ${b.hello.connectionTimeout} s)`,
        {
          expected: `Leave for player ${b.playerId} with quit type 1 (Timeout)`,
          received: a.peer.inbox.tail(),
        },
      );
    const m = leave.message as Extract<ServerMessage, { type: 'Leave' }>;
    if (m.quitType !== QuitType.Timeout)
      t.fail(`the Leave says quit type ${m.quitType}, not ${QuitType.Timeout} (Timeout)`, {
        received: leave.raw,
      });
    return `Leave (Timeout) for player ${b.playerId}`;
  },
};

const disconnect: Check = {
  id: 'disconnect',
  title: 'Disconnect is confirmed with a Disconnect, and the session ends',
  rule: 'A Disconnect request is answered with a Disconnect (uid echoed, or 0 as the reference server does) and the session ends (TCP: the connection closes).',
  sources: [
    client('Core/Types/Disconnect/DisconnectRequest.cs', 'ToBuffer'),
    server('Requests/Disconnect/DisconnectHandler.cs', 'OnRequest'),
    docs('disconnect', 'confirmation'),
  ],
  clientReaction:
    'The client waits for the confirmation before it tears down; without it, quitting hangs until its request timeout.',
  requires: ['handshake.fields'],
  run: async (ctx: NoxConformContext, t: CheckRun) => {
    const { peer } = await connected(ctx, t);
    const uid = peer.allocUid();
    const sent = peer.post({ type: 'Disconnect', reason: null }, uid);
    await peer.next(
      'Disconnect confirmation',
      (p) => p.message.type === 'Disconnect' && (p.uid === uid || p.uid === 0),
    );
    if (ctx.transport === 'tcp') {
      await peer.inbox.poll(() => false, 3000);
      if (!peer.closed)
        t.fail('the TCP connection stayed open 3 s after the Disconnect confirmation', {
          sent,
          expected: 'the server closes the connection',
          received: peer.inbox.tail(),
        });
    }
    return 'confirmed';
  },
};

export const noxChecks: readonly Check[] = [
  handshakeFields,
  keepAliveAdvertised,
  latency,
  auth,
  enter,
  joinLeave,
  joinCatchUp,
  transformRelay,
  transformThreshold,
  segmentation,
  reliable,
  keepAlive,
  timeout,
  disconnect,
];
