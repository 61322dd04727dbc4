/** Starts the admin endpoint in-process over real servers, and reads it over real HTTP. */
import type { AdminServer, AdminServerEntry } from '../../src/core/admin/server.js';
import { startAdminServer } from '../../src/core/admin/server.js';
import { codecDecoder } from '../../src/core/admin/wire-json.js';
import type { ProtocolModule } from '../../src/core/protocol.js';
import type { RunningServer } from '../../src/core/server.js';
import { waitFor } from '../helpers/wait.js';

export interface Admin {
  admin: AdminServer;
  base: string;
  get(path: string, init?: RequestInit): Promise<Response>;
  json<T = any>(path: string): Promise<T>;
  post(path: string, token?: string | null): Promise<Response>;
}

/** One entry per running server, as `gamewire serve` builds them. */
export function entry(
  module: ProtocolModule,
  server: RunningServer,
  metrics: AdminServerEntry['metrics'],
): AdminServerEntry {
  return {
    protocol: module.name,
    summary: module.summary,
    startedAt: Date.now(),
    endpoints: server.endpoints,
    metrics,
    admin: server.admin,
    decode: server.admin?.decode ?? codecDecoder(module.codecs[0]!),
  };
}

export async function startAdmin(
  entries: AdminServerEntry[],
  options: Partial<Parameters<typeof startAdminServer>[0]> = {},
): Promise<Admin> {
  const admin = await startAdminServer({
    host: '127.0.0.1',
    port: 0,
    metrics: () => entries.map((e) => e.metrics),
    servers: () => entries,
    state: () => 'ready',
    ...options,
  });
  const base = `http://127.0.0.1:${admin.port}`;
  const get = (path: string, init?: RequestInit) => fetch(base + path, init);
  return {
    admin,
    base,
    get,
    async json<T = any>(path: string): Promise<T> {
      const r = await get(path);
      if (r.status !== 200) throw new Error(`${path}: ${r.status} ${await r.text()}`);
      return (await r.json()) as T;
    },
    post(path, token) {
      const headers: Record<string, string> = { 'content-type': 'application/json' };
      if (token !== null) headers['x-gamewire-action'] = token ?? admin.actionToken;
      return fetch(base + path, { method: 'POST', headers, body: '{}' });
    },
  };
}

/** Polls `fn` until it returns a value that is not undefined, or fails after `ms`. */
export async function eventually<T>(
  fn: () => Promise<T | undefined> | T | undefined,
  ms = 8000,
  what = 'condition',
): Promise<T> {
  const got = await waitFor(
    async () => {
      const v = await fn();
      return v === undefined ? undefined : { v };
    },
    { what, timeoutMs: ms, intervalMs: 50, retryErrors: true },
  );
  return got.v;
}

export interface SseEvent {
  event: string;
  data: any;
}

/** Opens an event stream and collects its events until `stop()`. */
export async function openStream(url: string, headers: Record<string, string> = {}) {
  const controller = new AbortController();
  const res = await fetch(url, { headers, signal: controller.signal });
  const events: SseEvent[] = [];
  const comments: string[] = [];
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  const pump = (async () => {
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return;
        buffer += decoder.decode(value, { stream: true });
        let end = buffer.indexOf('\n\n');
        while (end !== -1) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          let event = 'message';
          let data = '';
          for (const line of block.split('\n')) {
            if (line.startsWith(':')) comments.push(line);
            else if (line.startsWith('event: ')) event = line.slice(7);
            else if (line.startsWith('data: ')) data += line.slice(6);
          }
          if (data !== '') events.push({ event, data: JSON.parse(data) });
          end = buffer.indexOf('\n\n');
        }
      }
    } catch {
      // aborted
    }
  })();
  return {
    res,
    events,
    comments,
    async stop() {
      controller.abort();
      await pump;
    },
  };
}
