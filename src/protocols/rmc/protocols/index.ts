/**
 * The built-in HyperScape protocols and a helper that registers them all on a server.
 */
import type { RmcServer } from '../server.js';
import type { ProtocolDef } from '../signature.js';
import { MemoryStore, type RmcStore } from '../store.js';
import { ApexAntitoxicityProtocol, acknowledgeAll } from './apex-antitoxicity.js';
import {
  CloudServersProtocol,
  cloudServersHandlers,
  type DatacenterConfig,
  DEFAULT_DATACENTERS,
} from './cloud-servers.js';
import { LoginProtocol, loginHandlers, type TokenValidator } from './login.js';
import type { RegistrationLimiter, RegistrationLimits } from './rate-limit.js';
import { SessionProtocol, SessionRegistry, sessionHandlers } from './session.js';

export * from './apex-antitoxicity.js';
export * from './cloud-servers.js';
export * from './login.js';
export * from './rate-limit.js';
export * from './secure-connection.js';
export * from './session.js';
export * from './ticket-granting.js';

/** Every built-in protocol declaration (for the CLI's typed decoding and `rmc call`). */
export const BUILTIN_PROTOCOLS: readonly ProtocolDef<any>[] = [
  LoginProtocol,
  CloudServersProtocol,
  SessionProtocol,
  ApexAntitoxicityProtocol,
];

export interface BuiltinOptions {
  store?: RmcStore;
  validateToken?: TokenValidator;
  datacenters?: readonly DatacenterConfig[];
  sessions?: SessionRegistry;
  /** StationURL returned by LoginWithToken_V1 as urlRegularProtocols. */
  secureUrl?: string;
  /** New-account rate limits (defaults: 20 per address and 10 000 per server, per hour). */
  registration?: RegistrationLimits | RegistrationLimiter;
}

/** Registers LoginProtocol, CloudServersProtocol, SessionProtocol and ApexAntitoxicityProtocol. */
export function registerBuiltins(
  server: RmcServer,
  options: BuiltinOptions = {},
): { store: RmcStore; sessions: SessionRegistry } {
  const store = options.store ?? new MemoryStore();
  const sessions = options.sessions ?? new SessionRegistry();
  server.register(
    LoginProtocol,
    loginHandlers({
      store,
      validateToken: options.validateToken,
      metrics: server.metrics,
      ...(options.secureUrl === undefined ? {} : { secureUrl: options.secureUrl }),
      ...(options.registration === undefined ? {} : { registration: options.registration }),
    }),
  );
  server.register(CloudServersProtocol, cloudServersHandlers(options.datacenters ?? DEFAULT_DATACENTERS));
  server.register(SessionProtocol, sessionHandlers(sessions));
  server.register(ApexAntitoxicityProtocol, {}, { fallback: acknowledgeAll });
  return { store, sessions };
}
