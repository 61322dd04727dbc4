// What the shell hands a protocol's page: its building blocks, so a page (the protocol's own
// dashboard/page.js, served from its folder at /assets/protocols/<name>/) imports nothing from the
// shell and works wherever it is served from. A page module exports
// `mount(main, ctx, kit)` returning a View.

import { actionButton, enc, toast } from './actions.js';
import { rateChart } from './charts.js';
import { fill, h, liveTable, section } from './dom.js';
import * as fmt from './format.js';
import { offers, protocolFrame, rateTracker } from './protocol-page.js';
import { fieldTree } from './wire.js';

/** @typedef {import('../../src/core/admin/api-types.js').ServerJson} ServerJson */
/** @typedef {import('../../src/core/admin/api-types.js').TickJson} TickJson */
/** @typedef {import('../../src/core/admin/api-types.js').WireEventJson} WireEventJson */

/**
 * What a page sees of the shell.
 * @typedef {object} PageContext
 * @property {ServerJson[]} servers the servers running now (`/api/servers`)
 * @property {() => void} refreshServers re-reads the server list
 * @property {() => void} refreshState fetches the current protocol's state at once
 */

/**
 * A mounted view: the stream it wants and what it does with the stream's events.
 * @typedef {object} View
 * @property {{ protocol?: string, wire?: string }} [stream] the query of its `/api/stream`
 * @property {(tick: TickJson) => void} [onTick]
 * @property {(body: import('../../src/core/admin/api-types.js').ServerDetailJson<any>) => void} [onState] (a protocol's page knows its state's shape)
 * @property {(data: WireEventJson) => void} [onWire]
 * @property {() => void} [destroy]
 */

export const kit = {
  actionButton,
  enc,
  toast,
  rateChart,
  fill,
  h,
  liveTable,
  section,
  fmt,
  offers,
  protocolFrame,
  rateTracker,
  fieldTree,
};

/** @typedef {typeof kit} Kit */

/**
 * A page module: `mount(main, ctx, kit)`.
 * @typedef {{ mount: (main: HTMLElement, ctx: PageContext, kit: Kit) => View }} PageModule
 */
