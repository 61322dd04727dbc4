/**
 * Client families the server and client can speak to (docs/js5.md, "Profiles"). They differ
 * in the 0x80 prefetch flag, the in-flight caps, the master index format and the handshake.
 */
import { UsageError } from '../../core/errors.js';
import type { MasterIndexFormat } from './cache/master-index.js';

export const PROFILE_NAMES = ['435', '530', 'osrs'] as const;
export type Js5Profile = (typeof PROFILE_NAMES)[number];

export interface ProfileSpec {
  name: Js5Profile;
  /** OR 0x80 into the compression byte of prefetch responses (5xx/6xx clients only). */
  prefetchFlag: boolean;
  /** In-flight requests per client, per priority. */
  urgentCap: number;
  prefetchCap: number;
  masterIndexFormat: MasterIndexFormat;
  defaultBuild: number;
  /** The client sends `06 000003` (connected) after the handshake. */
  sendsConnected: boolean;
}

export const PROFILES: Readonly<Record<Js5Profile, ProfileSpec>> = {
  '435': {
    name: '435',
    prefetchFlag: false,
    urgentCap: 20,
    prefetchCap: 20,
    masterIndexFormat: 'original',
    defaultBuild: 435,
    sendsConnected: false,
  },
  '530': {
    name: '530',
    prefetchFlag: true,
    urgentCap: 20,
    prefetchCap: 20,
    masterIndexFormat: 'versioned',
    defaultBuild: 530,
    sendsConnected: true,
  },
  osrs: {
    name: 'osrs',
    prefetchFlag: false,
    urgentCap: 200,
    prefetchCap: 200,
    masterIndexFormat: 'versioned',
    defaultBuild: 232,
    sendsConnected: false,
  },
};

/** OSRS revisions from 223 on send a 16-byte seed after the build (21-byte handshake). */
export const SEEDED_HANDSHAKE_FROM = 223;

export function handshakeIsSeeded(profile: Js5Profile, build: number): boolean {
  return profile === 'osrs' && build >= SEEDED_HANDSHAKE_FROM;
}

export function parseProfile(value: unknown): Js5Profile {
  const s = String(value);
  if ((PROFILE_NAMES as readonly string[]).includes(s)) return s as Js5Profile;
  throw new UsageError(`unknown js5 profile "${s}" (known: ${PROFILE_NAMES.join(', ')})`);
}
