// #/js5: connections with their queue depths and bytes served, and the cache's archives.

/**
 * A js5 connection (docs/dashboard-api.md).
 * @typedef {object} Js5Connection
 * @property {string} id
 * @property {string} remote
 * @property {number} build
 * @property {boolean} handshaken
 * @property {number} urgentQueued
 * @property {number} prefetchQueued
 * @property {number} inFlight a response being written: 0 or 1
 * @property {number} bytesServed
 * @property {number} since
 */

/**
 * An archive of the master index; `storedBytes` is what was read so far until
 * `storedBytesComplete`.
 * @typedef {{ id: number, groups: number, storedBytes: number, crc: number, version: number }} Js5Archive
 */

/**
 * js5's state (`/api/servers/js5` body.state).
 * @typedef {object} Js5State
 * @property {Js5Connection[]} connections
 * @property {number} bytesServed
 * @property {Js5Archive[]} archives
 * @property {string} profile
 * @property {number} build
 * @property {boolean} storedBytesComplete
 */

/**
 * @param {HTMLElement} main
 * @param {import('../../../../web/dashboard/kit.js').PageContext} ctx
 * @param {import('../../../../web/dashboard/kit.js').Kit} kit
 * @returns {import('../../../../web/dashboard/kit.js').View}
 */
export function mount(main, ctx, kit) {
  const { fmt, h, liveTable, protocolFrame, rateTracker, section } = kit;
  const frame = protocolFrame(main, ctx, 'js5', 'state');
  const rates = rateTracker();
  const served = h('p', { class: 'muted', testid: 'bytes-served' });

  /** @type {import('../../../../web/dashboard/dom.js').LiveTable<Js5Connection & { rate: number | undefined }>} */
  const connections = liveTable({
    testid: 'connections',
    rowTestid: 'connection-row',
    empty: 'no connections',
    key: (c) => c.id,
    columns: [
      { label: 'connection', cell: (c) => c.id },
      { label: 'remote', cell: (c) => ({ text: c.remote, class: 'mono' }) },
      { label: 'build', num: true, cell: (c) => c.build },
      {
        label: 'urgent queued',
        num: true,
        cell: (c) => ({ text: fmt.count(c.urgentQueued), value: c.urgentQueued }),
      },
      {
        label: 'prefetch queued',
        num: true,
        cell: (c) => ({ text: fmt.count(c.prefetchQueued), value: c.prefetchQueued }),
      },
      { label: 'in flight', num: true, cell: (c) => fmt.count(c.inFlight) },
      {
        label: 'bytes served',
        num: true,
        cell: (c) => ({ text: fmt.bytes(c.bytesServed), value: c.bytesServed, testid: 'conn-bytes' }),
      },
      { label: 'rate', num: true, cell: (c) => (c.rate === undefined ? '–' : fmt.bytesPerSecond(c.rate)) },
      { label: 'connected', cell: (c) => fmt.ago(c.since) },
      {
        label: 'actions',
        create: (c) => frame.disconnect(c.id, `Disconnect ${c.remote} (connection ${c.id})?`),
      },
    ],
  });
  /** @type {import('../../../../web/dashboard/dom.js').LiveTable<Js5Archive>} */
  const archives = liveTable({
    testid: 'archives',
    rowTestid: 'archive-row',
    empty: 'no archives',
    key: (a) => a.id,
    columns: [
      { label: 'archive', num: true, cell: (a) => a.id },
      { label: 'groups', num: true, cell: (a) => fmt.count(a.groups) },
      { label: 'stored', num: true, cell: (a) => ({ text: fmt.bytes(a.storedBytes), value: a.storedBytes }) },
      { label: 'crc', cell: (a) => ({ text: fmt.hex32(a.crc), class: 'mono' }) },
      { label: 'version', num: true, cell: (a) => a.version },
    ],
  });
  frame.body.append(
    served,
    section('Connections', 'connections-panel', h('div', { class: 'scroll' }, connections.node)),
    section('Archives', 'archives-panel', h('div', { class: 'scroll tall' }, archives.node)),
  );
  return {
    stream: { protocol: 'js5' },
    onTick: frame.onTick,
    /** @param {import('../../../../src/core/admin/api-types.js').ServerDetailJson<Js5State>} body */
    onState(body) {
      const s = body.state ?? {};
      const now = Date.now();
      const conns = (s.connections ?? []).map((c) => ({
        ...c,
        rate: rates.rate(c.id, 'served', c.bytesServed, now),
      }));
      const total = rates.rate('*', 'served', s.bytesServed ?? 0, now);
      rates.commit();
      const list = s.archives ?? [];
      const stored = list.reduce((n, a) => n + (a.storedBytes ?? 0), 0);
      served.textContent = `${fmt.bytes(s.bytesServed)} served${total === undefined ? '' : ` (${fmt.bytesPerSecond(total)} now)`} · ${list.length} archives, ${fmt.bytes(stored)} stored`;
      served.dataset.value = String(s.bytesServed ?? 0);
      connections.update(conns);
      archives.update(list);
    },
  };
}
