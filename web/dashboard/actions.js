// Actions that change server state: each asks for confirmation in a <dialog>, then POSTs with the
// action token (api.js). Errors are shown in the alert region; success in the status line.
import { post } from './api.js';
import { h } from './dom.js';

/**
 * Shows a message in the alert region for a while; `kind` is 'error' or 'info'.
 * @param {string} text
 * @param {'error' | 'info'} [kind]
 */
export function toast(text, kind = 'error') {
  // index.html holds the alert region.
  const box = /** @type {HTMLElement} */ (document.getElementById('toasts'));
  const item = h('div', { class: `toast ${kind}`, testid: kind === 'error' ? 'error' : 'notice' }, text);
  const close = h(
    'button',
    { type: 'button', class: 'link', 'aria-label': 'Dismiss', onclick: () => item.remove() },
    '×',
  );
  item.append(close);
  box.append(item);
  setTimeout(() => item.remove(), kind === 'error' ? 15000 : 5000);
}

/**
 * Resolves true when the user confirms.
 * @param {string} text the question
 * @param {string} okLabel the confirming button's label
 * @returns {Promise<boolean>}
 */
export function confirmAction(text, okLabel) {
  // index.html holds the dialog, its text and its buttons.
  const dialog = /** @type {HTMLDialogElement} */ (document.getElementById('confirm'));
  /** @type {HTMLElement} */ (document.getElementById('confirm-text')).textContent = text;
  /** @type {HTMLElement} */ (document.getElementById('confirm-ok')).textContent = okLabel;
  return new Promise((resolve) => {
    dialog.returnValue = '';
    dialog.addEventListener('close', () => resolve(dialog.returnValue === 'ok'), { once: true });
    dialog.showModal();
    // The safe choice has focus: Enter alone never ends someone's session.
    /** @type {HTMLButtonElement} */ (dialog.querySelector('[value="cancel"]')).focus();
  });
}

/**
 * A button that runs an action: `label` on the button, `question` in the confirm dialog,
 * `path` (under /api) to POST. `done` runs after success (e.g. to refresh the view).
 * @param {{ label: string, question: string, path: string, testid?: string, done?: () => void, danger?: boolean }} options
 */
export function actionButton({ label, question, path, testid, done, danger = true }) {
  const button = h(
    'button',
    { type: 'button', class: danger ? 'small danger' : 'small', testid, dataset: { path } },
    label,
  );
  button.addEventListener('click', async () => {
    if (!(await confirmAction(question, label))) return;
    button.disabled = true;
    try {
      await post(path);
      toast(`${label}: done`, 'info');
      done?.();
    } catch (err) {
      toast(`${label} failed: ${/** @type {Error} */ (err).message}`);
    } finally {
      button.disabled = false;
    }
  });
  return button;
}

/**
 * A path segment: `s` URI-encoded.
 * @param {string | number} s
 */
export function enc(s) {
  return encodeURIComponent(String(s));
}
