/**
 * Printing records: JSON lines (`--json`) or a table for people. Also the filters
 * (`--protocol`, `--flow`, `--type`).
 */
import type { Json } from '../wire/codec.js';
import type { InspectRecord } from './inspector.js';

export interface RecordFilter {
  protocols?: ReadonlySet<string>;
  /** A flow label, one endpoint (`host:port`), or a port. */
  flow?: string;
  /** Message types; errors are kept unless `error` is absent from a given list... see `accepts`. */
  types?: ReadonlySet<string>;
}

/** The JSON line's object: time in seconds (microsecond precision). */
export function recordJson(r: InspectRecord): Record<string, Json> {
  const out: Record<string, Json> = {
    time: r.timeUs / 1e6,
    flow: r.flow,
    transport: r.transport,
    direction: r.direction,
    protocol: r.protocol,
  };
  if (r.error !== undefined) out.error = r.error as unknown as Json;
  else out.message = r.message!;
  return out;
}

function flowMatches(label: string, want: string): boolean {
  if (label === want) return true;
  const [client, server] = label.split(' -> ');
  if (client === want || server === want) return true;
  if (/^\d+$/.test(want)) return client!.endsWith(`:${want}`) || server!.endsWith(`:${want}`);
  return false;
}

/**
 * True when a record passes the filters. `--type` names message types; an error record passes
 * a type filter only when the list includes `error` (so `--type error` shows just the failures).
 */
export function accepts(r: InspectRecord, f: RecordFilter): boolean {
  if (f.protocols !== undefined && !f.protocols.has(r.protocol)) return false;
  if (f.flow !== undefined && !flowMatches(r.flow, f.flow)) return false;
  if (f.types !== undefined) {
    if (r.error !== undefined) return f.types.has('error');
    const type = (r.message as { type?: unknown } | null)?.type;
    if (typeof type !== 'string' || !f.types.has(type)) return false;
  }
  return true;
}

function two(n: number): string {
  return n < 10 ? `0${n}` : String(n);
}

/** `HH:MM:SS.uuuuuu` (UTC). */
export function clock(timeUs: number): string {
  const d = new Date(Math.floor(timeUs / 1000));
  const micros = String(Math.floor(timeUs % 1e6)).padStart(6, '0');
  return `${two(d.getUTCHours())}:${two(d.getUTCMinutes())}:${two(d.getUTCSeconds())}.${micros}`;
}

function summary(message: Json, width: number): { type: string; rest: string } {
  if (message === null || typeof message !== 'object' || Array.isArray(message)) {
    return { type: '', rest: JSON.stringify(message) };
  }
  const { type, ...fields } = message as Record<string, Json>;
  const parts: string[] = [];
  for (const [k, v] of Object.entries(fields)) {
    let text = typeof v === 'string' ? v : JSON.stringify(v);
    if (text.length > 64) text = `${text.slice(0, 61)}…`;
    parts.push(`${k}=${text}`);
  }
  let rest = parts.join(' ');
  if (rest.length > width) rest = `${rest.slice(0, Math.max(0, width - 1))}…`;
  return { type: typeof type === 'string' ? type : '', rest };
}

/** One table line: time, protocol, flow, arrow (→ client to server, ← back), type, fields. */
export function tableLine(r: InspectRecord, width = 200): string {
  const arrow = r.direction === 'client' ? '→' : '←';
  const head = `${clock(r.timeUs)}  ${r.protocol.padEnd(11)} ${r.flow.padEnd(45)} ${arrow} `;
  if (r.error !== undefined) {
    return `${head}ERROR ${r.error.code} at ${r.error.offset}: ${r.error.message}`;
  }
  const s = summary(r.message!, Math.max(20, width - head.length - 22));
  return `${head}${s.type.padEnd(20)} ${s.rest}`;
}
