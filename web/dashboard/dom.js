// A tiny element builder: h('td', {class: 'num', dataset: {testid: 'x'}}, 'text', child…).
// Text is always set as text (never as HTML), so nothing the server sends can inject markup.

export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  if (attrs !== undefined && attrs !== null) {
    for (const [k, v] of Object.entries(attrs)) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') el.className = v;
      else if (k === 'dataset') Object.assign(el.dataset, v);
      else if (k === 'testid') el.dataset.testid = v;
      else if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
      else if (v === true) el.setAttribute(k, '');
      else el.setAttribute(k, String(v));
    }
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else if (c instanceof Node) el.append(c);
    else el.append(String(c));
  }
}

/** Replaces an element's children. */
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

/**
 * A semantic table: `columns` are {label, num?}; `rows` are arrays of cells (text or nodes, or
 * {value, text, testid} for a cell carrying its raw value in data-value). Empty rows show `empty`.
 * @param {{ caption?: string, columns: any[], rows: any[], testid?: string, rowTestid?: string, rowKey?: (row: any) => string, empty?: string }} options
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

export function section(title, testid, ...children) {
  const id = `s-${title.toLowerCase().replace(/[^a-z0-9]+/g, '-')}`;
  return h('section', { class: 'panel', testid, 'aria-labelledby': id }, h('h2', { id }, title), children);
}

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
 * A table updated in place each sample: rows are keyed, cells rewritten only when their text
 * changes, and cells built by `create` (buttons) are made once per row, so focus and clicks
 * survive the once-a-second refresh. `columns`: {label, num?, cell(item) | create(item)}.
 * @param {{ caption?: string, columns: any[], testid?: string, rowTestid?: string, empty?: string, key: (item: any) => string | number }} options
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
