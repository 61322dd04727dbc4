/** `gamewire/vcmp-rpc/codec`: LibRPC ServerData packets; loads nothing else. */
export {
  decodeServerData,
  encodePacket,
  encodeServerData,
  vcmpRpcCodec,
} from '../protocols/vcmp-rpc/codec.js';
export type { RpcCall, RpcValue, ServerData, TopItem } from '../protocols/vcmp-rpc/messages.js';
