/**
 * The inspector's table of protocols: every registered protocol's flows (declared in
 * `src/protocols/<name>/inspect.ts` and reached through its registry entry, plug-ins included),
 * then the transports they ride on (TLS and DTLS record headers). Loaded once, on first use.
 */
import {
  type BaseDecoderOptions,
  declaredFlow,
  type FlowProtocol,
  isFlowDeclaration,
  type ProtocolInspection,
} from '../core/flow.js';
import { dtlsDecoder, looksLikeDtls, looksLikeTls, tlsDecoder } from '../core/flow-transports.js';
import { registry } from '../protocols/registry.js';

export type { Emitter, FlowDecoder } from '../core/flow.js';
export { GAP_ERROR } from '../core/flow.js';

/** The options every decoder gets: the common ones and each protocol's own (`rmcVariant`, …). */
export type DecoderOptions = BaseDecoderOptions & Record<string, unknown>;

export const DEFAULT_DECODER_OPTIONS: BaseDecoderOptions = { maxFrameBytes: 16 << 20 };

export const STREAM_ERROR = 'ERR_INSPECT_DESYNC';

/**
 * Transports, after the protocols: their content detection is the weakest. Their ports are the
 * ones protocols declare as carrying TLS or DTLS (`ProtocolInspection.tlsPorts`, `dtlsPorts`).
 */
export function transportFlows(
  ports: { tls?: readonly number[]; dtls?: readonly number[] } = {},
): FlowProtocol[] {
  return [
    {
      name: 'tls',
      tcpPorts: ports.tls ?? [],
      udpPorts: [],
      create: tlsDecoder,
      detect: (tr, b) => (tr === 'tcp' && looksLikeTls(b) && b[5] === 1 ? 'client' : undefined),
    },
    {
      name: 'dtls',
      tcpPorts: [],
      udpPorts: ports.dtls ?? [],
      create: (out) => dtlsDecoder(out),
      detect: (tr, b) => (tr === 'udp' && looksLikeDtls(b) && b[13] === 1 ? 'client' : undefined),
    },
  ];
}

/** A registered protocol's name and what it gives the inspector. */
export interface LoadedInspection {
  protocol: string;
  inspection: ProtocolInspection;
}

let inspections: Promise<LoadedInspection[]> | undefined;

/** What every registered protocol gives the inspector (plug-ins included), in registry order. */
export function loadInspections(): Promise<LoadedInspection[]> {
  inspections ??= (async () => {
    const out: LoadedInspection[] = [];
    for (const entry of registry) {
      if (entry.loadInspection === undefined) continue;
      out.push({ protocol: entry.name, inspection: await entry.loadInspection() });
    }
    return out;
  })();
  return inspections;
}

let loaded: Promise<FlowProtocol<any>[]> | undefined;

/** Every flow protocol, in registry order, then the transports. */
export function loadFlowProtocols(): Promise<FlowProtocol<any>[]> {
  loaded ??= (async () => {
    const flows: FlowProtocol<any>[] = [];
    const tls: number[] = [];
    const dtls: number[] = [];
    for (const { inspection } of await loadInspections()) {
      for (const f of inspection.flows) flows.push(isFlowDeclaration(f) ? declaredFlow(f) : f);
      tls.push(...(inspection.tlsPorts ?? []));
      dtls.push(...(inspection.dtlsPorts ?? []));
    }
    return [...flows, ...transportFlows({ tls, dtls })];
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
