/**
 * The Unity Relay conformance checks: each a rule read from Unity Transport's relay code
 * (needle-mirror/com.unity.transport, the mirror of the UPM package) or Unity's Relay
 * documentation, run over the transport a game picks (udp, dtls, ws, wss).
 */
import type { CheckRun, CheckSource, ConformCheck } from '../../../core/conform.js';
import { CheckFailure } from '../../../core/conform.js';
import { createBind } from '../client.js';
import { encodeMessage } from '../messages.js';
import {
  type Allocation,
  allocate,
  bind,
  bound,
  connectedPair,
  connectRequest,
  errorBytes,
  hostAndClient,
  isBindReceived,
  isType,
  join,
  open,
  ping,
  relay,
  type UnityConformContext,
} from './context.js';
import { openWebSocket } from './link.js';

type Check = ConformCheck<UnityConformContext>;

const utp = (path: string, symbol: string): CheckSource => ({
  repo: 'needle-mirror/com.unity.transport',
  path,
  symbol,
});
const relayLayer = (symbol: string) => utp('Runtime/Layers/RelayLayer.cs', symbol);
const unityDocs = (page: string, symbol: string): CheckSource => ({
  repo: 'docs.unity.com',
  path: `relay/${page}`,
  symbol,
  url: `https://docs.unity.com/ugs/manual/relay/manual/${page}`,
});

const hex = (b: Uint8Array): string => Buffer.from(b).toString('hex');

const transportDtls: Check = {
  id: 'transport.dtls',
  title: 'the DTLS handshake takes the allocation id as PSK identity and the allocation key as PSK',
  rule: "Unity's DTLS client (DTLS 1.2, PSK) sends the 16 allocation id bytes as its identity and uses the 64-byte allocation key as the pre-shared key; the relay completes the handshake with them.",
  sources: [
    utp('Runtime/Layers/DTLSLayer.cs', 'Initialize'),
    utp('Runtime/Relay/RelayServerData.cs', 'IsSecure'),
  ],
  clientReaction:
    'A failed handshake is "DTLS handshake failed": the connection ends with AuthenticationFailure and the player never reaches the relay.',
  applies: (ctx) => (ctx.transport === 'dtls' ? undefined : 'only for --transport dtls'),
  run: async (ctx: UnityConformContext, t: CheckRun) => {
    const a = await allocate(ctx, t);
    await open(ctx, t, a);
    return `handshake done, identity ${hex(a.id)}`;
  },
};

const transportWs: Check = {
  id: 'transport.websocket',
  title: "the WebSocket upgrade reply passes Unity Transport's own checks",
  rule: 'To the request Unity Transport writes (GET /, Upgrade, Connection, Sec-WebSocket-Version 13, Sec-WebSocket-Key, Host = IP:port; TLS 1.2 at most for wss) the relay answers HTTP/1.1 101 with Upgrade: websocket, Connection: upgrade and the right Sec-WebSocket-Accept, and without Sec-WebSocket-Protocol or Sec-WebSocket-Extensions.',
  sources: [
    utp('Runtime/WebSocket/WebSocket.cs', 'Connect, Handshake'),
    utp('Runtime/Layers/WebSocketLayer.cs', 'ProcessReceive'),
  ],
  clientReaction:
    'Unity refuses the reply and the connection never opens: a subprotocol or an extension in the 101 (a default in many WebSocket servers) is enough.',
  applies: (ctx) =>
    ctx.transport === 'ws' || ctx.transport === 'wss' ? undefined : 'only for --transport ws or wss',
  run: async (ctx: UnityConformContext, t: CheckRun) => {
    const ws = await openWebSocket(ctx.target!, t, ctx.link);
    if (ws.problems.length > 0)
      t.fail(`Unity Transport would refuse the upgrade reply: ${ws.problems.join('; ')}`, {
        sent: ws.request,
        expected:
          'HTTP/1.1 101 …, Upgrade: websocket, Connection: upgrade, Sec-WebSocket-Accept, no Protocol/Extensions',
        received: ws.reply,
      });
    return `101 accepted${ws.tlsVersion === undefined ? '' : ` over ${ws.tlsVersion}`}`;
  },
};

const transports = ['transport.dtls', 'transport.websocket'];

const bindOk: Check = {
  id: 'bind.ok',
  title: 'a valid BIND is answered with exactly DA 72 00 01 (BIND_RECEIVED)',
  rule: 'A 295-byte BIND (accept mode 0, little-endian nonce, connection data padded to 255, HMAC-SHA256 of its first 263 bytes keyed with the allocation key) gets the 4-byte BIND_RECEIVED back; Unity sends it again every second until then.',
  sources: [
    relayLayer('ProcessRelayServerConnection'),
    utp('Runtime/Relay/Messages/RelayMessageBind.cs', 'Write'),
    utp('Runtime/Relay/RelayServerData.cs', 'ComputeBindHMAC'),
  ],
  clientReaction:
    'Without BIND_RECEIVED the client keeps binding for 60 s (maxConnectAttempts × connectTimeoutMS) and then fails with AllocationInvalid ("server didn\'t answer any BIND message"); Unity Transport 1.x also ignores a BIND_RECEIVED that is not exactly 4 bytes.',
  requires: transports,
  run: async (ctx: UnityConformContext, t: CheckRun) => {
    const a = await allocate(ctx, t);
    const link = await open(ctx, t, a);
    await bind(link, a, 0);
    return `BIND (nonce 0) answered da720001 over ${ctx.transport}`;
  },
};

const bindBadHmac: Check = {
  id: 'bind.bad-hmac',
  title: 'a BIND whose HMAC is wrong is not accepted',
  rule: 'The relay checks the BIND HMAC against the allocation key and binds nothing when it does not match (silence, or ERROR 2); the same allocation then binds with a correct BIND.',
  sources: [
    utp('Runtime/Relay/RelayServerData.cs', 'ComputeBindHMAC'),
    unityDocs('authentication', 'BIND HMAC'),
  ],
  clientReaction:
    "A relay that ignores the HMAC lets anyone who learns an allocation id (it travels in every RELAY) bind it from their own address and take the player's traffic: the real player gets ERROR 3 and re-binds against them.",
  requires: ['bind.ok'],
  run: async (ctx: UnityConformContext, t: CheckRun) => {
    const a = await allocate(ctx, t);
    const link = await open(ctx, t, a);
    const bad = createBind(0, a.connectionData, a.key);
    bad[bad.length - 1]! ^= 0x01;
    link.send(bad);
    const got = await link.poll(isBindReceived, 1500);
    if (got !== undefined)
      t.fail('a BIND with a wrong HMAC was answered BIND_RECEIVED', {
        sent: bad,
        expected: 'no BIND_RECEIVED (silence, or ERROR 2)',
        received: got,
        note: 'the last byte of the HMAC was flipped',
      });
    await bind(link, a, 1);
    return 'wrong HMAC refused; the right one then bound';
  },
};

const bindRebind: Check = {
  id: 'bind.rebind',
  title: 'a BIND again from the same address with the same nonce is answered',
  rule: 'After 3 keep-alive periods without hearing from the relay Unity binds again with the same nonce from the same address; the relay answers BIND_RECEIVED again (the nonce must only grow for a new address).',
  sources: [relayLayer('ProcessRelayServerConnection'), unityDocs('authentication', 'nonce')],
  clientReaction:
    'An idle Netcode host (keep-alive 0.5 s) re-binds every 1.5 s of silence; a relay that refuses the repeated BIND leaves it re-binding until it gives up after 60 s.',
  requires: ['bind.ok'],
  run: async (ctx: UnityConformContext, t: CheckRun) => {
    const a = await allocate(ctx, t);
    const link = await open(ctx, t, a);
    const first = await bind(link, a, 0);
    link.send(first);
    const got = await link.poll(isBindReceived, 3000);
    if (got === undefined)
      t.fail('the same BIND sent again from the bound address got no BIND_RECEIVED', {
        sent: first,
        expected: 'da720001',
        received: link.inbox.tail(),
      });
    return 'BIND_RECEIVED again';
  },
};

const pingEcho: Check = {
  id: 'ping.echo',
  title: 'a PING from a bound client is answered',
  rule: "Unity sends PING (DA 72 00 02, its allocation id, 01 00) when it has sent nothing for a keep-alive period (3 s; Netcode: 0.5 s); the relay answers (it echoes the PING), since any message from the relay is what keeps the client's connection alive.",
  sources: [
    relayLayer('ProcessRelayServerConnection'),
    utp('Runtime/Relay/Messages/RelayMessagePing.cs', 'Write'),
    utp('Runtime/Relay/RelayNetworkParameter.cs', 'k_DefaultConnectionTimeMS'),
  ],
  clientReaction:
    'A client that hears nothing for 3 keep-alive periods binds again; under Netcode that is a re-BIND every 1.5 s for every idle player, for as long as the session lasts.',
  requires: ['bind.ok'],
  run: async (ctx: UnityConformContext, t: CheckRun) => {
    const a = await allocate(ctx, t);
    const link = await bound(ctx, t, a);
    const p = ping(a);
    link.send(p);
    const got = await link.next('answer to the PING', (m) => m.length >= 4 && m[0] === 0xda && m[1] === 0x72);
    if (got[3] === 12)
      t.fail(`the PING was answered with ERROR ${got[got.length - 1]}`, {
        sent: p,
        expected: p,
        received: got,
      });
    return got.equals(p) ? 'echoed' : `answered type ${got[3]}`;
  },
};

const connectAccepted: Check = {
  id: 'connect.accepted',
  title: 'CONNECT_REQUEST is answered ACCEPTED (host id, client id) to the client only',
  rule: "A bound client sends CONNECT_REQUEST (its id, 255, the host's connection data) every second; the relay answers the client with a 36-byte ACCEPTED whose From is the host's allocation id and To the client's, and tells the host nothing.",
  sources: [
    relayLayer('ProcessReceivedMessages (Accepted)'),
    utp('Runtime/Relay/Messages/RelayMessageConnectRequest.cs', 'Write'),
    utp('Runtime/Relay/Messages/RelayMessageAccepted.cs', 'FromAllocationId'),
  ],
  clientReaction:
    'The client takes From as the host\'s address for all its RELAYs: a wrong id and its packets go nowhere. A host that gets an ACCEPTED logs an error ("one and only one connection is expected").',
  requires: ['bind.ok'],
  run: async (ctx: UnityConformContext, t: CheckRun) => {
    const { host, client } = await hostAndClient(ctx, t);
    const hostLink = await bound(ctx, t, host);
    const clientLink = await bound(ctx, t, client);
    const request = connectRequest(client);
    let accepted: Buffer | undefined;
    for (let attempt = 0; attempt < 3 && accepted === undefined; attempt++) {
      clientLink.send(request);
      accepted = await clientLink.poll(isType(6), 1000);
    }
    const expected = encodeMessage({
      type: 'ACCEPTED',
      fromAllocationId: host.id,
      toAllocationId: client.id,
    });
    if (accepted === undefined)
      t.fail('no ACCEPTED for CONNECT_REQUEST (sent 3 times, 1 s apart)', {
        sent: request,
        expected,
        received: clientLink.inbox.tail(),
      });
    if (!accepted.equals(expected))
      t.fail('the ACCEPTED does not name the host as From and the client as To in 36 bytes', {
        sent: request,
        expected,
        received: accepted,
      });
    const atHost = await hostLink.poll(isType(6), 500);
    if (atHost !== undefined)
      t.fail('the host was sent an ACCEPTED too', {
        sent: request,
        expected: 'nothing to the host',
        received: atHost,
      });
    return 'ACCEPTED to the client only';
  },
};

const connectFull: Check = {
  id: 'connect.full',
  title: "a client beyond the host's maxConnections is refused (REJECTED), not accepted",
  rule: 'When a host allocated with maxConnections already has that many clients, a further CONNECT_REQUEST is answered REJECTED (DA 72 00 08), or the join is refused at the API.',
  sources: [
    relayLayer('ProcessReceivedMessages (Rejected)'),
    unityDocs('limitations', 'maximum connections'),
  ],
  clientReaction:
    'Unity (2.5.1 and later) stops connecting with "Relay allocation maximum connected players limit reached"; older clients ignore REJECTED and time out. A relay that accepts the client lets more players in than the game allowed.',
  requires: ['connect.accepted'],
  run: async (ctx: UnityConformContext, t: CheckRun) => {
    const { host, client, joinCode } = await hostAndClient(ctx, t, 1);
    let second: Allocation;
    try {
      second = await join(ctx, t, joinCode);
    } catch (err) {
      if (err instanceof CheckFailure && /answered 4(?!29)\d\d/.test(err.message))
        return `the API refused the second join (${err.message})`;
      throw err;
    }
    await bound(ctx, t, host);
    const firstLink = await bound(ctx, t, client);
    firstLink.send(connectRequest(client));
    await firstLink.next('ACCEPTED for the first client', isType(6));
    const secondLink = await bound(ctx, t, second);
    const request = connectRequest(second);
    let answer: Buffer | undefined;
    for (let attempt = 0; attempt < 3 && answer === undefined; attempt++) {
      secondLink.send(request);
      answer = await secondLink.poll((m) => isType(8)(m) || isType(6)(m), 1000);
    }
    if (answer === undefined)
      t.fail('no answer to a CONNECT_REQUEST beyond maxConnections 1', {
        sent: request,
        expected: 'REJECTED (da720008…)',
        received: secondLink.inbox.tail(),
      });
    if (isType(6)(answer))
      t.fail('a second client was ACCEPTED by a host allocated for 1', {
        sent: request,
        expected: 'REJECTED (da720008…)',
        received: answer,
      });
    return 'REJECTED';
  },
};

const relayBothWays: Check = {
  id: 'relay.both-ways',
  title: 'RELAY is forwarded unchanged, client to host and host to client',
  rule: 'A RELAY (DA 72 00 0A, From, To, big-endian length, data) from a linked peer reaches the other peer byte for byte, From and To untouched.',
  sources: [
    relayLayer('ProcessReceivedMessages (Relay)'),
    utp('Runtime/Relay/Messages/RelayMessageRelay.cs', 'Write'),
  ],
  clientReaction:
    'Unity drops a RELAY whose To is not its own id or whose length does not match, and learns of a new client only from the From of its first RELAY: anything rewritten is lost traffic.',
  requires: ['connect.accepted'],
  run: async (ctx: UnityConformContext, t: CheckRun) => {
    const { host, client, hostLink, clientLink } = await connectedPair(ctx, t);
    const up = relay(client, host, Buffer.from('55545001010102030405060708', 'hex'));
    clientLink.send(up);
    const atHost = await hostLink.next('RELAY at the host', isType(10));
    if (!atHost.equals(up))
      t.fail('the RELAY reached the host changed', { sent: up, expected: up, received: atHost });
    const down = relay(host, client, Buffer.from('55545001020807060504030201', 'hex'));
    hostLink.send(down);
    const atClient = await clientLink.next('RELAY at the client', isType(10));
    if (!atClient.equals(down))
      t.fail('the RELAY reached the client changed', { sent: down, expected: down, received: atClient });
    return 'both directions byte for byte';
  },
};

const relayLength: Check = {
  id: 'relay.length',
  title: 'a RELAY whose length field does not match its size is not forwarded',
  rule: 'The big-endian DataLength at offset 36 must equal the bytes after the 38-byte header; a RELAY where it does not (longer or shorter) is dropped, not delivered.',
  sources: [
    relayLayer('ProcessReceivedMessages (Relay: DataLength != Length)'),
    utp('Runtime/Relay/Messages/RelayMessageRelay.cs', 'SwitchEndianness'),
  ],
  clientReaction:
    "Unity drops such a RELAY anyway; a relay that forwards it spends the recipient's bandwidth on garbage, and a little-endian length (the classic mistake) means no RELAY is ever delivered.",
  requires: ['relay.both-ways'],
  run: async (ctx: UnityConformContext, t: CheckRun) => {
    const { host, client, hostLink, clientLink } = await connectedPair(ctx, t);
    const good = relay(client, host, Buffer.from('0102030405060708', 'hex'));
    const long = Buffer.from(good);
    long.writeUInt16BE(12, 36); // says 12, carries 8
    const short = Buffer.from(good);
    short.writeUInt16BE(4, 36); // says 4, carries 8
    clientLink.send(long);
    clientLink.send(short);
    clientLink.send(good);
    await hostLink.next('the well-formed RELAY sent after two malformed ones', (m) => m.equals(good));
    const late = await hostLink.poll(isType(10), 300);
    const early = hostLink.inbox.history.find((m) => isType(10)(m) && !m.equals(good));
    const wrong = early ?? late;
    if (wrong !== undefined)
      t.fail(
        `a RELAY whose length field says ${wrong.readUInt16BE(36)} for ${wrong.length - 38} bytes was forwarded`,
        {
          sent: wrong,
          expected: 'only the well-formed RELAY at the host',
          received: wrong,
        },
      );
    return 'longer and shorter lengths dropped';
  },
};

const disconnectForwarded: Check = {
  id: 'disconnect.forwarded',
  title: 'DISCONNECT from a peer reaches the other peer',
  rule: 'A DISCONNECT (DA 72 00 09, From, To) from a linked peer is forwarded to To unchanged.',
  sources: [
    relayLayer('ProcessReceivedMessages (Disconnect)'),
    utp('Runtime/Relay/Messages/RelayMessageDisconnect.cs', 'Write'),
  ],
  clientReaction:
    'Unity closes the connection to From when it gets a DISCONNECT addressed to itself; without it the other side only notices after its disconnect timeout (30 s by default).',
  requires: ['connect.accepted'],
  run: async (ctx: UnityConformContext, t: CheckRun) => {
    const { host, client, hostLink, clientLink } = await connectedPair(ctx, t);
    const bye = encodeMessage({ type: 'DISCONNECT', fromAllocationId: client.id, toAllocationId: host.id });
    clientLink.send(bye);
    const got = await hostLink.next('DISCONNECT at the host', isType(9));
    if (!got.equals(bye))
      t.fail('the DISCONNECT reached the host changed', { sent: bye, expected: bye, received: got });
    return 'forwarded unchanged';
  },
};

const closeUnbinds: Check = {
  id: 'close.unbinds',
  title: 'CLOSE unbinds: the binding stops answering, and a new BIND binds again',
  rule: 'CLOSE (DA 72 00 0B + allocation id, 20 bytes) from the bound address unbinds the allocation: a PING is no longer answered as from a bound client, and a later BIND with a newer nonce binds it again.',
  sources: [
    unityDocs('relay-message-protocol', 'CLOSE'),
    {
      repo: 'needle-mirror/com.unity.services.relay',
      path: 'Runtime/Models/Allocation.cs',
      symbol: 'AllocationIdBytes',
    },
  ],
  clientReaction:
    'Unity Transport itself never sends CLOSE; other clients use it to leave cleanly. A relay that ignores it keeps forwarding to an address that has gone, until the idle timeout.',
  requires: ['ping.echo'],
  run: async (ctx: UnityConformContext, t: CheckRun) => {
    const a = await allocate(ctx, t);
    const link = await bound(ctx, t, a);
    const close = encodeMessage({ type: 'CLOSE', allocationId: a.id });
    link.send(close);
    const p = ping(a);
    link.send(p);
    const echoed = await link.poll((m) => m.equals(p), 1000);
    if (echoed !== undefined)
      t.fail('after CLOSE a PING was still echoed as from a bound client', {
        sent: Buffer.concat([close, p]),
        expected: 'no PING echo (ERROR 3, or nothing)',
        received: echoed,
      });
    if (link.inbox.closedReason === undefined) await bind(link, a, 1);
    return 'unbound, then bound again';
  },
};

const errorRoaming: Check = {
  id: 'error.roaming',
  title: 'traffic from a new address gets ERROR 3, and a BIND with the next nonce moves the binding',
  rule: 'A PING for a bound allocation from another address (a new port, DTLS association or WebSocket connection) is answered with a 21-byte ERROR 3 for that allocation; a BIND from the new address with a larger nonce is then accepted and the binding follows it.',
  sources: [
    relayLayer('ProcessReceivedMessages (Error: ErrorCode == 3)'),
    utp('Runtime/Relay/Messages/RelayMessageError.cs', 'LogError'),
    unityDocs('authentication', 'nonce'),
  ],
  clientReaction:
    'On ERROR 3 Unity increments its nonce and binds again ("our IP has changed"): this is how a player survives a NAT rebinding or a Wi-Fi to mobile switch. Without it the player is cut off; Unity 1.x also ignores an ERROR that is not exactly 21 bytes.',
  requires: ['ping.echo'],
  run: async (ctx: UnityConformContext, t: CheckRun) => {
    const a = await allocate(ctx, t);
    await bound(ctx, t, a);
    const moved = await open(ctx, t, a);
    const p = ping(a);
    moved.send(p);
    const expected = errorBytes(a, 3);
    const got = await moved.next('ERROR 3 at the new address', isType(12));
    if (!got.equals(expected))
      t.fail(`the answer from a new address was not ERROR 3 for the allocation in 21 bytes`, {
        sent: p,
        expected,
        received: got,
      });
    await bind(moved, a, 1);
    moved.send(p);
    await moved.next('PING echo at the new address after the re-BIND', (m) => m.equals(p));
    return 'ERROR 3, then bound at the new address';
  },
};

/** How long past a keep-alive period the window check stays silent. */
const KEEP_ALIVE_SLACK_MS = 1000;
const UTP_KEEP_ALIVE_MS = 3000;

const idleWindow: Check = {
  id: 'idle.keep-alive-window',
  title: "a binding survives the silence between Unity's keep-alives",
  rule: `Unity pings after ${UTP_KEEP_ALIVE_MS / 1000} s without sending; a binding silent for ${(UTP_KEEP_ALIVE_MS + KEEP_ALIVE_SLACK_MS) / 1000} s is still bound, and its PING still answered.`,
  sources: [
    utp('Runtime/Relay/RelayNetworkParameter.cs', 'k_DefaultConnectionTimeMS'),
    relayLayer('ProcessRelayServerConnection'),
    unityDocs('client-timeouts', 'idle timeout'),
  ],
  clientReaction:
    'A relay whose idle timeout is shorter than the keep-alive drops idle players: their next PING goes unanswered (or gets ERROR 4, which Unity treats as fatal).',
  requires: ['ping.echo'],
  timeoutMs: 15_000,
  run: async (ctx: UnityConformContext, t: CheckRun) => {
    // A joined client: the shortest idle timeout Unity documents (a lone host gets 60 s).
    const { client: a } = await hostAndClient(ctx, t);
    const link = await bound(ctx, t, a);
    await new Promise((r) => setTimeout(r, UTP_KEEP_ALIVE_MS + KEEP_ALIVE_SLACK_MS));
    const p = ping(a);
    link.send(p);
    const got = await link.next(
      `answer to a PING after ${(UTP_KEEP_ALIVE_MS + KEEP_ALIVE_SLACK_MS) / 1000} s of silence`,
      (m) => m.length >= 4 && m[0] === 0xda,
    );
    if (got[3] === 12)
      t.fail(`the PING was answered ERROR ${got[got.length - 1]}`, { sent: p, expected: p, received: got });
    return `still bound after ${(UTP_KEEP_ALIVE_MS + KEEP_ALIVE_SLACK_MS) / 1000} s`;
  },
};

const idleExpiry: Check = {
  id: 'idle.expired',
  title: 'an allocation idle past the timeout is gone: its BIND gets ERROR 4',
  rule: 'After the idle timeout (Unity documents 10 s; --idle-timeout-ms) the allocation is gone, and the BIND the client sends after its silence is answered with ERROR 4 (allocation not found), 21 bytes.',
  sources: [
    unityDocs('client-timeouts', 'allocation ID not found'),
    relayLayer('ProcessReceivedMessages (Error: ErrorCode == 4)'),
    utp('Runtime/Relay/Messages/RelayMessageError.cs', 'LogError'),
  ],
  clientReaction:
    'ERROR 4 tells Unity the allocation is invalid and the game must make a new one; without it the client re-binds into silence for 60 s before it gives up.',
  requires: ['bind.ok'],
  timeoutMs: 60_000,
  run: async (ctx: UnityConformContext, t: CheckRun) => {
    // A joined client: a host nobody has joined lives longer (60 s "host alone", in Unity's docs).
    const { client: a } = await hostAndClient(ctx, t);
    const link = await bound(ctx, t, a);
    const wait = ctx.idleTimeoutMs + 1500;
    if (wait > t.remainingMs() - 4000)
      t.skip(`--idle-timeout-ms ${ctx.idleTimeoutMs} is longer than this check may wait`);
    await new Promise((r) => setTimeout(r, wait));
    // Unity re-binds after silence with the same nonce; over DTLS and WebSocket a closed
    // transport is reopened first, which counts as a new address (nonce + 1).
    let target = link;
    let nonce = 0;
    if (link.inbox.closedReason !== undefined) {
      try {
        target = await open(ctx, t, a);
      } catch (err) {
        if (ctx.transport === 'dtls' && err instanceof CheckFailure)
          return 'the DTLS handshake for the expired allocation was refused';
        throw err;
      }
      nonce = 1;
    }
    const b = createBind(nonce, a.connectionData, a.key);
    target.send(b);
    const expected = errorBytes(a, 4);
    const got = await target.next(
      `answer to a BIND ${wait / 1000} s after the last message`,
      (m) => isBindReceived(m) || isType(12)(m),
    );
    if (isBindReceived(got))
      t.fail(
        `the allocation was still there after ${wait / 1000} s of silence (idle timeout ${ctx.idleTimeoutMs} ms)`,
        {
          sent: b,
          expected,
          received: got,
        },
      );
    if (!got.equals(expected))
      t.fail('the answer was not ERROR 4 for the allocation in 21 bytes', {
        sent: b,
        expected,
        received: got,
      });
    return `ERROR 4 after ${wait / 1000} s`;
  },
};

export const unityChecks: readonly Check[] = [
  transportDtls,
  transportWs,
  bindOk,
  bindBadHmac,
  bindRebind,
  pingEcho,
  connectAccepted,
  connectFull,
  relayBothWays,
  relayLength,
  disconnectForwarded,
  closeUnbinds,
  errorRoaming,
  idleWindow,
  idleExpiry,
];
