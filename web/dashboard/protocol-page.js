// The frame every protocol page shares: heading, State/Wire tabs, live counters and charts, and
// the server's actions on an item (disconnect, end, drain) as buttons.
import { actionButton } from './actions.js';
import { rateChart } from './charts.js';
import { fill, h } from './dom.js';
import * as fmt from './format.js';
import { latestCounters, series } from './history.js';

/** @typedef {import('../../src/core/admin/api-types.js').ServerJson} ServerJson */
/** @typedef {import('../../src/core/admin/api-types.js').CountersJson} CountersJson */

/**
 * The frame of a protocol's page: heading, tabs, counters and charts, then `body` for the page.
 * @param {HTMLElement} main
 * @param {import('./kit.js').PageContext} ctx
 * @param {string} protocol
 * @param {'state' | 'wire'} tab the tab shown
 */
export function protocolFrame(main, ctx, protocol, tab) {
  const server = ctx.servers.find((s) => s.protocol === protocol);
  const summary = h('p', { class: 'counters', testid: 'counters' });
  const body = h('div', { class: 'page-body' });
  const tabs = h(
    'nav',
    { class: 'tabs', 'aria-label': `${protocol} views` },
    h(
      'a',
      {
        href: `#/${protocol}`,
        class: 'navlink',
        'aria-current': tab === 'state' ? 'page' : undefined,
        testid: 'tab-state',
      },
      'State',
    ),
    server?.hasWire === false && tab !== 'wire'
      ? null
      : h(
          'a',
          {
            href: `#/${protocol}/wire`,
            class: 'navlink',
            'aria-current': tab === 'wire' ? 'page' : undefined,
            testid: 'tab-wire',
          },
          'Wire',
        ),
  );
  const charts = tab === 'state' ? [rateChart(protocol, 'messages'), rateChart(protocol, 'bytes')] : [];
  fill(
    main,
    h('div', { class: 'page-head' }, h('h1', { testid: 'page-title' }, protocol), tabs),
    server?.summary ? h('p', { class: 'muted' }, server.summary) : null,
    summary,
    charts.length > 0
      ? h(
          'div',
          { class: 'charts wide' },
          charts.map((c) => c.box),
        )
      : null,
    body,
  );
  for (const c of charts) c.resize();
  /** @param {CountersJson | undefined} counters */
  const updateCounters = (counters) => {
    if (counters === undefined) return;
    const r = series(protocol).rates;
    const uptime = server === undefined ? '' : ` · up ${fmt.duration(Date.now() - server.startedAt)}`;
    summary.textContent = `${fmt.count(counters.open)} open · in ${fmt.perSecond(r.msgIn)} (${fmt.bytesPerSecond(r.bytesIn)}) · out ${fmt.perSecond(r.msgOut)} (${fmt.bytesPerSecond(r.bytesOut)})${uptime}`;
  };
  updateCounters(latestCounters(protocol) ?? server?.counters);
  const base = `/api/servers/${encodeURIComponent(protocol)}`;
  /**
   * A button for the server's action `name` (POST to `base + path`), or `false` when the server
   * does not offer it; the page's state is re-read once it is done.
   * @param {string} name
   * @param {{ label: string, question: string, path: string, testid: string }} spec
   */
  const action = (name, { label, question, path, testid }) =>
    offers(server, name) &&
    actionButton({ label, question, path: `${base}${path}`, testid, done: ctx.refreshState });
  return {
    body,
    server,
    action,
    /**
     * The Disconnect button of one connection.
     * @param {string | number} id the connection's id in the server's state
     * @param {string} question what the confirmation dialog asks
     */
    disconnect: (id, question) =>
      action('disconnect', {
        label: 'Disconnect',
        question,
        path: `/connections/${encodeURIComponent(String(id))}/disconnect`,
        testid: 'disconnect',
      }),
    /**
     * The Drain button, shown while the server says draining applies (`state.drain.available`;
     * else while it lists the action, as a fleet node does).
     * @param {string} question what the confirmation dialog asks
     */
    drainButton(question) {
      const node = h('div', { class: 'toolbar' });
      let shown = false;
      return {
        node,
        /**
         * @param {{ drain?: { available?: boolean } | null, [key: string]: unknown } | null | undefined} state
         *   the server's state (`/api/servers/<name>` body.state)
         */
        update(state) {
          const available =
            state?.drain?.available ?? (Array.isArray(server?.actions) && server.actions.includes('drain'));
          if (available === shown) return;
          shown = available;
          node.replaceChildren();
          if (available)
            node.append(
              actionButton({
                label: 'Drain',
                question,
                path: `${base}/drain`,
                testid: 'drain',
                done: ctx.refreshState,
              }),
            );
        },
      };
    },
    /** @param {import('../../src/core/admin/api-types.js').TickJson} tick */
    onTick(tick) {
      const s = (tick.servers ?? []).find((x) => x.protocol === protocol);
      if (s !== undefined) updateCounters(s.counters);
    },
  };
}

/**
 * Per-item rates from successive cumulative samples (allocation traffic, js5 bytes served).
 * `rate(id, key, value, t)` returns units per second since the previous sample of that id/key.
 */
export function rateTracker() {
  /** @type {Map<string, { value: number, t: number }>} */
  let prev = new Map();
  /** @type {Map<string, { value: number, t: number }>} */
  let next = new Map();
  return {
    /**
     * @param {string | number} id the item's id
     * @param {string} key which of its values
     * @param {number} value the cumulative value now
     * @param {number} t the sample's time (ms)
     * @returns {number | undefined} units per second, undefined on an item's first sample
     */
    rate(id, key, value, t) {
      const k = `${id}\u0000${key}`;
      next.set(k, { value, t });
      const p = prev.get(k);
      if (p === undefined || t <= p.t || value < p.value) return undefined;
      return ((value - p.value) * 1000) / (t - p.t);
    },
    /** Call once per sample, after every rate() of that sample. */
    commit() {
      prev = next;
      next = new Map();
    },
  };
}

/**
 * Whether the server offers an action (`actions` in /api/servers; assumed when absent).
 * @param {ServerJson | undefined} server
 * @param {string} action
 */
export function offers(server, action) {
  return !Array.isArray(server?.actions) || server.actions.includes(action);
}

/**
 * What a route to a protocol that is not running shows.
 * @param {HTMLElement} main
 * @param {string} protocol
 */
export function notRunning(main, protocol) {
  fill(
    main,
    h('h1', null, protocol),
    h('p', { class: 'muted', testid: 'not-running' }, `${protocol} is not running in this gamewire serve.`),
    h('p', null, h('a', { href: '#/' }, 'Back to the overview')),
  );
}
