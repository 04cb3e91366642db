// On PostgreSQL a unit of work joined to the application's transaction holds its saga row's lock until the application
// commits or rolls back: another unit of work for the same saga waits for that, then applies its message on the
// committed state. The joined unit itself waits for a row another transaction holds as long as the application's
// connection allows (its lock_timeout); and two application transactions starting the same saga meet on its unique
// key, the second waiting for the first. Each wait that ends in a conflict is CONFLICT_IN_APP_TRANSACTION, the unit
// rolled back to its savepoint and the application's transaction still usable.
import type { EntityManager } from '@mikro-orm/core';
import { describe, expect, it } from 'vitest';
import { type HandleResult, SagaRuntime } from '../../../src/index.js';
import { ArticleSchema, committedArticle, writeArticle } from '../../fixtures/article.js';
import { ScriptedSaga, scriptedSaga } from '../../fixtures/scripted-saga.js';
import { untilLockWaiters } from '../../support/row-locks.js';
import { rowsOf } from '../../support/rows.js';
import { uniqueKey, useDatabase } from '../../support/suite.js';

/** Runs `work` in a transaction opened with em.begin() on a fork: committed when it resolves, rolled back when it throws. */
async function inTransaction<T>(em: EntityManager, work: (tx: EntityManager) => Promise<T>): Promise<T> {
  const tx = em.fork();
  await tx.begin();
  try {
    const result = await work(tx);
    await tx.commit();
    return result;
  } catch (error) {
    await tx.rollback();
    throw error;
  }
}

describe("the saga row's lock in the application's transaction (postgresql)", () => {
  const db = useDatabase('postgresql', [ScriptedSaga, ArticleSchema]);

  it('another handle() for the same saga waits until the application commits, then applies its message on the committed state', async () => {
    const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga] });
    const key = uniqueKey('waits');
    await runtime.handle(scriptedSaga, { type: 'Start', key });
    const app = db().orm.em.fork();
    await app.begin();
    expect(await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] }, { em: app })).toMatchObject({ version: 1 });
    let settled = false;
    const waiting = runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc', by: 10 }] }).finally(() => {
      settled = true;
    });
    await untilLockWaiters(db().orm, 1);
    expect(settled).toBe(false);
    await app.commit();
    // It read version 0, waited for the row, found it at version 1: re-read and re-run, no lost update.
    expect(await waiting).toMatchObject({ outcome: 'handled', version: 2, conflicts: 1 });
    expect(await rowsOf(db().orm).saga(key)).toMatchObject({ counter: 11, version: 2 });
  });

  it("the joined unit waits for a row another transaction holds up to the connection's lock_timeout: CONFLICT_IN_APP_TRANSACTION, the transaction goes on", async () => {
    const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga] });
    const key = uniqueKey('lock-timeout');
    const { sagaId } = await runtime.handle(scriptedSaga, { type: 'Start', key });
    // An operator's session holds the saga row.
    const operator = (await db().openAnother()).em.fork();
    await operator.begin();
    await operator
      .getConnection()
      .execute('select 1 from scripted_saga where key = ? for update', [key], 'all', operator.getTransactionContext());
    try {
      const error = await inTransaction(db().orm.em, async (em) => {
        // The application's own bound on lock waits, for the rest of its transaction.
        await em.getConnection().execute("set local lock_timeout = '50ms'", [], 'run', em.getTransactionContext());
        const failed = await runtime
          .handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }, { op: 'send', message: { type: 'Never' } }] }, { em })
          .then(
            () => new Error('handled') as Error & { code?: string },
            (e: unknown) => e as Error & { code?: string },
          );
        writeArticle(em, key);
        return failed;
      });
      expect(error).toMatchObject({ code: 'CONFLICT_IN_APP_TRANSACTION' });
      expect(error.message).toMatch(/stayed locked by another transaction past your connection's lock_timeout/);
    } finally {
      await operator.rollback();
    }
    expect(await committedArticle(db().orm, key)).toMatchObject({ id: key });
    expect(await rowsOf(db().orm).saga(key)).toMatchObject({ counter: 0, version: 0 });
    expect(await rowsOf(db().orm).outbox(sagaId!)).toEqual([]);
  });

  it('two application transactions start one saga: the second waits for the first, then CONFLICT_IN_APP_TRANSACTION; run again, it handles the existing saga', async () => {
    const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga] });
    const key = uniqueKey('racing-start');
    const first = db().orm.em.fork();
    await first.begin();
    expect(await runtime.handle(scriptedSaga, { type: 'Start', key, actions: [{ op: 'inc' }] }, { em: first })).toMatchObject({
      outcome: 'started',
    });
    const second = inTransaction(db().orm.em, async (em) => {
      const failed = await runtime
        .handle(scriptedSaga, { type: 'Start', key, actions: [{ op: 'inc', by: 10 }] }, { em, messageId: `${key}-second` })
        .then(
          () => new Error('handled') as Error & { code?: string },
          (e: unknown) => e as Error & { code?: string },
        );
      writeArticle(em, key);
      return failed;
    });
    // Its INSERT waits on the unique key the first transaction's uncommitted row holds.
    await untilLockWaiters(db().orm, 1);
    await first.commit();
    const error = await second;
    expect(error).toMatchObject({ code: 'CONFLICT_IN_APP_TRANSACTION' });
    expect(error.message).toMatch(/another transaction started this saga, or recorded this message id for it, and committed first/);
    expect(await committedArticle(db().orm, key)).toMatchObject({ id: key });
    const rows = rowsOf(db().orm);
    expect((await rows.sagas()).filter((saga) => saga.key === key)).toMatchObject([{ counter: 1, version: 0, log: 'started;' }]);

    const again: HandleResult = await inTransaction(db().orm.em, (em) =>
      runtime.handle(scriptedSaga, { type: 'Start', key, actions: [{ op: 'inc', by: 10 }] }, { em, messageId: `${key}-second` }),
    );
    expect(again).toMatchObject({ outcome: 'handled', version: 1 });
    expect(await rows.saga(key)).toMatchObject({ counter: 11, version: 1, log: 'started;' });
  });
});
