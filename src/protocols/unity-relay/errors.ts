/**
 * unity-relay's own errors, each with a stable code (docs/errors.md): the client's, the
 * allocation API's and the allocation store's, and the native data plane's.
 */
import { GamewireError } from '../../wire/errors.js';

/** A client call that cannot proceed: closed, not bound, no peer, no such endpoint. */
export class RelayClientError extends GamewireError {
  override get name(): string {
    return 'RelayClientError';
  }
}

/** The allocation API answered a client (`RelayApiClient`) with an error status. */
export class RelayApiError extends GamewireError {
  readonly status: number;
  readonly body: unknown;

  constructor(status: number, body: unknown) {
    const detail = typeof body === 'object' && body !== null && 'detail' in body ? String(body.detail) : '';
    super('ERR_RELAY_API', `allocation API answered ${status}${detail === '' ? '' : `: ${detail}`}`);
    this.status = status;
    this.body = body;
  }
}

/** An error the allocation API answers with; it becomes the SDK's `ErrorResponseBody`. */
export class ApiError extends GamewireError {
  readonly status: number;
  readonly title: string;
  readonly details: { key: string; value: string }[] | undefined;

  constructor(status: number, title: string, detail: string, details?: { key: string; value: string }[]) {
    super('ERR_RELAY_API', detail);
    this.status = status;
    this.title = title;
    this.details = details;
  }
}

/** The allocation store holds its maximum; the API answers 429/503 with it. */
export class StoreFullError extends GamewireError {
  constructor(message = 'the allocation store is full') {
    super('ERR_RELAY_FULL', message);
  }

  override get name(): string {
    return 'StoreFullError';
  }
}

/** The native data plane failed: not built, a bind that failed, a call that failed. */
export class NativeDataplaneError extends GamewireError {
  /** For a failed bind: the address and port that could not be had (as Node's errors carry them). */
  address?: string;
  port?: number;

  constructor(code: string, message: string) {
    super(code, message);
  }
}
