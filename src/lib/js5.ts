/** `gamewire/js5`: JS5 client, server, cache stores and formats, codecs. */
export { CacheWriter, cacheInfo, verifyCache } from '../protocols/js5/cache/cache.js';
export { decodeContainer, encodeContainer } from '../protocols/js5/cache/container.js';
export { createDemoCache } from '../protocols/js5/cache/demo.js';
export { nameHash, readIndex, writeIndex } from '../protocols/js5/cache/js5-index.js';
export { LzmaError } from '../protocols/js5/cache/lzma.js';
export { createMasterIndex, readMasterIndex, writeMasterIndex } from '../protocols/js5/cache/master-index.js';
export {
  createStore,
  DiskStore,
  FlatFileStore,
  openStore,
  StoreCorruptError,
  StoreReadError,
} from '../protocols/js5/cache/store.js';
export { downloadCache, Js5Client, Js5HandshakeError } from '../protocols/js5/client.js';
export { js5Codec, js5ContainerCodec, js5IndexCodec, js5MasterIndexCodec } from '../protocols/js5/codec.js';
export { Js5Error } from '../protocols/js5/errors.js';
export { frameResponse, unframeResponse } from '../protocols/js5/framing.js';
export { Handshake, Js5Request, Js5Response } from '../protocols/js5/messages.js';
export { PROFILES } from '../protocols/js5/profiles.js';
export { Js5Server } from '../protocols/js5/server.js';
