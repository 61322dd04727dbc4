/**
 * Errors of the JS5 module that are not decode errors: handshake refusals, connection failures,
 * cache-folder problems. Each has a stable `code` (`ERR_JS5_…`), listed in docs/js5.md.
 */

export class Js5Error extends Error {
  /** Stable machine-readable code, `ERR_JS5_…`. */
  readonly code: string;

  constructor(code: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
  }

  override get name(): string {
    return 'Js5Error';
  }
}
