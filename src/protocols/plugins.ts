/**
 * Protocols from outside gamewire (plug-ins): `GAMEWIRE_PLUGINS` lists modules, each exporting
 * one protocol, which join the registry after the built-in ones and then appear everywhere a
 * built-in does (`protocols`, `decode`/`encode`, `serve`, `inspect`, `dissector`, the admin API
 * and the dashboard). See docs/plugins.md.
 *
 * A plug-in module's default export (or its export `protocol`) is either a `ProtocolEntry` (the
 * registry's light entry, with loaders) or a whole `ProtocolModule` (its entry is made from it).
 */
import { createRequire } from 'node:module';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { CommandError, EXIT_USAGE } from '../core/errors.js';
import type { ProtocolModule } from '../core/protocol.js';
import { type ProtocolEntry, registerProtocol } from './registry.js';

export const PLUGINS_ENV = 'GAMEWIRE_PLUGINS';

function pluginError(spec: string, why: string): CommandError {
  return new CommandError('ERR_PLUGIN', `plug-in ${spec} (from ${PLUGINS_ENV}): ${why}`, EXIT_USAGE);
}

/** A relative or absolute path is taken from `cwd`; a bare name is resolved as a package from `cwd`. */
function resolveSpecifier(spec: string, cwd: string): string {
  if (spec.startsWith('.') || path.isAbsolute(spec)) return pathToFileURL(path.resolve(cwd, spec)).href;
  try {
    return pathToFileURL(createRequire(path.join(cwd, 'noop.js')).resolve(spec)).href;
  } catch (err) {
    throw pluginError(spec, `cannot find it from ${cwd}: ${(err as Error).message.split('\n')[0]}`);
  }
}

function isEntry(v: any): v is ProtocolEntry {
  return typeof v?.name === 'string' && typeof v.load === 'function' && typeof v.loadCodecs === 'function';
}

function isModule(v: any): v is ProtocolModule {
  return typeof v?.name === 'string' && Array.isArray(v.codecs);
}

/** The registry entry of a whole module already loaded. */
export function entryOf(m: ProtocolModule): ProtocolEntry {
  const entry: ProtocolEntry = {
    name: m.name,
    summary: m.summary,
    codecs: m.codecs.map((c) => c.name),
    codecFlags: m.codecs.flatMap((c) => c.flags ?? []),
    hasServer: m.server !== undefined,
    hasCommands: m.registerCommands !== undefined,
    hasConform: m.conform !== undefined,
    hasLoad: m.load !== undefined,
    loadCodecs: async () => m.codecs,
    load: async () => m,
  };
  if (m.inspection !== undefined) entry.loadInspection = m.inspection;
  return entry;
}

/** The list in `GAMEWIRE_PLUGINS`: comma-separated, blanks ignored. */
export function pluginSpecifiers(value: string | undefined): string[] {
  return (value ?? '')
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s !== '');
}

let loaded = false;

/**
 * Loads every plug-in named in `GAMEWIRE_PLUGINS` into the registry, once. Any failure (a module
 * that cannot be found or loaded, an export that is no protocol, a name already taken) is
 * ERR_PLUGIN, exit 2, naming the plug-in.
 */
export async function loadPlugins(env: NodeJS.ProcessEnv = process.env, cwd = process.cwd()): Promise<void> {
  if (loaded) return;
  loaded = true;
  for (const spec of pluginSpecifiers(env[PLUGINS_ENV])) {
    const url = resolveSpecifier(spec, cwd);
    let mod: any;
    try {
      mod = await import(url);
    } catch (err) {
      throw pluginError(spec, `cannot load it: ${(err as Error).message.split('\n')[0]}`);
    }
    const value = mod.default ?? mod.protocol;
    let entry: ProtocolEntry;
    if (isEntry(value)) entry = value;
    else if (isModule(value)) entry = entryOf(value);
    else throw pluginError(spec, 'its default export is neither a ProtocolEntry nor a ProtocolModule');
    try {
      registerProtocol(entry);
    } catch (err) {
      throw pluginError(spec, (err as Error).message);
    }
  }
}
