/**
 * CloudServersProtocol (HyperScape-specific): lists the datacenters game servers run in.
 *
 * Layout status: **unknown**. The wiki page exists but its content is not public (spec §1.4).
 * The method name `GetDatacenters_V1` and its result layout are gamewire's choice; a client
 * that expects something else gets a well-formed answer it may not understand. Change the
 * declaration below once the real layout is known.
 */
import { ConfigError } from '../../../core/errors.js';
import { struct } from '../../../wire/index.js';
import type { Handlers } from '../dispatcher.js';
import { defineProtocol, method } from '../signature.js';
import { list, qString, u16 } from '../types.js';

/** Our choice (layout unknown): id, display name, region, host, port. */
export const Datacenter = struct({ id: qString, name: qString, region: qString, host: qString, port: u16 });

export interface DatacenterConfig {
  id: string;
  name: string;
  region: string;
  host: string;
  port: number;
}

export const CloudServersProtocol = defineProtocol(
  'CloudServersProtocol',
  'Lists datacenters for connecting to game servers (layout not public; gamewire choice).',
  {
    GetDatacenters_V1: method({
      args: {},
      results: { datacenters: list(Datacenter) },
      layout: 'unknown',
      doc: '() -> List<Datacenter{id, name, region, host, port}> (method name and layout are gamewire choices)',
    }),
  },
);

export const DEFAULT_DATACENTERS: readonly DatacenterConfig[] = [
  { id: 'local', name: 'Local', region: 'local', host: '127.0.0.1', port: 9103 },
];

/**
 * Reads datacenters from config: objects `{id, name?, region?, host, port}`, or strings
 * `id=host:port` (the `--datacenters a=1.2.3.4:7000,b=…` flag form).
 */
export function parseDatacenters(value: unknown): DatacenterConfig[] {
  if (value === undefined) return [...DEFAULT_DATACENTERS];
  if (!Array.isArray(value)) throw new ConfigError('datacenters must be a list');
  return value.map((v, i) => {
    if (typeof v === 'string') {
      const m = /^([^=]+)=([^:]+|\[[^\]]+\]):(\d{1,5})$/.exec(v);
      if (m === null)
        throw new ConfigError(`datacenters[${i}]: expected id=host:port, got ${JSON.stringify(v)}`);
      const port = Number(m[3]);
      if (port > 0xffff) throw new ConfigError(`datacenters[${i}]: port ${port} is out of range`);
      return { id: m[1]!, name: m[1]!, region: m[1]!, host: m[2]!, port };
    }
    if (typeof v === 'object' && v !== null) {
      const o = v as Record<string, unknown>;
      const s = (k: string, d?: string) => {
        const x = o[k] ?? d;
        if (typeof x !== 'string') throw new ConfigError(`datacenters[${i}].${k} must be a string`);
        return x;
      };
      const port = o.port;
      if (typeof port !== 'number' || !Number.isInteger(port) || port < 0 || port > 0xffff) {
        throw new ConfigError(`datacenters[${i}].port must be a port number`);
      }
      const id = s('id');
      return { id, name: s('name', id), region: s('region', id), host: s('host'), port };
    }
    throw new ConfigError(`datacenters[${i}] must be an object or id=host:port`);
  });
}

export function cloudServersHandlers(
  datacenters: readonly DatacenterConfig[],
): Handlers<typeof CloudServersProtocol> {
  const list = datacenters.map((d) => ({ ...d }));
  return {
    GetDatacenters_V1: () => ({ datacenters: list }),
  };
}
