/**
 * VC-MP NPC LibRPC (`vcmp-rpc`). The wire layer is transport-free: ServerData rides inside VC-MP's
 * client-script-data messages, which gamewire does not carry, so this protocol has no `serve`.
 * Its "server" side is the builder (what the npc04relxx plugin does) and its "client" side is the
 * executor (what the NPC's LibRPC does).
 */
import type { ProtocolModule } from '../../core/protocol.js';
import { registerCommands } from './cli.js';
import { vcmpRpcCodec } from './codec.js';

export {
  createRpc,
  FloatArg,
  float,
  Quaternion,
  type RpcArg,
  type RpcBuilder,
  type RpcBuilderOptions,
  toRpcValue,
  Userdata,
  Vector,
} from './builder.js';
export {
  type DecodeServerDataOptions,
  decodeServerData,
  type EncodeServerDataOptions,
  encodePacket,
  encodeServerData,
  runServerDataLive,
  vcmpRpcCodec,
} from './codec.js';
export { squirrelDelegates } from './delegates.js';
export {
  type ExecutorOptions,
  type RpcErrorCode,
  RpcExecutionError,
  RpcExecutor,
  type RunContext,
  type RunResult,
} from './executor.js';
export type { LiveHooks, ReadMode } from './lenient.js';
export { IdentifierCodec, ServerDataCodec, ServerDataCodecs } from './messages.js';
export {
  type CallTag,
  Identifier,
  type IndirectCall,
  isNamedCall,
  MAX_DEPTH,
  MAX_PACKET_BYTES,
  type NamedCall,
  QuaternionPayload,
  type RpcCall,
  type RpcGet,
  type RpcSet,
  RpcString,
  type RpcValue,
  type ServerData,
  Tag,
  type TopItem,
  VectorPayload,
} from './values.js';

export const vcmpRpc: ProtocolModule = {
  name: 'vcmp-rpc',
  summary: 'VC-MP NPC LibRPC: serialized function calls between a server and its NPCs',
  codecs: [vcmpRpcCodec],
  registerCommands,
};
