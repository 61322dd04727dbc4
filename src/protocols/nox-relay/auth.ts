/**
 * Authentification back ends. Offline mode (the default) accepts any non-empty token; a master
 * server checks tokens over HTTP (`POST {master}/api/relays/checkbearer`, docs/nox-relay.md). Both sit
 * behind one function type, so an embedding program can plug in its own.
 */
import { AuthResult } from './constants.js';

export interface AuthRequest {
  token: string;
  tokenType: 'bearer' | 'integrity';
  ip: string;
  clientId: number;
}

export type AuthOutcome =
  | {
      result: typeof AuthResult.Success;
      userId: number;
      serverAddress: string;
      displayName: string;
      flags?: number;
    }
  | { result: typeof AuthResult.Blacklisted; expireAt: number; reason: string }
  | {
      result: typeof AuthResult.InvalidToken | typeof AuthResult.MasterError | typeof AuthResult.Unknown;
      reason: string | null;
    };

export type Authenticator = (req: AuthRequest) => Promise<AuthOutcome>;

/** FNV-1a, 32 bits: a stable user id for an offline token. */
function fnv1a(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

/**
 * Offline: every token is accepted. A token made of digits is that user id (handy for
 * whitelists and owner lists in tests); any other token maps to a stable 32-bit hash of it.
 */
export function offlineAuthenticator(serverAddress: string): Authenticator {
  return async (req) => {
    const userId =
      /^\d{1,10}$/.test(req.token) && Number(req.token) <= 0xffffffff ? Number(req.token) : fnv1a(req.token);
    return { result: AuthResult.Success, userId, serverAddress, displayName: `Player ${req.clientId}` };
  };
}

interface CheckBearerReply {
  valid?: boolean;
  user?: { id?: unknown; display?: unknown; server?: unknown };
  is_blacklisted?: boolean;
  blacklisted?: { expires?: unknown; reason?: unknown };
  is_invalid_token?: boolean;
}

/** Longest display name, server address and ban reason (UTF-8 bytes) taken from a master reply. */
export const MAX_DISPLAY_BYTES = 64;
export const MAX_SERVER_BYTES = 255;
export const MAX_REASON_BYTES = 512;

/** `s` cut to at most `max` UTF-8 bytes, on a character boundary. */
function clip(s: string, max: number): string {
  if (Buffer.byteLength(s, 'utf8') <= max) return s;
  let out = '';
  let n = 0;
  for (const ch of s) {
    const b = Buffer.byteLength(ch, 'utf8');
    if (n + b > max) break;
    out += ch;
    n += b;
  }
  return out;
}

/**
 * The master-server check over HTTP, with a timeout. The reply is validated: a user id that is
 * not an integer 0..2^32-1, a display name over 64 bytes or a server address over 255 bytes is a
 * MasterError; a ban expiry is truncated to an integer (0 when absent or out of range).
 */
export function masterAuthenticator(master: string, timeoutMs = 5000): Authenticator {
  const url = new URL('/api/relays/checkbearer', master).href;
  return async (req) => {
    let body: CheckBearerReply;
    try {
      const res = await fetch(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ access_token: req.token, token_type: req.tokenType, ip: req.ip }),
        signal: AbortSignal.timeout(timeoutMs),
      });
      if (!res.ok)
        return { result: AuthResult.MasterError, reason: `Master server answered HTTP ${res.status}.` };
      body = (await res.json()) as CheckBearerReply;
    } catch (err) {
      return {
        result: AuthResult.MasterError,
        reason: (err as Error).message || 'Master server unreachable.',
      };
    }
    if (typeof body !== 'object' || body === null) {
      return { result: AuthResult.MasterError, reason: 'Master server sent an invalid reply.' };
    }
    if (body.valid === true && typeof body.user === 'object' && body.user !== null) {
      const { id, display, server } = body.user;
      const displayName = String(display ?? '');
      const serverAddress = String(server ?? '');
      if (
        !Number.isSafeInteger(id) ||
        (id as number) < 0 ||
        (id as number) > 0xffffffff ||
        Buffer.byteLength(displayName, 'utf8') > MAX_DISPLAY_BYTES ||
        Buffer.byteLength(serverAddress, 'utf8') > MAX_SERVER_BYTES
      ) {
        return { result: AuthResult.MasterError, reason: 'Master server sent an invalid user.' };
      }
      return { result: AuthResult.Success, userId: id as number, serverAddress, displayName };
    }
    if (body.is_blacklisted === true) {
      const expires = Math.trunc(Number(body.blacklisted?.expires ?? 0));
      return {
        result: AuthResult.Blacklisted,
        expireAt: Number.isSafeInteger(expires) && expires > 0 ? expires : 0,
        reason: clip(String(body.blacklisted?.reason ?? ''), MAX_REASON_BYTES),
      };
    }
    if (body.is_invalid_token === true) return { result: AuthResult.InvalidToken, reason: null };
    return { result: AuthResult.Unknown, reason: 'Unknown authentification error.' };
  };
}
