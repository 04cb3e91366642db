// A step that changes its state after it returned (a callback it did not await) must not have those changes written
// unchecked (the primary key and completed_at included): the unit fails with CONTEXT_CLOSED and writes nothing.
// The late change runs when the unit of work's transaction starts (a MikroORM transaction event), after the step's
// checks: a timer or setImmediate would not do, since better-sqlite3 (MikroORM 7) never yields to the event loop.
import { describe, expect, it } from 'vitest';
import { SagaRuntime } from '../../src/index.js';
import { FakeClock } from '../../src/testing/index.js';
import { ScriptedSaga, scriptedVariant } from '../fixtures/scripted-saga.js';
import { DIALECTS } from '../support/databases.js';
import { rowsOf } from '../support/rows.js';
import { uniqueKey, useDatabase } from '../support/suite.js';

for (const dialect of DIALECTS) {
  describe(`state changed after the step returned (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);
    /** Runs once, when the next transaction of the ORM `lateOrm` returns has started. */
    let atTransactionStart: (() => void) | undefined;
    const lateOrm = () =>
      db().openAnother({
        subscribers: [
          {
            afterTransactionStart: () => {
              const late = atTransactionStart;
              atTransactionStart = undefined;
              late?.();
            },
          },
        ],
      });

    it('an un-awaited callback that rewrites id, createdAt and a business column is CONTEXT_CLOSED and writes nothing', async () => {
      const key = uniqueKey('late');
      const late = scriptedVariant('Late', (saga) => {
        saga.counter += 1;
        atTransactionStart = () => {
          saga.id = '00000000-0000-4000-8000-000000000000';
          saga.createdAt = new Date(0);
          saga.stage = 'x'.repeat(500);
        };
      });
      const runtime = new SagaRuntime({ em: (await lateOrm()).em, sagas: [late], clock: new FakeClock() });
      const failure = await runtime.handle(late, { type: 'Late', key }).catch((e: unknown) => e);
      expect(failure).toMatchObject({ code: 'CONTEXT_CLOSED' });
      expect(await rowsOf(db().orm).saga(key)).toBeNull();
      expect(await rowsOf(db().orm).sagas()).toHaveLength(0);
    });

    it('a late change to an existing saga is refused too, and the row keeps its version', async () => {
      const key = uniqueKey('late-update');
      const late = scriptedVariant('Late', (saga, _m, ctx) => {
        if (ctx.isNew) return;
        saga.counter += 1;
        atTransactionStart = () => {
          saga.completedAt = new Date(0);
        };
      });
      const runtime = new SagaRuntime({ em: (await lateOrm()).em, sagas: [late], clock: new FakeClock() });
      await runtime.handle(late, { type: 'Late', key });
      const failure = await runtime.handle(late, { type: 'Late', key }).catch((e: unknown) => e);
      expect(failure).toMatchObject({ code: 'CONTEXT_CLOSED' });
      expect(await rowsOf(db().orm).saga(key)).toMatchObject({ version: 0, counter: 0, completedAt: null });
    });
  });
}
