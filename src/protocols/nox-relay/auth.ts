/**
 * Authentification back ends. Offline mode (the default) accepts any non-empty token; a master
 * server checks tokens over HTTP (`POST {master}/api/relays/checkbearer`, spec §4.6). Both sit
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
  user?: { id?: number; display?: string; server?: string };
  is_blacklisted?: boolean;
  blacklisted?: { expires?: number; reason?: string };
  is_invalid_token?: boolean;
}

/** The master-server check over HTTP, with a timeout. */
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
    if (body.valid === true && body.user !== undefined) {
      const id = body.user.id;
      return {
        result: AuthResult.Success,
        userId: typeof id === 'number' && id >= 0 && id <= 0xffffffff ? id : 0,
        serverAddress: String(body.user.server ?? ''),
        displayName: String(body.user.display ?? ''),
      };
    }
    if (body.is_blacklisted === true) {
      return {
        result: AuthResult.Blacklisted,
        expireAt: Number(body.blacklisted?.expires ?? 0) || 0,
        reason: String(body.blacklisted?.reason ?? ''),
      };
    }
    if (body.is_invalid_token === true) return { result: AuthResult.InvalidToken, reason: null };
    return { result: AuthResult.Unknown, reason: 'Unknown authentification error.' };
  };
}
