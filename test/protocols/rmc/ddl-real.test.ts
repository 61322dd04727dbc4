/**
 * Opt-in: imports a real DDL folder (5th-echelon's `scripts/ddls`, for Splinter Cell: Blacklist)
 * when GAMEWIRE_DDL_DIR points at it. Skipped otherwise (CI has no copy: the dumps are not ours
 * to ship).
 */
import { describe, expect, it } from 'vitest';
import { importDdl, readDdlInputs } from '../../../src/protocols/rmc/ddl/import.js';
import { packProtocols } from '../../../src/protocols/rmc/ddl/pack.js';

const dir = process.env.GAMEWIRE_DDL_DIR;

describe.skipIf(dir === undefined || dir === '')('a real DDL folder (GAMEWIRE_DDL_DIR)', () => {
  it('imports every protocol, reports what it cannot carry over, and the pack loads', () => {
    const { docs, ids } = readDdlInputs([dir!]);
    const pack = importDdl(docs, ids === undefined ? {} : { ids });
    const defs = packProtocols(pack);
    expect(defs.length).toBe(pack.protocols.length);
    expect(defs.length).toBeGreaterThan(0);
    // Every protocol without an id is reported, by name.
    for (const p of pack.protocols)
      if (p.id === null)
        expect(pack.problems.some((x) => x.kind === 'no-protocol-id' && x.element.endsWith(p.name))).toBe(
          true,
        );
    if (process.env.GAMEWIRE_DDL_VERBOSE) {
      console.log(
        `${Object.keys(pack.types).length} classes, ${defs.length} protocols, ${pack.protocols.reduce((a, p) => a + p.methods.length, 0)} methods`,
      );
      for (const p of pack.problems) console.log(`${p.kind} ${p.element}: ${p.detail}`);
    }
  });
});
