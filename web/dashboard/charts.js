// Live rate charts on uPlot (served by gamewire from node_modules/uplot/dist).

import { h } from './dom.js';
import * as fmt from './format.js';
import { series, WINDOW_MS } from './history.js';
// @ts-expect-error: served from the uplot package at /assets/vendor/uplot/ (not a file of this folder)
import uPlot from './vendor/uplot/uPlot.esm.js';

/** @typedef {import('uplot')} UPlot the chart object (the uplot package's declarations) */
/** @typedef {keyof import('./history.js').Rates} RateKey */

/**
 * A CSS custom property of the page, or `fallback` when it is not set.
 * @param {string} name
 * @param {string} fallback
 */
function cssVar(name, fallback) {
  const v = getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  return v === '' ? fallback : v;
}

/**
 * "14:03:27" of a time in seconds since the epoch (uPlot's x values).
 * @param {number} seconds
 */
function hms(seconds) {
  const d = new Date(seconds * 1000);
  const pad = (/** @type {number} */ x) => String(x).padStart(2, '0');
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

/**
 * What a chart shows: its title, the in and out series, how values read, the y range's floor.
 * @typedef {{ title: string, keys: [RateKey, RateKey], value: (n: number) => string, floor: number }} ChartKind
 */

/** @type {{ messages: ChartKind, bytes: ChartKind }} */
const KINDS = {
  messages: { title: 'Messages per second', keys: ['msgIn', 'msgOut'], value: (n) => fmt.count(n), floor: 1 },
  bytes: {
    title: 'Bytes per second',
    keys: ['bytesIn', 'bytesOut'],
    value: (n) => fmt.bytes(n),
    floor: 1024,
  },
};

/**
 * A live chart: its element (`box`), and what the page calls on it.
 * @typedef {object} RateChart
 * @property {string} protocol
 * @property {HTMLElement} box the `<figure>`, with data-points
 * @property {() => void} update redraws from the protocol's history
 * @property {() => void} resize fits the plot to its box
 * @property {() => void} destroy
 * @property {UPlot} plot
 */

/** @type {Set<RateChart>} */
const live = new Set();

/**
 * A chart of one protocol's in/out rates over the last five minutes. The returned element
 * carries data-points (how many samples are drawn), which the browser tests read.
 * @param {string} protocol
 * @param {keyof typeof KINDS} kind
 * @returns {RateChart}
 */
export function rateChart(protocol, kind) {
  const k = KINDS[kind];
  const box = h('figure', { class: 'chart', testid: `chart-${kind}`, dataset: { protocol, points: '0' } });
  const caption = h('figcaption', null, k.title);
  const plotBox = h('div', { class: 'plot' });
  box.append(caption, plotBox);
  const fg = cssVar('--fg', '#222');
  const grid = cssVar('--grid', 'rgba(128,128,128,0.2)');
  const axis = { stroke: fg, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid, width: 1 } };
  /** @type {import('uplot').Options} */
  const opts = {
    width: 320,
    height: 150,
    legend: { show: true, live: false },
    cursor: { drag: { x: false, y: false } },
    scales: { x: { time: true }, y: { range: (_u, _min, max) => [0, Math.max(k.floor, max * 1.1)] } },
    series: [
      {},
      {
        label: 'in',
        stroke: cssVar('--in', '#2b7bd6'),
        width: 1.5,
        value: (_u, v) => (v == null ? '–' : k.value(v)),
      },
      {
        label: 'out',
        stroke: cssVar('--out', '#d6762b'),
        width: 1.5,
        value: (_u, v) => (v == null ? '–' : k.value(v)),
      },
    ],
    axes: [
      { ...axis, space: 70, values: (_u, splits) => splits.map(hms) },
      { ...axis, size: 64, values: (_u, splits) => splits.map((v) => k.value(v)) },
    ],
  };
  const plot = /** @type {UPlot} */ (new uPlot(opts, [[], [], []], plotBox));
  /** @type {RateChart} */
  const chart = {
    protocol,
    box,
    update() {
      const s = series(protocol);
      const a = s[k.keys[0]];
      const b = s[k.keys[1]];
      const now = s.t.length > 0 ? s.t[s.t.length - 1] : Date.now() / 1000;
      plot.batch(() => {
        plot.setData([s.t.slice(), a.slice(), b.slice()], false);
        plot.setScale('x', { min: now - WINDOW_MS / 1000, max: now });
      });
      box.dataset.points = String(s.t.length);
    },
    resize() {
      const w = Math.max(200, Math.floor(plotBox.clientWidth));
      if (w !== plot.width) plot.setSize({ width: w, height: 150 });
    },
    destroy() {
      live.delete(chart);
      observer.disconnect();
      plot.destroy();
    },
    plot,
  };
  const observer = new ResizeObserver(() => chart.resize());
  observer.observe(plotBox);
  live.add(chart);
  chart.update();
  return chart;
}

/**
 * Redraws the charts of the given protocols (after a tick).
 * @param {string[]} protocols
 */
export function updateCharts(protocols) {
  for (const c of live) if (protocols.includes(c.protocol)) c.update();
}

export function destroyAllCharts() {
  for (const c of [...live]) c.destroy();
}
