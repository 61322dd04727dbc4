/** nox-relay's own errors, each with a stable code. */

/** A server option out of range, or an instance file that cannot be used. Code `ERR_CONFIG`. */
export class NoxRelayConfigError extends Error {
  readonly code = 'ERR_CONFIG';

  override get name(): string {
    return 'NoxRelayConfigError';
  }
}

/** A client request that cannot complete: `ERR_NOX_CLOSED`, `ERR_NOX_TIMEOUT`, `ERR_NOX_NO_UID`. */
export class NoxRelayClientError extends Error {
  readonly code: string;

  constructor(code: string, message: string) {
    super(message);
    this.code = code;
  }

  override get name(): string {
    return 'NoxRelayClientError';
  }
}
