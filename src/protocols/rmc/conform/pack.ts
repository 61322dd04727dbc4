/**
 * `gamewire conform rmc --protocols PACK [--method Protocol::Method,…]`: the methods of a game's
 * protocol pack (from its DDL, `gamewire rmc ddl import`) called on the server, each with the
 * zero value of its declared arguments. A server that implements a method must answer in the
 * pack's layout; one that does not must answer with an RMC error, never with silence.
 */
import type { CheckRun, ConformCheck } from '../../../core/conform.js';
import { UsageError } from '../../../core/errors.js';
import { type Codec, DecodeError, EncodeError, WireReader, WireWriter } from '../../../wire/index.js';
import { typedOrHex } from '../codec.js';
import { loadPacks } from '../ddl/pack.js';
import type { MethodDef, ProtocolDef } from '../signature.js';
import {
  type Call,
  classicRequest,
  namedRequest,
  prudpCall,
  prudpSession,
  type RmcConformContext,
  type RmcReply,
  readReply,
  TcpRmc,
} from './session.js';

/** The pack methods a run calls: every method of the packs, or those `--method` names. */
export function packMethods(
  files: string | undefined,
  names: string | undefined,
): { packs: ProtocolDef[]; methods: MethodDef[] } {
  if (files === undefined || files === '') {
    if (names !== undefined)
      throw new UsageError('--method names methods of a --protocols pack: give the pack');
    return { packs: [], methods: [] };
  }
  const packs = loadPacks(files);
  const all = packs.flatMap((p) => [...p.byName.values()]);
  if (names === undefined) return { packs, methods: all };
  const methods = names
    .split(',')
    .map((n) => n.trim())
    .filter((n) => n !== '')
    .map((n) => {
      const m = all.find((x) => x.fullName === n);
      if (m === undefined)
        throw new UsageError(`--method: ${n} is no method of the packs (give Protocol::Method)`);
      return m;
    });
  return { packs, methods };
}

/**
 * The zero value of a declaration as bytes: what it reads from zeros (0, "", empty lists, false),
 * written back canonically. Undefined when zeros are no value of it (an AnyDataHolder's name).
 */
export function zeroBytes(codec: Codec<unknown>): Buffer | undefined {
  try {
    const value = codec.read(new WireReader(Buffer.alloc(4096)));
    const w = new WireWriter();
    codec.write(w, value as never);
    return w.toBuffer();
  } catch (e) {
    if (e instanceof DecodeError || e instanceof EncodeError) return undefined;
    throw e;
  }
}

let nextCallId = 0x6000;

function packCall(ctx: RmcConformContext, m: MethodDef, ids: ReadonlyMap<string, number | undefined>): Call {
  const callId = nextCallId++;
  const args = zeroBytes(m.args) ?? Buffer.alloc(0);
  if (ctx.variant === 'classic') {
    const protocolId = ids.get(m.protocol)!;
    return {
      name: `${m.fullName} (${protocolId}::${m.id})`,
      bytes: classicRequest(protocolId, m.id!, callId, args),
      callId,
      method: '',
      methodId: m.id!,
    };
  }
  return {
    name: m.fullName,
    bytes: namedRequest(m.protocol, m.fullName, callId, args),
    callId,
    method: m.fullName,
    methodId: 0,
  };
}

export const packMethodsCheck: ConformCheck<RmcConformContext> = {
  id: 'rmc.pack',
  title: "every method of the --protocols packs is answered: in the pack's layout, or with an RMC error",
  rule: "Each method of the game's protocols (its DDL, imported as a pack), called with zero arguments, gets either a success response whose results read exactly as the pack declares them (every parameter, no byte left over) or an RMC error with the call's id.",
  sources: [
    { repo: 'unixoide/5th-echelon', path: 'scripts/ddls', symbol: 'ProtocolDeclaration (the game’s DDL)' },
  ],
  clientReaction:
    'The game reads the results with the layout its DDL compiled in: a field missing, extra or of another type desynchronises everything after it, and a call never answered waits out its timeout.',
  requires: ['rmc.call'],
  applies: (ctx) =>
    ctx.packMethods.length === 0 ? 'needs --protocols PACK (gamewire rmc ddl import)' : undefined,
  timeoutMs: 60_000,
  run: async (ctx: RmcConformContext, t: CheckRun) => {
    const ids = new Map(ctx.packs.map((p) => [p.name, p.id]));
    // Classic calls carry ids: a protocol the id mapping left without one cannot be called.
    const callable = ctx.packMethods.filter(
      (m) => ctx.variant !== 'classic' || (ids.get(m.protocol) !== undefined && m.id !== undefined),
    );
    if (callable.length === 0) t.skip('no pack method has a protocol id to call it by (classic)');
    let send: (c: Call) => Promise<{ reply: RmcReply; message: Buffer }>;
    if (ctx.transport === 'tcp') {
      const tcp = await TcpRmc.open(ctx.target!, t);
      send = async (c) => {
        tcp.probe.send(c.bytes);
        const message = await tcp.next(`answer to ${c.name}`);
        return { reply: readReply(ctx, message, c.bytes), message };
      };
    } else {
      const s = await prudpSession(ctx, t);
      send = (c) => prudpCall(ctx, s, c);
    }
    let answered = 0;
    let errors = 0;
    for (const m of callable) {
      const c = packCall(ctx, m, ids);
      const { reply, message } = await send(c);
      if (reply.callId !== c.callId)
        t.fail(`${c.name} was answered with call id ${reply.callId}, not ${c.callId}`, {
          sent: c.bytes,
          received: message,
        });
      if (reply.type === 'error') {
        errors++;
        continue;
      }
      if (reply.type !== 'response')
        t.fail(`${c.name} was answered with a ${reply.type}`, { sent: c.bytes, received: message });
      const results = Buffer.from(String(reply.results), 'hex');
      if (typeof typedOrHex(m.results, results) === 'string')
        t.fail(`the results of ${c.name} do not read as the pack declares them`, {
          sent: c.bytes,
          expected: `(${(m.results.info as { fields?: { name: string }[] }).fields?.map((f) => f.name).join(', ') ?? ''})`,
          received: message,
        });
      answered++;
    }
    const left = ctx.packMethods.length - callable.length;
    return `${answered} answered in the pack's layout, ${errors} with an RMC error${left === 0 ? '' : `; ${left} without a protocol id not called`}`;
  },
};
