/** `gamewire/vcmp-rpc`: VC-MP LibRPC builder, executor, Squirrel delegates and codecs. */
export type { RpcArg, RpcBuilder, RpcBuilderOptions } from '../protocols/vcmp-rpc/builder.js';
export {
  createRpc,
  FloatArg,
  float,
  Quaternion,
  toRpcValue,
  Userdata,
  Vector,
} from '../protocols/vcmp-rpc/builder.js';
export type { DecodeServerDataOptions, EncodeServerDataOptions } from '../protocols/vcmp-rpc/codec.js';
export {
  decodeServerData,
  encodePacket,
  encodeServerData,
  runServerDataLive,
  vcmpRpcCodec,
} from '../protocols/vcmp-rpc/codec.js';
export { SquirrelError, squirrelDelegates } from '../protocols/vcmp-rpc/delegates.js';
export type { ExecutorOptions, RpcErrorCode, RunContext, RunResult } from '../protocols/vcmp-rpc/executor.js';
export { RpcExecutionError, RpcExecutor } from '../protocols/vcmp-rpc/executor.js';
export type { LiveHooks, ReadMode } from '../protocols/vcmp-rpc/lenient.js';
export type { RpcCall, RpcValue, ServerData, TopItem } from '../protocols/vcmp-rpc/messages.js';
