/** Byte fixtures from the RMC seed document (its first capture, `000_*.txt`), spec §1.7. */

/** LoginProtocol::Register_V1 request, call id 6, four StationURLs: all 253 bytes. */
export const SEED_REGISTER_REQUEST_HEX =
  'f90000000e004c6f67696e50726f746f636f6c0001060000001b004c6f67696e50726f746f636f6c3a3a52656769737465725f5631' +
  '0000000000040000002f0070727564703a2f616464726573733d3030302e3030302e30302e3030303b706f72743d393130333b7369' +
  '643d3135002e0070727564703a2f616464726573733d3030302e3030302e3030302e303b706f72743d393130333b7369643d313500' +
  '2d0070727564703a2f616464726573733d3030302e3030302e30302e303b706f72743d393130333b7369643d3135002d0070727564' +
  '703a2f616464726573733d3030302e3030302e30302e303b706f72743d393130333b7369643d313500';

/** Failure response: LoginProtocol, RendezVous / 0x0081, call id 5 (37 + 4 = 41 bytes). */
export const SEED_ERROR_RESPONSE_HEX =
  '250000000e004c6f67696e50726f746f636f6c0000000b0052656e64657a566f757300810005000000';

export const SEED_URLS = [
  'prudp:/address=000.000.00.000;port=9103;sid=15',
  'prudp:/address=000.000.000.0;port=9103;sid=15',
  'prudp:/address=000.000.00.0;port=9103;sid=15',
  'prudp:/address=000.000.00.0;port=9103;sid=15',
];

export const seedRequest = (): Buffer => Buffer.from(SEED_REGISTER_REQUEST_HEX, 'hex');
export const seedError = (): Buffer => Buffer.from(SEED_ERROR_RESPONSE_HEX, 'hex');

/** Parses the hex dumps out of the seed document itself, to check the fixtures above. */
export function hexDumpsFromSeed(text: string): string[] {
  const dumps: string[] = [];
  let current: string[] = [];
  for (const line of text.split('\n')) {
    const m = /^[0-9A-F]{8} {2}((?:[0-9A-Fa-f]{2} ){0,15}[0-9A-Fa-f]{2})/.exec(line);
    if (m !== null) current.push(m[1]!.replace(/ /g, ''));
    else if (current.length > 0) {
      dumps.push(current.join('').toLowerCase());
      current = [];
    }
  }
  if (current.length > 0) dumps.push(current.join('').toLowerCase());
  return dumps;
}
