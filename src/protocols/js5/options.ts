/**
 * JS5 server options, declared once (src/core/options.ts): `gamewire serve js5`, the config file's
 * `js5` section, `completeOptions` and the `Js5Server` class all take them from here, defaults
 * and checks included.
 */

import { defineOptions, option, type ServerOptions } from '../../core/options.js';
import { MASTER_INDEX_FORMATS } from './cache/master-index.js';
import { PROFILE_NAMES, PROFILES } from './profiles.js';

/**
 * Smallest `--js5-slice-bytes` the CLI accepts: one 512-byte block of the response framing.
 * A library caller may give any positive integer (tiny slices exercise the framing in tests).
 */
export const MIN_SLICE_BYTES = 512;

/**
 * Default connections per address: a quarter of the server (at least 8), so a venue or a campus
 * NAT is served, and one address still cannot take every slot. One player needs one JS5
 * connection (two briefly while it reconnects). Behind a proxy, use 0.
 */
export function defaultMaxPerIp(maxClients: number): number {
  return Math.max(8, Math.floor(maxClients / 4));
}

/** Default output turns one address's connections share per round (the bandwidth of 8 players). */
export const DEFAULT_TURNS_PER_IP = 8;

/** Default connections in their handshake at once. */
export const DEFAULT_MAX_HANDSHAKING = 1024;

/** Default input budgets (the framed TCP seam's): across all connections, and per address. */
export const DEFAULT_MAX_INPUT_BYTES = 4 * 1024 * 1024;
export const DEFAULT_MAX_INPUT_BYTES_PER_IP = 1024 * 1024;

/** The JS5 port. */
export const JS5_PORT = 43594;

/**
 * `gamewire serve js5`'s options, declared once: flag, config key (with the former names it is
 * still read under), checks, default and the type `start()` and `Js5Server` receive. Defaults
 * that follow from other options (`build`, `masterIndex`: the profile's; `maxPerIp`) are derived
 * in `js5Options`.
 */
export const JS5_OPTIONS = {
  cache: option.string({
    flag: '--cache <dir>',
    description: 'js5: cache folder (default: a demo cache in the data dir)',
  }),
  build: option.int({
    min: 0,
    flag: '--build <n>',
    description: "js5: accepted client build (default: the profile's)",
  }),
  profile: option.string({
    choices: PROFILE_NAMES,
    flag: '--profile <profile>',
    description: 'js5: 435, 530 or osrs',
    default: '530',
  }),
  preload: option.bool({
    flag: '--preload',
    description: 'js5: frame every group into memory at start',
  }),
  // `drop` by default: a real 530 client cannot see a close (docs/js5.md, "Missing groups"), so
  // `close` makes it lose every request queued behind the hole, on every reconnect.
  missingGroup: option.string({
    choices: ['drop', 'close'],
    flag: '--missing-group <mode>',
    description:
      'js5: on a request for a missing or damaged group, drop (default: forget it, go on) or close (serve what was queued before it, then close)',
    default: 'drop',
  }),
  maxClients: option.int({
    min: 1,
    aliases: ['js5MaxClients'],
    flag: '--js5-max-clients <n>',
    description: 'js5: sessions before replying 7 (full)',
    default: 1000,
  }),
  cacheMb: option.int({
    min: 1,
    unit: 'MiB',
    aliases: ['js5CacheMb'],
    flag: '--js5-cache-mb <n>',
    description: 'js5: memory for framed groups (MiB)',
    default: 64,
  }),
  sliceBytes: option.int({
    min: MIN_SLICE_BYTES,
    // A library caller may frame in tiny slices (tests exercise the framing with 3 bytes).
    libraryMin: 1,
    unit: 'bytes',
    aliases: ['js5SliceBytes'],
    flag: '--js5-slice-bytes <n>',
    description: 'js5: bytes per client per scheduler turn (at least 512)',
    default: 16384,
  }),
  maxPerIp: option.int({
    min: 0,
    aliases: ['js5MaxPerIp'],
    flag: '--js5-max-per-ip <n>',
    description:
      'js5: connections per address, counted from accept; one more gets 9 (IP limit). 0 = no limit (behind a proxy). Default max(8, max-clients/4)',
  }),
  turnsPerIp: option.int({
    min: 0,
    flag: '--js5-turns-per-ip <n>',
    description:
      "js5: output turns the connections of one address share per round (a crowd behind one address gets that many players' bandwidth when the server is busy); 0 = one per connection",
    default: DEFAULT_TURNS_PER_IP,
  }),
  maxHandshaking: option.int({
    min: 1,
    flag: '--js5-max-handshaking <n>',
    description: 'js5: connections still in their handshake; one more closes the oldest of them',
    default: DEFAULT_MAX_HANDSHAKING,
  }),
  handshakeTimeoutMs: option.int({
    min: 1,
    unit: 'ms',
    flag: '--js5-handshake-timeout-ms <ms>',
    description: 'js5: close a connection that has not completed its handshake this long after accept',
    default: 10_000,
  }),
  logIntervalMs: option.int({
    min: 0,
    unit: 'ms',
    flag: '--js5-log-interval-ms <ms>',
    description:
      'js5: at most one info line per refusal reason (wrong build, full, IP limit, missing group) per this',
    default: 10_000,
  }),
  idleTimeoutMs: option.int({
    min: 0,
    unit: 'ms',
    flag: '--js5-idle-timeout-ms <ms>',
    description: 'js5: close a session with no request for this long (keep-alives do not count; 0 = never)',
    default: 30_000,
  }),
  preloadMaxMb: option.int({
    min: 1,
    unit: 'MiB',
    aliases: ['js5PreloadMaxMb'],
    flag: '--js5-preload-max-mb <n>',
    description: 'js5: refuse --preload beyond this many MiB of framed groups',
    default: 1024,
    requires: 'preload',
    requiresWhy: 'it only bounds what --preload frames',
  }),
  maxInputBytes: option.int({
    min: 1024,
    unit: 'bytes',
    flag: '--js5-max-input-bytes <n>',
    description:
      'js5: request bytes held across all connections (partial requests, requests behind a full queue)',
    default: DEFAULT_MAX_INPUT_BYTES,
  }),
  maxInputBytesPerIp: option.int({
    min: 0,
    unit: 'bytes',
    flag: '--js5-max-input-bytes-per-ip <n>',
    description: 'js5: request bytes held for the connections of one address (0 = only the global budget)',
    default: DEFAULT_MAX_INPUT_BYTES_PER_IP,
  }),
  masterIndex: option.string({
    choices: MASTER_INDEX_FORMATS,
    aliases: ['js5MasterIndex'],
    flag: '--js5-master-index <format>',
    description: "js5: master index format: original, versioned or digests (default: the profile's)",
  }),
};

/** The js5 options with their derived defaults: what `start()` and `Js5Server` run with. */
export const js5Options = defineOptions({
  section: 'js5',
  defaultPort: JS5_PORT,
  options: JS5_OPTIONS,
  derive: {
    build: (o) => PROFILES[o.profile].defaultBuild,
    masterIndex: (o) => PROFILES[o.profile].masterIndexFormat,
    maxPerIp: (o) => defaultMaxPerIp(o.maxClients),
  },
});

/** The complete js5 options (`js5Options.resolve`): every default filled, every value checked. */
export type Js5Options = ServerOptions<typeof JS5_OPTIONS, 'build' | 'masterIndex' | 'maxPerIp'>;
