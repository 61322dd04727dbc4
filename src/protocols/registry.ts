/**
 * Every protocol gamewire speaks, as light entries: names and loaders, no protocol code. The CLI
 * starts fast because it imports a protocol's code only when a command uses it (`decode js5`
 * loads the js5 codecs, nothing else). An entry is the one place a protocol is plugged in: the
 * CLI, `serve`, the inspector, the dissector generator, the admin endpoint and the dashboard
 * reach everything of a protocol through it. Add a built-in protocol by adding its entry here
 * (test/cli/registry.test.ts checks each entry against the module it loads); add one from
 * outside with `GAMEWIRE_PLUGINS` (plugins.ts, docs/plugins.md).
 */
import { CommandError, EXIT_USAGE } from '../core/errors.js';
import type { ProtocolInspection } from '../core/flow.js';
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
  /** Loads what the inspector and the dissector generator use (flows, dissectors); absent: none. */
  loadInspection?(): Promise<ProtocolInspection>;
}

/** The built-in protocols, then any plug-in added with `registerProtocol` (in that order). */
export const registry: ProtocolEntry[] = [
  {
    name: 'rmc',
    summary: 'Rendez-Vous RMC (HyperScape string-named variant by default; nex-verbose and classic packed)',
    codecs: ['rmc', 'prudp'],
    codecFlags: PRUDP_CODEC_FLAGS,
    hasServer: true,
    hasCommands: true,
    hasConform: true,
    hasLoad: true,
    loadCodecs: async () => [
      (await import('./rmc/codec.js')).rmcCodec,
      (await import('./rmc/prudp/codec.js')).prudpCodec,
    ],
    load: async () => (await import('./rmc/index.js')).rmc,
    loadInspection: async () => (await import('./rmc/inspect.js')).inspection,
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
    loadInspection: async () => (await import('./js5/inspect.js')).inspection,
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
    loadInspection: async () => (await import('./unity-relay/inspect.js')).inspection,
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
    loadInspection: async () => (await import('./nox-relay/inspect.js')).inspection,
  },
];

function pluginError(message: string): CommandError {
  return new CommandError('ERR_PLUGIN', message, EXIT_USAGE);
}

/** A protocol's name: lowercase letters, digits and dashes (it is a flag value, a config section, a URL part). */
export const PROTOCOL_NAME = /^[a-z][a-z0-9-]{0,39}$/;

/**
 * Adds a protocol from outside (a plug-in) after the built-in ones. Its name and codec names
 * must be new; throws ERR_PLUGIN (exit 2) otherwise.
 */
export function registerProtocol(entry: ProtocolEntry): void {
  if (!PROTOCOL_NAME.test(entry.name)) {
    throw pluginError(`protocol name "${entry.name}" must be lowercase letters, digits and dashes`);
  }
  if (registry.some((p) => p.name === entry.name))
    throw pluginError(`protocol "${entry.name}" is already registered`);
  for (const c of entry.codecs) {
    if (!PROTOCOL_NAME.test(c))
      throw pluginError(`codec name "${c}" must be lowercase letters, digits and dashes`);
    const owner = entryForCodec(c);
    if (owner !== undefined) throw pluginError(`codec "${c}" already belongs to ${owner.name}`);
  }
  registry.push(entry);
}

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
