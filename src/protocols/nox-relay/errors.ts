/** nox-relay's own errors, each with a stable code (listed in docs/nox-relay.md, "Errors"). */
import { ConfigError } from '../../core/errors.js';
import { GamewireError } from '../../wire/errors.js';

/**
 * A server option out of range, or an instance file that cannot be used: `ERR_CONFIG`, a usage
 * problem (exit 2 from the command line).
 */
export class NoxRelayConfigError extends ConfigError {
  override get name(): string {
    return 'NoxRelayConfigError';
  }
}

/**
 * A client request that cannot complete: `ERR_NOX_CLOSED` (the connection is gone),
 * `ERR_NOX_TIMEOUT` (no reply in time), `ERR_NOX_NO_UID` (every request uid is waiting),
 * `ERR_NOX_BOT` (a bot could not enter).
 */
export class NoxRelayClientError extends GamewireError {
  override get name(): string {
    return 'NoxRelayClientError';
  }
}
