/** `gamewire/vcmp-rpc`: VC-MP LibRPC builder, executor and codecs. */
export type { RpcArg, RpcBuilder } from '../protocols/vcmp-rpc/builder.js';
export { createRpc } from '../protocols/vcmp-rpc/builder.js';
export {
  decodeServerData,
  encodePacket,
  encodeServerData,
  vcmpRpcCodec,
} from '../protocols/vcmp-rpc/codec.js';
export type { RpcErrorCode } from '../protocols/vcmp-rpc/executor.js';
export { RpcExecutionError, RpcExecutor } from '../protocols/vcmp-rpc/executor.js';
export type { RpcCall, RpcValue, ServerData, TopItem } from '../protocols/vcmp-rpc/messages.js';
