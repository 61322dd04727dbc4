/**
 * NoxVR Relay v1 constants and enumerations (docs/nox-relay.md, "Wire format"). Plain
 * `as const` objects: the project builds with `erasableSyntaxOnly`, so no TypeScript enums.
 */

export const PROTOCOL_VERSION = 1;
export const DEFAULT_PORT = 23032;
/** Header: length u16 (counts itself), uid u16, type u8. */
export const HEADER_BYTES = 5;
export const DEFAULT_MAX_PACKET = 1024;
export const DEFAULT_CONNECTION_TIMEOUT_S = 15;
export const DEFAULT_KEEP_ALIVE_S = 5;
export const DEFAULT_SEGMENTATION_TIMEOUT_S = 30;
/** Player id meaning "myself" in Transform, AvatarChanged, AvatarParams and Teleport requests. */
export const SELF = 0xffff;
/** Moderator id meaning "the system" in Leave. */
export const SYSTEM = 0xffff;

/** Client → server type codes. */
export const C2S = {
  Disconnect: 0x00,
  Handshake: 0x01,
  Segmentation: 0x02,
  Reliable: 0x03,
  Latency: 0x04,
  Authentification: 0x05,
  Enter: 0x06,
  Quit: 0x07,
  Custom: 0x08,
  PasswordRequirement: 0x09,
  Traveling: 0x0a,
  Transform: 0x0b,
  Teleport: 0x0c,
  AvatarChanged: 0x0d,
  ServerConfig: 0x0e,
  AvatarParams: 0x0f,
  Sessions: 0x11,
} as const;

/** Server → client type codes (0x11 is Leave here, 0x12 the Sessions response). */
export const S2C = {
  Disconnect: 0x00,
  Handshake: 0x01,
  Segmentation: 0x02,
  Reliable: 0x03,
  Latency: 0x04,
  Authentification: 0x05,
  Enter: 0x06,
  Quit: 0x07,
  Custom: 0x08,
  PasswordRequirement: 0x09,
  Traveling: 0x0a,
  Transform: 0x0b,
  Teleport: 0x0c,
  AvatarChanged: 0x0d,
  ServerConfig: 0x0e,
  AvatarParams: 0x0f,
  Join: 0x10,
  Leave: 0x11,
  Sessions: 0x12,
} as const;

/** Local scheduling hint (no wire form): what drops first under congestion. */
export const Priority = { Low: 0, Normal: 1, High: 2, Critical: 3 } as const;
export type Priority = (typeof Priority)[keyof typeof Priority];

export const HandshakeFlags = { None: 0x00, IsOffline: 0x01 } as const;

export const AuthFlags = { None: 0x00, UseIntegrity: 0x01, UseGuest: 0x02 } as const;

export const AuthResult = {
  Success: 0,
  InvalidToken: 1,
  MasterError: 2,
  Blacklisted: 3,
  Unknown: 4,
} as const;

export const EnterFlags = {
  None: 0,
  AsBot: 0x01,
  UsePseudonyme: 0x02,
  UsePassword: 0x04,
  HideInList: 0x08,
} as const;

export const EnterResult = {
  Success: 0,
  NotFound: 1,
  Full: 2,
  Blacklisted: 3,
  NotWhitelisted: 4,
  InvalidGame: 5,
  IncorrectPassword: 6,
  Unknown: 7,
  Refused: 8,
  InvalidPseudonyme: 9,
} as const;

export const QuitType = {
  Normal: 0,
  Timeout: 1,
  ModerationKick: 2,
  VoteKick: 3,
  ConfigurationError: 4,
  UnknownError: 5,
} as const;

export const PlayerFlags = {
  IsBot: 0x001,
  InstanceMaster: 0x002,
  InstanceModerator: 0x004,
  InstanceOwner: 0x008,
  GuildModerator: 0x010,
  MasterModerator: 0x020,
  WorldOwner: 0x040,
  WorldModerator: 0x080,
  AuthUnverified: 0x100,
  HideInList: 0x200,
  HasCustomDisplay: 0x400,
  /** Composite: any moderation right. */
  HasPrivilege: 0x0fe,
  /** Composite: may change the server configuration. */
  HasHighPrivilege: 0x028,
} as const;

export const InstanceFlags = {
  IsPublic: 0x01,
  UsePassword: 0x02,
  UseWhitelist: 0x04,
  AuthorizeBot: 0x08,
  AllowOverload: 0x10,
} as const;

export const TransformType = { ByPath: 0, OnPlayer: 1, OnObject: 2 } as const;

export const TransformFlags = {
  Position: 0x01,
  Rotation: 0x02,
  Scale: 0x04,
  Velocity: 0x08,
  AngularVelocity: 0x10,
  Reset: 0x20,
} as const;

export const TravelingAction = { Travel: 0, Ready: 1, Failed: 2 } as const;

export const TravelingResult = {
  None: 0x00,
  UseUrl: 0x02,
  UseMaster: 0x04,
  Unknown: 0x08,
  Ready: 0x10,
} as const;

export const AvatarChangedResult = { Changing: 0, Unknown: 1, Failed: 2, Success: 3 } as const;

export const ServerConfigFlags = {
  None: 0,
  Tps: 0x01,
  Threshold: 0x02,
  Capacity: 0x04,
  Password: 0x08,
  Flags: 0x10,
  All: 0x1f,
} as const;

export const ServerConfigResult = { Success: 0, Failure: 1, Change: 2 } as const;

/** gamewire's PasswordRequirement reply (the format is ours: docs/nox-relay.md, docs/nox-relay.md). */
export const PasswordRequirementResult = { NotRequired: 0, Required: 1, NotFound: 2 } as const;

/** Server-side player status (never on the wire). */
export const PlayerStatus = { None: 0, NeedPassword: 1, Preparing: 2, Traveling: 3, Ready: 4 } as const;
export type PlayerStatus = (typeof PlayerStatus)[keyof typeof PlayerStatus];
