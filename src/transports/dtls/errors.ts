import { GamewireError } from '../../wire/errors.js';

/** Every code a DtlsError carries (listed in docs/errors.md). */
export type DtlsErrorCode =
  | 'ERR_DTLS_TIMEOUT'
  | 'ERR_DTLS_ALERT'
  | 'ERR_DTLS_HANDSHAKE'
  | 'ERR_DTLS_SOCKET'
  | 'ERR_DTLS_NOT_OPEN'
  | 'ERR_DTLS_TOO_LARGE'
  | 'ERR_DTLS_BAD_OPTION'
  | 'ERR_DTLS_LISTENING';

/**
 * What the DTLS module throws or rejects with: a client that could not connect (with the fatal
 * alert the server sent, if any), a send that cannot happen, or a bad option.
 */
export class DtlsError extends GamewireError<DtlsErrorCode> {
  /** The fatal alert the server sent, for ERR_DTLS_ALERT. */
  readonly alert: number | undefined;

  constructor(code: DtlsErrorCode, message: string, alert?: number) {
    super(code, message);
    this.alert = alert;
  }

  override get name(): string {
    return 'DtlsError';
  }
}
