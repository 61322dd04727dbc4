/**
 * The inspector's table of protocols: every registered protocol's flows (declared in
 * `src/protocols/<name>/inspect.ts` and reached through its registry entry, plug-ins included),
 * then the transports they ride on (TLS and DTLS record headers). Loaded once, on first use.
 */
import { type BaseDecoderOptions, declaredFlow, type FlowProtocol, isFlowDeclaration } from '../core/flow.js';
import { dtlsDecoder, looksLikeDtls, looksLikeTls, tlsDecoder } from '../core/flow-transports.js';
import { registry } from '../protocols/registry.js';

export type { Emitter, FlowDecoder } from '../core/flow.js';
export { GAP_ERROR } from '../core/flow.js';

/** The options every decoder gets: the common ones and each protocol's own (`rmcVariant`, …). */
export type DecoderOptions = BaseDecoderOptions & Record<string, unknown>;

export const DEFAULT_DECODER_OPTIONS: BaseDecoderOptions = { maxFrameBytes: 16 << 20 };

export const STREAM_ERROR = 'ERR_INSPECT_DESYNC';

/** Transports, after the protocols: their content detection is the weakest. */
export const TRANSPORT_FLOWS: readonly FlowProtocol[] = [
  {
    name: 'tls',
    tcpPorts: [37003],
    udpPorts: [],
    create: tlsDecoder,
    detect: (tr, b) => (tr === 'tcp' && looksLikeTls(b) && b[5] === 1 ? 'client' : undefined),
  },
  {
    name: 'dtls',
    tcpPorts: [],
    udpPorts: [],
    create: (out) => dtlsDecoder(out),
    detect: (tr, b) => (tr === 'udp' && looksLikeDtls(b) && b[13] === 1 ? 'client' : undefined),
  },
];

let loaded: Promise<FlowProtocol<any>[]> | undefined;

/** Every flow protocol, in registry order, then the transports. */
export function loadFlowProtocols(): Promise<FlowProtocol<any>[]> {
  loaded ??= (async () => {
    const flows: FlowProtocol<any>[] = [];
    for (const entry of registry) {
      if (entry.loadInspection === undefined) continue;
      const inspection = await entry.loadInspection();
      for (const f of inspection.flows) flows.push(isFlowDeclaration(f) ? declaredFlow(f) : f);
    }
    return [...flows, ...TRANSPORT_FLOWS];
  })();
  return loaded;
}

/** The default decoder options: the common ones, then each protocol's own defaults. */
export function decoderDefaults(protocols: readonly FlowProtocol<any>[]): DecoderOptions {
  const out: DecoderOptions = { ...DEFAULT_DECODER_OPTIONS };
  for (const p of protocols) Object.assign(out, p.defaults ?? {});
  // The common options win over a protocol's defaults of the same name.
  return { ...out, ...DEFAULT_DECODER_OPTIONS };
}

export function findProtocol(
  protocols: readonly FlowProtocol<any>[],
  name: string,
): FlowProtocol<any> | undefined {
  return protocols.find((p) => p.name === name);
}
