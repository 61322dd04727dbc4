/**
 * RMC errors: what a handler throws to make the dispatcher answer with a failure.
 *
 * HyperScape writes a failure as (namespace String, u16 code); classic RMC as one u32 result
 * code (MSB set, facility in the high half, code in the low half). Spec §3.2 infers that the
 * namespace is the classic facility written out by name; we follow that inference (a choice,
 * see docs/rmc.md) to convert between the two forms.
 */

import { DeclarationError, GamewireError } from '../../wire/errors.js';

/** Classic facilities (spec §3.1): name -> facility number. */
export const FACILITIES: ReadonlyMap<string, number> = new Map([
  ['Core', 0x0001],
  ['DDL', 0x0002],
  ['RendezVous', 0x0003],
  ['PythonCore', 0x0004],
  ['Transport', 0x0005],
  ['DOCore', 0x0006],
  ['UbiAuthentication', 0x0009],
  ['Privilege', 0x000b],
  ['Tracking', 0x000d],
  ['News', 0x000f],
  ['Friends', 0x0010],
  ['GameSession', 0x0012],
]);

/** Known code names per namespace (spec §3.1; the ones the built-in protocols use and a few more). */
export const ERROR_NAMES: ReadonlyMap<string, ReadonlyMap<string, number>> = new Map([
  [
    'Core',
    new Map([
      ['Unknown', 0x01],
      ['NotImplemented', 0x02],
      ['InvalidPointer', 0x03],
      ['OperationAborted', 0x04],
      ['Exception', 0x05],
      ['AccessDenied', 0x06],
      ['InvalidHandle', 0x07],
      ['InvalidIndex', 0x08],
      ['OutOfMemory', 0x09],
      ['InvalidArgument', 0x0a],
      ['Timeout', 0x0b],
      ['InitializationFailure', 0x0c],
      ['CallInitiationFailure', 0x0d],
      ['RegistrationError', 0x0e],
      ['BufferOverflow', 0x0f],
      ['InvalidLockState', 0x10],
      ['InvalidSequence', 0x11],
      ['SystemError', 0x12],
      ['Cancelled', 0x13],
    ]),
  ],
  [
    'DDL',
    new Map([
      ['InvalidSignature', 0x01],
      ['IncorrectVersion', 0x02],
    ]),
  ],
  [
    'RendezVous',
    new Map([
      ['ConnectionFailure', 0x01],
      ['NotAuthenticated', 0x02],
      ['InvalidUsername', 0x64],
      ['InvalidPassword', 0x65],
      ['UsernameAlreadyExists', 0x66],
      ['AccountDisabled', 0x67],
      ['AccountExpired', 0x68],
      ['ConcurrentLoginDenied', 0x69],
      ['EncryptionFailure', 0x6a],
      ['InvalidPID', 0x6b],
      ['MaxConnectionsReached', 0x6c],
      ['InvalidGID', 0x6d],
      ['DuplicateEntry', 0x70],
      ['ClassNotFound', 0x72],
      ['SessionVoid', 0x73],
      ['DDLMismatch', 0x75],
      ['InvalidConfiguration', 0x76],
      ['SessionFull', 0xc8],
      ['PermissionDenied', 0xd9],
      ['SessionClosed', 0xdb],
      ['LimitExceeded', 0xdf],
    ]),
  ],
]);

/** Longest namespace, in UTF-8 bytes: a String's u16 length also counts the NUL. */
export const MAX_NAMESPACE_BYTES = 65_534;

/**
 * An RMC failure. Throw it from a handler; the dispatcher answers with (namespace, code). It is
 * an RMC result: it joins the `GamewireError` family but keeps RMC's numeric `code` (the u16 of
 * its namespace); a bad namespace or code is a `DeclarationError` (ERR_BAD_DECLARATION).
 *
 * Throw it from a handler; the dispatcher answers with (namespace, code).
 * `RmcError.of('RendezVous::InvalidUsername')` looks the code up by name.
 */
export class RmcError extends GamewireError<number> {
  readonly namespace: string;

  constructor(namespace: string, code: number, message?: string) {
    super(code, message ?? `${namespace}::${errorName(namespace, code)}`);
    if (!Number.isInteger(code) || code < 0 || code > 0xffff)
      throw new DeclarationError(`RMC error code ${code} is not a u16`);
    // The namespace goes on the wire as a String: u16 length counting a NUL.
    if (typeof namespace !== 'string' || namespace.includes('\0'))
      throw new DeclarationError('RMC error namespace must be a string without NUL');
    if (Buffer.byteLength(namespace, 'utf8') > MAX_NAMESPACE_BYTES)
      throw new DeclarationError(
        `RMC error namespace of ${Buffer.byteLength(namespace, 'utf8')} bytes exceeds ${MAX_NAMESPACE_BYTES}`,
      );
    this.namespace = namespace;
  }

  override get name(): string {
    return 'RmcError';
  }

  /** `Namespace::Name` (from the tables above) or `Namespace::0x0081` for unnamed codes. */
  static of(qualified: string, message?: string): RmcError {
    const [ns, name] = qualified.split('::');
    const code = ns === undefined || name === undefined ? undefined : ERROR_NAMES.get(ns)?.get(name);
    if (code === undefined) {
      const hex = /^0x[0-9a-f]{1,4}$/i.test(name ?? '') ? Number.parseInt(name!, 16) : undefined;
      if (ns !== undefined && hex !== undefined) return new RmcError(ns, hex, message);
      throw new DeclarationError(`unknown RMC error ${qualified}`);
    }
    return new RmcError(ns!, code, message);
  }

  /** The classic u32 form (MSB set), when the namespace is a known facility. */
  get resultCode(): number | undefined {
    return toResultCode(this.namespace, this.code);
  }

  get qualifiedName(): string {
    return `${this.namespace}::${errorName(this.namespace, this.code)}`;
  }
}

/** `NotImplemented` for (Core, 2); `0x0081` for codes without a known name. */
export function errorName(namespace: string, code: number): string {
  for (const [name, c] of ERROR_NAMES.get(namespace) ?? []) if (c === code) return name;
  return `0x${code.toString(16).padStart(4, '0')}`;
}

/** (namespace, code) -> classic u32 result code with the error bit, when the facility is known. */
export function toResultCode(namespace: string, code: number): number | undefined {
  const facility = FACILITIES.get(namespace);
  return facility === undefined ? undefined : (0x80000000 | (facility << 16) | code) >>> 0;
}

/** Classic u32 result code -> (namespace, code); unknown facilities keep their number as `0x…`. */
export function fromResultCode(result: number): { namespace: string; code: number } {
  const facility = (result >>> 16) & 0x7fff;
  for (const [name, f] of FACILITIES) if (f === facility) return { namespace: name, code: result & 0xffff };
  return { namespace: `0x${facility.toString(16).padStart(4, '0')}`, code: result & 0xffff };
}

export const CoreErrors = {
  notImplemented: () => new RmcError('Core', 0x02),
  invalidArgument: (message?: string) => new RmcError('Core', 0x0a, message),
  exception: (message?: string) => new RmcError('Core', 0x05, message),
  accessDenied: () => new RmcError('Core', 0x06),
} as const;
