/**
 * gamewire's binary layer: one reader, one writer, one error model, declared codecs and stream
 * framing, shared by every protocol. See docs/ARCHITECTURE.md.
 */
export * from './checksum.js';
export * from './codec.js';
export * from './errors.js';
export * from './framing.js';
export * from './hex.js';
export * from './limits.js';
export * from './reader.js';
export * from './writer.js';
