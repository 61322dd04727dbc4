/** `gamewire/rmc`: Rendez-Vous RMC: client, server, dispatcher, protocol declarations, codecs. */
export type { RmcClientOptions } from '../protocols/rmc/client.js';
export { RmcClient, RmcClientError } from '../protocols/rmc/client.js';
export { decodeStream, rmcCodec } from '../protocols/rmc/codec.js';
export { describeMethod, summarizeProtocol } from '../protocols/rmc/describe.js';
export type { CallContext, Handler, RmcConnection } from '../protocols/rmc/dispatcher.js';
export { RmcDispatcher } from '../protocols/rmc/dispatcher.js';
export { CoreErrors, errorName, fromResultCode, RmcError, toResultCode } from '../protocols/rmc/errors.js';
export type { RmcVariant } from '../protocols/rmc/messages.js';
export { packetCodec, RMC_VARIANTS } from '../protocols/rmc/messages.js';
export type { TokenValidator } from '../protocols/rmc/protocols/index.js';
export {
  ApexAntitoxicityProtocol,
  BUILTIN_PROTOCOLS,
  CloudServersProtocol,
  LoginProtocol,
  registerBuiltins,
  SessionProtocol,
} from '../protocols/rmc/protocols/index.js';
export type { RmcServerOptions } from '../protocols/rmc/server.js';
export { RmcServer } from '../protocols/rmc/server.js';
export type { ArgsOf, MethodDef, ProtocolDef, ResultsOf } from '../protocols/rmc/signature.js';
export { defineProtocol, method } from '../protocols/rmc/signature.js';
export type { RmcStore } from '../protocols/rmc/store.js';
export { MemoryStore } from '../protocols/rmc/store.js';
/** The RMC data types as codecs, for declaring methods' arguments and results. */
export {
  anyDataHolder,
  bool,
  buffer16,
  buffer32,
  dateTime,
  double,
  float,
  i8,
  i16,
  i32,
  i64,
  list,
  map,
  qResult,
  qString,
  stationUrl,
  u8,
  u16,
  u32,
  u64,
  uuid,
  variant,
} from '../protocols/rmc/types.js';
