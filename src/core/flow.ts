/**
 * What a protocol gives the inspector (`gamewire inspect`, the replay, the dissector generator):
 * its flow decoders and their port map and content detection, and its Wireshark dissector
 * declarations. Everything here is protocol-free; each protocol declares its own in
 * `src/protocols/<name>/inspect.ts`, reached through its registry entry (`loadInspection`).
 *
 * A flow decoder receives one TCP direction's bytes in order (gaps announced) or whole datagrams,
 * and emits one record per message, or a typed error whose offset counts from the start of that
 * direction's stream (or of the datagram).
 */
import { type Codec, decode, type Json } from '../wire/codec.js';
import { asDecodeError, DecodeError, ErrorCode } from '../wire/errors.js';
import {
  type FrameMeasure,
  type LengthPrefixOptions,
  lengthPrefixed,
  StreamDeframer,
} from '../wire/framing.js';
import type { Direction } from './protocol.js';

/** Where a decoder sends what it found. */
export interface Emitter {
  message(direction: Direction, message: Json): void;
  error(direction: Direction, error: DecodeError): void;
}

export interface FlowDecoder {
  /** In-order TCP bytes of one direction at stream offset `offset` (a view: copy to keep). */
  stream(direction: Direction, bytes: Buffer, offset: number): void;
  /** A whole UDP datagram. */
  datagram(direction: Direction, payload: Buffer): void;
  /** Bytes of a TCP direction that were never captured. */
  gap(direction: Direction, offset: number, length: number): void;
}

/** Options every flow decoder gets; a protocol adds its own (with defaults) in `FlowProtocol.defaults`. */
export interface BaseDecoderOptions {
  /** Largest frame any stream decoder accepts. */
  maxFrameBytes: number;
}

/** One protocol as the inspector sees it: ports, content detection, and a decoder per flow. */
export interface FlowProtocol<O extends object = object> {
  /** The name shown in records and accepted by `--port 40000=NAME` and `--protocol`. */
  name: string;
  /** Default ports (a flow to or from one is this protocol; the port's owner is the server). */
  tcpPorts: readonly number[];
  udpPorts: readonly number[];
  /** The protocol's own decoder options and their defaults (`--rmc-variant` → `rmcVariant`). */
  defaults?: O;
  create(out: Emitter, options: BaseDecoderOptions & O): FlowDecoder;
  /**
   * Content detection on the first bytes one side sent (TCP stream start or a datagram):
   * returns who sent them, or undefined when they are not this protocol.
   */
  detect?(transport: 'tcp' | 'udp', first: Buffer): Direction | undefined;
  /** How `gamewire replay` compares this protocol's server messages (absent: every field exactly). */
  replay?: ReplayComparison;
}

/**
 * The server-made values of a protocol's server messages, which `gamewire replay` does not
 * compare exactly by default (`--compare-all` does). Names are field names (the last part of a
 * field's path, whatever message carries it).
 */
export interface ReplayComparison {
  /**
   * Values the server makes up per connection or per run that stay the same for the same thing
   * (ids from a counter, ports, cookies): compared by consistency within a flow, so a recorded
   * value must always come back as one replayed value and no two recorded values as the same one.
   * An array is one group of names that share that mapping (a player id, whatever field names it).
   */
  consistent?: readonly (string | readonly string[])[];
  /** Values that change on every message or run with nothing to map them to (clocks): not compared. */
  ignore?: readonly string[];
}

// ---- the dissector declarations -----------------------------------------------------------------

/** A Wireshark field declared by hand (headers a glue adds itself). */
export interface DissectorField {
  /** Abbreviation after the protocol's prefix (`response.group` → `gw_js5.response.group`). */
  path: string;
  label: string;
  /** ProtoField constructor: `uint8`, `uint16`, `int32`, `bytes`, `string`, … */
  type: string;
  /** Display base and optional value names, Lua text (`base.DEC, { [0] = "none" }`). Default per type. */
  display?: string;
  doc?: string;
}

/**
 * One entry of a dissector's schema, written as `local NAME = …` before the glue: a declared
 * codec walked into a schema node, a union (tag + variants), a hand-declared field, or a table of
 * entries (Lua keys are quoted).
 */
export type SchemaItem =
  | { node: Codec<unknown>; path: string; label?: string; depth?: number }
  | { union: Codec<unknown>; path?: string }
  | { field: DissectorField }
  | { table: readonly (readonly [string, SchemaItem | undefined])[] };

/** How the Lua runtime shows a hand-written (`custom`) codec, by the codec's name. */
export interface CustomDissection {
  /** ProtoField constructor and display of the value. */
  type: string;
  display: string;
  /** A second field, `f2`, of this constructor (a value read in another width). */
  second?: string;
  /** Body of `function(node, tvb, off, lim, tree)`: returns the end offset and the value. */
  lua: string;
}

/**
 * A dissector written from declarations plus the protocol's own Lua glue (framing, reassembly,
 * direction). The glue sees `P` (the Proto), `F_MSG` and `F_DIR` (message name and direction
 * fields), `gw` (the runtime, src/inspect/lua-runtime.ts) and the schema's names.
 */
export interface DissectorDeclaration {
  /** The protocol's name; the file is `gamewire-<protocol>.lua`. */
  protocol: string;
  /** Field prefix (`gw_nox`). */
  abbrev: string;
  title: string;
  description: string;
  schema: readonly (readonly [string, SchemaItem])[];
  custom?: Readonly<Record<string, CustomDissection>>;
  glue: string;
}

/**
 * A protocol simple enough to be declared whole: messages as one union per direction, TCP frames
 * cut by a length prefix, UDP datagrams of one message (or of prefixed frames). One declaration
 * gives both the flow decoder (`declaredFlow`) and the generated dissector, framing included.
 */
export interface FlowDeclaration {
  name: string;
  /** Wireshark: field prefix (`gw_echo`), protocol title and the Protocol column. */
  abbrev: string;
  title: string;
  column: string;
  description: string;
  tcpPorts: readonly number[];
  udpPorts: readonly number[];
  /** TCP framing; absent when the protocol never runs over TCP. */
  tcp?: Omit<LengthPrefixOptions, 'maxFrameBytes' | 'minFrameBytes'>;
  /** UDP: one message per datagram, or framed like TCP; absent when it never runs over UDP. */
  udp?: 'datagram' | Omit<LengthPrefixOptions, 'maxFrameBytes' | 'minFrameBytes'>;
  /** The messages each side sends (unions: the tag names the message). */
  messages: { client: Codec<any>; server: Codec<any> };
  /** Content detection: the bytes a client's first message starts with (after any prefix). */
  clientSignature?: { offset: number; bytes: readonly number[] };
  /** Its own decoder options and their defaults (set by its `inspectFlags`), as `FlowProtocol.defaults`. */
  defaults?: Record<string, unknown>;
  /**
   * How a decoded message is shown, given the decoder options (its own included): the message's
   * JSON as decoded, returned changed or as is. Absent: as decoded. The dissector ignores it.
   */
  present?(message: Json, direction: Direction, options: BaseDecoderOptions & Record<string, unknown>): Json;
  /** How `gamewire replay` compares its server messages, as `FlowProtocol.replay`. */
  replay?: ReplayComparison;
}

// ---- helpers for decoders ------------------------------------------------------------------------

export const GAP_ERROR = 'ERR_INSPECT_GAP';

/**
 * One TCP direction cut into frames by a measure. A malformed frame header, or a gap, leaves
 * the direction unreadable (a byte stream cannot be resynchronised without guessing): the error
 * is emitted once and later bytes are skipped.
 */
export class FramedDirection {
  private readonly deframer: StreamDeframer;
  private dead = false;
  private readonly direction: Direction;
  private readonly out: Emitter;
  private readonly onFrame: (buf: Buffer, start: number, end: number) => void;

  constructor(
    direction: Direction,
    out: Emitter,
    measure: FrameMeasure,
    maxFrameBytes: number,
    decodeFrame: (frame: Buffer, frameOffset: number) => void,
  ) {
    this.direction = direction;
    this.out = out;
    this.deframer = new StreamDeframer(measure, { maxFrameBytes, maxBufferedBytes: maxFrameBytes + 65_536 });
    this.onFrame = (buf, start, end) => {
      const frameOffset = this.deframer.consumed - (end - start);
      try {
        decodeFrame(buf.subarray(start, end), frameOffset);
      } catch (e) {
        this.out.error(this.direction, asDecodeError(e, 0).atBase(frameOffset));
      }
    };
  }

  setMeasure(measure: FrameMeasure): void {
    this.deframer.setMeasure(measure);
  }

  push(bytes: Buffer): void {
    if (this.dead) return;
    try {
      this.deframer.push(bytes, this.onFrame);
    } catch (e) {
      this.dead = true;
      this.out.error(this.direction, asDecodeError(e, 0));
    }
  }

  gap(offset: number, length: number): void {
    if (this.dead) return;
    this.dead = true;
    this.out.error(
      this.direction,
      new DecodeError(
        GAP_ERROR,
        `${length} byte(s) missing from the capture; the rest of this direction is skipped`,
        offset,
      ),
    );
  }
}

/** One value per direction. */
export function perDirection<T>(make: (d: Direction) => T): Record<Direction, T> {
  return { client: make('client'), server: make('server') };
}

/** The `datagram` of a decoder for a protocol that never runs over UDP. */
export function noDatagrams(out: Emitter, name: string): (d: Direction, p: Buffer) => void {
  return (d) => out.error(d, new DecodeError(ErrorCode.BAD_INPUT, `${name} does not run over UDP`, 0));
}

/** The `stream` of a decoder for a protocol that never runs over TCP. */
export function noStreams(out: Emitter, name: string): (d: Direction) => void {
  return (d) => out.error(d, new DecodeError(ErrorCode.BAD_INPUT, `${name} travels over UDP`, 0));
}

/** A decoder whose TCP directions are cut by `measure` and decoded frame by frame. */
export function framedStreams(
  out: Emitter,
  measure: FrameMeasure,
  maxFrameBytes: number,
  decodeFrame: (direction: Direction, frame: Buffer, frameOffset: number) => void,
): Pick<FlowDecoder, 'stream' | 'gap'> {
  const dirs = perDirection(
    (d) => new FramedDirection(d, out, measure, maxFrameBytes, (frame, at) => decodeFrame(d, frame, at)),
  );
  return {
    stream(d, bytes) {
      dirs[d].push(bytes);
    },
    gap(d, offset, length) {
      dirs[d].gap(offset, length);
    },
  };
}

export function prefixWidth(prefix: LengthPrefixOptions['prefix']): number {
  return prefix === 'u8' ? 1 : prefix.startsWith('u16') ? 2 : 4;
}

/** The flow decoder of a declared protocol (see `FlowDeclaration`). */
export function declaredFlow(decl: FlowDeclaration): FlowProtocol {
  const present = decl.present;
  const emitMessages = (
    out: Emitter,
    options: BaseDecoderOptions & Record<string, unknown>,
    d: Direction,
    bytes: Buffer,
    start: number,
  ): void => {
    const codec = decl.messages[d];
    const json = codec.toJson(decode(codec, bytes.subarray(start))) as Json;
    out.message(d, present === undefined ? json : present(json, d, options));
  };
  const signature = decl.clientSignature;
  // The message starts after the length field, whatever the length counts.
  const framedOffset = (f: Omit<LengthPrefixOptions, 'maxFrameBytes' | 'minFrameBytes'>): number =>
    (f.at ?? 0) + prefixWidth(f.prefix);
  const flow: FlowProtocol<Record<string, unknown>> = {
    name: decl.name,
    tcpPorts: decl.tcpPorts,
    udpPorts: decl.udpPorts,
    ...(decl.replay === undefined ? {} : { replay: decl.replay }),
    create(out, options) {
      const tcp = decl.tcp;
      const udp = decl.udp;
      const streams =
        tcp === undefined
          ? { stream: noStreams(out, decl.name), gap: () => {} }
          : framedStreams(
              out,
              lengthPrefixed({
                ...tcp,
                maxFrameBytes: options.maxFrameBytes,
                minFrameBytes: framedOffset(tcp),
              }),
              options.maxFrameBytes,
              (d, frame) => emitMessages(out, options, d, frame, framedOffset(tcp)),
            );
      const udpMeasure =
        udp === undefined || udp === 'datagram'
          ? undefined
          : lengthPrefixed({ ...udp, maxFrameBytes: 0xffff, minFrameBytes: framedOffset(udp) });
      return {
        stream: streams.stream,
        gap: streams.gap,
        datagram:
          udp === undefined
            ? noDatagrams(out, decl.name)
            : (d, payload) => {
                try {
                  if (udpMeasure === undefined || udp === 'datagram') {
                    emitMessages(out, options, d, payload, 0);
                    return;
                  }
                  let off = 0;
                  while (off < payload.length) {
                    const n = udpMeasure(payload, off, payload.length - off);
                    if (n < 0 || off + n > payload.length) {
                      throw new DecodeError(ErrorCode.INCOMPLETE, 'frame cut short by the datagram', off);
                    }
                    try {
                      emitMessages(out, options, d, payload.subarray(off, off + n), framedOffset(udp));
                    } catch (e) {
                      throw asDecodeError(e, 0).atBase(off);
                    }
                    off += n;
                  }
                } catch (e) {
                  out.error(d, asDecodeError(e, 0));
                }
              },
      };
    },
    detect:
      signature === undefined
        ? undefined
        : (tr, b) => {
            const framing = tr === 'tcp' ? decl.tcp : decl.udp;
            if (framing === undefined) return undefined;
            const base = framing === 'datagram' ? 0 : framedOffset(framing);
            const at = base + signature.offset;
            if (b.length < at + signature.bytes.length) return undefined;
            for (let i = 0; i < signature.bytes.length; i++)
              if (b[at + i] !== signature.bytes[i]) return undefined;
            return 'client';
          },
  };
  if (decl.defaults !== undefined) flow.defaults = decl.defaults;
  return flow;
}

/**
 * A command-line flag a protocol adds to `gamewire inspect` (its `inspectFlags`) or to `gamewire
 * replay` (its `replayFlags`) for its own decoder options: `--rmc-variant <variant>` sets
 * `rmcVariant`. The command adds it as declared (flag, help line, default) and hands every
 * decoder the options `apply` returns.
 */
export interface DecoderFlag {
  /** Commander's flag: `--rmc-variant <variant>` takes a value, `--js5-seeded` is a switch. */
  flag: string;
  /** Its help line. */
  description: string;
  /** The value when the flag is not given (shown by `--help`); for a flag with a value only. */
  default?: string;
  /** The values it accepts: another is refused (exit 2, "--rmc-variant takes a, b or c"). */
  choices?: readonly string[];
  /** May be given more than once: the values reach `apply` joined with commas, in order. */
  repeatable?: boolean;
  /**
   * The decoder options it sets, from its value: the string given (or its default), `true` for a
   * switch given, undefined for neither. May throw `UsageError` for a value it refuses.
   */
  apply(value: string | true | undefined): Record<string, unknown>;
}

/** Everything a protocol gives the inspector: its flows and its dissectors. */
export interface ProtocolInspection {
  /** Flow decoders; a `FlowDeclaration` also gives its dissector. */
  flows: readonly (FlowProtocol<any> | FlowDeclaration)[];
  /** Dissectors written from declarations plus glue. */
  dissectors?: readonly DissectorDeclaration[];
  /** Its flags of `gamewire inspect` (for its flows' decoder options), in `--help` order. */
  inspectFlags?: readonly DecoderFlag[];
  /** Its flags of `gamewire replay` (the decoder that follows a replayed flow). */
  replayFlags?: readonly DecoderFlag[];
  /** Its flags of `gamewire dissector`, whose options `dissectorsWith` reads. */
  dissectorFlags?: readonly DecoderFlag[];
  /**
   * Its dissectors given the options of its `dissectorFlags` (in place of `dissectors` when
   * present): declarations that depend on what the user loads, such as extra message types.
   */
  dissectorsWith?(options: Record<string, unknown>): readonly DissectorDeclaration[];
  /**
   * Ports of its endpoints that carry TLS over TCP (a `wss` endpoint) or DTLS over UDP, which
   * the inspector shows as `tls` or `dtls` records (the protocol inside cannot be read).
   */
  tlsPorts?: readonly number[];
  dtlsPorts?: readonly number[];
}

/** A declared flow (rather than a hand-written decoder). */
export function isFlowDeclaration(f: FlowProtocol<any> | FlowDeclaration): f is FlowDeclaration {
  return 'messages' in f;
}
