/** `gamewire/js5/codec`: JS5 messages, containers and indexes; loads no server or client code. */
export { decodeContainer } from '../protocols/js5/cache/container.js';
export { readIndex } from '../protocols/js5/cache/js5-index.js';
export { readMasterIndex } from '../protocols/js5/cache/master-index.js';
export { js5Codec, js5ContainerCodec, js5IndexCodec, js5MasterIndexCodec } from '../protocols/js5/codec.js';
export { Js5Error } from '../protocols/js5/errors.js';
export { unframeResponse } from '../protocols/js5/framing.js';
export { Handshake, Js5Request, Js5Response } from '../protocols/js5/messages.js';
