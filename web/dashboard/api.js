// Talks to gamewire's admin API (docs/dashboard-api.md). Same-origin only: the admin token, when
// one is configured, travels in the HttpOnly cookie set by `/?token=…`, so this code never sees it.

/** @typedef {import('../../src/core/admin/api-types.js').SessionJson} SessionJson */
/** @typedef {import('../../src/core/admin/api-types.js').ActionAnswerJson} ActionAnswerJson */

/**
 * The handlers of the stream's events, each given the event's parsed data.
 * @typedef {object} StreamHandlers
 * @property {(tick: import('../../src/core/admin/api-types.js').TickJson) => void} tick
 * @property {(body: import('../../src/core/admin/api-types.js').ServerDetailJson<any>) => void} state
 * @property {(data: import('../../src/core/admin/api-types.js').WireEventJson) => void} wire
 */

/** @typedef {'open' | 'reconnecting' | 'closed'} StreamStatus */

/** Thrown for any non-2xx answer; `status` is the HTTP status, `message` the server's `error`. */
export class ApiError extends Error {
  /**
   * @param {number} status
   * @param {string} message
   */
  constructor(status, message) {
    super(message);
    this.name = 'ApiError';
    this.status = status;
  }
}

let actionToken = '';
/** @type {Set<() => void>} */
const unauthorizedListeners = new Set();

/**
 * Called with no argument whenever the server answers 401 (token missing or wrong).
 * @param {() => void} fn
 */
export function onUnauthorized(fn) {
  unauthorizedListeners.add(fn);
}

/**
 * The answer's JSON (any JSON: the caller knows its shape from api-types.ts), or an ApiError.
 * @param {Response} res
 * @returns {Promise<any>}
 */
async function parse(res) {
  /** @type {any} */
  let body;
  try {
    body = await res.json();
  } catch {
    body = undefined;
  }
  if (res.status === 401) for (const fn of unauthorizedListeners) fn();
  if (!res.ok) {
    const message = body !== undefined && typeof body.error === 'string' ? body.error : `HTTP ${res.status}`;
    throw new ApiError(res.status, message);
  }
  return body;
}

/**
 * GET `path`: its JSON (any JSON: the caller knows its shape from api-types.ts).
 * @param {string} path
 * @returns {Promise<any>}
 */
export async function getJson(path) {
  const res = await fetch(path, { headers: { accept: 'application/json' }, cache: 'no-store' });
  return parse(res);
}

/**
 * GET /api/session: remembers the action token for `post`.
 * @returns {Promise<SessionJson>}
 */
export async function loadSession() {
  /** @type {SessionJson} */
  const session = await getJson('/api/session');
  actionToken = session.actionToken ?? '';
  return session;
}

/**
 * An action: POST with the action token header, JSON body. Resolves to the answer's JSON.
 * @param {string} path
 * @param {unknown} [body] sent as JSON
 * @returns {Promise<ActionAnswerJson>}
 */
export async function post(path, body = {}) {
  const res = await fetch(path, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'x-gamewire-action': actionToken },
    body: JSON.stringify(body),
    cache: 'no-store',
  });
  return parse(res);
}

/**
 * One EventSource on /api/stream. `handlers` maps event names (tick, state, wire) to functions
 * taking the parsed data; `onStatus` hears 'open', 'reconnecting' and 'closed'.
 * @param {{ protocol?: string, wire?: string }} query
 * @param {StreamHandlers} handlers
 * @param {(status: StreamStatus) => void} onStatus
 * @returns {{ close: () => void }}
 */
export function openStream(query, handlers, onStatus) {
  const params = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) if (v !== undefined) params.set(k, v);
  const qs = params.toString();
  const source = new EventSource(`/api/stream${qs === '' ? '' : `?${qs}`}`);
  for (const [name, fn] of Object.entries(handlers)) {
    source.addEventListener(name, (e) => {
      let data;
      try {
        data = JSON.parse(e.data);
      } catch {
        return; // a malformed event is skipped, the next tick repairs the view
      }
      fn(data);
    });
  }
  source.addEventListener('open', () => onStatus('open'));
  source.addEventListener('error', () =>
    onStatus(source.readyState === EventSource.CLOSED ? 'closed' : 'reconnecting'),
  );
  return { close: () => source.close() };
}
