// #/rmc: connections (TCP and PRUDP), logged-in players, sessions and the recent calls with their
// method, latency and result.

/**
 * A connection, TCP or PRUDP (docs/dashboard-api.md): `pid` is a number for 4-byte PIDs, the hex
 * of a 16-byte UUID PID, null (like `user`) until it logs in.
 * @typedef {object} RmcConnection
 * @property {string} id
 * @property {string} remote
 * @property {string} transport `tcp` or `prudp`
 * @property {number | string | null} pid
 * @property {string | null} user
 * @property {number} since
 * @property {boolean} secure
 */

/**
 * A SessionProtocol session (its key never appears).
 * @typedef {object} RmcSession
 * @property {string} id
 * @property {string} type
 * @property {number | string} host its host's PID
 * @property {(number | string)[]} members PIDs
 * @property {{ type: string, createdAt: number, memberNames: string[], nodes: string[] }} attributes
 */

/**
 * A call answered: `result` is `ok` or `Namespace::ErrorName`.
 * @typedef {{ at: number, connection: string, protocol: string, method: string, latencyMs: number, result: string }} RmcCall
 */

/**
 * rmc's state (`/api/servers/rmc` body.state).
 * @typedef {{ connections: RmcConnection[], sessions: RmcSession[], recentCalls: RmcCall[] }} RmcState
 */

/**
 * The `p`th percentile of sorted values, undefined when there are none.
 * @param {number[]} sorted
 * @param {number} p
 */
function percentile(sorted, p) {
  if (sorted.length === 0) return undefined;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

/**
 * "k=v, …" of a session's attributes, or '–'.
 * @param {Record<string, unknown> | null | undefined} a
 */
function attributes(a) {
  if (a === null || a === undefined) return '–';
  const entries = Object.entries(a);
  return entries.length === 0
    ? '–'
    : entries.map(([k, v]) => `${k}=${typeof v === 'object' ? JSON.stringify(v) : v}`).join(', ');
}

/**
 * @param {HTMLElement} main
 * @param {import('../../../../web/dashboard/kit.js').PageContext} ctx
 * @param {import('../../../../web/dashboard/kit.js').Kit} kit
 * @returns {import('../../../../web/dashboard/kit.js').View}
 */
export function mount(main, ctx, kit) {
  const { fmt, h, liveTable, protocolFrame, section } = kit;
  const frame = protocolFrame(main, ctx, 'rmc', 'state');
  const drain = frame.drainButton('Drain this server? It refuses new logins; connected players stay.');
  const callStats = h('p', { class: 'muted', testid: 'call-stats' });

  const disconnect = (/** @type {RmcConnection} */ c) =>
    frame.disconnect(c.id, `Disconnect ${c.user ?? c.remote} (connection ${c.id})?`);
  /** @type {import('../../../../web/dashboard/dom.js').LiveTable<RmcConnection>} */
  const connections = liveTable({
    testid: 'connections',
    rowTestid: 'connection-row',
    empty: 'no connections',
    key: (c) => c.id,
    columns: [
      { label: 'connection', cell: (c) => c.id },
      { label: 'remote', cell: (c) => ({ text: c.remote, class: 'mono' }) },
      { label: 'transport', cell: (c) => c.transport },
      { label: 'secure', cell: (c) => (c.secure ? 'yes' : 'no') },
      { label: 'pid', num: true, cell: (c) => c.pid ?? '–' },
      { label: 'user', cell: (c) => c.user ?? '–' },
      { label: 'connected', cell: (c) => fmt.ago(c.since) },
      { label: 'actions', create: disconnect },
    ],
  });
  /** @type {import('../../../../web/dashboard/dom.js').LiveTable<RmcConnection>} */
  const players = liveTable({
    testid: 'players',
    rowTestid: 'player-row',
    empty: 'nobody is logged in',
    key: (c) => c.id,
    columns: [
      { label: 'pid', num: true, cell: (c) => c.pid },
      { label: 'user', cell: (c) => c.user ?? '–' },
      { label: 'connection', cell: (c) => c.id },
      { label: 'transport', cell: (c) => `${c.transport}${c.secure ? ' (secure)' : ''}` },
      { label: 'since', cell: (c) => fmt.ago(c.since) },
    ],
  });
  /** @type {import('../../../../web/dashboard/dom.js').LiveTable<RmcSession>} */
  const sessions = liveTable({
    testid: 'sessions',
    rowTestid: 'session-row',
    empty: 'no sessions',
    key: (s) => s.id,
    columns: [
      { label: 'session', cell: (s) => s.id },
      { label: 'host pid', num: true, cell: (s) => s.host },
      {
        label: 'members',
        cell: (s) => ({ text: (s.members ?? []).join(', ') || '–', value: (s.members ?? []).length }),
      },
      { label: 'attributes', cell: (s) => attributes(s.attributes) },
    ],
  });
  /** @type {import('../../../../web/dashboard/dom.js').LiveTable<RmcCall & { i: number }>} */
  const calls = liveTable({
    testid: 'calls',
    rowTestid: 'call-row',
    empty: 'no calls yet',
    key: (c) => `${c.at}/${c.connection}/${c.protocol}/${c.method}/${c.i}`,
    columns: [
      { label: 'time', cell: (c) => fmt.clock(c.at) },
      { label: 'connection', cell: (c) => c.connection },
      { label: 'protocol', cell: (c) => c.protocol },
      { label: 'method', cell: (c) => ({ text: c.method, testid: 'call-method' }) },
      {
        label: 'latency',
        num: true,
        cell: (c) => ({ text: `${fmt.num(c.latencyMs, 2)} ms`, value: c.latencyMs }),
      },
      {
        label: 'result',
        cell: (c) => ({ text: c.result, class: c.result === 'ok' ? 'ok' : 'bad', testid: 'call-result' }),
      },
    ],
  });

  frame.body.append(
    drain.node,
    section('Connections', 'connections-panel', h('div', { class: 'scroll' }, connections.node)),
    h(
      'div',
      { class: 'two' },
      section('Players', 'players-panel', players.node),
      section('Sessions', 'sessions-panel', sessions.node),
    ),
    section('Recent calls', 'calls-panel', callStats, h('div', { class: 'scroll tall' }, calls.node)),
  );

  return {
    stream: { protocol: 'rmc' },
    onTick: frame.onTick,
    /** @param {import('../../../../src/core/admin/api-types.js').ServerDetailJson<RmcState>} body */
    onState(body) {
      const s = body.state ?? {};
      const conns = s.connections ?? [];
      connections.update(conns);
      players.update(conns.filter((c) => c.pid !== null && c.pid !== undefined));
      sessions.update(s.sessions ?? []);
      // Same-millisecond duplicates get an index so their keys stay unique.
      /** @type {Map<string, number>} */
      const seen = new Map();
      const recent = (s.recentCalls ?? []).map((c) => {
        const k = `${c.at}/${c.connection}/${c.protocol}/${c.method}`;
        const i = seen.get(k) ?? 0;
        seen.set(k, i + 1);
        return { ...c, i };
      });
      calls.update(recent);
      const lat = recent
        .map((c) => c.latencyMs)
        .filter((x) => typeof x === 'number')
        .sort((a, b) => a - b);
      const failed = recent.filter((c) => c.result !== 'ok').length;
      callStats.textContent =
        recent.length === 0
          ? 'no calls yet'
          : `last ${recent.length} calls: p50 ${fmt.num(percentile(lat, 50))} ms · p99 ${fmt.num(percentile(lat, 99))} ms · ${failed} failed`;
      drain.update(s);
    },
  };
}
