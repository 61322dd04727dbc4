// Overview (#/): one card per running server with its endpoints, uptime, open connections, live
// rates with charts and drops by reason.
import { rateChart } from './charts.js';
import { fill, h } from './dom.js';
import * as fmt from './format.js';
import { latestCounters, series } from './history.js';

/** @typedef {import('../../src/core/admin/api-types.js').ServerJson} ServerJson */
/** @typedef {import('../../src/core/admin/api-types.js').CountersJson} CountersJson */

/**
 * A table of counts by reason (those above zero, largest first), or "none".
 * @param {string} title
 * @param {Record<string, number> | undefined} reasons
 * @param {string} testid
 */
function reasonsList(title, reasons, testid) {
  const entries = Object.entries(reasons ?? {}).filter(([, n]) => n > 0);
  entries.sort((a, b) => b[1] - a[1]);
  return h(
    'div',
    { class: 'reasons', testid },
    h('h4', null, title),
    entries.length === 0
      ? h('p', { class: 'muted' }, 'none')
      : h(
          'table',
          { class: 'compact' },
          h(
            'thead',
            null,
            h(
              'tr',
              null,
              h('th', { scope: 'col' }, 'reason'),
              h('th', { scope: 'col', class: 'num' }, 'count'),
            ),
          ),
          h(
            'tbody',
            null,
            entries.map(([reason, n]) =>
              h(
                'tr',
                { dataset: { reason } },
                h('td', null, reason),
                h('td', { class: 'num', dataset: { value: String(n) } }, fmt.count(n)),
              ),
            ),
          ),
        ),
  );
}

/**
 * A figure of the card: its `<dt>`/`<dd>` pair, and the `<dd>` to write the value in.
 * @param {string} label
 * @param {string} testid
 */
function stat(label, testid) {
  const value = h('dd', { testid });
  return { node: [h('dt', null, label), value], value };
}

/**
 * The card of one server; `update` writes its counters (and the rates of its history).
 * @param {ServerJson} server
 */
function card(server) {
  const p = server.protocol;
  const uptime = stat('uptime', 'uptime');
  const open = stat('connections open', 'open');
  const msgIn = stat('messages in', 'msg-in');
  const msgOut = stat('messages out', 'msg-out');
  const bytesIn = stat('bytes in', 'bytes-in');
  const bytesOut = stat('bytes out', 'bytes-out');
  const totals = stat('total in / out', 'totals');
  const reasons = h('div', { class: 'reason-lists' });
  const charts = [rateChart(p, 'messages'), rateChart(p, 'bytes')];
  const node = h(
    'article',
    { class: 'card', testid: 'server-card', dataset: { protocol: p }, 'aria-labelledby': `card-${p}` },
    h(
      'header',
      null,
      h('h2', { id: `card-${p}` }, h('a', { href: `#/${p}` }, p)),
      server.hasWire === false ? null : h('a', { class: 'small-link', href: `#/${p}/wire` }, 'wire view'),
    ),
    h('p', { class: 'muted' }, server.summary ?? ''),
    h(
      'ul',
      { class: 'endpoints', testid: 'endpoints', 'aria-label': `${p} endpoints` },
      (server.endpoints ?? []).map((e) =>
        h(
          'li',
          null,
          h('code', null, `${e.transport} ${e.host}:${e.port}`),
          e.description ? ` ${e.description}` : '',
        ),
      ),
    ),
    h(
      'dl',
      { class: 'stats' },
      uptime.node,
      open.node,
      msgIn.node,
      msgOut.node,
      bytesIn.node,
      bytesOut.node,
      totals.node,
    ),
    h(
      'div',
      { class: 'charts' },
      charts.map((c) => c.box),
    ),
    reasons,
  );
  /** @param {CountersJson | undefined} counters */
  const update = (counters) => {
    uptime.value.textContent = fmt.duration(Date.now() - server.startedAt);
    if (counters === undefined) return;
    const r = series(p).rates;
    open.value.textContent = fmt.count(counters.open);
    open.value.dataset.value = String(counters.open);
    msgIn.value.textContent = fmt.perSecond(r.msgIn);
    msgOut.value.textContent = fmt.perSecond(r.msgOut);
    bytesIn.value.textContent = fmt.bytesPerSecond(r.bytesIn);
    bytesOut.value.textContent = fmt.bytesPerSecond(r.bytesOut);
    totals.value.textContent = `${fmt.count(counters.received)} msgs (${fmt.bytes(counters.bytesReceived)}) / ${fmt.count(counters.sent)} msgs (${fmt.bytes(counters.bytesSent)})`;
    fill(
      reasons,
      reasonsList('drops by reason', counters.dropped, 'drops'),
      reasonsList('closes by reason', counters.closed, 'closes'),
    );
  };
  update(latestCounters(p) ?? server.counters);
  return { node, update, charts };
}

/**
 * The overview: a card per running server.
 * @param {HTMLElement} main
 * @param {import('./kit.js').PageContext} ctx
 * @returns {import('./kit.js').View}
 */
export function mountOverview(main, ctx) {
  /** @type {Map<string, ReturnType<typeof card>>} */
  const cards = new Map();
  const grid = h('div', { class: 'cards', testid: 'overview' });
  fill(main, h('h1', { class: 'visually-hidden' }, 'Overview'), grid);
  if (ctx.servers.length === 0)
    grid.append(h('p', { class: 'muted', testid: 'no-servers' }, 'No server is running.'));
  for (const s of ctx.servers) {
    const c = card(s);
    cards.set(s.protocol, c);
    grid.append(c.node);
    for (const chart of c.charts) chart.resize();
  }
  return {
    stream: {},
    onTick(tick) {
      for (const s of tick.servers ?? []) {
        const c = cards.get(s.protocol);
        if (c === undefined)
          ctx.refreshServers(); // a server we have not listed yet
        else c.update(s.counters);
      }
    },
  };
}
