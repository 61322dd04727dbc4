/**
 * The admin API's shapes (docs/dashboard-api.md), declared once: the server builds its answers
 * with these types, and the dashboard's JavaScript imports them in JSDoc
 * (`@typedef {import('…/api-types.js').ServerJson} ServerJson`), so `npm run check` type-checks
 * both sides against the same declaration. Types only: nothing here runs, and the module imports
 * nothing (the page's type check sees no Node types through it).
 */

/** Any JSON value (a protocol's state is JSON the page walks generically unless it knows it). */
export type JsonValue = null | boolean | number | string | JsonValue[] | { [key: string]: JsonValue };

/** Cumulative counters of one server (the page computes rates from successive samples). */
export interface CountersJson {
  received: number;
  sent: number;
  bytesReceived: number;
  bytesSent: number;
  open: number;
  dropped: Record<string, number>;
  closed: Record<string, number>;
  events: Record<string, number>;
}

export interface EndpointJson {
  transport: 'tcp' | 'udp' | 'http';
  host: string;
  port: number;
  description: string;
}

/** An action a server offers: POST `/api/servers/:protocol[/:collection/:id]/:verb`. */
export interface ActionJson {
  name: string;
  /** The collection its id belongs to (`connections`, `allocations`); absent for server-wide actions. */
  collection?: string;
  verb: string;
}

/** `GET /api/session`. */
export interface SessionJson {
  actionToken: string;
  version: string;
  startedAt: number;
}

/** One running server in `GET /api/servers`. */
export interface ServerJson {
  protocol: string;
  summary: string;
  startedAt: number;
  endpoints: EndpointJson[];
  counters: CountersJson;
  hasWire: boolean;
  /** Names of the actions it offers (see `actionRoutes` for their paths). */
  actions: string[];
  actionRoutes: ActionJson[];
  /** URL of the protocol's own dashboard page module, when it has one (else the generic view). */
  page: string | null;
}

/** `GET /api/servers`. */
export interface ServersJson {
  servers: ServerJson[];
}

/**
 * `GET /api/servers/:protocol`, and the `state` event of the stream. `S` is the protocol's own
 * state (docs/dashboard-api.md describes each); a page that knows its protocol reads it as such.
 */
export interface ServerDetailJson<S = JsonValue> {
  protocol: string;
  counters: CountersJson;
  state: S;
}

/** The `tick` event of `/api/stream`. */
export interface TickJson {
  t: number;
  servers: { protocol: string; counters: CountersJson }[];
}

/** One message of the wire view. */
export interface WireMessageJson {
  seq: number;
  at: number;
  direction: 'client' | 'server';
  connection: string | null;
  transport: string;
  name: string | null;
  fields: JsonValue;
  hex: string;
  length: number;
  truncated: boolean;
  error: string | null;
  [key: string]: JsonValue;
}

/** `GET /api/wire/:protocol`. */
export interface WirePageJson {
  messages: WireMessageJson[];
  next: number;
  sampled: number;
  seen: number;
  available: boolean;
}

/** The `wire` event of `/api/stream`. */
export interface WireEventJson {
  messages: WireMessageJson[];
}

/** An action's answer, or any error's body. */
export type ActionAnswerJson = { ok: true } | ErrorJson;

export interface ErrorJson {
  error: string;
}
