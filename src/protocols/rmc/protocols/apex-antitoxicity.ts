/**
 * ApexAntitoxicityProtocol (HyperScape-specific): "currently unknown, possibly for managing bans
 * and mutes" (spec §1.4). Neither its method names nor its layouts are public.
 *
 * Our choice: accept every method of this protocol and acknowledge it with an empty success
 * response, logging the method name and argument size so that server authors learn what the
 * client sends. No method is declared, so nothing is decoded.
 */
import type { FallbackHandler } from '../dispatcher.js';
import { defineProtocol } from '../signature.js';

export const ApexAntitoxicityProtocol = defineProtocol(
  'ApexAntitoxicityProtocol',
  'Unknown (bans/mutes?); every call is acknowledged with an empty success (gamewire choice).',
  {},
);

export const acknowledgeAll: FallbackHandler = (ctx, method, args) => {
  ctx.log.info(
    { method, argBytes: args.length, connection: ctx.connection.id },
    'ApexAntitoxicityProtocol call acknowledged',
  );
  return Buffer.alloc(0);
};
