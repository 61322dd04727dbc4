/**
 * A JS5 connection as the conformance checks drive it: the handshake, 4-byte requests, and a
 * response reader that reads exactly as the real clients do (8-byte header, then the container
 * in 512-byte blocks, each later block behind a 0xFF marker, XOR over every byte once a key is
 * set), but records what a client would silently drop (a wrong marker) instead of dropping it.
 */
import { CheckFailure, type CheckRun, type ConformTarget } from '../../../core/conform.js';
import { TcpProbe } from '../../../core/conform-probes.js';
import { BLOCK_SIZE } from '../framing.js';

/** One response as read off the wire. */
export interface WireResponse {
  archive: number;
  group: number;
  /** The compression byte as sent (0x80 included). */
  typeByte: number;
  /** The container as a client stores it: compression (0x80 masked), length, [uncompressed length], data. */
  container: Buffer;
  /** The response's bytes as received, markers included, XOR removed. */
  framed: Buffer;
  /** Block boundaries whose byte was not 0xFF (response offsets). */
  badMarkers: { offset: number; byte: number }[];
}

/** Largest container a check accepts before it refuses to read (a client would allocate it). */
export const MAX_RESPONSE_CONTAINER = 0xff_ffff;

export function requestBytes(opcode: number, archive: number, group: number): Buffer {
  return Buffer.from([opcode, archive, group >>> 8, group & 0xff]);
}

export const key = (archive: number, group: number): string => `${archive}/${group}`;

export class Js5Peer {
  readonly probe: TcpProbe;
  /** XOR applied to every byte the server sends after a rekey. */
  xorKey = 0;

  private constructor(probe: TcpProbe) {
    this.probe = probe;
  }

  static async open(target: ConformTarget, run: CheckRun): Promise<Js5Peer> {
    return new Js5Peer(await TcpProbe.connect(target, run));
  }

  /** Handshake bytes of a client of this build (21 bytes for Old School from revision 223). */
  static handshake(build: number, seeded: boolean): Buffer {
    const b = Buffer.alloc(seeded ? 21 : 5);
    b[0] = 15;
    b.writeUInt32BE(build >>> 0, 1);
    return b;
  }

  /** Sends the handshake and returns the one-byte reply. */
  async handshake(build: number, seeded: boolean): Promise<number> {
    this.probe.send(Js5Peer.handshake(build, seeded));
    return (await this.probe.read(1, 'handshake reply', 5000))[0]!;
  }

  /** Handshakes and requires reply 0 (the checks after handshake.ok). */
  async open(build: number, seeded: boolean): Promise<void> {
    const reply = await this.handshake(build, seeded);
    if (reply !== 0)
      throw new CheckFailure(`the handshake was answered ${reply}, not 0`, {
        sent: Js5Peer.handshake(build, seeded),
        expected: Buffer.from([0]),
        received: Buffer.from([reply]),
      });
    this.probe.clearSent();
  }

  send(bytes: Uint8Array): void {
    this.probe.send(bytes);
  }

  /** Sends `04 KK 0000`: every byte the server sends afterwards is XORed with KK. */
  rekey(k: number): void {
    this.probe.send(Buffer.from([4, k, 0, 0]));
    this.xorKey = k;
  }

  private async readPlain(n: number, what: string, timeoutMs: number): Promise<Buffer> {
    const b = Buffer.from(await this.probe.read(n, what, timeoutMs));
    if (this.xorKey !== 0) for (let i = 0; i < b.length; i++) b[i]! ^= this.xorKey;
    return b;
  }

  /**
   * Reads one response the way the clients read it. A length beyond 16 MiB − 1 fails the check
   * (a client would allocate it). `timeoutMs` bounds the wait for each part.
   */
  async readResponse(timeoutMs = 5000): Promise<WireResponse> {
    const head = await this.readPlain(8, 'response header', timeoutMs);
    const archive = head[0]!;
    const group = head.readUInt16BE(1);
    const typeByte = head[3]!;
    const length = head.readInt32BE(4);
    const type = typeByte & 0x7f;
    if (length < 0 || length > MAX_RESPONSE_CONTAINER)
      throw new CheckFailure(`response ${key(archive, group)} declares a container length of ${length}`, {
        sent: this.probe.sent,
        received: head,
        expected: `a length from 0 to ${MAX_RESPONSE_CONTAINER}`,
      });
    const containerLength = length + (type === 0 ? 5 : 9);
    const container = Buffer.allocUnsafe(containerLength);
    head.copy(container, 0, 3, 8);
    container[0] = type;
    const framedParts: Buffer[] = [head];
    const badMarkers: { offset: number; byte: number }[] = [];
    let have = 5;
    let responseOffset = 8;
    while (have < containerLength) {
      if (responseOffset % BLOCK_SIZE === 0) {
        const marker = await this.readPlain(
          1,
          `block marker at response offset ${responseOffset}`,
          timeoutMs,
        );
        framedParts.push(marker);
        if (marker[0] !== 0xff) badMarkers.push({ offset: responseOffset, byte: marker[0]! });
        responseOffset++;
      }
      const inBlock = BLOCK_SIZE - (responseOffset % BLOCK_SIZE);
      const take = Math.min(inBlock, containerLength - have);
      const part = await this.readPlain(take, `the rest of response ${key(archive, group)}`, timeoutMs);
      part.copy(container, have);
      framedParts.push(part);
      have += take;
      responseOffset += take;
    }
    return { archive, group, typeByte, container, framed: Buffer.concat(framedParts), badMarkers };
  }

  /**
   * Reads responses until every key in `want` (a multiset: one entry per expected response) is
   * matched. A response that matches nothing fails the check as the real client's I/O error.
   */
  async readAll(want: string[], timeoutMs = 5000): Promise<WireResponse[]> {
    const left = [...want];
    const got: WireResponse[] = [];
    while (left.length > 0) {
      let r: WireResponse;
      try {
        r = await this.readResponse(timeoutMs);
      } catch (err) {
        if (err instanceof CheckFailure)
          throw new CheckFailure(
            `${err.message} (${got.length} of ${want.length} responses read; still waiting for ${summarize(left)})`,
            err.evidence,
          );
        throw err;
      }
      const i = left.indexOf(key(r.archive, r.group));
      if (i < 0)
        throw new CheckFailure(`response ${key(r.archive, r.group)} matches no request in flight`, {
          sent: this.probe.sent,
          expected: `one of ${summarize(left)}`,
          received: r.framed.subarray(0, 64),
        });
      if (r.badMarkers.length > 0) throw markerFailure(r, this.probe.sent);
      left.splice(i, 1);
      got.push(r);
    }
    return got;
  }
}

/**
 * The failure for a response with a wrong block marker: the client abandons the response there,
 * so nothing after it on the connection can be trusted either.
 */
export function markerFailure(r: WireResponse, sent?: Buffer): CheckFailure {
  const bad = r.badMarkers[0]!;
  const from = Math.max(0, bad.offset - 8);
  return new CheckFailure(
    `response ${key(r.archive, r.group)} has 0x${bad.byte.toString(16).padStart(2, '0')} at offset ${bad.offset}, not the 0xff block marker`,
    {
      ...(sent === undefined ? {} : { sent }),
      expected: `ff at response offset ${bad.offset}`,
      received: r.framed.subarray(from, bad.offset + 8),
      note: `bytes ${from}..${bad.offset + 8} of a ${r.framed.length}-byte response; ${r.badMarkers.length} bad boundaries in it`,
    },
  );
}

function summarize(keys: readonly string[]): string {
  return keys.length <= 6 ? keys.join(', ') : `${keys.slice(0, 6).join(', ')} and ${keys.length - 6} more`;
}
