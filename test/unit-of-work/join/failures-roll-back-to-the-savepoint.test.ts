// A unit of work joined to the application's transaction that fails to write, on every database: the same typed
// error handle() gives outside a transaction, its writes rolled back to its savepoint, and the application's
// transaction able to go on (on PostgreSQL a failed statement aborts the transaction until ROLLBACK TO SAVEPOINT).
// The reads that tell what failed run in the application's transaction, after that rollback. A transaction that
// takes no statement any more (a failed statement aborted it) cannot be joined: the unit's SAVEPOINT fails first.
import { describe, expect, it } from 'vitest';
import { SagaPersistenceError, SagaRuntime } from '../../../src/index.js';
import { FakeClock } from '../../../src/testing/index.js';
import { ArticleSchema, committedArticle, writeArticle } from '../../fixtures/article.js';
import { ScriptedSaga, scriptedSaga } from '../../fixtures/scripted-saga.js';
import { DIALECTS } from '../../support/databases.js';
import { gatedSaga } from '../../support/gated-saga.js';
import { refuseInserts, rowsOf } from '../../support/rows.js';
import { StepGate } from '../../support/step-gate.js';
import { uniqueKey, useDatabase } from '../../support/suite.js';

for (const dialect of DIALECTS) {
  describe(`a joined unit whose write fails (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga, ArticleSchema]);
    const setup = () => ({
      runtime: new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock: new FakeClock() }),
      rows: rowsOf(db().orm),
    });

    it("a write the database refuses: PERSISTENCE_FAILED naming the table, rolled back to its savepoint; the application's transaction commits", async () => {
      const { runtime, rows } = setup();
      const key = uniqueKey('refused');
      const { sagaId } = await runtime.handle(scriptedSaga, { type: 'Start', key });
      const restore = await refuseInserts(db().orm, 'saga_outbox', 'message_type', 'Refused');
      try {
        const refused = [
          { op: 'inc' } as const,
          { op: 'schedule', name: 'soon', after: 1_000 } as const,
          { op: 'send', message: { type: 'Refused' } } as const,
        ];
        await db().orm.em.transactional(async (em) => {
          const error = await runtime
            .handle(scriptedSaga, { type: 'Do', key, actions: refused }, { em, messageId: `${key}-m` })
            .catch((e) => e);
          expect(error).toBeInstanceOf(SagaPersistenceError);
          expect(error).toMatchObject({ code: 'PERSISTENCE_FAILED', details: { operation: 'insert', table: 'saga_outbox', sagaId } });
          expect(error.message).toMatch(
            /insert on saga_outbox failed .* It was rolled back to its savepoint in your transaction, so nothing of it was written\./,
          );
          // The transaction takes statements again: the application's own, and the next unit.
          writeArticle(em, key);
          await em.flush();
          await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'note', text: 'after' }] }, { em });
        });
      } finally {
        await restore();
      }
      expect(await committedArticle(db().orm, key)).toMatchObject({ id: key });
      expect(await rows.saga(key)).toMatchObject({ counter: 0, version: 1, log: 'started;after;' });
      expect(await rows.pendingTimers(sagaId!)).toEqual([]);
      expect(await rows.outbox(sagaId!)).toEqual([]);
      expect(await rows.handledMessages(sagaId!)).toEqual([]);
    });

    it("a value another row's unique column holds: UNIQUE_VIOLATION (no race, no conflict), rolled back to its savepoint", async () => {
      const { runtime, rows } = setup();
      const gated = gatedSaga(new StepGate(1));
      const joinedRuntime = new SagaRuntime({ em: db().orm.em, sagas: [gated] });
      const taken = uniqueKey('taken');
      const key = uniqueKey('rekey');
      await runtime.handle(scriptedSaga, { type: 'Start', key: taken });
      await runtime.handle(scriptedSaga, { type: 'Start', key });
      await db().orm.em.transactional(async (em) => {
        const error = await joinedRuntime.handle(gated, { type: 'Do', key, inc: 1, rekeyTo: taken }, { em }).catch((e) => e);
        expect(error).toMatchObject({ name: 'SagaPersistenceError', code: 'UNIQUE_VIOLATION', details: { table: 'scripted_saga' } });
        expect(error.message).toMatch(
          /It was rolled back to its savepoint in your transaction, so nothing of it was written; change the step or the data/,
        );
        expect(await joinedRuntime.handle(gated, { type: 'Do', key, inc: 5 }, { em })).toMatchObject({ version: 1 });
      });
      expect(joinedRuntime.stats().concurrencyConflicts).toBe(0);
      expect(await rows.saga(key)).toMatchObject({ counter: 5, version: 1 });
      expect(await rows.saga(taken)).toMatchObject({ counter: 0, version: 0 });
    });
  });
}

describe('joining a transaction a failed statement aborted (postgresql)', () => {
  const db = useDatabase('postgresql', [ScriptedSaga, ArticleSchema]);

  it('PERSISTENCE_FAILED: its SAVEPOINT failed, nothing of the unit read or written; the transaction is to be rolled back', async () => {
    const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga] });
    const key = uniqueKey('aborted');
    await runtime.handle(scriptedSaga, { type: 'Start', key });
    const em = db().orm.em.fork();
    await em.begin();
    try {
      // The application let a statement fail: PostgreSQL refuses every statement of the transaction from then on.
      await em
        .getConnection()
        .execute('select * from no_such_table', [], 'all', em.getTransactionContext())
        .catch(() => undefined);
      const error = await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] }, { em }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(SagaPersistenceError);
      expect(error).toMatchObject({
        code: 'PERSISTENCE_FAILED',
        details: { operation: 'savepoint', sagaType: 'scripted', messageType: 'Do' },
      });
      expect((error as Error).message).toMatch(
        /could not join your transaction \(its SAVEPOINT failed: .*\); nothing of it was read or written\..* Roll it back and run it again\./,
      );
    } finally {
      await em.rollback();
    }
    expect(await rowsOf(db().orm).saga(key)).toMatchObject({ counter: 0, version: 0 });
  });
});
