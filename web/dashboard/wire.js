// #/<protocol>/wire: the live wire view. The most recent messages the server sampled (newest
// first, at most MAX_MESSAGES kept in the page), filterable and pausable; selecting one shows its
// decoded fields as a collapsible tree next to an offset/hex/ASCII dump.
import { getJson } from './api.js';
import { fill, h } from './dom.js';
import * as fmt from './format.js';
import { protocolFrame } from './protocol-page.js';

/** @typedef {import('../../src/core/admin/api-types.js').JsonValue} JsonValue */
/** @typedef {import('../../src/core/admin/api-types.js').WireMessageJson} WireMessageJson */
/** @typedef {import('../../src/core/admin/api-types.js').WirePageJson} WirePageJson */

export const MAX_MESSAGES = 500;
const TREE_OPEN_DEPTH = 3;

/** @param {JsonValue} value a string, number, boolean or null */
function leaf(value) {
  if (value === null) return h('span', { class: 'v-null' }, 'null');
  if (typeof value === 'string')
    return h('span', { class: value === '<redacted>' ? 'v-redacted' : 'v-str' }, JSON.stringify(value));
  if (typeof value === 'number') return h('span', { class: 'v-num' }, String(value));
  if (typeof value === 'boolean') return h('span', { class: 'v-bool' }, String(value));
  return h('span', null, String(value));
}

/**
 * A collapsible tree of a JSON value (<details> per object/array: keyboard-usable as is).
 * @param {JsonValue} value
 * @param {string} [key] its name in its parent
 * @param {number} [depth]
 * @returns {HTMLLIElement}
 */
export function fieldTree(value, key = undefined, depth = 0) {
  const label = key === undefined ? null : h('span', { class: 'k' }, `${key}: `);
  if (value !== null && typeof value === 'object') {
    /** @type {[string, JsonValue][]} */
    const entries = Array.isArray(value) ? value.map((v, i) => [String(i), v]) : Object.entries(value);
    const kind = Array.isArray(value) ? `[${entries.length}]` : `{${entries.length}}`;
    return h(
      'li',
      null,
      h(
        'details',
        { open: depth < TREE_OPEN_DEPTH },
        h('summary', null, label, h('span', { class: 'muted' }, kind)),
        h(
          'ul',
          null,
          entries.map(([k, v]) => fieldTree(v, k, depth + 1)),
        ),
      ),
    );
  }
  return h('li', null, label, leaf(value));
}

/** @param {string} hex */
function hexDump(hex) {
  const rows = fmt.hexRows(hex);
  return h(
    'table',
    { class: 'hexdump', testid: 'hex-dump' },
    h('caption', { class: 'visually-hidden' }, 'Message bytes'),
    h(
      'thead',
      null,
      h(
        'tr',
        null,
        h('th', { scope: 'col' }, 'offset'),
        h('th', { scope: 'col' }, 'hex'),
        h('th', { scope: 'col' }, 'ASCII'),
      ),
    ),
    h(
      'tbody',
      null,
      rows.map((r) =>
        h(
          'tr',
          null,
          h('td', { class: 'off' }, r.offset),
          h('td', { class: 'hx' }, r.hex),
          h('td', { class: 'asc' }, r.ascii),
        ),
      ),
    ),
  );
}

/** @param {string} d */
function directionLabel(d) {
  return d === 'client' ? 'C→S' : d === 'server' ? 'S→C' : String(d ?? '?');
}

/**
 * The wire view of a protocol.
 * @param {HTMLElement} main
 * @param {import('./kit.js').PageContext} ctx
 * @param {string} protocol
 * @returns {import('./kit.js').View}
 */
export function mountWire(main, ctx, protocol) {
  const frame = protocolFrame(main, ctx, protocol, 'wire');
  /** @type {WireMessageJson[]} Newest first. */
  let messages = [];
  /** @type {WireMessageJson[]} Newest first: held while paused or while a row has focus. */
  let pending = [];
  let lastSeq = -1;
  let paused = false;
  /** @type {number | undefined} */
  let selectedSeq;
  /** @type {Set<string>} */
  const names = new Set();

  const nameInput = h('input', {
    type: 'search',
    id: 'f-name',
    list: 'wire-names',
    testid: 'filter-name',
    autocomplete: 'off',
  });
  const nameList = h('datalist', { id: 'wire-names' });
  const connInput = h('input', {
    type: 'search',
    id: 'f-conn',
    testid: 'filter-connection',
    autocomplete: 'off',
    size: 10,
  });
  const dirSelect = h(
    'select',
    { id: 'f-dir', testid: 'filter-direction' },
    h('option', { value: '' }, 'both'),
    h('option', { value: 'client' }, 'from client (C→S)'),
    h('option', { value: 'server' }, 'from server (S→C)'),
  );
  const textInput = h('input', {
    type: 'search',
    id: 'f-text',
    testid: 'filter-text',
    autocomplete: 'off',
    placeholder: 'in fields or hex',
  });
  const pauseButton = h('button', { type: 'button', testid: 'wire-pause', 'aria-pressed': 'false' }, 'Pause');
  const clearButton = h('button', { type: 'button', testid: 'wire-clear' }, 'Clear');
  const info = h('p', { class: 'muted', testid: 'wire-info', 'aria-live': 'polite' });
  const tbody = h('tbody');
  const tableNode = h(
    'table',
    { class: 'wire', testid: 'wire-table' },
    h('caption', { class: 'visually-hidden' }, `Recent ${protocol} messages, newest first`),
    h(
      'thead',
      null,
      h(
        'tr',
        null,
        ['#', 'time', 'dir', 'connection', 'transport', 'message', 'length'].map((c) =>
          h('th', { scope: 'col', class: c === 'length' || c === '#' ? 'num' : undefined }, c),
        ),
      ),
    ),
    tbody,
  );
  const detail = h(
    'div',
    { class: 'wire-detail', testid: 'wire-detail' },
    h('p', { class: 'muted' }, 'Select a message to see its fields and bytes.'),
  );

  const filters = h(
    'form',
    {
      class: 'filters',
      role: 'search',
      'aria-label': 'Filter messages',
      onsubmit: (e) => e.preventDefault(),
    },
    h('label', { for: 'f-name' }, 'message', nameInput),
    nameList,
    h('label', { for: 'f-conn' }, 'connection', connInput),
    h('label', { for: 'f-dir' }, 'direction', dirSelect),
    h('label', { for: 'f-text' }, 'text', textInput),
    pauseButton,
    clearButton,
  );
  frame.body.append(
    filters,
    info,
    h('div', { class: 'wire-layout' }, h('div', { class: 'scroll wire-list' }, tableNode), detail),
  );

  /** @type {WeakMap<WireMessageJson, string>} */
  const searchable = new WeakMap();
  /** @param {WireMessageJson} m */
  const matches = (m) => {
    const name = nameInput.value.trim().toLowerCase();
    const conn = connInput.value.trim();
    const dir = dirSelect.value;
    const text = textInput.value.trim().toLowerCase();
    if (
      name !== '' &&
      !String(m.name ?? '')
        .toLowerCase()
        .includes(name)
    )
      return false;
    if (conn !== '' && String(m.connection ?? '') !== conn) return false;
    if (dir !== '' && m.direction !== dir) return false;
    if (text !== '') {
      let hay = searchable.get(m);
      if (hay === undefined) {
        hay =
          `${m.name ?? ''} ${m.error ?? ''} ${JSON.stringify(m.fields ?? null)} ${m.hex ?? ''}`.toLowerCase();
        searchable.set(m, hay);
      }
      if (!hay.includes(text)) return false;
    }
    return true;
  };

  /** @param {WireMessageJson} m */
  const rowOf = (m) => {
    const tr = h(
      'tr',
      {
        testid: 'wire-row',
        tabindex: '0',
        dataset: {
          seq: String(m.seq),
          name: m.name ?? '',
          direction: m.direction ?? '',
          connection: m.connection ?? '',
        },
        'aria-selected': m.seq === selectedSeq ? 'true' : 'false',
        class: m.error ? 'has-error' : undefined,
      },
      h('td', { class: 'num' }, m.seq),
      h('td', null, fmt.clock(m.at)),
      h(
        'td',
        { title: m.direction === 'client' ? 'from the client' : 'from the server' },
        directionLabel(m.direction),
      ),
      h('td', null, m.connection ?? '–'),
      h('td', null, m.transport ?? '–'),
      h('td', { class: 'name' }, m.name ?? (m.error ? 'undecodable' : '?')),
      h('td', { class: 'num' }, `${m.length}${m.truncated ? '+' : ''}`),
    );
    tr.addEventListener('click', () => select(m.seq));
    return tr;
  };

  const render = () => {
    const shown = messages.filter(matches);
    // Rows are rebuilt: a keyboard user's focus stays on the same message if it is still listed.
    const active = document.activeElement;
    const focusedSeq =
      active instanceof HTMLElement && tbody.contains(active) ? active.dataset.seq : undefined;
    fill(
      tbody,
      shown.length === 0
        ? h(
            'tr',
            { class: 'empty' },
            h(
              'td',
              { colspan: 7 },
              messages.length === 0 ? 'waiting for messages…' : 'no message matches the filter',
            ),
          )
        : shown.map(rowOf),
    );
    if (focusedSeq !== undefined)
      /** @type {HTMLTableRowElement | null} */ (tbody.querySelector(`tr[data-seq="${focusedSeq}"]`))?.focus({
        preventScroll: true,
      });
    updateInfo(shown.length);
  };

  /** @type {number | undefined} */
  let sampled;
  /** @type {number | undefined} */
  let seen;
  /** @param {number} shown how many rows are listed */
  const updateInfo = (shown) => {
    const parts = [`${shown} shown of ${messages.length} kept (max ${MAX_MESSAGES})`];
    if (paused) parts.push(`paused: ${pending.length} new`);
    else if (pending.length > 0) parts.push(`held while a row has focus: ${pending.length} new`);
    if (sampled !== undefined && seen !== undefined)
      parts.push(`server sampled ${fmt.count(sampled)} of ${fmt.count(seen)} seen`);
    info.textContent = parts.join(' · ');
  };

  /** @param {number} seq */
  const select = (seq) => {
    selectedSeq = seq;
    const m = messages.find((x) => x.seq === seq);
    for (const tr of /** @type {NodeListOf<HTMLTableRowElement>} */ (tbody.querySelectorAll('tr[data-seq]')))
      tr.setAttribute('aria-selected', tr.dataset.seq === String(seq) ? 'true' : 'false');
    if (m === undefined) return;
    const head = h(
      'dl',
      { class: 'stats' },
      h('dt', null, 'message'),
      h('dd', { testid: 'detail-name' }, m.name ?? '–'),
      h('dt', null, 'direction'),
      h('dd', null, m.direction === 'client' ? 'client → server' : 'server → client'),
      h('dt', null, 'connection'),
      h('dd', null, `${m.connection ?? '–'} (${m.transport ?? '?'})`),
      h('dt', null, 'time'),
      h('dd', null, fmt.clock(m.at)),
      h('dt', null, 'length'),
      h(
        'dd',
        null,
        `${m.length} bytes${m.truncated ? ` (first ${Math.floor((m.hex ?? '').length / 2)} shown)` : ''}`,
      ),
    );
    fill(
      detail,
      h('h2', null, `#${m.seq} ${m.name ?? 'message'}`),
      head,
      m.error ? h('p', { class: 'bad', testid: 'detail-error' }, `decode error: ${m.error}`) : null,
      h(
        'div',
        { class: 'detail-cols' },
        h(
          'section',
          { 'aria-label': 'Decoded fields' },
          h('h3', null, 'Fields'),
          m.fields === null || m.fields === undefined
            ? h('p', { class: 'muted' }, 'not decoded')
            : h('ul', { class: 'tree', testid: 'field-tree' }, fieldTree(m.fields)),
        ),
        h(
          'section',
          { 'aria-label': 'Bytes' },
          h('h3', null, 'Bytes'),
          // The server hides the bytes of a message it could not decode where they may hold a secret.
          (m.hex ?? '') === '' && m.length > 0
            ? h(
                'p',
                { class: 'muted', testid: 'hex-hidden' },
                'hidden: not decoded, so secrets could not be masked',
              )
            : hexDump(m.hex ?? ''),
        ),
      ),
    );
  };

  /** @param {WireMessageJson[] | undefined} list */
  const add = (list) => {
    /** @type {WireMessageJson[]} */
    const fresh = [];
    for (const m of list ?? []) {
      if (typeof m.seq !== 'number' || m.seq <= lastSeq) continue;
      lastSeq = m.seq;
      fresh.push(m);
      if (m.name && !names.has(m.name)) {
        names.add(m.name);
        nameList.append(h('option', { value: m.name }));
      }
    }
    if (fresh.length === 0) return;
    fresh.reverse();
    if (holding()) {
      pending = fresh.concat(pending).slice(0, MAX_MESSAGES);
      updateInfo(tbody.querySelectorAll('tr[data-seq]').length);
      return;
    }
    messages = fresh.concat(messages).slice(0, MAX_MESSAGES);
    render();
  };

  // While a row has keyboard focus the list holds still (new messages wait, as when paused), so
  // the message under the cursor is not pushed out of the 500 kept; it moves again on leaving.
  const holding = () => paused || tbody.contains(document.activeElement);
  const release = () => {
    if (holding()) return;
    if (pending.length === 0) return updateInfo(tbody.querySelectorAll('tr[data-seq]').length);
    messages = pending.concat(messages).slice(0, MAX_MESSAGES);
    pending = [];
    render();
  };
  tbody.addEventListener('focusout', () => setTimeout(release, 0));

  pauseButton.addEventListener('click', () => {
    paused = !paused;
    pauseButton.textContent = paused ? 'Resume' : 'Pause';
    pauseButton.setAttribute('aria-pressed', String(paused));
    if (!paused) release();
    else updateInfo(tbody.querySelectorAll('tr[data-seq]').length);
  });
  clearButton.addEventListener('click', () => {
    messages = [];
    pending = [];
    render();
  });
  for (const el of [nameInput, connInput, textInput]) el.addEventListener('input', render);
  dirSelect.addEventListener('change', render);
  // Arrow keys move the selection; Enter/Space select the focused row.
  tbody.addEventListener('keydown', (e) => {
    // Keys reach the body from its rows (elements).
    const tr = /** @type {HTMLTableRowElement | null} */ (
      /** @type {Element} */ (e.target).closest('tr[data-seq]')
    );
    if (tr === null) return;
    if (e.key === 'Enter' || e.key === ' ') {
      e.preventDefault();
      select(Number(tr.dataset.seq));
    } else if (e.key === 'ArrowDown' || e.key === 'ArrowUp') {
      e.preventDefault();
      const next = /** @type {HTMLTableRowElement | null} */ (
        e.key === 'ArrowDown' ? tr.nextElementSibling : tr.previousElementSibling
      );
      if (next?.dataset.seq !== undefined) {
        next.focus();
        select(Number(next.dataset.seq));
      }
    }
  });

  render();
  // What the server already holds, then the stream (duplicates are dropped by sequence number).
  getJson(`/api/wire/${encodeURIComponent(protocol)}?limit=${MAX_MESSAGES}`)
    .then((/** @type {WirePageJson} */ r) => {
      sampled = r.sampled;
      seen = r.seen;
      add(r.messages);
      updateInfo(tbody.querySelectorAll('tr[data-seq]').length);
    })
    .catch((/** @type {Error} */ err) => {
      info.textContent = `wire view unavailable: ${err.message}`;
    });

  // The sampling figures come with GET /api/wire only: refresh them now and then (this also
  // keeps the server's tap armed, as the stream does).
  const refreshFigures = () => {
    getJson(`/api/wire/${encodeURIComponent(protocol)}?after=${Math.max(0, lastSeq)}&limit=1`)
      .then((/** @type {WirePageJson} */ r) => {
        sampled = r.sampled;
        seen = r.seen;
        updateInfo(tbody.querySelectorAll('tr[data-seq]').length);
      })
      .catch(() => {});
  };
  // Soon after opening (the first read armed the tap), then every few seconds.
  const firstFigures = setTimeout(refreshFigures, 1500);
  const figures = setInterval(refreshFigures, 5000);

  return {
    stream: { wire: protocol },
    destroy() {
      clearTimeout(firstFigures);
      clearInterval(figures);
    },
    onTick: frame.onTick,
    onWire(data) {
      add(data.messages);
    },
  };
}
