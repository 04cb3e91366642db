// A unit of work joined to the application's transaction is never retried, on every database: when another
// transaction commits a change to the saga between the unit's read and its write, it is rolled back to its savepoint
// and throws CONFLICT_IN_APP_TRANSACTION. Nothing of it is written; on PostgreSQL the application's transaction goes
// on. Running the application's transaction again applies the message on fresh state.
// SQLite runs in WAL mode here: in its default rollback-journal mode no other connection can commit while a
// transaction holds what it read, so the conflict cannot arise between a read and a write (the other writer waits).
import { IsolationLevel } from '@mikro-orm/core';
import { beforeAll, describe, expect, it } from 'vitest';
import { SagaConcurrencyError, SagaRuntime } from '../../../src/index.js';
import { ArticleSchema, committedArticle, writeArticle } from '../../fixtures/article.js';
import { ScriptedSaga, scriptedSaga, scriptedVariant } from '../../fixtures/scripted-saga.js';
import { DIALECTS, isSqlite } from '../../support/databases.js';
import { rowsOf } from '../../support/rows.js';
import { deferred, uniqueKey, useDatabase } from '../../support/suite.js';

for (const dialect of DIALECTS) {
  describe(`a conflict in the application's transaction (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga, ArticleSchema]);
    beforeAll(async () => {
      if (isSqlite(dialect)) await db().orm.em.getConnection().execute('pragma journal_mode = wal');
    });

    it('another transaction commits between the read and the write: CONFLICT_IN_APP_TRANSACTION, nothing of the unit written, no retry', async () => {
      const key = uniqueKey('bumped');
      const plain = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga] });
      const { sagaId } = await plain.handle(scriptedSaga, { type: 'Start', key });
      // Another process's runtime, on a connection of its own.
      const other = new SagaRuntime({ em: (await db().openAnother()).em, sagas: [scriptedSaga] });
      const entered = deferred();
      const go = deferred();
      const runs: number[] = [];
      const bump = scriptedVariant('Bump', async (saga, _message, ctx) => {
        runs.push(saga.version);
        saga.counter += 10;
        ctx.send({ type: 'Bumped' });
        ctx.schedule('after-bump', 60_000, { type: 'Bump', key });
        entered.resolve();
        await go.promise;
      });
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [bump] });
      const em = db().orm.em.fork();
      await em.begin();
      const joined = runtime.handle(bump, { type: 'Bump', key }, { em, messageId: `${key}-bump` }).catch((error: unknown) => error);
      await entered.promise;
      expect(await other.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] })).toMatchObject({ version: 1 });
      go.resolve();
      const error = (await joined) as SagaConcurrencyError;
      expect(error).toBeInstanceOf(SagaConcurrencyError);
      expect(error).toMatchObject({
        code: 'CONFLICT_IN_APP_TRANSACTION',
        details: { sagaType: 'scripted', sagaId, messageType: 'Bump', attempts: 1 },
      });
      expect(error.message).toMatch(/rolled back to its savepoint; nothing of it was written/);
      expect(error.message).toMatch(/cannot retry a transaction it does not own: roll back your transaction and run it again/);
      expect(runs).toEqual([0]);
      expect(runtime.stats().concurrencyConflicts).toBe(1);
      if (dialect === 'postgresql') {
        // Rolled back to its savepoint, the unit left the application's transaction able to go on.
        writeArticle(em, key);
        await em.commit();
        expect(await committedArticle(db().orm, key)).toMatchObject({ id: key });
      } else {
        // SQLite lets no transaction write once another connection wrote since it began reading: roll it back.
        await em.rollback();
      }
      const rows = rowsOf(db().orm);
      expect(await rows.saga(key)).toMatchObject({ counter: 1, version: 1 });
      expect(await rows.outbox(sagaId!)).toEqual([]);
      expect(await rows.pendingTimers(sagaId!)).toEqual([]);
      expect(await rows.handledMessages(sagaId!)).toEqual([]);

      // What the error says to do: run the application's transaction again. It reads the saga afresh.
      const again = await db().orm.em.transactional((tx) =>
        runtime.handle(bump, { type: 'Bump', key }, { em: tx, messageId: `${key}-bump` }),
      );
      expect(again).toMatchObject({ outcome: 'handled', version: 2, messagesSent: 1, timersScheduled: 1 });
      expect(runs).toEqual([0, 1]);
      expect(await rows.saga(key)).toMatchObject({ counter: 11, version: 2 });
      expect(await rows.outbox(sagaId!)).toHaveLength(1);
    });
  });
}

describe('a conflict in an application transaction under REPEATABLE READ (postgresql)', () => {
  const db = useDatabase('postgresql', [ScriptedSaga, ArticleSchema]);

  it('the write fails as a serialization failure: CONFLICT_IN_APP_TRANSACTION, and the transaction goes on', async () => {
    const key = uniqueKey('repeatable');
    const plain = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga] });
    await plain.handle(scriptedSaga, { type: 'Start', key });
    const em = db().orm.em.fork();
    await em.begin({ isolationLevel: IsolationLevel.REPEATABLE_READ });
    try {
      // The transaction's snapshot is taken by its first statement, before the other writer commits.
      await em.findOne(ScriptedSaga, { key });
      await plain.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] });
      const error = await plain
        .handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc', by: 10 }] }, { em })
        .catch((e: unknown) => e);
      expect(error).toMatchObject({ code: 'CONFLICT_IN_APP_TRANSACTION' });
      expect((error as Error).message).toMatch(/a deadlock with another transaction, or a serialization failure/);
      writeArticle(em, key);
      await em.commit();
    } catch (error) {
      await em.rollback();
      throw error;
    }
    expect(await committedArticle(db().orm, key)).toMatchObject({ id: key });
    expect(await rowsOf(db().orm).saga(key)).toMatchObject({ counter: 1, version: 1 });
  });
});
