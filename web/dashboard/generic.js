// A protocol this page has no dedicated view for: its counters, charts and its state as a tree.
import { fill, h, section } from './dom.js';
import { protocolFrame } from './protocol-page.js';
import { fieldTree } from './wire.js';

/**
 * @param {HTMLElement} main
 * @param {import('./kit.js').PageContext} ctx
 * @param {string} protocol
 * @returns {import('./kit.js').View}
 */
export function mountGeneric(main, ctx, protocol) {
  const frame = protocolFrame(main, ctx, protocol, 'state');
  const tree = h('ul', { class: 'tree', testid: 'state-tree' });
  frame.body.append(section('State', 'state-panel', tree));
  return {
    stream: { protocol },
    onTick: frame.onTick,
    /** @param {import('../../src/core/admin/api-types.js').ServerDetailJson} body */
    onState(body) {
      fill(tree, fieldTree(body.state ?? null, 'state'));
    },
  };
}
