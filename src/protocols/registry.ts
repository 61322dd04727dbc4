/**
 * Every protocol gamewire speaks, as light entries: names and loaders, no protocol code. The CLI
 * starts fast because it imports a protocol's code only when a command uses it (`decode js5`
 * loads the js5 codecs, nothing else). Add a protocol by adding its entry here; the test in
 * test/cli/registry.test.ts checks each entry against the module it loads.
 */
import type { CodecFlag, ProtocolCodec, ProtocolModule } from '../core/protocol.js';
import { PRUDP_CODEC_FLAGS } from './rmc/prudp/flags.js';

export interface ProtocolEntry {
  /** The protocol's name on the command line and in the config file. */
  name: string;
  summary: string;
  /** Names of the decode/encode formats its codec module provides, the protocol's own first. */
  codecs: readonly string[];
  /** Flags of its codecs' own that `decode`/`encode` accept (listed here so no code loads for them). */
  codecFlags?: readonly CodecFlag[];
  /** True when `gamewire serve <name>` can run a server. */
  hasServer: boolean;
  /** True when it adds subcommands (`gamewire js5 cache …`). */
  hasCommands: boolean;
  /** True when `gamewire conform <name>` has checks for it (its module's `conform` loader). */
  hasConform: boolean;
  /** True when `gamewire load <name>` has a load generator for it (its module's `load` loader). */
  hasLoad: boolean;
  /** Loads the codecs alone: wire declarations, no server, client or CLI code. */
  loadCodecs(): Promise<readonly ProtocolCodec[]>;
  /** Loads the whole module (server, commands). */
  load(): Promise<ProtocolModule>;
}

export const registry: readonly ProtocolEntry[] = [
  {
    name: 'rmc',
    summary: 'Rendez-Vous RMC (HyperScape string-named variant by default; nex-verbose and classic packed)',
    codecs: ['rmc', 'prudp'],
    codecFlags: PRUDP_CODEC_FLAGS,
    hasServer: true,
    hasCommands: true,
    hasConform: false,
    hasLoad: true,
    loadCodecs: async () => [
      (await import('./rmc/codec.js')).rmcCodec,
      (await import('./rmc/prudp/codec.js')).prudpCodec,
    ],
    load: async () => (await import('./rmc/index.js')).rmc,
  },
  {
    name: 'js5',
    summary: 'RuneScape JS5 cache download protocol (435, 530, OSRS) and on-disk cache',
    codecs: ['js5', 'js5-container', 'js5-index', 'js5-master-index'],
    hasServer: true,
    hasCommands: true,
    hasConform: true,
    hasLoad: true,
    loadCodecs: async () => {
      const m = await import('./js5/codec.js');
      return [m.js5Codec, m.js5ContainerCodec, m.js5IndexCodec, m.js5MasterIndexCodec];
    },
    load: async () => (await import('./js5/index.js')).js5,
  },
  {
    name: 'vcmp-rpc',
    summary: 'VC-MP NPC LibRPC: serialized function calls between a server and its NPCs',
    codecs: ['vcmp-rpc'],
    hasServer: false,
    hasCommands: true,
    hasConform: false,
    hasLoad: false,
    loadCodecs: async () => [(await import('./vcmp-rpc/codec.js')).vcmpRpcCodec],
    load: async () => (await import('./vcmp-rpc/index.js')).vcmpRpc,
  },
  {
    name: 'unity-relay',
    summary: 'Unity Relay: relay server for stock Unity Transport clients, allocation API, client',
    codecs: ['unity-relay'],
    hasServer: true,
    hasCommands: true,
    hasConform: true,
    hasLoad: true,
    loadCodecs: async () => [(await import('./unity-relay/codec.js')).unityRelayCodec],
    load: async () => (await import('./unity-relay/index.js')).unityRelay,
  },
  {
    name: 'nox-relay',
    summary: 'NoxVR Relay v1 (social VR instances; TCP+UDP)',
    codecs: ['nox-relay'],
    hasServer: true,
    hasCommands: true,
    hasConform: true,
    hasLoad: true,
    loadCodecs: async () => [(await import('./nox-relay/codec.js')).noxRelayCodec],
    load: async () => (await import('./nox-relay/index.js')).noxRelay,
  },
];

/** Every format name `decode` accepts, in registry order. */
export function codecNames(): string[] {
  return registry.flatMap((p) => p.codecs);
}

/** The entry that provides a decode/encode format, by the format's name. */
export function entryForCodec(name: string): ProtocolEntry | undefined {
  return registry.find((p) => p.codecs.includes(name));
}

/** Loads one format's codec (and only its protocol's codec module). */
export async function loadCodec(name: string): Promise<ProtocolCodec | undefined> {
  const entry = entryForCodec(name);
  if (entry === undefined) return undefined;
  return (await entry.loadCodecs()).find((c) => c.name === name);
}

/** Loads every protocol module, in registry order. */
export async function loadProtocols(): Promise<ProtocolModule[]> {
  return Promise.all(registry.map((p) => p.load()));
}

/** Every codec-specific flag of `decode`/`encode`, once each (codecs may share one). */
export function codecFlags(): CodecFlag[] {
  const seen = new Map<string, CodecFlag>();
  for (const p of registry) for (const f of p.codecFlags ?? []) if (!seen.has(f.flag)) seen.set(f.flag, f);
  return [...seen.values()];
}
