/**
 * Whirlpool (ISO/IEC 10118-3, the final 2003 version), for the DIGESTS master index and the
 * Js5Index digest flag. Node's OpenSSL only has it behind `--openssl-legacy-provider`, so it is
 * computed here: 64-bit words as (hi, lo) pairs of 32-bit ints, with the usual 8 lookup tables.
 * Written from the algorithm's description; tested against OpenSSL's output.
 */

const ROUNDS = 10;

/** The S-box, built from its mini-boxes E, E⁻¹ and R as the specification describes. */
function sbox(): Uint8Array {
  const e = [0x1, 0xb, 0x9, 0xc, 0xd, 0x6, 0xf, 0x3, 0xe, 0x8, 0x7, 0x4, 0xa, 0x2, 0x5, 0x0];
  const r = [0x7, 0xc, 0xb, 0xd, 0xe, 0x4, 0x9, 0xf, 0x6, 0x3, 0x8, 0xa, 0x2, 0x5, 0x1, 0x0];
  const ei = new Array<number>(16);
  e.forEach((v, i) => {
    ei[v] = i;
  });
  const s = new Uint8Array(256);
  for (let u = 0; u < 256; u++) {
    const a = e[u >>> 4]!;
    const b = ei[u & 15]!;
    const t = r[a ^ b]!;
    s[u] = (e[a ^ t]! << 4) | ei[b ^ t]!;
  }
  return s;
}

/** Multiplication in GF(2^8) modulo x^8 + x^4 + x^3 + x^2 + 1. */
function mul(a: number, b: number): number {
  let p = 0;
  while (b > 0) {
    if (b & 1) p ^= a;
    a <<= 1;
    if (a & 0x100) a ^= 0x11d;
    b >>>= 1;
  }
  return p;
}

const S = sbox();
/** T[k] maps a byte to row k of the circulant matrix times S[byte]: hi and lo halves. */
const THI: Uint32Array[] = [];
const TLO: Uint32Array[] = [];
const RC_HI = new Uint32Array(ROUNDS + 1);
const RC_LO = new Uint32Array(ROUNDS + 1);

(function tables() {
  const circ = [1, 1, 4, 1, 8, 5, 2, 9];
  for (let k = 0; k < 8; k++) {
    THI.push(new Uint32Array(256));
    TLO.push(new Uint32Array(256));
  }
  const bytes = new Uint8Array(8);
  for (let x = 0; x < 256; x++) {
    for (let k = 0; k < 8; k++) {
      // Row k is the base row rotated right by k bytes.
      for (let j = 0; j < 8; j++) bytes[(j + k) & 7] = mul(S[x]!, circ[j]!);
      THI[k]![x] = ((bytes[0]! << 24) | (bytes[1]! << 16) | (bytes[2]! << 8) | bytes[3]!) >>> 0;
      TLO[k]![x] = ((bytes[4]! << 24) | (bytes[5]! << 16) | (bytes[6]! << 8) | bytes[7]!) >>> 0;
    }
  }
  for (let r = 1; r <= ROUNDS; r++) {
    const o = 8 * (r - 1);
    RC_HI[r] = ((S[o]! << 24) | (S[o + 1]! << 16) | (S[o + 2]! << 8) | S[o + 3]!) >>> 0;
    RC_LO[r] = ((S[o + 4]! << 24) | (S[o + 5]! << 16) | (S[o + 6]! << 8) | S[o + 7]!) >>> 0;
  }
})();

/** Byte `n` (0 = most significant) of the 64-bit row (hi, lo). */
function byteOf(hi: Uint32Array, lo: Uint32Array, row: number, n: number): number {
  return n < 4 ? (hi[row]! >>> (24 - 8 * n)) & 0xff : (lo[row]! >>> (56 - 8 * n)) & 0xff;
}

/** out = θπγ(input): one round without the key addition. */
function round(inHi: Uint32Array, inLo: Uint32Array, outHi: Uint32Array, outLo: Uint32Array): void {
  for (let i = 0; i < 8; i++) {
    let h = 0;
    let l = 0;
    for (let k = 0; k < 8; k++) {
      const b = byteOf(inHi, inLo, (i - k) & 7, k);
      h ^= THI[k]![b]!;
      l ^= TLO[k]![b]!;
    }
    outHi[i] = h >>> 0;
    outLo[i] = l >>> 0;
  }
}

class State {
  readonly hHi = new Uint32Array(8);
  readonly hLo = new Uint32Array(8);
  private readonly kHi = new Uint32Array(8);
  private readonly kLo = new Uint32Array(8);
  private readonly sHi = new Uint32Array(8);
  private readonly sLo = new Uint32Array(8);
  private readonly mHi = new Uint32Array(8);
  private readonly mLo = new Uint32Array(8);
  private readonly tHi = new Uint32Array(8);
  private readonly tLo = new Uint32Array(8);

  block(data: Uint8Array, at: number): void {
    const { hHi, hLo, kHi, kLo, sHi, sLo, mHi, mLo, tHi, tLo } = this;
    for (let i = 0; i < 8; i++) {
      const o = at + i * 8;
      mHi[i] = ((data[o]! << 24) | (data[o + 1]! << 16) | (data[o + 2]! << 8) | data[o + 3]!) >>> 0;
      mLo[i] = ((data[o + 4]! << 24) | (data[o + 5]! << 16) | (data[o + 6]! << 8) | data[o + 7]!) >>> 0;
      kHi[i] = hHi[i]!;
      kLo[i] = hLo[i]!;
      sHi[i] = (mHi[i]! ^ kHi[i]!) >>> 0;
      sLo[i] = (mLo[i]! ^ kLo[i]!) >>> 0;
    }
    for (let r = 1; r <= ROUNDS; r++) {
      round(kHi, kLo, tHi, tLo);
      tHi[0] = (tHi[0]! ^ RC_HI[r]!) >>> 0;
      tLo[0] = (tLo[0]! ^ RC_LO[r]!) >>> 0;
      kHi.set(tHi);
      kLo.set(tLo);
      round(sHi, sLo, tHi, tLo);
      for (let i = 0; i < 8; i++) {
        sHi[i] = (tHi[i]! ^ kHi[i]!) >>> 0;
        sLo[i] = (tLo[i]! ^ kLo[i]!) >>> 0;
      }
    }
    for (let i = 0; i < 8; i++) {
      hHi[i] = (hHi[i]! ^ sHi[i]! ^ mHi[i]!) >>> 0;
      hLo[i] = (hLo[i]! ^ sLo[i]! ^ mLo[i]!) >>> 0;
    }
  }
}

/** The 64-byte Whirlpool digest of `data`. */
export function whirlpool(data: Uint8Array): Buffer {
  const st = new State();
  const full = data.length - (data.length % 64);
  for (let o = 0; o < full; o += 64) st.block(data, o);
  // Padding: a 1 bit, zeros up to 32 bytes before a block end, then the 256-bit bit length.
  const rest = data.length - full;
  const tail = Buffer.alloc(rest < 32 ? 64 : 128);
  tail.set(data.subarray(full), 0);
  tail[rest] = 0x80;
  const bits = BigInt(data.length) * 8n;
  tail.writeBigUInt64BE(bits & 0xffff_ffff_ffff_ffffn, tail.length - 8);
  tail.writeBigUInt64BE(bits >> 64n, tail.length - 16);
  for (let o = 0; o < tail.length; o += 64) st.block(tail, o);
  const out = Buffer.allocUnsafe(64);
  for (let i = 0; i < 8; i++) {
    out.writeUInt32BE(st.hHi[i]!, i * 8);
    out.writeUInt32BE(st.hLo[i]!, i * 8 + 4);
  }
  return out;
}
