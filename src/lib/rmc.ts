/** `gamewire/rmc`: Rendez-Vous RMC: client, server, dispatcher, protocol declarations, codecs. */

export type { LogFn, Logger } from '../core/logger.js';
export { RedisNodeRegistry } from '../core/node-registry.js';
export type { RedisArg, RedisClient, RedisConnection, RedisConnectOptions } from '../core/redis.js';
export { connectRedis, StoreNotDurableError, StoreUnavailableError } from '../core/redis.js';
export { AccountFileError } from '../protocols/rmc/account-log.js';
export type { RmcClientOptions } from '../protocols/rmc/client.js';
export { RmcClient, RmcClientError } from '../protocols/rmc/client.js';
export { decodeStream, rmcCodec } from '../protocols/rmc/codec.js';
/** Protocols from a game's DDL: import dumps into a pack, load packs as protocol declarations. */
export type { DdlDocument, ImportOptions } from '../protocols/rmc/ddl/import.js';
export { DdlError, importDdl } from '../protocols/rmc/ddl/import.js';
export type { ProtocolPack } from '../protocols/rmc/ddl/pack.js';
export { loadPackFile, loadPacks, PackError, validatePack } from '../protocols/rmc/ddl/pack.js';
export { describeMethod, summarizeProtocol } from '../protocols/rmc/describe.js';
export type { CallContext, Handler, RmcConnection } from '../protocols/rmc/dispatcher.js';
export { RmcDispatcher } from '../protocols/rmc/dispatcher.js';
export { CoreErrors, errorName, fromResultCode, RmcError, toResultCode } from '../protocols/rmc/errors.js';
/** A fleet's stores on Redis (ioredis is loaded only by `connectRedis`). */
export type { FleetStoreContext } from '../protocols/rmc/fleet/control-plane.js';
export { STORE_UNAVAILABLE_ERROR } from '../protocols/rmc/fleet/control-plane.js';
export { SecureServerPicker } from '../protocols/rmc/fleet/node.js';
export { RedisSessionStore } from '../protocols/rmc/fleet/redis-sessions.js';
export { FleetConnectionIds, RedisAccountStore } from '../protocols/rmc/fleet/redis-store.js';
export type { RmcFleetServer, RmcRole } from '../protocols/rmc/fleet/start.js';
export type { Sweepable, SweepOptions, SweepResult, SweepStep } from '../protocols/rmc/fleet/sweep.js';
export { FleetSweeper, sweepPass } from '../protocols/rmc/fleet/sweep.js';
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
export { loginHandlers } from '../protocols/rmc/protocols/login.js';
export type { SessionMember, SessionStore, SessionSummary } from '../protocols/rmc/protocols/session.js';
export { SessionRegistry, sessionHandlers } from '../protocols/rmc/protocols/session.js';
export { PrudpClientError } from '../protocols/rmc/prudp/client.js';
export { PrudpError } from '../protocols/rmc/prudp/packet.js';
export { KeyDerivationBusyError } from '../protocols/rmc/prudp/user-keys.js';
export type { RmcServerOptions } from '../protocols/rmc/server.js';
export { RmcServer } from '../protocols/rmc/server.js';
export type {
  ArgsOf,
  LayoutStatus,
  MethodDef,
  MethodSpec,
  MethodSpecs,
  ProtocolDef,
  ProtocolMethods,
  ResultsOf,
} from '../protocols/rmc/signature.js';
export { defineProtocol, method } from '../protocols/rmc/signature.js';
export type { AccountStore, LoginSessionRecord, RmcStore } from '../protocols/rmc/store.js';
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
