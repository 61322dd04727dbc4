// #/nox-relay: instances and their players with a live top-down map, and the connections.
import { createMap } from './map.js';

/** @typedef {import('./map.js').Vec3} Vec3 */

/**
 * A player of an instance (docs/dashboard-api.md): its position and rotation are its latest
 * Transform's, null (like `updatedAt`) until it sent one.
 * @typedef {object} NoxPlayer
 * @property {string} id
 * @property {string} name
 * @property {string} connection
 * @property {number} userId
 * @property {boolean} bot
 * @property {Vec3 | null} position
 * @property {import('./map.js').Quat | null} rotation
 * @property {number | null} updatedAt
 */

/** @typedef {{ id: string, name: string, capacity: number, players: NoxPlayer[] }} NoxInstance */

/**
 * @typedef {object} NoxConnection
 * @property {string} id
 * @property {string} remote
 * @property {string} transport
 * @property {string | null} playerId its first player
 * @property {string | null} user its display name
 * @property {number} since
 */

/**
 * nox-relay's state (`/api/servers/nox-relay` body.state).
 * @typedef {{ instances: NoxInstance[], connections: NoxConnection[], bounds: import('./map.js').Bounds | null }} NoxState
 */

/**
 * "x, y, z" of a position, or '–'.
 * @param {{ num(n: number): string }} fmt
 * @param {Vec3 | null | undefined} p
 */
function vec(fmt, p) {
  return p === null || p === undefined ? '–' : `${fmt.num(p.x)}, ${fmt.num(p.y)}, ${fmt.num(p.z)}`;
}

/**
 * @param {HTMLElement} main
 * @param {import('../../../../web/dashboard/kit.js').PageContext} ctx
 * @param {import('../../../../web/dashboard/kit.js').Kit} kit
 * @returns {import('../../../../web/dashboard/kit.js').View}
 */
export function mount(main, ctx, kit) {
  const { fmt, h, liveTable, protocolFrame, section } = kit;
  const frame = protocolFrame(main, ctx, 'nox-relay', 'state');
  const canvas = h('canvas', {
    class: 'map',
    testid: 'nox-map',
    role: 'img',
    'aria-label': 'Top-down map of player positions (x to the right, z up)',
  });
  const map = createMap(canvas);
  const mapCaption = h('p', { class: 'muted', testid: 'map-caption' });
  const summary = h('p', { class: 'muted', testid: 'nox-summary' });

  /** @type {import('../../../../web/dashboard/dom.js').LiveTable<NoxInstance>} */
  const instances = liveTable({
    testid: 'instances',
    rowTestid: 'instance-row',
    empty: 'no instances',
    key: (i) => i.id,
    columns: [
      { label: 'instance', cell: (i) => i.id },
      { label: 'name', cell: (i) => i.name ?? '–' },
      {
        label: 'players',
        num: true,
        cell: (i) => ({
          text:
            i.capacity === undefined
              ? fmt.count(i.players.length)
              : `${fmt.count(i.players.length)} / ${fmt.count(i.capacity)}`,
          value: i.players.length,
          testid: 'instance-players',
        }),
      },
      {
        label: 'actions',
        create: (i) =>
          frame.action('endInstance', {
            label: 'End instance',
            question: `End instance ${i.id} (${i.name ?? 'unnamed'})? Its players leave as when the instance closes.`,
            path: `/instances/${encodeURIComponent(i.id)}/end`,
            testid: 'end-instance',
          }),
      },
    ],
  });
  /** @type {import('../../../../web/dashboard/dom.js').LiveTable<NoxPlayer & { instance: string }>} */
  const players = liveTable({
    testid: 'players',
    rowTestid: 'player-row',
    empty: 'no players',
    key: (p) => `${p.instance}/${p.id}`,
    columns: [
      { label: 'instance', cell: (p) => p.instance },
      { label: 'player', cell: (p) => p.id },
      { label: 'name', cell: (p) => `${p.name ?? '–'}${p.bot ? ' (bot)' : ''}` },
      { label: 'connection', cell: (p) => p.connection ?? '–' },
      {
        label: 'position x, y, z',
        num: true,
        cell: (p) => ({ text: vec(fmt, p.position), testid: 'player-position' }),
      },
      { label: 'updated', cell: (p) => (p.updatedAt ? fmt.ago(p.updatedAt) : '–') },
      {
        label: 'actions',
        create: (p) =>
          p.connection === null || p.connection === undefined
            ? ''
            : frame.disconnect(
                p.connection,
                `Disconnect player ${p.name ?? p.id} (connection ${p.connection})?`,
              ) || '',
      },
    ],
  });
  /** @type {import('../../../../web/dashboard/dom.js').LiveTable<NoxConnection>} */
  const connections = liveTable({
    testid: 'connections',
    rowTestid: 'connection-row',
    empty: 'no connections',
    key: (c) => c.id,
    columns: [
      { label: 'connection', cell: (c) => c.id },
      { label: 'remote', cell: (c) => ({ text: c.remote, class: 'mono' }) },
      { label: 'transport', cell: (c) => c.transport },
      { label: 'user', cell: (c) => c.user ?? '–' },
      { label: 'player', cell: (c) => c.playerId ?? '–' },
      { label: 'connected', cell: (c) => fmt.ago(c.since) },
      {
        label: 'actions',
        create: (c) => frame.disconnect(c.id, `Disconnect ${c.remote} (connection ${c.id})?`),
      },
    ],
  });

  frame.body.append(
    summary,
    section('Map', 'map-panel', canvas, mapCaption),
    h(
      'div',
      { class: 'two' },
      section('Instances', 'instances-panel', instances.node),
      section('Connections', 'connections-panel', h('div', { class: 'scroll' }, connections.node)),
    ),
    section('Players', 'players-panel', h('div', { class: 'scroll' }, players.node)),
  );
  window.gamewireDashboard.map = map;

  return {
    stream: { protocol: 'nox-relay' },
    onTick: frame.onTick,
    /** @param {import('../../../../src/core/admin/api-types.js').ServerDetailJson<NoxState>} body */
    onState(body) {
      const s = body.state ?? {};
      const inst = s.instances ?? [];
      const all = inst.flatMap((i) => (i.players ?? []).map((p) => ({ ...p, instance: i.id })));
      summary.textContent = `${inst.length} instance${inst.length === 1 ? '' : 's'} · ${all.length} player${all.length === 1 ? '' : 's'} · ${(s.connections ?? []).length} connection${(s.connections ?? []).length === 1 ? '' : 's'}`;
      summary.dataset.players = String(all.length);
      instances.update(inst.map((i) => ({ ...i, players: i.players ?? [] })));
      players.update(all);
      connections.update(s.connections ?? []);
      map.update(inst, s.bounds);
      const placed = all.filter((p) => p.position).length;
      mapCaption.textContent = `${placed} of ${all.length} players placed · x to the right, z up${s.bounds ? '' : ' · bounds fitted to the players'}`;
    },
    destroy() {
      map.destroy();
      if (window.gamewireDashboard.map === map) window.gamewireDashboard.map = undefined;
    },
  };
}
