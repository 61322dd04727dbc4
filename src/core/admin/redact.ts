/**
 * Secret masking for the wire view: decoded fields whose name says they hold a secret become
 * `"<redacted>"`, and the bytes of those values are blanked in the hex too, so neither the
 * fields nor the hex of a message ever carry a key, a ticket, a password or connection data.
 */
import type { Json } from '../../wire/codec.js';

export const REDACTED = '<redacted>';

/** Field names that hold secrets in gamewire's decoders (case-insensitive, anywhere in the name). */
const SECRET_NAME =
  /(password|passwd|secret|token|ticket|hmac|mac$|^key$|Key$|sessionkey|connectiondata|signature|auth(code|data)?$|credential)/i;

export function isSecretName(name: string): boolean {
  return SECRET_NAME.test(name);
}

/**
 * Returns a copy of `json` with secret fields masked, and collects the masked values' byte forms
 * (hex strings as bytes, other strings as UTF-8) so the caller can blank them in the raw bytes.
 */
export function redactFields(json: Json, found: Buffer[] = []): Json {
  if (Array.isArray(json)) return json.map((v) => redactFields(v, found));
  if (json === null || typeof json !== 'object') return json;
  const out: { [key: string]: Json } = {};
  for (const [k, v] of Object.entries(json)) {
    if (isSecretName(k) && v !== null && v !== '' && !(Array.isArray(v) && v.length === 0)) {
      collect(v, found);
      out[k] = REDACTED;
    } else out[k] = redactFields(v, found);
  }
  return out;
}

/** The byte forms of a secret value (hex as bytes, strings as UTF-8, byte arrays), for blanking. */
export function collect(v: Json, found: Buffer[]): void {
  if (typeof v === 'string') {
    if (v.length >= 8 && v.length % 2 === 0 && /^[0-9a-fA-F]+$/.test(v)) found.push(Buffer.from(v, 'hex'));
    if (v.length >= 4) found.push(Buffer.from(v, 'utf8'));
  } else if (Array.isArray(v)) {
    if (v.length >= 4 && v.every((x) => typeof x === 'number' && x >= 0 && x <= 255))
      found.push(Buffer.from(v as number[]));
    else for (const x of v) collect(x, found);
  } else if (v !== null && typeof v === 'object') {
    for (const x of Object.values(v)) collect(x, found);
  }
}

/** Blanks (zeroes) every occurrence of each value in `bytes`, in place. */
export function blankValues(bytes: Buffer, values: readonly Buffer[]): void {
  for (const v of values) {
    if (v.length < 4) continue;
    let at = bytes.indexOf(v);
    while (at !== -1) {
      bytes.fill(0, at, at + v.length);
      at = bytes.indexOf(v, at + v.length);
    }
  }
}
