// Runtime-owned columns on every database: id, version, createdAt, updatedAt and completedAt stay the runtime's.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { SagaRuntime, SagaValidationError } from '../../src/index.js';
import { FakeClock } from '../../src/testing/index.js';
import { ScriptedSaga, scriptedSaga, scriptedVariant } from '../fixtures/scripted-saga.js';
import { DIALECTS } from '../support/databases.js';
import { rowsOf } from '../support/rows.js';
import { uniqueKey, useDatabase } from '../support/suite.js';

/** Steps that each change one runtime-owned column, and send a message so a partial write would show. */
const TAMPERING: ReadonlyArray<readonly [string, (saga: ScriptedSaga) => void]> = [
  [
    'id',
    (saga) => {
      saga.id = '00000000-0000-4000-8000-000000000000';
    },
  ],
  [
    'version',
    (saga) => {
      saga.version = 41;
    },
  ],
  [
    'createdAt',
    (saga) => {
      saga.createdAt = new Date('2001-01-01T00:00:00Z');
    },
  ],
  ['createdAt', (saga) => void saga.createdAt.setTime(0)],
  [
    'updatedAt',
    (saga) => {
      saga.updatedAt = new Date('2001-01-01T00:00:00Z');
    },
  ],
  [
    'completedAt',
    (saga) => {
      saga.completedAt = new Date('2001-01-01T00:00:00Z');
    },
  ],
];

for (const dialect of DIALECTS) {
  describe(`runtime-owned columns (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);

    it.each(TAMPERING)('a step that changes %s on an existing saga: STATE_COLUMN_READONLY, nothing written', async (column, tamper) => {
      const clock = new FakeClock();
      const key = uniqueKey(`own-${column}`);
      await new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock }).handle(scriptedSaga, { type: 'Start', key });
      const saga = scriptedVariant('Tamper', (state, _m, ctx) => {
        state.counter += 1;
        tamper(state);
        ctx.send({ type: 'Leaked' });
      });
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [saga], clock });
      clock.advance(60_000);
      const before = await rowsOf(db().orm).saga(key);
      const error = await runtime.handle(saga, { type: 'Tamper', key }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(SagaValidationError);
      expect(error).toMatchObject({ code: 'STATE_COLUMN_READONLY', details: { columns: [column], sagaId: before!.id } });
      const after = await rowsOf(db().orm).saga(key);
      expect(after).toEqual(before);
      expect(await rowsOf(db().orm).outbox(before!.id)).toEqual([]);
    });

    it.each(TAMPERING.filter(([column]) => column !== 'id'))(
      'the first step of a new saga that sets %s: STATE_COLUMN_READONLY, no row',
      async (column, tamper) => {
        const key = uniqueKey(`own-new-${column}`);
        const saga = scriptedVariant('Begin', (state) => tamper(state));
        const runtime = new SagaRuntime({ em: db().orm.em, sagas: [saga], clock: new FakeClock() });
        await expect(runtime.handle(saga, { type: 'Begin', key })).rejects.toMatchObject({ code: 'STATE_COLUMN_READONLY' });
        expect(await rowsOf(db().orm).saga(key)).toBeNull();
      },
    );

    it('a new saga stores version 0 and createdAt/updatedAt from the clock, whatever the entity initialises', async () => {
      const clock = new FakeClock(new Date('2030-05-05T05:05:05Z'));
      const key = uniqueKey('own-fresh');
      const saga = scriptedVariant('Begin', (state) => {
        state.counter = 1;
      });
      const result = await new SagaRuntime({ em: db().orm.em, sagas: [saga], clock }).handle(saga, { type: 'Begin', key });
      expect(result).toMatchObject({ outcome: 'started', version: 0 });
      const row = await rowsOf(db().orm).saga(key);
      expect(row).toMatchObject({ version: 0, counter: 1, completedAt: null, createdAt: clock.now(), updatedAt: clock.now() });
    });

    it('reading the runtime columns is fine: a step that only reads them writes as usual', async () => {
      const key = uniqueKey('own-read');
      const saga = scriptedVariant('Begin', (state) => {
        state.log = `${state.version}@${state.createdAt.toISOString()}`;
      });
      const clock = new FakeClock();
      await new SagaRuntime({ em: db().orm.em, sagas: [saga], clock }).handle(saga, { type: 'Begin', key });
      expect(await rowsOf(db().orm).saga(key)).toMatchObject({ log: `0@${clock.now().toISOString()}` });
    });
  });
}

const OWNED = ['id', 'version', 'createdAt', 'updatedAt', 'completedAt'] as const;
type Owned = (typeof OWNED)[number];

/** A hostile value for a runtime column: another uuid, a number, a date, null, or a value of the wrong type. */
const hostileValue = (current: Record<Owned, unknown>) =>
  fc.oneof(
    fc.uuid(),
    fc.integer(),
    fc.date({ noInvalidDate: true }),
    fc.constant(null),
    fc.string(),
    fc.constant({ $ne: 1 }),
    // The same instant as the stored value, as another type: still a change.
    fc.constantFrom(
      ...OWNED.map((column) => current[column])
        .filter((v): v is Date => v instanceof Date)
        .map((d) => d.getTime()),
    ),
  );

for (const dialect of DIALECTS) {
  describe(`runtime-owned columns, property-based (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);

    it('any change to any non-empty set of runtime columns is STATE_COLUMN_READONLY and leaves the row as it was', async () => {
      const clock = new FakeClock();
      const key = uniqueKey('own-prop');
      await new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock }).handle(scriptedSaga, { type: 'Start', key });
      const before = await rowsOf(db().orm).saga(key);
      const changes = fc
        .dictionary(fc.constantFrom(...OWNED), hostileValue(before as unknown as Record<Owned, unknown>), { minKeys: 1 })
        .filter((change) => Object.entries(change).some(([column, value]) => !sameValue(before![column as Owned], value)));
      await fc.assert(
        fc.asyncProperty(changes, async (change) => {
          const saga = scriptedVariant('Tamper', (state, _m, ctx) => {
            state.counter += 1;
            Object.assign(state, change);
            ctx.send({ type: 'Leaked' });
          });
          const runtime = new SagaRuntime({ em: db().orm.em, sagas: [saga], clock });
          const error = await runtime.handle(saga, { type: 'Tamper', key }).catch((e: unknown) => e);
          expect(error).toMatchObject({ code: 'STATE_COLUMN_READONLY' });
          expect(await rowsOf(db().orm).saga(key)).toEqual(before);
          expect(await rowsOf(db().orm).outbox(before!.id)).toEqual([]);
        }),
        { numRuns: 30 },
      );
    });
  });
}

function sameValue(current: unknown, next: unknown): boolean {
  if (current instanceof Date && next instanceof Date) return current.getTime() === next.getTime();
  return Object.is(current, next);
}
