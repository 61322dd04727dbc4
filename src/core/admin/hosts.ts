/**
 * Which host names count as "this machine" for the admin endpoint: the loopback default, and
 * the DNS-rebinding guard (a Host header must name this machine, never a name that merely
 * starts like a loopback address, such as `127.0.0.1.attacker.example`).
 */
import { isIPv4, isIPv6 } from 'node:net';

/** `localhost`, an IPv4 address in 127.0.0.0/8, `::1`, or `::ffff:127.x.y.z`. Literal names only. */
export function isLoopbackName(host: string): boolean {
  const h = host.trim().toLowerCase();
  if (h === 'localhost') return true;
  if (isIPv4(h)) return h.startsWith('127.');
  if (!isIPv6(h)) return false;
  if (h.startsWith('::ffff:')) {
    const v4 = h.slice(7);
    return isIPv4(v4) && v4.startsWith('127.');
  }
  // Every spelling of ::1 (0:0:0:0:0:0:0:1, ::0:1, …): only the last group is 1.
  const groups = h.split(':').filter((g) => g !== '');
  return (
    groups.length > 0 &&
    Number.parseInt(groups[groups.length - 1]!, 16) === 1 &&
    groups.slice(0, -1).every((g) => Number.parseInt(g, 16) === 0)
  );
}

/** The host name of a Host header (`[::1]:9100` → `::1`, `example.com:80` → `example.com`). */
export function hostName(header: string): string {
  const h = header.trim().toLowerCase();
  if (h.startsWith('[')) {
    const end = h.indexOf(']');
    return h.slice(1, end === -1 ? undefined : end);
  }
  const colon = h.lastIndexOf(':');
  return colon === -1 ? h : h.slice(0, colon);
}
