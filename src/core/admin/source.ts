/**
 * What a running server gives the admin endpoint (docs/dashboard-api.md): its live state, built
 * only when asked; the actions it declares; and its wire tap. Protocols fill this in; the admin
 * HTTP server (src/core/admin/) never knows any protocol.
 */
import type { Json } from '../../wire/codec.js';
import type { WireTap } from '../wire-tap.js';
import type { WireDecoder } from './wire-json.js';

/** What an action answers: done, or an HTTP status with a reason. */
export type AdminActionResult = { ok: true } | { status: 400 | 404 | 409; error: string };

/** Runs one action (`id` is the path's `:id`, absent for server-wide actions). */
export type AdminAction = (id: string | undefined) => AdminActionResult | Promise<AdminActionResult>;

/**
 * One action a protocol declares. With a `collection`, it acts on one object of it:
 * `POST /api/servers/:protocol/:collection/:id/:verb`; without, on the whole server:
 * `POST /api/servers/:protocol/:verb`.
 */
export interface AdminActionDefinition {
  collection?: string;
  verb: string;
  run: AdminAction;
}

/** The actions of a server, by the name `/api/servers` lists (`disconnect`, `endAllocation`, …). */
export type AdminActions = Record<string, AdminActionDefinition>;

/** An action on one object of `collection` (`POST …/:collection/:id/:verb`). */
export function objectAction(collection: string, verb: string, run: AdminAction): AdminActionDefinition {
  return { collection, verb, run };
}

/** An action on the whole server (`POST /api/servers/:protocol/:verb`). */
export function serverAction(verb: string, run: AdminAction): AdminActionDefinition {
  return { verb, run };
}

export interface AdminSource {
  /** The protocol's state object (see the contract); built on each call, never kept up to date. */
  state(): Json | Promise<Json>;
  actions: AdminActions;
  /** The server's wire tap, when it has one. */
  wire?: WireTap;
  /** Decodes its wire messages when the protocol's own codec with default options would not (a variant). */
  decode?: WireDecoder;
  /**
   * Its wire messages carry secrets that only decoding finds (field names, nested packets): a
   * message that does not decode then shows no hex.
   */
  hideUndecoded?: boolean;
}

export const notFound = (what: string): AdminActionResult => ({ status: 404, error: `no such ${what}` });
export const done: AdminActionResult = { ok: true };
