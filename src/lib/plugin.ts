/**
 * `gamewire/plugin`: what a protocol from outside gamewire builds on (docs/plugins.md). A plug-in
 * module exports one `ProtocolModule` (or a light `ProtocolEntry`) as its default export and is
 * named in `GAMEWIRE_PLUGINS`; it then appears in every command, in `serve`, the inspector, the
 * dissector generator, the admin API and the dashboard, like a built-in protocol.
 */

export type * from '../core/admin/api-types.js';
export {
  type AdminAction,
  type AdminActionDefinition,
  type AdminActionResult,
  type AdminActions,
  type AdminSource,
  done,
  notFound,
  objectAction,
  serverAction,
} from '../core/admin/source.js';
export { protocolPageDir } from '../core/admin/static.js';
export {
  CloseReason,
  type Connection,
  type ConnectionEvent,
  ConnectionTable,
  type TransportKind,
  TransportKinds,
} from '../core/connection.js';
export { CommandError, ConfigError, UsageError } from '../core/errors.js';
export {
  type BaseDecoderOptions,
  type CustomDissection,
  type DecoderFlag,
  type DissectorDeclaration,
  type DissectorField,
  declaredFlow,
  type Emitter,
  type FlowDeclaration,
  type FlowDecoder,
  type FlowProtocol,
  FramedDirection,
  framedStreams,
  noDatagrams,
  noStreams,
  type ProtocolInspection,
  perDirection,
  type SchemaItem,
} from '../core/flow.js';
export type { LogFn, Logger } from '../core/logger.js';
export { ProtocolMetrics } from '../core/metrics.js';
export type {
  CodecFlag,
  CodecOptions,
  CommandProgram,
  DashboardPage,
  Direction,
  ProtocolCodec,
  ProtocolModule,
} from '../core/protocol.js';
export type {
  Endpoint,
  RunningServer,
  ServeOption,
  ServerContext,
  ServerDefinition,
} from '../core/server.js';
export {
  addressKey,
  closeSocket,
  listenTcp,
  TcpConnection,
  type TcpListener,
  type TcpListenOptions,
} from '../core/tcp.js';
export { bindUdp, closeUdp, type UdpBindOptions } from '../core/udp.js';
export { WireTap } from '../core/wire-tap.js';
export { PROTOCOL_NAME, type ProtocolEntry, registerProtocol } from '../protocols/registry.js';
