/**
 * The Transform merge (handlers/relay.ts) walks one table of vectors (`TRANSFORM_VECTORS`); this
 * checks it against the rule written out vector by vector: a vector that arrives for the first
 * time, or any component that moved by more than the instance's threshold, makes the update
 * worth relaying; Reset returns the rig to its start values first.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { mergeTransform, newStored } from '../../../src/protocols/nox-relay/handlers/relay.js';
import type { TransformMessage } from '../../../src/protocols/nox-relay/messages.js';

type V3 = { x: number; y: number; z: number };
type V4 = V3 & { w: number };
const NAMES = ['position', 'rotation', 'scale', 'velocity', 'angularVelocity'] as const;

/** The rule, one vector at a time. */
class Reference {
  flags = 0;
  vectors: Record<(typeof NAMES)[number], number[]> = Reference.start();

  static start(): Reference['vectors'] {
    return {
      position: [0, 0, 0],
      rotation: [0, 0, 0, 1],
      scale: [1, 1, 1],
      velocity: [0, 0, 0],
      angularVelocity: [0, 0, 0],
    };
  }

  merge(m: TransformMessage, t: number): boolean {
    let changed = false;
    if (m.flags & 0x20) {
      this.flags = 0;
      this.vectors = Reference.start();
      changed = true;
    }
    NAMES.forEach((name, k) => {
      const flag = 1 << k;
      if ((m.flags & flag) === 0) return;
      const v = (m as unknown as Record<string, V4>)[name]!;
      const next = name === 'rotation' ? [v.x, v.y, v.z, v.w] : [v.x, v.y, v.z];
      const old = this.vectors[name];
      if ((this.flags & flag) === 0 || next.some((c, i) => !(Math.abs(c - old[i]!) <= t))) changed = true;
      this.vectors[name] = next;
    });
    this.flags |= m.flags & 0x1f;
    return changed;
  }

  values(): number[] {
    return NAMES.flatMap((n) => this.vectors[n]);
  }
}

const component = fc.oneof(
  fc.constantFrom(0, 1, -1, 0.5, 0.01, 1.01),
  fc.float({ noDefaultInfinity: true }),
  fc.constant(Number.NaN),
);
const v3 = fc.record({ x: component, y: component, z: component });
const v4 = fc.record({ x: component, y: component, z: component, w: component });
const message = fc
  .record({ flags: fc.integer({ min: 0, max: 0x3f }), v: fc.tuple(v3, v4, v3, v3, v3) })
  .map(({ flags, v }) => {
    const m: Record<string, unknown> = {
      type: 'Transform',
      instanceId: 0,
      transformType: 1,
      playerId: 0,
      rig: 0,
      flags,
    };
    NAMES.forEach((name, k) => {
      if (flags & (1 << k)) m[name] = v[k];
    });
    return m as unknown as TransformMessage;
  });

describe('nox-relay Transform merge', () => {
  it('matches the rule vector by vector: changed or not, and the stored state', () => {
    fc.assert(
      fc.property(
        fc.array(message, { minLength: 1, maxLength: 30 }),
        fc.constantFrom(0, 0.01, 0.5, 2, Number.NaN),
        (messages, threshold) => {
          const st = newStored(7);
          const ref = new Reference();
          for (const m of messages) {
            expect(mergeTransform(st, m, threshold)).toBe(ref.merge(m, threshold));
            expect(st.flags).toBe(ref.flags);
            expect(Array.from(st.values)).toEqual(ref.values());
            expect(st.rig).toBe(7);
          }
        },
      ),
      { numRuns: 500 },
    );
  });

  it('each vector, the rotation’s w included, counts on its own', () => {
    const threshold = 0.1;
    const vectors: [number, string, number][] = [
      [0x01, 'position', 3],
      [0x02, 'rotation', 4],
      [0x04, 'scale', 3],
      [0x08, 'velocity', 3],
      [0x10, 'angularVelocity', 3],
    ];
    for (const [flag, name, size] of vectors) {
      const st = newStored(0);
      const at = (c: number[]) =>
        ({
          flags: flag,
          [name]: size === 4 ? { x: c[0], y: c[1], z: c[2], w: c[3] } : { x: c[0], y: c[1], z: c[2] },
        }) as unknown as TransformMessage;
      const base = [1, 2, 3, 4].slice(0, size);
      expect(mergeTransform(st, at(base), threshold), `${name} first`).toBe(true);
      expect(mergeTransform(st, at(base.map((c) => c + 0.05)), threshold), `${name} below`).toBe(false);
      for (let i = 0; i < size; i++) {
        const moved = base.map((c, j) => (j === i ? c + 1 : c + 0.05));
        expect(mergeTransform(st, at(moved), threshold), `${name}[${i}] beyond`).toBe(true);
        mergeTransform(st, at(base.map((c) => c + 0.05)), threshold);
      }
    }
  });
});
