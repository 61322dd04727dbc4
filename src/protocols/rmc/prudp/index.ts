/** PRUDP V0: the UDP transport real Rendez-Vous clients speak under RMC. See docs/rmc.md. */
export * from './checksum.js';
export * from './client.js';
export * from './codec.js';
export * from './constants.js';
export * from './kerberos.js';
export * from './link.js';
export * from './packet.js';
export * from './payload.js';
export * from './profiles.js';
export * from './rc4.js';
export * from './secure.js';
export * from './serve.js';
export * from './server.js';
export * from './user-keys.js';
