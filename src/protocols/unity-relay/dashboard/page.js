// #/unity-relay: allocations (transport, bound address, peers, traffic), join codes, relay nodes
// when the relay is scaled out, and the drain action where the server supports it.

/**
 * An allocation (docs/dashboard-api.md): `transport` and `boundAddress` are null until it binds.
 * @typedef {object} Allocation
 * @property {string} id its GUID
 * @property {'host' | 'client'} role
 * @property {string} region
 * @property {'allocated' | 'bound'} state
 * @property {string | null} transport `udp`, `dtls`, `ws` or `wss`
 * @property {string | null} boundAddress `ip:port`
 * @property {string[]} peers GUIDs
 * @property {string | null} joinCode
 * @property {string | null} host a client's host GUID
 * @property {number} maxConnections
 * @property {number} createdAt
 * @property {number} lastSeen
 * @property {number} packetsIn
 * @property {number} packetsOut
 * @property {number} bytesIn
 * @property {number} bytesOut
 */

/** @typedef {{ code: string, host: string, expiresAt: number }} JoinCode a live join code */

/**
 * A live relay node of the fleet.
 * @typedef {object} RelayNode
 * @property {string} id
 * @property {string} region
 * @property {{ transport: string, host: string, port: number }[]} endpoints
 * @property {number} load bound allocations
 * @property {number} capacity
 * @property {number} allocations
 * @property {boolean} draining
 * @property {number} heartbeatAgeMs
 */

/**
 * unity-relay's state (`/api/servers/unity-relay` body.state): `nodes` is null for a single
 * relay; an allocator has no allocations and no data plane.
 * @typedef {object} UnityRelayState
 * @property {Allocation[]} allocations
 * @property {JoinCode[]} joinCodes
 * @property {RelayNode[] | null} nodes
 * @property {'js' | 'native' | null} dataplane
 * @property {'js' | 'native'} [wireServedBy] the plane serving bindings now
 * @property {string} role
 * @property {string | null} nodeId
 * @property {boolean} draining
 */

/**
 * @param {HTMLElement} main
 * @param {import('../../../../web/dashboard/kit.js').PageContext} ctx
 * @param {import('../../../../web/dashboard/kit.js').Kit} kit
 * @returns {import('../../../../web/dashboard/kit.js').View}
 */
export function mount(main, ctx, kit) {
  const { fmt, h, liveTable, protocolFrame, rateTracker, section } = kit;
  const frame = protocolFrame(main, ctx, 'unity-relay', 'state');
  const rates = rateTracker();
  const info = h('p', { class: 'muted', testid: 'dataplane' });
  const drain = frame.drainButton(
    'Drain this relay? It stops taking new allocations; existing ones keep relaying.',
  );

  /** @type {import('../../../../web/dashboard/dom.js').LiveTable<Allocation & { rateIn: number | undefined, rateOut: number | undefined }>} */
  const allocations = liveTable({
    testid: 'allocations',
    rowTestid: 'allocation-row',
    empty: 'no allocations',
    key: (a) => a.id,
    columns: [
      { label: 'allocation', cell: (a) => ({ text: fmt.shortId(a.id), title: a.id, testid: 'alloc-id' }) },
      { label: 'role', cell: (a) => a.role },
      { label: 'region', cell: (a) => a.region ?? '–' },
      { label: 'state', cell: (a) => ({ text: a.state, class: `state-${a.state}`, testid: 'alloc-state' }) },
      { label: 'transport', cell: (a) => ({ text: a.transport ?? '–', testid: 'alloc-transport' }) },
      { label: 'bound address', cell: (a) => ({ text: a.boundAddress ?? '–', testid: 'alloc-address' }) },
      {
        label: 'peers',
        cell: (a) => ({
          text: (a.peers ?? []).length === 0 ? '–' : a.peers.map(fmt.shortId).join(', '),
          title: (a.peers ?? []).join('\n'),
          value: (a.peers ?? []).length,
          testid: 'alloc-peers',
        }),
      },
      { label: 'join code', cell: (a) => a.joinCode ?? '–' },
      { label: 'age', cell: (a) => fmt.duration(Date.now() - a.createdAt) },
      { label: 'last seen', cell: (a) => fmt.ago(a.lastSeen) },
      {
        label: 'packets in/out',
        num: true,
        cell: (a) => `${fmt.count(a.packetsIn)} / ${fmt.count(a.packetsOut)}`,
      },
      {
        label: 'bytes in',
        num: true,
        cell: (a) => ({ text: fmt.bytes(a.bytesIn), value: a.bytesIn, testid: 'alloc-bytes-in' }),
      },
      {
        label: 'bytes out',
        num: true,
        cell: (a) => ({ text: fmt.bytes(a.bytesOut), value: a.bytesOut, testid: 'alloc-bytes-out' }),
      },
      {
        label: 'rate in/out',
        num: true,
        cell: (a) => {
          const i = a.rateIn;
          const o = a.rateOut;
          return i === undefined ? '–' : `${fmt.bytesPerSecond(i)} / ${fmt.bytesPerSecond(o ?? 0)}`;
        },
      },
      {
        label: 'actions',
        create: (a) =>
          h(
            'span',
            { class: 'actions' },
            frame.disconnect(
              a.id,
              `Unbind allocation ${a.id}? Its client is disconnected as by a CLOSE; it may bind again.`,
            ),
            frame.action('endAllocation', {
              label: 'End',
              question: `End allocation ${a.id} now? Its peers are told as on an idle expiry.`,
              path: `/allocations/${encodeURIComponent(a.id)}/end`,
              testid: 'end-allocation',
            }),
          ),
      },
    ],
  });
  /** @type {import('../../../../web/dashboard/dom.js').LiveTable<JoinCode>} */
  const joinCodes = liveTable({
    testid: 'join-codes',
    rowTestid: 'join-code-row',
    empty: 'no join codes',
    key: (j) => j.code,
    columns: [
      { label: 'code', cell: (j) => ({ text: j.code, class: 'mono' }) },
      { label: 'host allocation', cell: (j) => ({ text: fmt.shortId(j.host), title: j.host }) },
      { label: 'expires in', cell: (j) => fmt.duration(j.expiresAt - Date.now()) },
    ],
  });
  /** @type {import('../../../../web/dashboard/dom.js').LiveTable<RelayNode>} */
  const nodes = liveTable({
    testid: 'nodes',
    rowTestid: 'node-row',
    empty: 'no nodes',
    key: (n) => n.id,
    columns: [
      { label: 'node', cell: (n) => n.id },
      { label: 'region', cell: (n) => n.region ?? '–' },
      {
        label: 'endpoints',
        cell: (n) =>
          (n.endpoints ?? [])
            .map((e) =>
              typeof e === 'string' ? e : `${e.transport ?? ''} ${e.host ?? ''}:${e.port ?? ''}`.trim(),
            )
            .join(', '),
      },
      { label: 'load', num: true, cell: (n) => `${fmt.count(n.load)} / ${fmt.count(n.capacity)}` },
      { label: 'draining', cell: (n) => (n.draining ? 'yes' : 'no') },
      { label: 'heartbeat', cell: (n) => `${fmt.duration(n.heartbeatAgeMs)} ago` },
    ],
  });
  const nodesPanel = section('Relay nodes', 'nodes-panel', nodes.node);
  nodesPanel.hidden = true;
  frame.body.append(
    h('div', { class: 'row' }, info, drain.node),
    section('Allocations', 'allocations-panel', h('div', { class: 'scroll' }, allocations.node)),
    section('Join codes', 'join-codes-panel', joinCodes.node),
    nodesPanel,
  );

  return {
    stream: { protocol: 'unity-relay' },
    onTick: frame.onTick,
    /** @param {import('../../../../src/core/admin/api-types.js').ServerDetailJson<UnityRelayState>} body */
    onState(body) {
      const s = body.state ?? {};
      const now = Date.now();
      const list = (s.allocations ?? []).map((a) => ({
        ...a,
        rateIn: rates.rate(a.id, 'in', a.bytesIn, now),
        rateOut: rates.rate(a.id, 'out', a.bytesOut, now),
      }));
      rates.commit();
      info.textContent = `${list.length} allocation${list.length === 1 ? '' : 's'} · data plane: ${s.dataplane ?? 'js'}${s.wireServedBy && s.wireServedBy !== s.dataplane ? ` (${s.wireServedBy} while the wire view is open)` : ''}`;
      allocations.update(list);
      joinCodes.update(s.joinCodes ?? []);
      nodesPanel.hidden = s.nodes === null || s.nodes === undefined;
      // (shown only when there are nodes)
      if (!nodesPanel.hidden) nodes.update(/** @type {RelayNode[]} */ (s.nodes));
      // Drain is offered when the server says it applies (a node role): see docs/dashboard.md.
      drain.update(s);
    },
  };
}
