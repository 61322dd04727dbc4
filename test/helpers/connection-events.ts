/**
 * Watching the connection seam's `gamewire:connection:*` diagnostics channels in a test: every
 * event of one protocol is recorded with its kind, and `next` waits for one that matches.
 */
import diagnosticsChannel from 'node:diagnostics_channel';
import type { ConnectionEvent } from '../../src/core/connection.js';
import { waitFor } from './wait.js';

export type ConnectionEventKind = 'open' | 'close' | 'drop';
export interface SeenConnectionEvent extends ConnectionEvent {
  kind: ConnectionEventKind;
}

export interface ConnectionWatch {
  readonly events: SeenConnectionEvent[];
  /** Events of one kind (and transport, if given). */
  of(kind: ConnectionEventKind, transport?: string): SeenConnectionEvent[];
  /** Waits for an event of `kind` passing `match`, and returns it. */
  next(
    kind: ConnectionEventKind,
    match?: (e: SeenConnectionEvent) => boolean,
    what?: string,
  ): Promise<SeenConnectionEvent>;
  stop(): void;
}

/** Subscribes to the three channels, keeping the events of `protocol` only. */
export function watchConnections(protocol: string): ConnectionWatch {
  const events: SeenConnectionEvent[] = [];
  const handlers = (['open', 'close', 'drop'] as const).map((kind) => {
    const name = `gamewire:connection:${kind}`;
    const fn = (message: unknown) => {
      const e = message as ConnectionEvent;
      if (e.protocol === protocol) events.push({ ...e, kind });
    };
    diagnosticsChannel.subscribe(name, fn);
    return [name, fn] as const;
  });
  return {
    events,
    of: (kind, transport) =>
      events.filter((e) => e.kind === kind && (transport === undefined || e.transport === transport)),
    next: (kind, match = () => true, what) =>
      waitFor(() => events.find((e) => e.kind === kind && match(e)), {
        what: () =>
          `a ${kind} event${what === undefined ? '' : ` (${what})`}; seen: ${JSON.stringify(events)}`,
      }),
    stop() {
      for (const [name, fn] of handlers) diagnosticsChannel.unsubscribe(name, fn);
    },
  };
}
