// Formatting helpers shared by every view. Pure functions, no DOM.

const BYTE_UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];

/**
 * A byte count in binary units, "1.50 KiB"; '–' for anything but a finite number.
 * @param {unknown} n
 */
export function bytes(n) {
  if (typeof n !== 'number' || !Number.isFinite(n)) return '–';
  let v = Math.abs(n);
  let u = 0;
  while (v >= 1024 && u < BYTE_UNITS.length - 1) {
    v /= 1024;
    u++;
  }
  const digits = u === 0 || v >= 100 ? 0 : v >= 10 ? 1 : 2;
  return `${n < 0 ? '-' : ''}${v.toFixed(digits)} ${BYTE_UNITS[u]}`;
}

/** @param {unknown} n */
export function bytesPerSecond(n) {
  return `${bytes(n)}/s`;
}

/**
 * A count with thousands separators; fractional rates get one decimal below 100.
 * @param {unknown} n
 */
export function count(n) {
  if (typeof n !== 'number' || !Number.isFinite(n)) return '–';
  if (!Number.isInteger(n) && Math.abs(n) < 100) return n.toFixed(1);
  return Math.round(n).toLocaleString('en-US');
}

/** @param {unknown} n */
export function perSecond(n) {
  return `${count(n)}/s`;
}

/**
 * "3d 4h", "2h 05m", "4m 07s", "12s".
 * @param {unknown} ms
 */
export function duration(ms) {
  if (typeof ms !== 'number' || !Number.isFinite(ms) || ms < 0) return '–';
  const s = Math.floor(ms / 1000);
  const d = Math.floor(s / 86400);
  const h = Math.floor((s % 86400) / 3600);
  const m = Math.floor((s % 3600) / 60);
  const sec = s % 60;
  const pad = (/** @type {number} */ x) => String(x).padStart(2, '0');
  if (d > 0) return `${d}d ${h}h`;
  if (h > 0) return `${h}h ${pad(m)}m`;
  if (m > 0) return `${m}m ${pad(sec)}s`;
  return `${sec}s`;
}

/**
 * Local wall-clock time with milliseconds, "14:03:27.381".
 * @param {unknown} ms
 */
export function clock(ms) {
  if (typeof ms !== 'number') return '–';
  const d = new Date(ms);
  const pad = (/** @type {number} */ x, n = 2) => String(x).padStart(n, '0');
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
}

/**
 * Age relative to `now`: "3s ago".
 * @param {unknown} ms
 * @param {number} [now]
 */
export function ago(ms, now = Date.now()) {
  if (typeof ms !== 'number') return '–';
  return `${duration(Math.max(0, now - ms))} ago`;
}

/**
 * The first 8 characters of a long id (GUIDs), full id in the title.
 * @param {unknown} id
 */
export function shortId(id) {
  const s = String(id ?? '');
  return s.length > 12 ? `${s.slice(0, 8)}…` : s;
}

/**
 * A 32-bit value as "0x0000abcd" (unsigned).
 * @param {unknown} n
 */
export function hex32(n) {
  if (typeof n !== 'number') return String(n ?? '–');
  return `0x${(n >>> 0).toString(16).padStart(8, '0')}`;
}

/**
 * A number with `digits` decimals; '–' for anything but a finite number.
 * @param {unknown} n
 * @param {number} [digits]
 */
export function num(n, digits = 2) {
  return typeof n === 'number' && Number.isFinite(n) ? n.toFixed(digits) : '–';
}

/**
 * A hex dump of lowercase hex text: rows of 16 bytes as [offset, hex columns, ASCII].
 * Odd trailing digits are ignored (the server always sends whole bytes).
 * @param {string} hex
 * @returns {{ offset: string, hex: string, ascii: string }[]}
 */
export function hexRows(hex) {
  const rows = [];
  const n = Math.floor((hex ?? '').length / 2);
  for (let off = 0; off < n; off += 16) {
    /** @type {string[]} */
    const parts = [];
    let ascii = '';
    for (let i = off; i < Math.min(off + 16, n); i++) {
      const pair = hex.slice(i * 2, i * 2 + 2);
      parts.push(pair);
      const c = Number.parseInt(pair, 16);
      ascii += c >= 0x20 && c < 0x7f ? String.fromCharCode(c) : '.';
    }
    const left = parts.slice(0, 8).join(' ');
    const right = parts.slice(8).join(' ');
    rows.push({
      offset: off.toString(16).padStart(8, '0'),
      hex: right === '' ? left : `${left}  ${right}`,
      ascii,
    });
  }
  return rows;
}
