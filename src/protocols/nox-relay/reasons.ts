/**
 * Every reason the nox-relay server drops a packet or closes a client, in one place. Metrics
 * (`dropped{reason}`, `closed{reason}`), logs and docs/nox-relay.md use these exact strings, so a
 * dashboard built on them keeps working when the code moves.
 */

/** Why a packet (or a whole datagram) was dropped; the connection stays open. */
export const DropReason = {
  /** Bad framing or a payload that does not decode. */
  Malformed: 'malformed',
  /** A packet other than Handshake before the Handshake. */
  NotHandshaked: 'not_handshaked',
  /** A first datagram from an unknown UDP source that is not one protocol-1 Handshake. */
  UnknownSource: 'unknown_source',
  /** No room: the server is full, or the source address holds its share. */
  OverCapacity: 'over_capacity',
  /** A reply that would break the anti-amplification budget of an unproven UDP source. */
  UdpAmplification: 'udp_amplification',
  /** A UDP Handshake whose address cookie does not verify (forged, expired or from elsewhere). */
  BadCookie: 'bad_cookie',
  /** An unproven UDP client named an instance by an id that is neither real nor its alias (a blind guess). */
  AliasWrong: 'alias_wrong',
  /** An alias proof not checked: the source address has spent its wrong guesses (the client stays unproven). */
  AliasUnchecked: 'alias_unchecked',
  /** The client sent more packets per second than its request budget allows. */
  RateLimited: 'rate_limited',
  /** Reliable or Segmentation nested deeper than allowed. */
  Nesting: 'nesting',
  /** Segment metadata out of range (total 0, index past the total, too many segments). */
  BadSegment: 'bad_segment',
  /** A segmentation session timed out, or was restarted with another total. */
  SegmentExpired: 'segment_expired',
  /** The client already holds its most segmentation sessions. */
  SegmentSessions: 'segment_sessions',
  /** A reassembled packet would exceed its cap. */
  SegmentTooLarge: 'segment_too_large',
  /** The server-wide reassembly memory budget is spent. */
  ReassemblyBudget: 'reassembly_budget',
  /** The source address's share of the reassembly memory is spent. */
  ReassemblyBudgetIp: 'reassembly_budget_ip',
  /** A second Authentification while one is pending or done. */
  AuthRepeated: 'auth_repeated',
  /** A Handshake beyond the few a session is answered (a source repeating it is flooding). */
  HandshakeRepeated: 'handshake_repeated',
  CongestionLow: 'congestion_low',
  CongestionNormal: 'congestion_normal',
  CongestionHigh: 'congestion_high',
  TransformUnsupported: 'transform_unsupported',
  TransformForbidden: 'transform_forbidden',
  TransformRigs: 'transform_rigs',
  TransformBelowThreshold: 'transform_below_threshold',
  TeleportForbidden: 'teleport_forbidden',
  CustomNotMember: 'custom_not_member',
  CustomTooLarge: 'custom_too_large',
  AvatarChangedTooLarge: 'avatar_changed_too_large',
  AvatarParamsRefused: 'avatar_params_refused',
  AvatarParamsTooLarge: 'avatar_params_too_large',
  QuitTypeRefused: 'quit_type_refused',
} as const;
export type DropReason = (typeof DropReason)[keyof typeof DropReason];

/** `<what>_not_ready`: instance traffic from a player that is not (yet) Traveling or Ready. */
export function notReady(what: 'transform' | 'teleport' | 'avatar_params'): string {
  return `${what}_not_ready`;
}

/** Why a client (a TCP connection or a UDP session) was closed or refused. */
export const CloseReason = {
  /** A TCP stream whose length prefix cannot be trusted any more. */
  Malformed: 'malformed',
  /** No valid packet for the connection timeout. */
  Timeout: 'timeout',
  /** A half-open UDP session that never sent a second valid packet. */
  HalfOpenTimeout: 'half_open_timeout',
  /** The oldest half-open UDP session, evicted to make room for a new one. */
  HalfOpenEvicted: 'half_open_evicted',
  /** The client said goodbye (Disconnect). */
  Disconnect: 'disconnect',
  /** A Handshake with another protocol version. */
  BadProtocol: 'bad_protocol',
  /** A TCP client that stopped reading: its queue stayed over the soft limit, or reached the close limit. */
  SlowConsumer: 'slow_consumer',
  /** The server is full. */
  OverCapacity: 'over_capacity',
  /** The source address holds its most TCP connections. */
  OverCapacityIp: 'over_capacity_ip',
  /** The server was full: an unproven UDP session or a TCP connection without a Handshake made room for a newcomer. */
  Evicted: 'evicted',
} as const;
export type CloseReason = (typeof CloseReason)[keyof typeof CloseReason];

/** Event counters (`counters{name}`). */
export const Counter = {
  HandlerError: 'handler_error',
  ReliableBatches: 'reliable_batches',
  SegmentsReassembled: 'segments_reassembled',
  Authenticated: 'authenticated',
  /** A repeated Authentification after success, answered again with the same identity. */
  AuthRepeatedAnswered: 'auth_repeated_answered',
  AuthFailed: 'auth_failed',
  AuthError: 'auth_error',
  EnterRefused: 'enter_refused',
  Entered: 'entered',
  Left: 'left',
  TravelFailed: 'travel_failed',
  TransformsRelayed: 'transforms_relayed',
  TransformFanout: 'transform_fanout',
  ServerConfigRefused: 'server_config_refused',
  ServerConfigChanged: 'server_config_changed',
  /** A UDP source proved its address (a valid cookie, or an instance alias sent back). */
  AddressProven: 'address_proven',
  /** Of those, proven by sending back an instance alias (a client that does not know the cookie). */
  AddressProvenByAlias: 'address_proven_alias',
} as const;
