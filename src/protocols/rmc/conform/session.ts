/**
 * What the RMC checks share: RMC requests built by hand in each variant's layout, responses read
 * with gamewire's envelope declarations, and a connection that carries them over PRUDP (with the
 * CONNECT of the variant: an empty auth CONNECT for classic, the ECDH exchange for HyperScape) or
 * over u32-framed TCP.
 */
import { createCipheriv, createECDH, randomBytes } from 'node:crypto';
import { deflateSync } from 'node:zlib';
import { CheckFailure, type CheckRun, type ConformTarget } from '../../../core/conform.js';
import { TcpProbe } from '../../../core/conform-probes.js';
import type { Json } from '../../../wire/codec.js';
import { rmcCodec } from '../codec.js';
import type { ChecksumConfig } from '../prudp/packet.js';
import { ClassicPayloadCodec, classicRc4, type PayloadCodec, SecurePayloadCodec } from '../prudp/payload.js';
import { ECK1_BLOB_BYTES, eck1FromPoint, pointFromEck1, sessionKeyFromSecret } from '../prudp/secure.js';
import type { MethodDef, ProtocolDef } from '../signature.js';
import { PrudpPeer, type Received } from './prudp-peer.js';

export type RmcConformVariant = 'hyperscape' | 'classic' | 'nex-verbose';

export interface RmcConformContext {
  target: ConformTarget | undefined;
  transport: 'prudp' | 'tcp';
  variant: RmcConformVariant;
  accessKey: string;
  checksum: ChecksumConfig;
  user: string;
  password: string;
  /** Where the secure server is reached, when not at the address its prudps URL names (a NAT, a proxy). */
  secureTarget: ConformTarget | undefined;
  /** The `--protocols` packs' protocols, and the methods `rmc.pack` calls (`--method`, or all). */
  packs: readonly ProtocolDef[];
  packMethods: readonly MethodDef[];
}

// ---- RMC messages ------------------------------------------------------------------------------

export function qString(s: string): Buffer {
  const b = Buffer.from(`${s}\0`, 'utf8');
  const out = Buffer.alloc(2 + b.length);
  out.writeUInt16LE(b.length, 0);
  b.copy(out, 2);
  return out;
}

export function u32(v: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(v >>> 0, 0);
  return b;
}

/** A List<StationURL> of one URL. */
export const urlList = (url: string): Buffer => Buffer.concat([u32(1), qString(url)]);

/** A string-named request (HyperScape, nex-verbose): protocol, isRequest, call id, method, no class versions, args. */
export function namedRequest(
  protocol: string,
  method: string,
  callId: number,
  args: Buffer = Buffer.alloc(0),
): Buffer {
  const body = Buffer.concat([
    qString(protocol),
    Buffer.from([1]),
    u32(callId),
    qString(method),
    u32(0),
    args,
  ]);
  return Buffer.concat([u32(body.length), body]);
}

/** A classic packed request: protocol id | 0x80, call id, method id, args. */
export function classicRequest(
  protocolId: number,
  methodId: number,
  callId: number,
  args: Buffer = Buffer.alloc(0),
): Buffer {
  const body = Buffer.concat([Buffer.from([protocolId | 0x80]), u32(callId), u32(methodId), args]);
  return Buffer.concat([u32(body.length), body]);
}

/** The request a real client of the variant makes first, and what a correct answer names. */
export interface Call {
  name: string;
  bytes: Buffer;
  callId: number;
  method: string;
  methodId: number;
}

let nextCallId = 0x4000;

export function standardCall(ctx: RmcConformContext): Call {
  const callId = nextCallId++;
  if (ctx.variant === 'classic')
    return {
      name: 'TicketGranting::Login (10::1)',
      bytes: classicRequest(10, 1, callId, qString(ctx.user)),
      callId,
      method: '',
      methodId: 1,
    };
  const method = 'CloudServersProtocol::GetDatacenters_V1';
  return {
    name: method,
    bytes: namedRequest('CloudServersProtocol', method, callId),
    callId,
    method,
    methodId: 0,
  };
}

/** A call of a method the server cannot have, with `extra` bytes of arguments. */
export function unknownCall(ctx: RmcConformContext, extra = 0): Call {
  const callId = nextCallId++;
  // Random bytes: a payload that compression cannot shrink below one fragment.
  const args = randomBytes(extra);
  if (ctx.variant === 'classic')
    return {
      name: 'TicketGranting::#0x7ff0',
      bytes: classicRequest(10, 0x7ff0, callId, args),
      callId,
      method: '',
      methodId: 0x7ff0,
    };
  const method = 'CloudServersProtocol::ConformNoSuchMethod_V1';
  return {
    name: method,
    bytes: namedRequest('CloudServersProtocol', method, callId, args),
    callId,
    method,
    methodId: 0,
  };
}

export type RmcReply = { type: string; callId: number } & Record<string, Json>;

/** Reads an RMC message with the variant's declaration, or fails saying why the client could not. */
export function readReply(ctx: RmcConformContext, message: Buffer, sent: Buffer): RmcReply {
  let json: Json;
  try {
    json = rmcCodec.decode(message, { variant: ctx.variant });
  } catch (err) {
    throw new CheckFailure(
      `the answer does not read as a ${ctx.variant} RMC message: ${(err as Error).message}`,
      {
        sent,
        received: message,
      },
    );
  }
  if (Array.isArray(json) || json === null || typeof json !== 'object')
    throw new CheckFailure(
      `the answer holds ${Array.isArray(json) ? json.length : 0} RMC messages, not one`,
      { sent, received: message },
    );
  return json as RmcReply;
}

// ---- connections -------------------------------------------------------------------------------

/** The HyperScape CONNECT: our ECK1 key; the session key from the server's (signature not checked). */
export function ecdhExchange(): {
  payload: Buffer;
  accept(ack: Buffer): { codec: PayloadCodec; key: Buffer };
} {
  const ecdh = createECDH('prime256v1');
  ecdh.generateKeys();
  return {
    payload: eck1FromPoint(ecdh.getPublicKey()),
    accept(ack) {
      if (
        ack.length < 2 + 64 + 2 + ECK1_BLOB_BYTES ||
        ack.readUInt16LE(0) !== 64 ||
        ack.readUInt16LE(66) !== ECK1_BLOB_BYTES
      )
        throw new CheckFailure(
          'the CONNECT-ACK does not carry a signed ECK1 key (u16 64, signature, u16 72, key)',
          { received: ack },
        );
      const key = sessionKeyFromSecret(
        ecdh.computeSecret(pointFromEck1(Buffer.from(ack.subarray(68, 68 + ECK1_BLOB_BYTES)))),
      );
      return { codec: new SecurePayloadCodec(key), key };
    },
  };
}

/** A PRUDP connection set up as the variant's clients do it. */
export interface PrudpSession {
  peer: PrudpPeer;
  codec: PayloadCodec;
  synAck: Received;
  connectAck: Received;
  /** The HyperScape AES session key (undefined for classic). */
  aesKey: Buffer | undefined;
}

export async function prudpSession(
  ctx: RmcConformContext,
  t: CheckRun,
  target = ctx.target!,
): Promise<PrudpSession> {
  const peer = await PrudpPeer.open(target, t, ctx.checksum);
  const synAck = await peer.syn();
  if (ctx.variant === 'classic') {
    const connectAck = await peer.connect(Buffer.alloc(0));
    return { peer, codec: new ClassicPayloadCodec(), synAck, connectAck, aesKey: undefined };
  }
  const x = ecdhExchange();
  const connectAck = await peer.connect(x.payload);
  const { codec, key } = x.accept(connectAck.payload);
  return { peer, codec, synAck, connectAck, aesKey: key };
}

/** The compression byte and body as the variant carries it, compressed or stored on purpose. */
export function encodeWith(s: PrudpSession, body: Buffer, compressed: boolean): Buffer {
  const z = deflateSync(body);
  const plain = compressed
    ? Buffer.concat([Buffer.from([Math.min(255, Math.max(1, Math.ceil(body.length / z.length)))]), z])
    : Buffer.concat([Buffer.from([0]), body]);
  if (s.aesKey === undefined) return classicRc4(plain);
  const iv = randomBytes(16);
  const c = createCipheriv('aes-128-cbc', s.aesKey, iv);
  return Buffer.concat([iv, c.update(plain), c.final()]);
}

/** One call over PRUDP: sent, acknowledged, answered; returns the answer as read. */
export async function prudpCall(
  ctx: RmcConformContext,
  s: PrudpSession,
  call: Call,
): Promise<{ reply: RmcReply; message: Buffer; packets: Received[] }> {
  s.peer.sendMessage(call.bytes, s.codec);
  const { message, packets } = await s.peer.receiveMessage(s.codec);
  return { reply: readReply(ctx, message, call.bytes), message, packets };
}

/** A u32-framed TCP connection. */
export class TcpRmc {
  readonly probe: TcpProbe;
  private constructor(probe: TcpProbe) {
    this.probe = probe;
  }
  static async open(target: ConformTarget, t: CheckRun): Promise<TcpRmc> {
    return new TcpRmc(await TcpProbe.connect(target, t));
  }
  async next(what: string, timeoutMs = 8000): Promise<Buffer> {
    const head = await this.probe.read(4, what, timeoutMs);
    const n = head.readUInt32LE(0);
    if (n > 1 << 20)
      throw new CheckFailure(`${what} declares ${n} bytes`, { sent: this.probe.sent, received: head });
    return Buffer.concat([head, await this.probe.read(n, what, timeoutMs)]);
  }
}

/** One call over the chosen transport; returns the answer as read. */
export async function call(
  ctx: RmcConformContext,
  t: CheckRun,
  c: Call,
): Promise<{ reply: RmcReply; message: Buffer }> {
  if (ctx.transport === 'tcp') {
    const tcp = await TcpRmc.open(ctx.target!, t);
    tcp.probe.send(c.bytes);
    const message = await tcp.next(`answer to ${c.name}`);
    return { reply: readReply(ctx, message, c.bytes), message };
  }
  const s = await prudpSession(ctx, t);
  const r = await prudpCall(ctx, s, c);
  return { reply: r.reply, message: r.message };
}
