// The nox-relay top-down map: each player's x/z on a canvas, name labels and heading, bounds that
// fit the players, and motion interpolated between samples (one sample per second, drawn every
// animation frame) so players glide instead of jumping.

/** @typedef {{ x: number, y: number, z: number }} Vec3 a position (world units) */
/** @typedef {{ x: number, y: number, z: number, w: number }} Quat a rotation */
/** @typedef {{ x: number, z: number }} XZ a point of the map (world x/z) */
/** @typedef {{ minX: number, maxX: number, minZ: number, maxZ: number }} Bounds the map's extent (world x/z) */

/**
 * What the map reads of a player in the state: its id, name, position and rotation (null until
 * it sent a Transform).
 * @typedef {{ id: string, name?: string | null, position?: Vec3 | null, rotation?: Quat | null }} MapPlayer
 */

/** @typedef {{ id: string, players?: MapPlayer[] | null }} MapInstance an instance and its players */

/**
 * A player on the map: its name and heading, and its motion from `from` to `to` (the latest
 * sample), from `t0` over `dur` ms.
 * @typedef {{ name: string, from: XZ, to: XZ, t0: number, dur: number, heading: XZ | undefined }} MapEntry
 */

const PAD = 28;
const MIN_SPAN = 4; // world units: a lone player still gets a readable scale

/**
 * @param {string} name
 * @param {string} fallback
 */
function cssVar(name, fallback) {
  const v = getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  return v === '' ? fallback : v;
}

/** @param {string} id */
function hue(id) {
  // FNV-1a then a golden-ratio spread: neighbouring ids ("0/1", "0/2") get distant colours.
  let x = 0x811c9dc5;
  for (const ch of String(id)) x = Math.imul(x ^ ch.charCodeAt(0), 0x01000193) >>> 0;
  return Math.floor(((x * 0.618033988749895) % 1) * 360);
}

/**
 * Unity forward (+z) rotated by the quaternion, projected on x/z.
 * @param {Quat | null | undefined} q
 * @returns {XZ | undefined}
 */
function heading(q) {
  if (q === null || q === undefined) return undefined;
  const fx = 2 * (q.x * q.z + q.w * q.y);
  const fz = 1 - 2 * (q.x * q.x + q.y * q.y);
  const len = Math.hypot(fx, fz);
  return len < 1e-6 ? undefined : { x: fx / len, z: fz / len };
}

/**
 * @param {number} a
 * @param {number} b
 * @param {number} t
 */
function lerp(a, b, t) {
  return a + (b - a) * t;
}

/** @param {number} span */
function niceStep(span) {
  const raw = span / 6;
  const p = 10 ** Math.floor(Math.log10(raw));
  const m = raw / p;
  return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
}

/**
 * The map drawn on `canvas`: `update` with each state's instances and bounds.
 * @param {HTMLCanvasElement} canvas
 */
export function createMap(canvas) {
  // A canvas always has a 2d context unless another kind was asked of it first (none is).
  const ctx2d = /** @type {CanvasRenderingContext2D} */ (canvas.getContext('2d'));
  /** @type {Map<string, MapEntry>} id → {name, from:{x,z}, to:{x,z}, t0, dur, heading} */
  const players = new Map();
  /** @type {Bounds | undefined} */
  let view; // {minX,maxX,minZ,maxZ}, eased toward target
  /** @type {Bounds | undefined} */
  let target;
  let frame = 0;
  let lastDraw = 0;
  /** @type {Map<string, { x: number, y: number }>} */
  const drawn = new Map(); // id → {x, y} canvas pixels of the last frame

  /**
   * The bounds to show: `bounds` (the server's), else the players', with a margin and square.
   * @param {Bounds | null | undefined} bounds
   * @returns {Bounds}
   */
  function targetBounds(bounds) {
    let b = bounds;
    if (b === null || b === undefined) {
      b = { minX: Infinity, maxX: -Infinity, minZ: Infinity, maxZ: -Infinity };
      for (const p of players.values()) {
        b.minX = Math.min(b.minX, p.to.x);
        b.maxX = Math.max(b.maxX, p.to.x);
        b.minZ = Math.min(b.minZ, p.to.z);
        b.maxZ = Math.max(b.maxZ, p.to.z);
      }
      if (!Number.isFinite(b.minX))
        b = { minX: -MIN_SPAN / 2, maxX: MIN_SPAN / 2, minZ: -MIN_SPAN / 2, maxZ: MIN_SPAN / 2 };
    }
    const cx = (b.minX + b.maxX) / 2;
    const cz = (b.minZ + b.maxZ) / 2;
    const half = Math.max(b.maxX - b.minX, b.maxZ - b.minZ, MIN_SPAN) * 0.55;
    return { minX: cx - half, maxX: cx + half, minZ: cz - half, maxZ: cz + half };
  }

  /**
   * @param {MapInstance[]} instances
   * @param {Bounds | null | undefined} bounds the server's bounds of the positions (null: fit the players)
   */
  function update(instances, bounds) {
    const now = performance.now();
    /** @type {Set<string>} */
    const seen = new Set();
    for (const inst of instances) {
      for (const pl of inst.players ?? []) {
        if (pl.position === null || pl.position === undefined) continue;
        const id = `${inst.id}/${pl.id}`;
        seen.add(id);
        const to = { x: pl.position.x, z: pl.position.z };
        const prev = players.get(id);
        if (prev === undefined) {
          players.set(id, {
            name: pl.name ?? String(pl.id),
            from: to,
            to,
            t0: now,
            dur: 1,
            heading: heading(pl.rotation),
          });
        } else {
          // Continue from where it is drawn now, reach the new sample in one tick period.
          const cur = position(prev, now);
          prev.from = cur;
          prev.to = to;
          prev.t0 = now;
          prev.dur = 1000;
          prev.name = pl.name ?? prev.name;
          prev.heading = heading(pl.rotation) ?? prev.heading;
        }
      }
    }
    for (const id of [...players.keys()]) if (!seen.has(id)) players.delete(id);
    target = targetBounds(bounds);
    if (view === undefined) view = { ...target };
    canvas.dataset.players = String(players.size);
    start();
  }

  /**
   * Where a player is drawn at `now` (eased between its samples).
   * @param {MapEntry} p
   * @param {number} now
   * @returns {XZ}
   */
  function position(p, now) {
    const t = Math.min(1, Math.max(0, (now - p.t0) / p.dur));
    const e = t * t * (3 - 2 * t);
    return { x: lerp(p.from.x, p.to.x, e), z: lerp(p.from.z, p.to.z, e) };
  }

  /** @param {number} now */
  function draw(now) {
    frame = 0;
    const dpr = window.devicePixelRatio || 1;
    const w = Math.max(1, canvas.clientWidth);
    const hgt = Math.max(1, canvas.clientHeight);
    if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(hgt * dpr)) {
      canvas.width = Math.round(w * dpr);
      canvas.height = Math.round(hgt * dpr);
    }
    const dt = lastDraw === 0 ? 16 : Math.min(100, now - lastDraw);
    lastDraw = now;
    if (view !== undefined && target !== undefined) {
      const k = 1 - Math.exp(-dt / 300);
      for (const key of /** @type {(keyof Bounds)[]} */ (['minX', 'maxX', 'minZ', 'maxZ']))
        view[key] = lerp(view[key], target[key], k);
    }
    const v = view ?? targetBounds(null);
    const scale = Math.min((w - 2 * PAD) / (v.maxX - v.minX), (hgt - 2 * PAD) / (v.maxZ - v.minZ));
    const cx = (v.minX + v.maxX) / 2;
    const cz = (v.minZ + v.maxZ) / 2;
    // Screen: x to the right, z up (top-down, north = +z).
    const sx = (/** @type {number} */ x) => w / 2 + (x - cx) * scale;
    const sy = (/** @type {number} */ z) => hgt / 2 - (z - cz) * scale;
    const fg = cssVar('--fg', '#222');
    const grid = cssVar('--grid', 'rgba(128,128,128,0.25)');
    const muted = cssVar('--muted', '#777');
    ctx2d.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx2d.clearRect(0, 0, w, hgt);
    // Grid with world coordinates.
    const step = niceStep(v.maxX - v.minX || MIN_SPAN);
    ctx2d.strokeStyle = grid;
    ctx2d.fillStyle = muted;
    ctx2d.lineWidth = 1;
    ctx2d.font = '11px system-ui, sans-serif';
    ctx2d.beginPath();
    const x0 = Math.ceil((cx - w / 2 / scale) / step) * step;
    for (let x = x0; sx(x) <= w; x += step) {
      ctx2d.moveTo(Math.round(sx(x)) + 0.5, 0);
      ctx2d.lineTo(Math.round(sx(x)) + 0.5, hgt);
      ctx2d.fillText(`${+x.toFixed(3)}`, sx(x) + 3, hgt - 4);
    }
    const z0 = Math.ceil((cz - hgt / 2 / scale) / step) * step;
    for (let z = z0; sy(z) >= 0; z += step) {
      ctx2d.moveTo(0, Math.round(sy(z)) + 0.5);
      ctx2d.lineTo(w, Math.round(sy(z)) + 0.5);
      ctx2d.fillText(`${+z.toFixed(3)}`, 3, sy(z) - 3);
    }
    ctx2d.stroke();
    ctx2d.fillText('x →  z ↑', w - 64, 14);
    drawn.clear();
    let moving = false;
    for (const [id, p] of players) {
      const pos = position(p, now);
      if (now - p.t0 < p.dur) moving = true;
      const px = sx(pos.x);
      const py = sy(pos.z);
      drawn.set(id, { x: px, y: py });
      const color = `hsl(${hue(id)} 70% 50%)`;
      if (p.heading !== undefined) {
        ctx2d.strokeStyle = color;
        ctx2d.lineWidth = 2;
        ctx2d.beginPath();
        ctx2d.moveTo(px, py);
        ctx2d.lineTo(px + p.heading.x * 12, py - p.heading.z * 12);
        ctx2d.stroke();
      }
      ctx2d.fillStyle = color;
      ctx2d.beginPath();
      ctx2d.arc(px, py, 5, 0, Math.PI * 2);
      ctx2d.fill();
      ctx2d.fillStyle = fg;
      ctx2d.fillText(p.name, px + 8, py + 4);
    }
    if (players.size === 0) {
      ctx2d.fillStyle = muted;
      ctx2d.font = '14px system-ui, sans-serif';
      ctx2d.fillText('no player has sent a position yet', PAD, hgt / 2);
    }
    // Keep animating while anything moves or the view is still easing.
    const easing =
      view !== undefined &&
      target !== undefined &&
      Math.abs(view.minX - target.minX) + Math.abs(view.maxZ - target.maxZ) > 1e-3;
    if ((moving || easing) && canvas.isConnected) start();
  }

  function start() {
    if (frame === 0) frame = requestAnimationFrame(draw);
  }

  const resize = new ResizeObserver(() => start());
  resize.observe(canvas);
  return {
    update,
    /** Canvas pixel positions of the last frame drawn, by "instance/player" id (tests read this). */
    drawnPositions: () =>
      Object.fromEntries([...drawn].map(([id, p]) => [id, { x: +p.x.toFixed(2), y: +p.y.toFixed(2) }])),
    destroy() {
      resize.disconnect();
      if (frame !== 0) cancelAnimationFrame(frame);
      frame = 0;
    },
  };
}
