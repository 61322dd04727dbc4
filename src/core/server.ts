import type { Logger } from 'pino';
import type { ProtocolMetrics } from './metrics.js';

/** One option of `gamewire serve`, also settable in the config file under the protocol's name. */
export interface ServeOption {
  /** Key in the options object and the config file (camelCase), e.g. `apiPort`. */
  key: string;
  /** Commander flag, e.g. `--api-port <port>`. Several protocols may share one (`--port`). */
  flag: string;
  description: string;
  type: 'int' | 'string' | 'bool' | 'list';
  default?: unknown;
}

export interface ServerContext {
  log: Logger;
  metrics: ProtocolMetrics;
  /** Folder for generated state (demo caches, stores); created on demand. */
  dataDir: string;
}

export interface Endpoint {
  transport: 'tcp' | 'udp' | 'http';
  host: string;
  port: number;
  description: string;
}

export interface RunningServer {
  endpoints: Endpoint[];
  /** Stops accepting, finishes in-flight writes, closes sockets. Idempotent. */
  close(): Promise<void>;
}

export interface ServerDefinition {
  summary: string;
  defaultPort: number;
  /** Protocol-specific options. `--port` and `--host` are common to all and always present. */
  options: readonly ServeOption[];
  /** `options` holds `port`, `host` and every declared key, defaults filled in. */
  start(options: Record<string, unknown>, ctx: ServerContext): Promise<RunningServer>;
}
