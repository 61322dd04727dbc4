/**
 * Where `gamewire load` may send its traffic. A load generator is a flood by design: pointed at
 * someone else's server it is an attack. So it loads this machine's loopback (127.0.0.0/8, ::1)
 * and nothing else unless the person running it states that they own the target
 * (`--i-own-this-target`). Names are resolved and every address they resolve to must pass, and
 * the rule applies to every address a run learns on its way (an allocation's relay, a login's
 * secure server), not only to `--target`. docs/capacity.md says why.
 */
import dgram from 'node:dgram';
import { lookup } from 'node:dns/promises';
import net from 'node:net';
import { CommandError, EXIT_USAGE, UsageError } from '../errors.js';

export const OWN_TARGET_FLAG = '--i-own-this-target';

/** True for 127.0.0.0/8, ::1 and IPv4-mapped loopback (::ffff:127.x.y.z). */
export function isLoopbackAddress(address: string): boolean {
  const a = address.startsWith('[') && address.endsWith(']') ? address.slice(1, -1) : address;
  if (net.isIPv4(a)) return a.startsWith('127.');
  if (net.isIPv6(a)) {
    const lower = a.toLowerCase();
    if (lower === '::1' || lower === '0:0:0:0:0:0:0:1') return true;
    const mapped = /^(?:0:0:0:0:0:|::)ffff:(\d+\.\d+\.\d+\.\d+)$/.exec(lower);
    return mapped !== null && mapped[1]!.startsWith('127.');
  }
  return false;
}

export class TargetPolicy {
  private readonly owned: boolean;
  private readonly checked = new Map<string, Promise<void>>();

  constructor(options: { owned: boolean }) {
    this.owned = options.owned;
  }

  /**
   * Resolves when `host` may be loaded; otherwise rejects with ERR_LOAD_TARGET (exit 2). `what`
   * names where the address came from, for the message.
   */
  allow(host: string, what = '--target'): Promise<void> {
    if (this.owned) return Promise.resolve();
    let p = this.checked.get(host);
    if (p === undefined) {
      p = this.check(host, what);
      this.checked.set(host, p);
    }
    return p;
  }

  private async check(host: string, what: string): Promise<void> {
    const bare = host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host;
    let addresses: string[];
    if (net.isIP(bare) !== 0) addresses = [bare];
    else {
      try {
        addresses = (await lookup(bare, { all: true })).map((a) => a.address);
      } catch (err) {
        throw new CommandError(
          'ERR_LOAD_TARGET',
          `cannot resolve ${host} (${what}): ${(err as Error).message}`,
          EXIT_USAGE,
        );
      }
    }
    const outside = addresses.filter((a) => !isLoopbackAddress(a));
    if (outside.length > 0 || addresses.length === 0) {
      const resolved = bare === outside[0] ? '' : ` (${outside.join(', ')})`;
      throw new CommandError(
        'ERR_LOAD_TARGET',
        `${host}${resolved}, from ${what}, is not a loopback address: gamewire load floods what it is pointed at, ` +
          `so it loads only this machine unless you own the target and say so with ${OWN_TARGET_FLAG}`,
        EXIT_USAGE,
      );
    }
  }
}

/**
 * Parses `--from` values: addresses, comma-separated lists, and last-octet ranges
 * (`127.0.0.2-9` is 127.0.0.2 … 127.0.0.9). At most `max` addresses.
 */
export function parseFromAddresses(values: readonly string[], max = 65536): string[] {
  const out: string[] = [];
  for (const value of values) {
    for (const part of value.split(',')) {
      const item = part.trim();
      if (item === '') continue;
      const range = /^(\d+\.\d+\.\d+\.)(\d+)-(\d+)$/.exec(item);
      if (range !== null) {
        const first = Number(range[2]);
        const last = Number(range[3]);
        if (!net.isIPv4(`${range[1]}${first}`) || !net.isIPv4(`${range[1]}${last}`) || last < first)
          throw new UsageError(`--from: "${item}" is not a range like 127.0.0.2-9`);
        for (let i = first; i <= last; i++) out.push(`${range[1]}${i}`);
      } else if (net.isIP(item) !== 0) out.push(item);
      else throw new UsageError(`--from: "${item}" is not an IP address (or a range like 127.0.0.2-9)`);
      if (out.length > max) throw new UsageError(`--from: more than ${max} addresses`);
    }
  }
  return out;
}

/** Checks that this machine can send from each address (binds a UDP socket to it once). */
export async function checkLocalAddresses(addresses: readonly string[]): Promise<void> {
  for (const address of addresses) {
    const socket = dgram.createSocket(net.isIPv6(address) ? 'udp6' : 'udp4');
    try {
      await new Promise<void>((resolve, reject) => {
        socket.once('error', reject);
        socket.bind(0, address, () => resolve());
      });
    } catch (err) {
      throw new CommandError(
        'ERR_LOAD_FROM',
        `cannot send from ${address} (--from): ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}; ` +
          'use addresses of this machine (the whole of 127.0.0.0/8 is local on Linux)',
        EXIT_USAGE,
      );
    } finally {
      socket.close();
    }
  }
}

/** Splits `HOST:PORT`, `[v6]:PORT` or `HOST` (port: `defaultPort`). */
export function parseHostPort(
  value: string,
  defaultPort: number,
  what = '--target',
): { host: string; port: number } {
  let host = value;
  let port = defaultPort;
  const v6 = /^\[([^\]]+)\](?::(\d+))?$/.exec(value);
  if (v6 !== null) {
    host = v6[1]!;
    if (v6[2] !== undefined) port = Number(v6[2]);
  } else if (net.isIPv6(value)) {
    host = value;
  } else {
    const at = value.lastIndexOf(':');
    if (at >= 0) {
      host = value.slice(0, at);
      const p = value.slice(at + 1);
      if (!/^\d+$/.test(p)) throw new UsageError(`${what}: "${value}" is not HOST:PORT`);
      port = Number(p);
    }
  }
  if (host === '') throw new UsageError(`${what}: "${value}" has no host`);
  if (!Number.isInteger(port) || port < 1 || port > 65535)
    throw new UsageError(`${what}: port ${port} is not 1..65535`);
  return { host, port };
}
