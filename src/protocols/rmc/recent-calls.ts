/**
 * The last calls an RMC server answered, for the dashboard: a fixed ring of slots overwritten in
 * place (no allocation per call). Names are the strings the dispatcher already holds; an error's
 * name is built only when the dashboard reads the ring.
 */
import { errorName } from './errors.js';

interface Slot {
  at: number;
  connection: number;
  protocol: string;
  method: string;
  latencyMs: number;
  /** Empty for success. */
  errorNamespace: string;
  errorCode: number;
}

export interface RecentCall {
  at: number;
  connection: string;
  protocol: string;
  method: string;
  latencyMs: number;
  result: string;
}

export class RecentCalls {
  readonly capacity: number;
  private readonly slots: Slot[];
  private count = 0;

  constructor(capacity = 200) {
    this.capacity = capacity;
    this.slots = Array.from({ length: capacity }, () => ({
      at: 0,
      connection: 0,
      protocol: '',
      method: '',
      latencyMs: 0,
      errorNamespace: '',
      errorCode: 0,
    }));
  }

  /** `receivedAt` and the answer time are `performance.now()` readings. */
  record(
    connection: number,
    protocol: string,
    method: string,
    receivedAt: number,
    errorNamespace = '',
    errorCode = 0,
  ): void {
    const now = performance.now();
    const s = this.slots[this.count % this.capacity]!;
    s.at = now;
    s.connection = connection;
    s.protocol = protocol;
    s.method = method;
    s.latencyMs = now - receivedAt;
    s.errorNamespace = errorNamespace;
    s.errorCode = errorCode;
    this.count++;
  }

  /** Newest first. */
  list(): RecentCall[] {
    const out: RecentCall[] = [];
    const n = Math.min(this.count, this.capacity);
    for (let i = 1; i <= n; i++) {
      const s = this.slots[(this.count - i) % this.capacity]!;
      out.push({
        at: Math.round(performance.timeOrigin + s.at),
        connection: String(s.connection),
        protocol: s.protocol,
        method: s.method,
        latencyMs: Math.round(s.latencyMs * 1000) / 1000,
        result:
          s.errorNamespace === '' ? 'ok' : `${s.errorNamespace}::${errorName(s.errorNamespace, s.errorCode)}`,
      });
    }
    return out;
  }
}
