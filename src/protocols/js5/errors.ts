/**
 * Errors of the JS5 module that are not decode errors: handshake refusals, connection failures,
 * cache-folder problems. Each has a stable `code` (`ERR_JS5_…`), listed in docs/js5.md.
 */

import { GamewireError } from '../../wire/errors.js';

export class Js5Error extends GamewireError {
  constructor(code: string, message: string, options?: { cause?: unknown }) {
    super(code, message, options);
  }

  override get name(): string {
    return 'Js5Error';
  }
}
