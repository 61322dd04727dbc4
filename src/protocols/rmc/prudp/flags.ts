/**
 * The `decode`/`encode prudp` flags, in a module of their own so the CLI's registry can list
 * them without loading any protocol code.
 */
import type { CodecFlag } from '../../../core/protocol.js';

/**
 * `--protocols`: protocol packs (from `gamewire rmc ddl import`) whose methods `decode`/`encode
 * rmc` and `decode prudp` show with named arguments and results.
 */
export const RMC_PROTOCOLS_FLAG: CodecFlag = {
  flag: '--protocols <files>',
  key: 'protocols',
  description:
    'rmc, prudp: protocol packs (gamewire rmc ddl import), comma-separated: named args and results',
};

export const PRUDP_CODEC_FLAGS: readonly CodecFlag[] = [
  RMC_PROTOCOLS_FLAG,
  { flag: '--access-key <key>', key: 'accessKey', description: 'prudp: the sandbox access key (checksums)' },
  {
    flag: '--checksum <width>',
    key: 'checksum',
    description: 'prudp: checksum width, 1 (default) or 4 bytes',
  },
  {
    flag: '--rmc-variant <name>',
    key: 'rmcVariant',
    description: 'prudp: RMC variant inside DATA, classic (default) or hyperscape',
  },
  {
    flag: '--session-key <hex>',
    key: 'sessionKey',
    description: 'prudp: HyperScape secure DATA: the 16-byte AES session key as hex',
  },
];
