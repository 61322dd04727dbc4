// The dashboard's shell: session, navigation, the hash router and the one /api/stream connection
// of the current view. Views (overview.js, wire.js, and each protocol's own page, found through
// `page` in /api/servers and loaded from the protocol's folder) get the stream's events through
// onTick/onState/onWire. The shell names no protocol: a protocol without a page gets the
// generic view (its counters and its state as a tree).

import { toast } from './actions.js';
import { ApiError, getJson, loadSession, onUnauthorized, openStream } from './api.js';
import { destroyAllCharts, updateCharts } from './charts.js';
import { fill, h } from './dom.js';
import * as fmt from './format.js';
import { mountGeneric } from './generic.js';
import { addTick } from './history.js';
import { kit } from './kit.js';
import { mountOverview } from './overview.js';
import { notRunning } from './protocol-page.js';
import { mountWire } from './wire.js';

/** @typedef {import('../../src/core/admin/api-types.js').ServerJson} ServerJson */
/** @typedef {import('./kit.js').View} View */

/** @type {Map<string, Promise<import('./kit.js').PageModule>>} Page modules loaded, by URL. */
const pages = new Map();
const RETRY_MS = 3000;

/** Hooks for the browser tests and for curious users in the console (no secrets in here). */
window.gamewireDashboard = { route: '', map: undefined, ticks: 0 };

// index.html holds these.
const main = /** @type {HTMLElement} */ (document.getElementById('main'));
const nav = /** @type {HTMLElement} */ (document.getElementById('nav'));
const statusEl = /** @type {HTMLElement} */ (document.getElementById('status'));
const metaEl = /** @type {HTMLElement} */ (document.getElementById('meta'));

/** @type {import('../../src/core/admin/api-types.js').SessionJson | undefined} */
let session;
/** @type {ServerJson[]} */
let servers = [];
/** @type {View | undefined} */
let view;
/** @type {{ close: () => void } | undefined} */
let stream;
let locked = false;
/** @type {number | undefined} */
let retryTimer;

/**
 * @param {string} text
 * @param {'live' | 'reconnecting' | 'closed' | 'locked'} kind (data-state, for the styles)
 */
function setStatus(text, kind) {
  statusEl.textContent = text;
  statusEl.dataset.state = kind;
}

function parseRoute() {
  const raw = location.hash.replace(/^#\/?/, '');
  const [protocol = '', sub = ''] = raw.split('/').map((s) => decodeURIComponent(s));
  return { protocol, sub };
}

function renderNav() {
  const { protocol } = parseRoute();
  const link = (/** @type {string} */ href, /** @type {string} */ label, /** @type {boolean} */ current) =>
    h('li', null, h('a', { href, class: 'navlink', 'aria-current': current ? 'page' : undefined }, label));
  fill(
    nav,
    link('#/', 'Overview', protocol === ''),
    servers.map((s) => link(`#/${s.protocol}`, s.protocol, protocol === s.protocol)),
  );
}

function renderMeta() {
  if (session === undefined) return;
  metaEl.textContent = `v${session.version} · up ${fmt.duration(Date.now() - session.startedAt)}`;
}

function closeView() {
  stream?.close();
  stream = undefined;
  view?.destroy?.();
  view = undefined;
  destroyAllCharts();
}

/** Re-reads the server list; resolves whether it changed (protocols added or gone). */
async function refreshServers() {
  /** @type {import('../../src/core/admin/api-types.js').ServersJson} */
  const r = await getJson('/api/servers');
  const before = servers.map((s) => s.protocol).join(',');
  servers = r.servers ?? [];
  renderNav();
  return before !== servers.map((s) => s.protocol).join(',');
}

let refreshingServers = false;
/** @type {import('./kit.js').PageContext} */
const ctx = {
  get servers() {
    return servers;
  },
  /** Re-reads the server list; re-mounts the view when the list changed. */
  refreshServers() {
    if (refreshingServers) return;
    refreshingServers = true;
    refreshServers()
      .then((changed) => {
        if (changed) mount();
      })
      .catch(() => {})
      .finally(() => {
        refreshingServers = false;
      });
  },
  /** Fetches the current protocol's state at once (after an action, on opening a page). */
  refreshState() {
    const { protocol } = parseRoute();
    const current = view;
    if (protocol === '' || current?.onState === undefined) return;
    getJson(`/api/servers/${encodeURIComponent(protocol)}`)
      .then((body) => {
        // (current.onState was checked above)
        if (view === current) /** @type {Required<Pick<View, 'onState'>>} */ (current).onState(body);
      })
      .catch(() => {});
  },
};

/** Opens the stream the current view wants (once it is mounted). */
function connect() {
  stream?.close();
  const current = /** @type {View} */ (view);
  stream = openStream(
    current.stream ?? {},
    {
      tick(tick) {
        window.gamewireDashboard.ticks++;
        updateCharts(addTick(tick));
        renderMeta();
        current.onTick?.(tick);
      },
      state(body) {
        current.onState?.(body);
      },
      wire(data) {
        current.onWire?.(data);
      },
    },
    (s) => {
      if (s === 'open') setStatus('live', 'live');
      else if (s === 'reconnecting') setStatus('reconnecting…', 'reconnecting');
      else {
        // The browser gave up (e.g. a 401): find out why, then try again later.
        setStatus('disconnected', 'closed');
        stream?.close();
        clearTimeout(retryTimer);
        retryTimer = setTimeout(() => start().catch(() => {}), RETRY_MS);
      }
    },
  );
}

/**
 * The protocol's own page module, or undefined (the generic view) when it has none or it fails to load.
 * @param {ServerJson | undefined} server
 * @returns {Promise<import('./kit.js').PageModule | undefined>}
 */
async function pageModule(server) {
  if (server?.page == null) return undefined;
  let loading = pages.get(server.page);
  if (loading === undefined) {
    loading = import(server.page);
    pages.set(server.page, loading);
  }
  try {
    return await loading;
  } catch (err) {
    pages.delete(server.page);
    toast(
      `the ${server.protocol} page did not load (${/** @type {Error} */ (err).message}): showing its state as a tree`,
    );
    return undefined;
  }
}

let mounting = 0;
async function mount() {
  if (locked) return;
  const token = ++mounting;
  closeView();
  const { protocol, sub } = parseRoute();
  window.gamewireDashboard.route = protocol === '' ? '/' : `/${protocol}${sub ? `/${sub}` : ''}`;
  renderNav();
  const server = servers.find((s) => s.protocol === protocol);
  /** @type {View} */
  let next;
  if (protocol === '') next = mountOverview(main, ctx);
  else if (server === undefined) {
    notRunning(main, protocol);
    next = { stream: {} };
  } else if (sub === 'wire') next = mountWire(main, ctx, protocol);
  else {
    const page = await pageModule(server);
    // Another route was chosen while the page loaded: that one wins.
    if (token !== mounting || locked) return;
    next = page === undefined ? mountGeneric(main, ctx, protocol) : page.mount(main, ctx, kit);
  }
  view = next;
  document.title = protocol === '' ? 'gamewire dashboard' : `${protocol}${sub ? ` ${sub}` : ''} · gamewire`;
  connect();
  ctx.refreshState();
}

function showLocked() {
  if (locked) return;
  locked = true;
  closeView();
  clearTimeout(retryTimer);
  servers = [];
  fill(nav);
  metaEl.textContent = '';
  setStatus('locked', 'locked');
  fill(
    main,
    h(
      'section',
      { class: 'panel locked', testid: 'auth-required' },
      h('h1', null, 'Admin token required'),
      h(
        'p',
        null,
        'This gamewire admin endpoint needs its token. Open this page once as ',
        h('code', null, '/?token=YOUR_TOKEN'),
        ' (the server then keeps it in a cookie for this browser), or ask whoever runs the server.',
      ),
      h('p', null, h('button', { type: 'button', onclick: () => location.reload() }, 'Retry')),
    ),
  );
}

onUnauthorized(showLocked);

async function start() {
  locked = false;
  try {
    session = await loadSession();
    await refreshServers();
  } catch (err) {
    if (err instanceof ApiError && err.status === 401) return showLocked();
    setStatus('server unreachable', 'closed');
    fill(
      main,
      h(
        'section',
        { class: 'panel', testid: 'unreachable' },
        h('h1', null, 'gamewire is not answering'),
        h('p', null, `${/** @type {Error} */ (err).message}. Retrying…`),
      ),
    );
    clearTimeout(retryTimer);
    retryTimer = setTimeout(() => start().catch(() => {}), RETRY_MS);
    return;
  }
  renderMeta();
  mount();
}

window.addEventListener('hashchange', () => {
  mount();
  main.focus({ preventScroll: true });
});
start();
