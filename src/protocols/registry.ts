/**
 * Every protocol gamewire speaks. Add a protocol by adding its module here; the CLI (`decode`,
 * `encode`, `serve`, subcommands) and `npm start` pick it up from this list.
 */
import type { ProtocolCodec, ProtocolModule } from '../core/protocol.js';
import { js5 } from './js5/index.js';
import { noxRelay } from './nox-relay/index.js';
import { rmc } from './rmc/index.js';
import { unityRelay } from './unity-relay/index.js';
import { vcmpRpc } from './vcmp-rpc/index.js';

export const protocols: readonly ProtocolModule[] = [rmc, js5, vcmpRpc, unityRelay, noxRelay];

export function findCodec(name: string): ProtocolCodec | undefined {
  for (const p of protocols) for (const c of p.codecs) if (c.name === name) return c;
  return undefined;
}

export function allCodecs(): ProtocolCodec[] {
  return protocols.flatMap((p) => p.codecs);
}
