/**
 * Every protocol's codecs, loaded at once: what the library's root `decode`/`encode`/`findCodec`
 * use. Codec modules hold declarations only, so importing this loads no server, client or CLI
 * code (and none of their dependencies).
 */
import type { ProtocolCodec } from '../core/protocol.js';
import { js5Codec, js5ContainerCodec, js5IndexCodec, js5MasterIndexCodec } from './js5/codec.js';
import { noxRelayCodec } from './nox-relay/codec.js';
import { rmcCodec } from './rmc/codec.js';
import { prudpCodec } from './rmc/prudp/codec.js';
import { unityRelayCodec } from './unity-relay/codec.js';
import { vcmpRpcCodec } from './vcmp-rpc/codec.js';

export const allCodecs: readonly ProtocolCodec[] = [
  rmcCodec,
  prudpCodec,
  js5Codec,
  js5ContainerCodec,
  js5IndexCodec,
  js5MasterIndexCodec,
  vcmpRpcCodec,
  unityRelayCodec,
  noxRelayCodec,
];

/** The codec for a format name (`js5`, `js5-index`, `unity-relay`, …), or undefined. */
export function findCodec(name: string): ProtocolCodec | undefined {
  return allCodecs.find((c) => c.name === name);
}
