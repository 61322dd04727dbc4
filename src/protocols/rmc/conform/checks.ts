/**
 * The Rendez-Vous RMC and PRUDP V0 conformance checks: rules read from servers the real Ubisoft
 * clients accept (unixoide/5th-echelon for Splinter Cell: Blacklist, ReHamster/AlcatrazServer's
 * QNetZ for Driver: San Francisco) and the NEX/Rendez-Vous documentation
 * (PretendoNetwork/nintendo-wiki), over raw UDP or u32-framed TCP.
 */
import { randomBytes } from 'node:crypto';
import type { CheckRun, CheckSource, ConformCheck } from '../../../core/conform.js';
import { CheckFailure } from '../../../core/conform.js';
import { Flag, PacketType } from '../prudp/constants.js';
import { deriveUserKey, openUserTicket } from '../prudp/kerberos.js';
import { kerberosCredentials } from '../prudp/profiles.js';
import { packMethodsCheck } from './pack.js';
import { hasFlag, PrudpPeer, type Received } from './prudp-peer.js';
import {
  type Call,
  call,
  classicRequest,
  encodeWith,
  namedRequest,
  prudpCall,
  prudpSession,
  type RmcConformContext,
  type RmcReply,
  readReply,
  standardCall,
  TcpRmc,
  unknownCall,
  urlList,
} from './session.js';

type Check = ConformCheck<RmcConformContext>;

const wiki = (path: string, symbol: string): CheckSource => ({
  repo: 'PretendoNetwork/nintendo-wiki',
  path: `docs/${path}`,
  symbol,
});
const fifth = (file: string, symbol: string): CheckSource => ({
  repo: 'unixoide/5th-echelon',
  path: `quazal/src/${file}`,
  symbol,
});
const qnetz = (file: string, symbol: string): CheckSource => ({
  repo: 'ReHamster/AlcatrazServer',
  path: `QNetZ/${file}`,
  symbol,
});
const handler = (symbol: string) => qnetz('Connection/QPacketHandlerPRUDP.cs', symbol);
const reliable = (symbol: string) => qnetz('Connection/QPacketHandlerPRUDPReliable.cs', symbol);

const prudpOnly = (ctx: RmcConformContext) =>
  ctx.transport === 'prudp' ? undefined : 'PRUDP only (--transport prudp)';
const classicPrudp = (ctx: RmcConformContext) =>
  ctx.transport !== 'prudp'
    ? 'PRUDP only (--transport prudp)'
    : ctx.variant !== 'classic'
      ? 'the classic (Kerberos) flow only (--variant classic)'
      : undefined;

const isData = (p: Received) => p.type === PacketType.DATA && !hasFlag(p, Flag.ACK);
const isDataAck = (seq: number) => (p: Received) =>
  p.type === PacketType.DATA && hasFlag(p, Flag.ACK) && p.sequenceId === seq;

/** The answer to `c` must be its success response in the variant's layout. */
function expectResponse(
  ctx: RmcConformContext,
  t: CheckRun,
  c: Call,
  reply: RmcReply,
  message: Buffer,
): void {
  if (reply.type !== 'response')
    t.fail(`${c.name} was answered with ${reply.type === 'error' ? 'an RMC error' : reply.type}`, {
      sent: c.bytes,
      expected: 'a success response',
      received: message,
    });
  if (reply.callId !== c.callId)
    t.fail(`the response carries call id ${reply.callId}, not the request's ${c.callId}`, {
      sent: c.bytes,
      received: message,
    });
  if (ctx.variant === 'classic') {
    const methodField = message.readUInt32LE(10);
    if (methodField !== (c.methodId | 0x8000))
      t.fail(
        `the response names method 0x${methodField.toString(16)}, not 0x${(c.methodId | 0x8000).toString(16)} (the id with 0x8000)`,
        {
          sent: c.bytes,
          received: message,
        },
      );
  } else if (reply.method !== `${c.method}*`)
    t.fail(`the response names "${String(reply.method)}", not "${c.method}*"`, {
      sent: c.bytes,
      received: message,
    });
}

const syn: Check = {
  id: 'prudp.syn',
  title: 'SYN is answered with SYN-ACK carrying the server’s connection signature',
  rule: 'A SYN (0x3f → 0x31, type SYN, NEED_ACK, signature 0, sequence 0, connection signature 0) gets a SYN with the ACK flag back, to the client’s vport, with a non-zero connection signature the client will put in every later packet, and a checksum that verifies with the game’s access key.',
  sources: [wiki('prudp.md', 'Connection (SYN)'), fifth('prudp.rs', 'handle_syn'), handler('ProcessSYN')],
  clientReaction:
    'Without the SYN-ACK the client resends its SYN until it gives up; with a wrong checksum it drops the SYN-ACK as damaged.',
  applies: prudpOnly,
  run: async (ctx: RmcConformContext, t: CheckRun) => {
    const s = await PrudpPeer.open(ctx.target!, t, ctx.checksum);
    const ack = await s.syn();
    if (ack.connectionSignature === 0)
      t.fail('the SYN-ACK carries connection signature 0', {
        sent: s.sent,
        expected: 'a non-zero signature',
        received: ack.raw,
      });
    if (ack.destination !== 0x3f)
      t.fail(`the SYN-ACK goes to vport 0x${ack.destination.toString(16)}, not the client's 0x3f`, {
        sent: s.sent,
        received: ack.raw,
      });
    return `signature 0x${(ack.connectionSignature >>> 0).toString(16)}`;
  },
};

const connect: Check = {
  id: 'prudp.connect',
  title: 'CONNECT is answered with CONNECT-ACK echoing the sequence, signed with the client’s signature',
  rule: "CONNECT (RELIABLE|NEED_ACK, the server's signature, sequence 1, the client's own connection signature, the variant's payload) gets a CONNECT with ACK back: sequence 1, the client's signature as packet signature, and a payload the client can read (classic: the RC4 of an empty body; HyperScape: the signed ECDH key).",
  sources: [
    wiki('prudp.md', 'Connection (CONNECT)'),
    fifth('prudp.rs', 'handle_connect'),
    handler('ProcessCONNECT'),
  ],
  clientReaction:
    'The client checks the ACK’s signature and resends CONNECT until it gets one it accepts; a HyperScape client without a readable key cannot encrypt anything.',
  requires: ['prudp.syn'],
  applies: prudpOnly,
  run: async (ctx: RmcConformContext, t: CheckRun) => {
    const s = await prudpSession(ctx, t);
    const a = s.connectAck;
    if (a.sequenceId !== 1)
      t.fail(`the CONNECT-ACK has sequence ${a.sequenceId}, not 1`, { sent: s.peer.sent, received: a.raw });
    if (a.packetSignature >>> 0 !== s.peer.clientSignature >>> 0)
      t.fail(
        `the CONNECT-ACK is signed 0x${(a.packetSignature >>> 0).toString(16)}, not with the client's 0x${(s.peer.clientSignature >>> 0).toString(16)}`,
        {
          sent: s.peer.sent,
          received: a.raw,
        },
      );
    return `session 0x${a.sessionId.toString(16)}`;
  },
};

const rmcCall: Check = {
  id: 'rmc.call',
  title: 'an RMC call is answered with its response: call id and method echoed',
  rule: 'A request in the variant’s layout (classic: u8 protocol | 0x80, u32 call id, u32 method id, args; HyperScape and nex-verbose: String protocol, bool, u32 call id, String method, class versions, args) gets a success response with the same call id and the method (classic: the id | 0x8000; string-named: the name + "*").',
  sources: [
    wiki('nex/index.md', 'RMC request/response'),
    qnetz('RMC/RMC.cs', 'HandleRequest, SendResponseWithACK'),
    qnetz('RMC/RMCPacket.cs', 'RMCPacket'),
  ],
  clientReaction:
    'The client matches the answer to its pending call by call id: any other id and the call waits until its timeout.',
  requires: ['prudp.connect'],
  run: async (ctx: RmcConformContext, t: CheckRun) => {
    const c = standardCall(ctx);
    const { reply, message } = await call(ctx, t, c);
    expectResponse(ctx, t, c, reply, message);
    return `${c.name} answered`;
  },
};

const rmcError: Check = {
  id: 'rmc.error',
  title: 'a call of a method the server lacks is answered with an RMC error, not silence',
  rule: 'A call the server cannot serve gets a failure response with the same call id: classic and nex-verbose a u32 error code with its top bit set, HyperScape a namespace and code.',
  sources: [wiki('nex/index.md', 'error response'), qnetz('RMC/RMC.cs', 'SendResponseWithACK (error)')],
  clientReaction:
    'Without an answer the client waits out its call timeout (and often its whole login) instead of reporting the error.',
  requires: ['rmc.call'],
  run: async (ctx: RmcConformContext, t: CheckRun) => {
    const c = unknownCall(ctx);
    const { reply, message } = await call(ctx, t, c);
    if (reply.type !== 'error')
      t.fail(`${c.name} was answered with a ${reply.type}`, {
        sent: c.bytes,
        expected: 'an RMC error',
        received: message,
      });
    if (reply.callId !== c.callId)
      t.fail(`the error carries call id ${reply.callId}, not ${c.callId}`, {
        sent: c.bytes,
        received: message,
      });
    if (ctx.variant !== 'hyperscape' && ((reply.errorCode as number) & 0x80000000) === 0)
      t.fail(`the error code 0x${(reply.errorCode as number).toString(16)} lacks the top bit`, {
        sent: c.bytes,
        received: message,
      });
    return ctx.variant === 'hyperscape'
      ? `${String(reply.namespace)}/${String(reply.code)}`
      : `0x${(reply.errorCode as number).toString(16)}`;
  },
};

const dataAck: Check = {
  id: 'prudp.ack',
  title: 'every reliable DATA is acknowledged on its own: same sequence and fragment id',
  rule: 'A DATA with NEED_ACK gets a DATA with ACK back carrying its sequence id and fragment id, signed with the client’s signature, from the server’s session.',
  sources: [wiki('prudp.md', 'Acknowledgement'), fifth('prudp.rs', 'send_ack'), handler('MakeACK')],
  clientReaction:
    'An unacknowledged packet is resent until the client gives up on the connection (about 20 s).',
  requires: ['rmc.call'],
  applies: prudpOnly,
  run: async (ctx: RmcConformContext, t: CheckRun) => {
    const s = await prudpSession(ctx, t);
    const c = standardCall(ctx);
    const [sent] = s.peer.sendMessage(c.bytes, s.codec);
    const ack = await s.peer.next(`ACK of DATA sequence ${sent!.seq}`, isDataAck(sent!.seq));
    if (ack.fragmentId !== sent!.frag)
      t.fail(`the ACK has fragment id ${ack.fragmentId}, not ${sent!.frag}`, {
        sent: sent!.raw,
        received: ack.raw,
      });
    if (ack.packetSignature >>> 0 !== s.peer.clientSignature >>> 0)
      t.fail('the ACK is not signed with the client’s signature', { sent: sent!.raw, received: ack.raw });
    if (ack.sessionId !== s.connectAck.sessionId)
      t.fail(
        `the ACK comes from session 0x${ack.sessionId.toString(16)}, not the server's 0x${s.connectAck.sessionId.toString(16)}`,
        {
          sent: sent!.raw,
          received: ack.raw,
        },
      );
    return `sequence ${sent!.seq} acknowledged`;
  },
};

const checksum: Check = {
  id: 'prudp.checksum',
  title: 'a packet with a wrong checksum is ignored, the same with the right one is served',
  rule: 'The last byte (or 4) of every packet is its checksum, seeded with the access key; a packet whose checksum does not verify is dropped: not acknowledged, not handled.',
  sources: [
    wiki('prudp.md', 'Checksum'),
    fifth('prudp/packet.rs', 'validate'),
    qnetz('Connection/QPacket.cs', 'MakeChecksum'),
  ],
  clientReaction:
    'A server that acts on damaged packets executes corrupted calls; one that mixes keys up serves another game’s clients.',
  requires: ['prudp.ack'],
  applies: prudpOnly,
  run: async (ctx: RmcConformContext, t: CheckRun) => {
    const s = await prudpSession(ctx, t);
    const c = standardCall(ctx);
    const seq = s.peer.seq;
    const good = s.peer.build(
      {
        type: PacketType.DATA,
        flags: Flag.RELIABLE | Flag.NEED_ACK | Flag.HAS_SIZE,
        sequenceId: seq,
        fragmentId: 0,
      },
      s.codec.encode(c.bytes),
    );
    const bad = Buffer.from(good);
    bad[bad.length - 1]! ^= 0x5a;
    s.peer.sendRaw(bad);
    const acked = await s.peer.poll(isDataAck(seq), 800);
    if (acked !== undefined)
      t.fail('a DATA packet with a wrong checksum was acknowledged', {
        sent: bad,
        expected: 'nothing',
        received: acked.raw,
      });
    const answered = await s.peer.poll(isData, 200);
    if (answered !== undefined)
      t.fail('a DATA packet with a wrong checksum was answered', {
        sent: bad,
        expected: 'nothing',
        received: answered.raw,
      });
    s.peer.seq++;
    s.peer.sendRaw(good);
    await s.peer.next('ACK of the same DATA with its right checksum', isDataAck(seq));
    return 'damaged packet dropped, intact one acknowledged';
  },
};

const compression: Check = {
  id: 'prudp.compression',
  title: 'a payload is read whether its compression byte says stored (0) or zlib',
  rule: 'Every DATA payload starts with a compression byte (inside RC4 for classic, inside AES for HyperScape): 0 means the body follows as is, any other value (the ratio) means a zlib stream follows.',
  sources: [
    wiki('prudp.md', 'Compression'),
    qnetz('Connection/QPacket.cs', 'QPacket (usesCompression = payload[0] != 0)'),
    qnetz('Helper.cs', 'Decompress'),
  ],
  clientReaction:
    'The clients compress when it pays and store otherwise: a server that reads one form only drops the other calls.',
  requires: ['rmc.call'],
  applies: prudpOnly,
  run: async (ctx: RmcConformContext, t: CheckRun) => {
    const s = await prudpSession(ctx, t);
    for (const compressed of [false, true]) {
      const c = standardCall(ctx);
      const seq = s.peer.seq++;
      s.peer.sendRaw(
        s.peer.build(
          {
            type: PacketType.DATA,
            flags: Flag.RELIABLE | Flag.NEED_ACK | Flag.HAS_SIZE,
            sequenceId: seq,
            fragmentId: 0,
          },
          encodeWith(s, c.bytes, compressed),
        ),
      );
      let answer: { message: Buffer };
      try {
        answer = await s.peer.receiveMessage(s.codec);
      } catch (err) {
        if (err instanceof CheckFailure)
          t.fail(
            `a call whose payload is ${compressed ? 'zlib-compressed (ratio byte)' : 'stored (compression byte 0)'} was not answered`,
            err.evidence,
          );
        throw err;
      }
      expectResponse(ctx, t, c, readReply(ctx, answer.message, c.bytes), answer.message);
    }
    return 'stored and compressed payloads both answered';
  },
};

const fragmentsIn: Check = {
  id: 'prudp.fragments-in',
  title: 'a call in several fragments (1, 2, …, 0) is reassembled',
  rule: 'A message longer than one packet arrives as DATA packets with consecutive sequence ids and fragment ids 1, 2, … and 0 for the last, each payload encrypted and compressed on its own; the server joins them in sequence order and handles the whole message.',
  sources: [wiki('prudp.md', 'Fragmentation'), reliable('Defrag'), fifth('prudp.rs', 'handle_data')],
  clientReaction:
    'Long calls (a friends list, a large station URL set) never arrive: the client waits out its timeout.',
  requires: ['rmc.error'],
  applies: prudpOnly,
  run: async (ctx: RmcConformContext, t: CheckRun) => {
    const s = await prudpSession(ctx, t);
    const c = unknownCall(ctx, 2000);
    const packets = s.peer.sendMessage(c.bytes, s.codec);
    const { message } = await s.peer.receiveMessage(s.codec);
    const reply = readReply(ctx, message, c.bytes);
    if (reply.callId !== c.callId)
      t.fail(`the answer carries call id ${reply.callId}, not ${c.callId}`, {
        sent: c.bytes,
        received: message,
      });
    return `${packets.length} fragments reassembled`;
  },
};

/**
 * A station URL the server echoes back, long enough for an answer of several fragments, and
 * random so that compression does not shrink it into one.
 */
function longUrl(): string {
  return `prudp:/address=10.1.2.3;port=3074;sid=15;note=${randomBytes(2400).toString('base64url')}`;
}

const fragmentsOut: Check = {
  id: 'prudp.fragments-out',
  title: 'an answer longer than a packet comes as fragments 1, …, 0 that reassemble',
  rule: 'The server cuts a long answer into fragments of at most 963 plaintext bytes, numbered 1, 2, … and 0 for the last, with consecutive sequence ids.',
  sources: [wiki('prudp.md', 'Fragmentation'), handler('MakeAndSend')],
  clientReaction:
    'The client reassembles by fragment id up to 0: fragments numbered the other way round (n−1 … 0) or too large to fit its buffers leave the call unanswered.',
  requires: ['prudp.fragments-in', 'prudp.compression', 'kerberos.secure'],
  applies: prudpOnly,
  run: async (ctx: RmcConformContext, t: CheckRun) => {
    const callId = 0x7000;
    const classic = ctx.variant === 'classic';
    const s = classic ? await secureSession(ctx, t) : await prudpSession(ctx, t);
    const bytes = classic
      ? classicRequest(11, 1, callId, urlList(longUrl()))
      : namedRequest('LoginProtocol', 'LoginProtocol::Register_V1', callId, urlList(longUrl()));
    s.peer.sendMessage(bytes, s.codec);
    const { message, packets } = await s.peer.receiveMessage(s.codec);
    if (packets.length < 2) t.skip(`the answer (${message.length} bytes) fit in one packet`);
    const ids = packets.map((p) => p.fragmentId);
    const want = packets.map((_, i) => (i === packets.length - 1 ? 0 : i + 1));
    if (ids.join() !== want.join())
      t.fail(`the answer's fragments are numbered ${ids.join(', ')}, not ${want.join(', ')}`, {
        sent: bytes,
        received: Buffer.concat(packets.map((p) => p.raw.subarray(0, 16))),
      });
    const reply = readReply(ctx, message, bytes);
    if (reply.callId !== callId)
      t.fail(`the reassembled answer carries call id ${reply.callId}`, {
        sent: bytes,
        received: message.subarray(0, 64),
      });
    return `${message.length} bytes in ${packets.length} fragments`;
  },
};

const retransmit: Check = {
  id: 'prudp.retransmit',
  title: 'an answer the client does not acknowledge is sent again, and stops once acknowledged',
  rule: 'The server resends a reliable DATA that was not acknowledged (same sequence id, same payload) after its retransmission delay, and stops when the ACK comes.',
  sources: [wiki('prudp.md', 'Reliability'), reliable('CheckResendPackets, RetrySend'), reliable('OnGotAck')],
  clientReaction:
    'Over a lossy link the lost answer never comes again: the call hangs and the client disconnects on its timeout.',
  requires: ['rmc.call'],
  applies: prudpOnly,
  timeoutMs: 20_000,
  run: async (ctx: RmcConformContext, t: CheckRun) => {
    const s = await prudpSession(ctx, t);
    const c = standardCall(ctx);
    s.peer.sendMessage(c.bytes, s.codec);
    const first = await s.peer.next('answer', isData);
    const again = await s.peer.next(
      `answer sent again (sequence ${first.sequenceId}) while unacknowledged`,
      (p) => isData(p) && p.sequenceId === first.sequenceId,
      8000,
    );
    if (!again.payload.equals(first.payload) && s.aesKey === undefined)
      t.fail('the resent packet carries another payload', { expected: first.raw, received: again.raw });
    s.peer.ack(again);
    const sameAnswer = (p: Received) => isData(p) && p.sequenceId === first.sequenceId;
    let more = await s.peer.poll(sameAnswer, 2500);
    if (more !== undefined) {
      // One copy may cross the ACK (its timer fired before the server read the ACK, as happens on
      // a busy server): a client acknowledges it again, and then no further copy may come.
      s.peer.ack(more);
      more = await s.peer.poll(sameAnswer, 2500);
    }
    if (more !== undefined)
      t.fail('the answer was sent again after it was acknowledged (twice)', {
        sent: s.peer.sent,
        received: more.raw,
      });
    return `resent once unacknowledged, then stopped`;
  },
};

const duplicate: Check = {
  id: 'prudp.duplicate',
  title: 'a request received twice is acknowledged twice and answered once',
  rule: 'A reliable DATA whose sequence id was already received (the client resent it because its ACK was lost) is acknowledged again and not delivered a second time.',
  sources: [
    wiki('prudp.md', 'Reliability'),
    reliable('GetCachedResponseByRequestPacket'),
    handler('ProcessPacket (resend?)'),
  ],
  clientReaction:
    'A lost ACK makes the client resend: a server that runs the call again buys twice, posts twice, or answers a call id the client has already settled.',
  requires: ['prudp.ack'],
  applies: prudpOnly,
  run: async (ctx: RmcConformContext, t: CheckRun) => {
    const s = await prudpSession(ctx, t);
    const c = standardCall(ctx);
    const [sent] = s.peer.sendMessage(c.bytes, s.codec);
    await s.peer.next('ACK of the request', isDataAck(sent!.seq));
    const first = await s.peer.receiveMessage(s.codec);
    const answered = new Set(first.packets.map((p) => p.sequenceId));
    s.peer.sendRaw(sent!.raw);
    await s.peer.next('a second ACK for the repeated request', isDataAck(sent!.seq));
    // The answer sent again under its own sequence ids is a retransmission (QNetZ replays its
    // cached answer); a packet with a new sequence id is the call run a second time.
    const twice = await s.peer.poll((p) => isData(p) && !answered.has(p.sequenceId), 1500);
    if (twice !== undefined)
      t.fail('the repeated request was answered again, as a new message', {
        sent: sent!.raw,
        expected: 'only an ACK (or the same answer resent)',
        received: twice.raw,
      });
    return 're-acknowledged, answered once';
  },
};

const ping: Check = {
  id: 'prudp.ping',
  title: 'PING is acknowledged',
  rule: 'A PING with NEED_ACK gets a PING with ACK back, carrying its sequence id.',
  sources: [wiki('prudp.md', 'PING'), handler('ProcessPING')],
  clientReaction:
    'The client pings when it has nothing to send; unanswered pings count toward its disconnect timeout.',
  requires: ['prudp.connect'],
  applies: prudpOnly,
  run: async (ctx: RmcConformContext, t: CheckRun) => {
    const s = await prudpSession(ctx, t);
    const p = s.peer.ping();
    await s.peer.next(
      `ACK of PING ${p.seq}`,
      (x) => x.type === PacketType.PING && hasFlag(x, Flag.ACK) && x.sequenceId === p.seq,
    );
    return `sequence ${p.seq} acknowledged`;
  },
};

const disconnect: Check = {
  id: 'prudp.disconnect',
  title: 'DISCONNECT is acknowledged',
  rule: 'A DISCONNECT gets a DISCONNECT with ACK back carrying its sequence id (the official server sends it more than once).',
  sources: [wiki('prudp.md', 'DISCONNECT'), handler('ProcessDISCONNECT')],
  clientReaction:
    'The client waits for the ACK before it forgets the connection; without it, logging out takes its full timeout.',
  requires: ['prudp.connect'],
  applies: prudpOnly,
  run: async (ctx: RmcConformContext, t: CheckRun) => {
    const s = await prudpSession(ctx, t);
    const d = s.peer.disconnect();
    await s.peer.next(
      `ACK of DISCONNECT ${d.seq}`,
      (x) => x.type === PacketType.DISCONNECT && hasFlag(x, Flag.ACK) && x.sequenceId === d.seq,
    );
    return 'acknowledged';
  },
};

/** Login on the auth connection, ticket opened with the password, secure CONNECT with it. */
async function secureSession(ctx: RmcConformContext, t: CheckRun) {
  const auth = await prudpSession(ctx, t);
  const login: Call = {
    name: 'TicketGranting::Login',
    bytes: classicRequest(10, 1, 0x6001, qStringOf(ctx.user)),
    callId: 0x6001,
    method: '',
    methodId: 1,
  };
  const { message } = await prudpCall(ctx, auth, login);
  const results = message.subarray(14);
  if (message[5] !== 1) t.fail(`Login(${ctx.user}) failed`, { sent: login.bytes, received: message });
  const retval = results.readUInt32LE(0);
  if (retval !== 0x00010001)
    t.fail(`Login(${ctx.user}) returned 0x${retval.toString(16)}, not success`, {
      sent: login.bytes,
      received: message,
    });
  const pid = results.readUInt32LE(4);
  const ticketLength = results.readUInt32LE(8);
  const sealed = results.subarray(12, 12 + ticketLength);
  const urlLength = results.readUInt16LE(12 + ticketLength);
  const url = results.subarray(14 + ticketLength, 14 + ticketLength + urlLength - 1).toString('utf8');
  const ticket = openUserTicket(sealed, deriveUserKey(pid, ctx.password));
  if (ticket === undefined)
    t.fail(`the ticket for pid ${pid} does not open with MD5^(65000 + pid % 1024) of the password`, {
      sent: login.bytes,
      received: sealed,
      note: `--password ${ctx.password}`,
    });
  // The client goes where the URL says; a loopback or unspecified address means the target's host.
  const address = /address=([^;]+)/.exec(url)?.[1];
  const port = Number(/port=(\d+)/.exec(url)?.[1] ?? ctx.target!.port);
  const secure = ctx.secureTarget ?? {
    host:
      address === undefined || address === '0.0.0.0' || address.startsWith('127.')
        ? ctx.target!.host
        : address,
    port,
  };
  const creds = kerberosCredentials({ internal: ticket.internal, sessionKey: ticket.sessionKey, pid });
  const peer = await PrudpPeer.open(secure, t, ctx.checksum);
  const synAck = await peer.syn();
  const connectAck = await peer.connect(creds.connectPayload());
  let codec: ReturnType<typeof creds.accept>;
  try {
    codec = creds.accept(connectAck.payload);
  } catch (err) {
    t.fail(`the secure CONNECT-ACK does not answer the ticket’s check: ${(err as Error).message}`, {
      sent: peer.sent,
      received: connectAck.raw,
    });
  }
  return { peer, codec, synAck, connectAck, aesKey: undefined, pid, url };
}

function qStringOf(s: string): Buffer {
  const b = Buffer.from(`${s}\0`, 'utf8');
  const out = Buffer.alloc(2 + b.length);
  out.writeUInt16LE(b.length, 0);
  b.copy(out, 2);
  return out;
}

const kerberos: Check = {
  id: 'kerberos.secure',
  title: 'Kerberos: a ticket from Login opens a secure connection where Register succeeds',
  rule: 'TicketGranting::Login(name) on the auth connection returns success, the user’s pid, a ticket sealed with MD5^(65000 + pid % 1024)(password) and the secure server’s prudps URL; a CONNECT carrying the internal ticket and a request sealed with the session key gets back check + 1; SecureConnection::Register then succeeds on that connection.',
  sources: [
    wiki('nex/kerberos.md', 'tickets'),
    wiki('nex/protocols/secure-connection/index.md', 'Register'),
    qnetz('Helper.cs', 'DeriveKey'),
    handler('MakeConnectPayload'),
  ],
  clientReaction:
    'A client that cannot open its ticket or gets no check + 1 never reaches the secure server: no login at all.',
  requires: ['rmc.call'],
  applies: classicPrudp,
  run: async (ctx: RmcConformContext, t: CheckRun) => {
    const s = await secureSession(ctx, t);
    const register: Call = {
      name: 'SecureConnection::Register (11::1)',
      bytes: classicRequest(11, 1, 0x6002, urlList('prudp:/address=127.0.0.1;port=3074;sid=15')),
      callId: 0x6002,
      method: '',
      methodId: 1,
    };
    const r = await prudpCall(ctx, s, register);
    expectResponse(ctx, t, register, r.reply, r.message);
    const retval = r.message.readUInt32LE(14);
    if (retval !== 0x00010001)
      t.fail(`Register returned 0x${retval.toString(16)}`, { sent: register.bytes, received: r.message });
    return `pid ${s.pid} registered on ${s.url.split(';')[0]}`;
  },
};

const tcpFraming: Check = {
  id: 'tcp.framing',
  title: 'calls cut across writes, or several in one write, are all answered',
  rule: 'Over TCP every RMC message is framed by its u32 length: a request split across writes is read whole, and several requests in one write are each answered.',
  sources: [
    wiki('nex/index.md', 'RMC message (u32 size)'),
    qnetz('RMC/RMCPacket.cs', 'RMCPacket (u32 size)'),
  ],
  clientReaction:
    'TCP delivers bytes, not messages: a server that reads one call per read loses calls under load.',
  requires: ['rmc.call'],
  applies: (ctx) => (ctx.transport === 'tcp' ? undefined : 'TCP only (--transport tcp)'),
  run: async (ctx: RmcConformContext, t: CheckRun) => {
    const tcp = await TcpRmc.open(ctx.target!, t);
    const a = standardCall(ctx);
    const b = standardCall(ctx);
    const both = Buffer.concat([a.bytes, b.bytes]);
    tcp.probe.send(both.subarray(0, 3));
    await new Promise((r) => setTimeout(r, 50));
    tcp.probe.send(both.subarray(3));
    const got = [
      readReply(ctx, await tcp.next('first answer'), both),
      readReply(ctx, await tcp.next('second answer'), both),
    ];
    const ids = got.map((r) => r.callId).sort();
    if (ids.join() !== [a.callId, b.callId].sort().join())
      t.fail(`answered call ids ${ids.join(', ')}, not ${a.callId}, ${b.callId}`, { sent: both });
    return 'both answered';
  },
};

export const rmcChecks: readonly Check[] = [
  syn,
  connect,
  rmcCall,
  rmcError,
  dataAck,
  checksum,
  compression,
  fragmentsIn,
  kerberos,
  fragmentsOut,
  retransmit,
  duplicate,
  ping,
  disconnect,
  tcpFraming,
  packMethodsCheck,
];
