/**
 * What a protocol module gives the rest of gamewire. Each `src/protocols/<name>/index.ts`
 * exports one `ProtocolModule`; `src/protocols/registry.ts` lists them; the CLI, `serve` and the
 * bench runner only ever go through this interface.
 */
import type { Json } from '../wire/codec.js';
import type { AnyConformSuite } from './conform.js';
import type { ProtocolInspection } from './flow.js';
import type { LoadDefinition } from './load/types.js';
import type { ServerDefinition } from './server.js';

/** Who sent the bytes: `client` (upstream: client, NPC, requester) or `server` (downstream). */
export type Direction = 'client' | 'server';

export interface CodecOptions {
  from?: Direction;
  variant?: string;
  /** Values of the codec's own flags (`CodecFlag.key` -> string), when given. */
  extra?: Record<string, string>;
}

/** A codec-specific flag of `decode`/`encode` (e.g. prudp's `--access-key KEY`). */
export interface CodecFlag {
  /** Commander flag with a value, e.g. `--access-key <key>`. */
  flag: string;
  /** Key in `CodecOptions.extra` (commander's camelCase name of the flag, e.g. `accessKey`). */
  key: string;
  description: string;
}

/** A decode/encode entry for the CLI: bytes <-> the JSON that docs/cli.md describes. */
export interface ProtocolCodec {
  /** The name used on the command line (`vcmp-rpc`, `js5-container`). */
  name: string;
  summary: string;
  /** Values accepted by `--variant`; the first is the default. */
  variants?: readonly string[];
  /** False for decode-only formats. */
  canEncode: boolean;
  /** Flags of its own that `decode`/`encode` accept for this codec only. */
  flags?: readonly CodecFlag[];
  /**
   * Decodes every message in `bytes` (a datagram, or a stream of frames). One message gives
   * one object; several give an array. Throws DecodeError only (ERR_INCOMPLETE when the input
   * ends inside a message).
   */
  decode(bytes: Buffer, options: CodecOptions): Json;
  /** Encodes the JSON that `decode` prints (an object, or an array of them). Throws EncodeError. */
  encode(json: unknown, options: CodecOptions): Buffer;
}

/**
 * The command-line program a protocol adds its subcommands to: commander's `Command`, named here
 * by the one member every protocol starts from, so that the package's types name no dependency.
 * A protocol's `registerCommands` may declare its parameter as commander's `Command`.
 */
export interface CommandProgram {
  command(nameAndArgs: string): unknown;
}

export interface ProtocolModule {
  name: string;
  summary: string;
  /** The protocol's own codec first, then any extra decode-only formats. */
  codecs: readonly ProtocolCodec[];
  /** Present when `gamewire serve <name>` can run a server. */
  server?: ServerDefinition;
  /** Adds protocol-specific subcommands (`gamewire js5 cache …`, `gamewire rmc call …`). */
  registerCommands?(program: CommandProgram): void;
  /**
   * Loads the protocol's conformance checks (`gamewire conform <name>`): rules read from the real
   * clients, run against any server. A loader, so the module does not import them until asked.
   */
  conform?(): Promise<AnyConformSuite>;
  /**
   * Loads the protocol's load generator (`gamewire load <name>`): how one client of this protocol
   * joins, plays and leaves, driven by the generic runner. A loader, like `conform`, so the module
   * does not import it until asked.
   */
  load?(): Promise<LoadDefinition>;
  /** Loads what the inspector and the dissector generator use (src/core/flow.ts). */
  inspection?(): Promise<ProtocolInspection>;
  /** Its dashboard page, served by the admin endpoint (see `DashboardPage`). */
  dashboard?: DashboardPage;
}

/**
 * A protocol's dashboard page: an ES module in `dir` (served at `/assets/protocols/<name>/`)
 * whose `entry` exports `mount(main, ctx, kit)`. The dashboard's shell finds it through
 * `/api/servers` (`page`), and hands it everything it needs in `kit` (web/dashboard/kit.js), so a
 * page imports nothing from the shell.
 */
export interface DashboardPage {
  /** Absolute path of the folder holding the page's files. */
  dir: string;
  /** The module to load, relative to `dir`. Default `page.js`. */
  entry?: string;
}
