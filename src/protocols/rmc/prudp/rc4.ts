/**
 * RC4, written here because OpenSSL 3 (Node 22) keeps it in the legacy provider. The classic
 * profile resets the stream for every packet with the fixed key "CD&ML", so the key schedule is
 * run once and each packet starts from a copy of the scheduled state (no per-packet allocation).
 */
import { ConfigError } from '../../../core/errors.js';

export class Rc4Key {
  /** The state after the key schedule. */
  private readonly initial = new Uint8Array(256);
  /** Scratch state for one run. */
  private readonly s = new Uint8Array(256);

  constructor(key: Uint8Array | string) {
    const k = typeof key === 'string' ? Buffer.from(key, 'latin1') : key;
    if (k.length === 0 || k.length > 256)
      throw new ConfigError('RC4 key must be 1 to 256 bytes', 'accessKey');
    const s = this.initial;
    for (let i = 0; i < 256; i++) s[i] = i;
    let j = 0;
    for (let i = 0; i < 256; i++) {
      j = (j + s[i]! + k[i % k.length]!) & 0xff;
      const t = s[i]!;
      s[i] = s[j]!;
      s[j] = t;
    }
  }

  /** XORs buf[start, end) in place with a fresh keystream. */
  apply(buf: Uint8Array, start = 0, end = buf.length): void {
    const s = this.s;
    s.set(this.initial);
    let i = 0;
    let j = 0;
    for (let n = start; n < end; n++) {
      i = (i + 1) & 0xff;
      const si = s[i]!;
      j = (j + si) & 0xff;
      const sj = s[j]!;
      s[i] = sj;
      s[j] = si;
      buf[n] = buf[n]! ^ s[(si + sj) & 0xff]!;
    }
  }

  /** A new buffer: `data` XORed with a fresh keystream. */
  process(data: Uint8Array): Buffer {
    const out = Buffer.from(data);
    this.apply(out);
    return out;
  }
}
