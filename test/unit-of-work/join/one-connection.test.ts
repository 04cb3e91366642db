// A unit of work joined to the application's transaction sends every statement on that transaction's connection: on
// a pool of one connection (SQLite's, or PostgreSQL's `pool.max: 1`) held by the application's transaction, it never
// waits for another. That covers a fresh runtime's schema check, the read, the writes, the message id lookup, and the
// reads that explain a failed write. Any statement sent elsewhere would wait for the application's transaction,
// which waits for it: a deadlock, bounded here by the pool's acquire timeout and the test's timeout.
import type { MikroORM, Options } from '@mikro-orm/core';
import { afterEach, describe, expect, it } from 'vitest';
import { SagaRuntime } from '../../../src/index.js';
import { FakeClock } from '../../../src/testing/index.js';
import { ArticleSchema, committedArticle, writeArticle } from '../../fixtures/article.js';
import { type Action, ScriptedSaga, scriptedSaga } from '../../fixtures/scripted-saga.js';
import { DIALECTS } from '../../support/databases.js';
import { refuseInserts, rowsOf } from '../../support/rows.js';
import { uniqueKey, useDatabase } from '../../support/suite.js';

for (const dialect of DIALECTS) {
  describe(`a joined unit on a pool of one connection (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga, ArticleSchema]);
    const opened: MikroORM[] = [];
    afterEach(async () => {
      for (const orm of opened.splice(0)) await orm.close();
    });

    it("a fresh runtime's units (its schema check, a start, a duplicate, a refused write, a throwing step) all run on the transaction's connection", async () => {
      // MikroORM 6 (knex) gives up waiting for a connection after 2 s instead of 60; MikroORM 7 has one SQLite connection.
      const orm = await db().openAnother({ pool: { min: 0, max: 1, acquireTimeoutMillis: 2_000 } } as Partial<Options>);
      opened.push(orm);
      const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga], clock: new FakeClock() });
      const key = uniqueKey('one');
      const restore = await refuseInserts(db().orm, 'saga_outbox', 'message_type', 'Refused');
      const start: Action[] = [{ op: 'inc' }, { op: 'schedule', name: 'later', after: 60_000 }, { op: 'send', message: { type: 'Sent' } }];
      const em = orm.em.fork();
      await em.begin();
      try {
        writeArticle(em, key);
        expect(await runtime.handle(scriptedSaga, { type: 'Start', key, actions: start }, { em, messageId: `${key}-1` })).toMatchObject({
          outcome: 'started',
        });
        expect(await runtime.handle(scriptedSaga, { type: 'Start', key, actions: start }, { em, messageId: `${key}-1` })).toMatchObject({
          outcome: 'duplicate',
        });
        const refused = await runtime
          .handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }, { op: 'send', message: { type: 'Refused' } }] }, { em })
          .catch((e: unknown) => e);
        expect(refused).toMatchObject({ code: 'PERSISTENCE_FAILED', details: { table: 'saga_outbox' } });
        const thrown = await runtime
          .handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'throw', message: 'no' }] }, { em })
          .catch((e) => e);
        expect(thrown).toMatchObject({ message: 'no' });
        expect(await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] }, { em })).toMatchObject({ version: 1 });
        await em.commit();
      } catch (error) {
        await em.rollback();
        throw error;
      } finally {
        await restore();
      }
      const rows = rowsOf(db().orm);
      const saga = await rows.saga(key);
      expect(saga).toMatchObject({ counter: 2, version: 1 });
      expect(await rows.pendingTimers(saga!.id)).toHaveLength(1);
      expect((await rows.outbox(saga!.id)).map((row) => row.messageType)).toEqual(['Sent']);
      expect(await committedArticle(db().orm, key)).toMatchObject({ id: key });
    }, 20_000);
  });
}
