/**
 * RMC over TCP in the inspector and in Wireshark: u32le-framed packets decoded with the `rmc`
 * codec (named arguments and results for the declared methods). PRUDP, the UDP transport, is in
 * prudp/inspect.ts.
 */
import {
  type DecoderFlag,
  type DissectorDeclaration,
  type FlowProtocol,
  framedStreams,
  noDatagrams,
  type ProtocolInspection,
} from '../../core/flow.js';
import { lengthPrefixed } from '../../wire/framing.js';
import { decodeStream } from './codec.js';
import { loadPacks } from './ddl/pack.js';
import { rmcDissector } from './dissector.js';
import type { RmcVariant } from './messages.js';
import { BUILTIN_PROTOCOLS } from './protocols/index.js';
import { type PrudpDissectorOptions, prudpDissector } from './prudp/dissector.js';
import { PRUDP_INSPECT_FLAGS, prudpFlow } from './prudp/inspect.js';
import type { ProtocolDef } from './signature.js';

export interface RmcInspectOptions {
  /** RMC envelope variant. */
  rmcVariant: RmcVariant;
  /** The declared protocols (`--protocols` packs first, then the built-ins): named args and results. */
  rmcProtocols: readonly ProtocolDef<any>[];
}

const RMC_VARIANTS: readonly RmcVariant[] = ['hyperscape', 'nex-verbose', 'classic'];

/**
 * `--rmc-variant` of `gamewire inspect`, `gamewire replay` and `gamewire dissector`: the envelope of
 * RMC and PRUDP flows (in the dissector, the default of the `gw_rmc.variant` preference).
 */
export const RMC_VARIANT_FLAG: DecoderFlag = {
  flag: '--rmc-variant <variant>',
  description: 'RMC envelope: hyperscape, nex-verbose or classic',
  default: 'hyperscape',
  choices: RMC_VARIANTS,
  apply: (value) => ({ rmcVariant: value as RmcVariant }),
};

/**
 * `--protocols` of `gamewire inspect`, `gamewire replay` and `gamewire dissector`: protocol packs
 * (`gamewire rmc ddl import`) whose methods RMC and PRUDP flows show with named, typed arguments
 * and results, and the generated RMC dissector names. Comma-separated or repeated; a pack that
 * does not load stops the command (ERR_RMC_PACK).
 */
export const RMC_PACKS_FLAG: DecoderFlag = {
  flag: '--protocols <files>',
  description:
    'rmc, prudp: protocol packs (gamewire rmc ddl import), comma-separated or repeated: named args and results',
  repeatable: true,
  apply: (value) =>
    typeof value === 'string' && value !== ''
      ? { rmcProtocols: [...loadPacks(value), ...BUILTIN_PROTOCOLS] }
      : {},
};

export const rmcFlow: FlowProtocol<RmcInspectOptions> = {
  name: 'rmc',
  tcpPorts: [9103],
  udpPorts: [],
  defaults: { rmcVariant: 'hyperscape', rmcProtocols: BUILTIN_PROTOCOLS },
  create(out, options) {
    const measure = lengthPrefixed({
      prefix: 'u32le',
      counts: 'rest',
      maxFrameBytes: options.maxFrameBytes,
      minFrameBytes: options.rmcVariant === 'classic' ? 6 : 7,
    });
    return {
      ...framedStreams(out, measure, options.maxFrameBytes, (d, frame) => {
        for (const m of decodeStream(frame, options.rmcVariant, options.rmcProtocols)) out.message(d, m);
      }),
      datagram: noDatagrams(out, 'RMC over TCP'),
    };
  },
  detect: (tr, b) =>
    tr === 'tcp' &&
    b.length >= 11 &&
    b.readUInt32LE(0) + 4 <= b.length &&
    b.readUInt32LE(0) >= 7 &&
    (b[4]! & 0x80) !== 0
      ? 'client'
      : undefined,
  // What the server makes up per connection or per run (docs/inspect.md, "Recording and replay"):
  // RegisterEx's connection id (a counter) and public URL (the client's own address and port),
  // and the Kerberos tickets, sealed with fresh session keys every time.
  replay: { consistent: ['pidConnectionID', 'urlPublic'], ignore: ['pbufResponse'] },
};

/** Both dissectors (RMC, and PRUDP handing its messages to RMC) for the `gamewire dissector` flags. */
function dissectors(options: Record<string, unknown>): DissectorDeclaration[] {
  return [
    rmcDissector(
      (options.rmcProtocols as readonly ProtocolDef<any>[] | undefined) ?? BUILTIN_PROTOCOLS,
      (options.rmcVariant as RmcVariant | undefined) ?? 'hyperscape',
    ),
    prudpDissector(prudpFlow.udpPorts, options as PrudpDissectorOptions),
  ];
}

export const inspection: ProtocolInspection = {
  flows: [rmcFlow, prudpFlow],
  inspectFlags: [RMC_VARIANT_FLAG, RMC_PACKS_FLAG, ...PRUDP_INSPECT_FLAGS],
  replayFlags: [RMC_VARIANT_FLAG, RMC_PACKS_FLAG],
  dissectorFlags: [RMC_VARIANT_FLAG, RMC_PACKS_FLAG, ...PRUDP_INSPECT_FLAGS],
  get dissectors() {
    return dissectors({});
  },
  dissectorsWith: dissectors,
};
