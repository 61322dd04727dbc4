/**
 * Serving a protocol pack: each of its protocols is registered with no handlers, so every method
 * answers Core::NotImplemented (typed, counted, logged) until an embedder registers handlers.
 */
import type { Logger } from '../../../core/logger.js';
import { DeclarationError } from '../../../wire/index.js';
import type { RmcServer } from '../server.js';
import type { ProtocolDef } from '../signature.js';

export interface PackRegistration {
  registered: string[];
  /** Protocols left out, each with why: a built-in of the same name or id wins; classic needs ids. */
  skipped: { protocol: string; reason: string }[];
}

/** Registers pack protocols after the built-ins; one that clashes with them is skipped and logged. */
export function registerPackProtocols(
  server: RmcServer,
  protocols: readonly ProtocolDef[],
  log: Pick<Logger, 'info' | 'warn'>,
): PackRegistration {
  const out: PackRegistration = { registered: [], skipped: [] };
  for (const p of protocols) {
    try {
      server.register(p, {});
      out.registered.push(p.name);
    } catch (e) {
      if (!(e instanceof DeclarationError)) throw e;
      out.skipped.push({ protocol: p.name, reason: e.message });
      log.warn({ pack: p.name, reason: e.message }, 'rmc: protocol pack protocol not served');
    }
  }
  if (out.registered.length > 0)
    log.info(
      { packProtocols: out.registered },
      'rmc: protocol pack protocols served (every method answers NotImplemented until it has a handler)',
    );
  return out;
}
