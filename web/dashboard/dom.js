// A tiny element builder: h('td', {class: 'num', dataset: {testid: 'x'}}, 'text', child…).
// Text is always set as text (never as HTML), so nothing the server sends can inject markup.

/**
 * An attribute's value: `undefined`, `null` and `false` leave it out, `true` sets it empty, a
 * function under an `on…` name is a listener, anything else is set as its string.
 * @typedef {string | number | boolean | null | undefined | EventListener | DOMStringMap} AttrValue
 */

/**
 * Attributes of `h`: `class`, `dataset` (data-* values), `testid` (data-testid), `on…` listeners
 * and plain attributes.
 * @typedef {{ class?: string | null, dataset?: DOMStringMap | null, testid?: string | null } & { [name: string]: AttrValue }} Attrs
 */

/**
 * A child of `h`/`fill`: a node, text (numbers too), nothing (`undefined`, `null`, `false`), or a
 * list of children.
 * @typedef {Node | string | number | boolean | null | undefined | Child[]} Child
 */

/**
 * @template {keyof HTMLElementTagNameMap} K
 * @param {K} tag
 * @param {Attrs | null} [attrs]
 * @param {...Child} children
 * @returns {HTMLElementTagNameMap[K]}
 */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  if (attrs !== undefined && attrs !== null) {
    for (const [k, v] of Object.entries(attrs)) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') el.className = /** @type {string} */ (v);
      else if (k === 'dataset') Object.assign(el.dataset, v);
      else if (k === 'testid') el.dataset.testid = /** @type {string} */ (v);
      else if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
      else if (v === true) el.setAttribute(k, '');
      else el.setAttribute(k, String(v));
    }
  }
  append(el, children);
  return el;
}

/**
 * @param {Element} el
 * @param {Child[]} children
 */
function append(el, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else if (c instanceof Node) el.append(c);
    else el.append(String(c));
  }
}

/**
 * Replaces an element's children.
 * @template {Element} E
 * @param {E} el
 * @param {...Child} children
 * @returns {E}
 */
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

/**
 * A column of `table`: its heading, and whether its cells are numbers (right-aligned).
 * @typedef {{ label: string, num?: boolean }} Column
 */

/**
 * A cell carrying more than its text: its raw value (data-value), a class, a title, a test id.
 * @typedef {{ text?: Child, value?: string | number | boolean | null, class?: string, title?: string, testid?: string }} CellObject
 */

/**
 * A semantic table: `columns` are {label, num?}; `rows` are arrays of cells (text or nodes, or
 * {value, text, testid} for a cell carrying its raw value in data-value). Empty rows show `empty`.
 * `rowKey` is given the row's index.
 * @param {{ caption?: string, columns: Column[], rows: (Child | CellObject)[][], testid?: string, rowTestid?: string, rowKey?: (index: number) => string | number, empty?: string }} options
 */
export function table({ caption, columns, rows, testid, rowTestid, rowKey, empty = 'none' }) {
  const thead = h(
    'thead',
    null,
    h(
      'tr',
      null,
      columns.map((c) => h('th', { scope: 'col', class: c.num ? 'num' : undefined }, c.label)),
    ),
  );
  const tbody = h('tbody');
  if (rows.length === 0) {
    tbody.append(h('tr', { class: 'empty' }, h('td', { colspan: columns.length }, empty)));
  }
  rows.forEach((row, i) => {
    const cells = row.map((cell, j) => {
      const num = columns[j]?.num ? 'num' : undefined;
      if (cell !== null && typeof cell === 'object' && !(cell instanceof Node) && !Array.isArray(cell)) {
        return h(
          'td',
          {
            class: [num, cell.class].filter(Boolean).join(' ') || undefined,
            title: cell.title,
            dataset: cell.value === undefined ? undefined : { value: String(cell.value) },
            testid: cell.testid,
          },
          cell.text,
        );
      }
      return h('td', { class: num }, cell);
    });
    tbody.append(
      h(
        'tr',
        { testid: rowTestid, dataset: rowKey === undefined ? undefined : { key: String(rowKey(i)) } },
        cells,
      ),
    );
  });
  return h('table', { testid }, caption === undefined ? null : h('caption', null, caption), thead, tbody);
}

/**
 * A titled panel (`<section>` labelled by its `<h2>`).
 * @param {string} title
 * @param {string} testid
 * @param {...Child} children
 */
export function section(title, testid, ...children) {
  const id = `s-${title.toLowerCase().replace(/[^a-z0-9]+/g, '-')}`;
  return h('section', { class: 'panel', testid, 'aria-labelledby': id }, h('h2', { id }, title), children);
}

/**
 * The text of a live cell, or the cell with its value, class, title and test id.
 * @typedef {string | number | boolean | null | undefined | CellObject} CellSpec
 */

/**
 * @param {HTMLTableCellElement} td
 * @param {CellSpec} spec
 * @param {boolean | undefined} numeric
 */
function setCell(td, spec, numeric) {
  const d = spec !== null && typeof spec === 'object' && !(spec instanceof Node) ? spec : { text: spec };
  const text = d.text === undefined || d.text === null ? '' : String(d.text);
  if (td.textContent !== text) td.textContent = text;
  const cls = [numeric ? 'num' : '', d.class ?? ''].filter(Boolean).join(' ');
  if (td.className !== cls) td.className = cls;
  if (d.value === undefined) delete td.dataset.value;
  else if (td.dataset.value !== String(d.value)) td.dataset.value = String(d.value);
  if (d.title === undefined) td.removeAttribute('title');
  else if (td.title !== String(d.title)) td.title = String(d.title);
  if (d.testid !== undefined) td.dataset.testid = d.testid;
}

/**
 * A column of `liveTable`: `cell` gives the cell's text (or spec) each sample; `create` makes
 * its content once per row (a button: anything but a node leaves the cell empty).
 * @template T
 * @typedef {object} LiveColumn
 * @property {string} label
 * @property {boolean} [num]
 * @property {(item: T) => CellSpec} [cell]
 * @property {(item: T) => Node | string | false | null | undefined} [create]
 */

/**
 * A live table of items of type `T`: its node, and `update` with each sample's items.
 * @template T
 * @typedef {{ node: HTMLTableElement, update: (items: T[]) => void }} LiveTable
 */

/**
 * A table updated in place each sample: rows are keyed, cells rewritten only when their text
 * changes, and cells built by `create` (buttons) are made once per row, so focus and clicks
 * survive the once-a-second refresh. `columns`: {label, num?, cell(item) | create(item)}.
 * @template T
 * @param {{ caption?: string, columns: LiveColumn<T>[], testid?: string, rowTestid?: string, empty?: string, key: (item: T) => string | number }} options
 * @returns {LiveTable<T>}
 */
export function liveTable({ caption, columns, testid, rowTestid, empty = 'none', key }) {
  const tbody = h('tbody');
  const emptyRow = h('tr', { class: 'empty' }, h('td', { colspan: columns.length }, empty));
  tbody.append(emptyRow);
  const node = h(
    'table',
    { testid },
    caption === undefined ? null : h('caption', null, caption),
    h(
      'thead',
      null,
      h(
        'tr',
        null,
        columns.map((c) => h('th', { scope: 'col', class: c.num ? 'num' : undefined }, c.label)),
      ),
    ),
    tbody,
  );
  /** @type {Map<string, { tr: HTMLTableRowElement, tds: HTMLTableCellElement[] }>} */
  const rows = new Map();
  return {
    node,
    update(items) {
      if (items.length === 0) {
        for (const r of rows.values()) r.tr.remove();
        rows.clear();
        if (emptyRow.parentNode !== tbody) tbody.append(emptyRow);
        return;
      }
      emptyRow.remove();
      /** @type {Set<string>} */
      const seen = new Set();
      let before = tbody.firstChild;
      for (const item of items) {
        const k = String(key(item));
        if (seen.has(k)) continue;
        seen.add(k);
        let row = rows.get(k);
        if (row === undefined) {
          const tr = h('tr', { testid: rowTestid, dataset: { key: k } });
          const tds = columns.map((c) => {
            const td = h('td', { class: c.num ? 'num' : undefined });
            const made = c.create?.(item);
            if (made instanceof Node) td.append(made);
            return td;
          });
          tr.append(...tds);
          row = { tr, tds };
          rows.set(k, row);
        }
        columns.forEach((c, i) => {
          if (c.cell !== undefined) setCell(row.tds[i], c.cell(item), c.num);
        });
        if (row.tr !== before) tbody.insertBefore(row.tr, before);
        before = row.tr.nextSibling;
      }
      for (const [k, r] of rows) {
        if (!seen.has(k)) {
          r.tr.remove();
          rows.delete(k);
        }
      }
    },
  };
}
