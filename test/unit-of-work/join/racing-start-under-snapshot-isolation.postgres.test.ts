// An application transaction at REPEATABLE READ or SERIALIZABLE (PostgreSQL) reads one snapshot throughout. When
// another transaction starts the same saga and commits after that snapshot was taken, the joined unit reads no saga,
// inserts one, and meets the committed row's correlation key. That is a race, not a bad value: the unit is rolled back
// to its savepoint and throws CONFLICT_IN_APP_TRANSACTION, which says to run the transaction again (and that handling
// the message again in the same transaction fails the same way). Run again, it handles the saga the other one started.
// A start that duplicates another unique column of a row the snapshot sees is no race: UNIQUE_VIOLATION, as outside.
import { defineEntity, IsolationLevel } from '@mikro-orm/core';
import { describe, expect, it } from 'vitest';
import { defineSaga, SagaConcurrencyError, SagaPersistenceError, SagaRuntime, SagaState, SagaStateSchema } from '../../../src/index.js';
import { ArticleSchema, committedArticle, writeArticle } from '../../fixtures/article.js';
import { ScriptedSaga, scriptedSaga } from '../../fixtures/scripted-saga.js';
import { rowsOf } from '../../support/rows.js';
import { uniqueKey, useDatabase } from '../../support/suite.js';

/** A saga with a unique business column besides its correlation key, which its start message sets. */
class BadgeSaga extends SagaState {
  holder!: string;
  badge!: string;
}

const BadgeSagaSchema = defineEntity({
  class: BadgeSaga,
  extends: SagaStateSchema,
  tableName: 'badge_saga',
  properties: {
    holder: { type: 'string', length: 100, fieldName: 'holder', unique: true },
    badge: { type: 'string', length: 100, fieldName: 'badge', unique: true },
  },
});

const badgeSaga = defineSaga<BadgeSaga, { readonly type: 'Issue'; readonly holder: string; readonly badge: string }>({
  name: 'badge',
  state: BadgeSaga,
  correlation: { property: 'holder', from: (m) => m.holder },
  startedBy: ['Issue'],
  steps: {
    Issue(saga, message) {
      saga.badge = message.badge;
    },
  },
});

describe('a saga started after the snapshot of an application transaction (postgresql)', () => {
  const db = useDatabase('postgresql', [ScriptedSaga, BadgeSagaSchema, ArticleSchema]);

  for (const isolationLevel of [IsolationLevel.REPEATABLE_READ, IsolationLevel.SERIALIZABLE]) {
    it(`${isolationLevel}: CONFLICT_IN_APP_TRANSACTION, not UNIQUE_VIOLATION; run again, the message is handled on the started saga`, async () => {
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga] });
      const key = uniqueKey('snapshot-start');
      const em = db().orm.em.fork();
      await em.begin({ isolationLevel });
      try {
        // The transaction's snapshot is taken by its first statement, before the other transaction starts the saga.
        expect(await em.findOne(ScriptedSaga, { key })).toBeNull();
        await runtime.handle(scriptedSaga, { type: 'Start', key });
        const first = await runtime
          .handle(scriptedSaga, { type: 'Start', key, actions: [{ op: 'inc', by: 10 }] }, { em, messageId: `${key}-m` })
          .catch((e: unknown) => e);
        expect(first).toBeInstanceOf(SagaConcurrencyError);
        expect(first).toMatchObject({ code: 'CONFLICT_IN_APP_TRANSACTION', details: { sagaType: 'scripted', messageType: 'Start' } });
        const message = (first as Error).message;
        expect(message).toMatch(/another transaction started this saga, or recorded this message id for it, and committed first/);
        expect(message).toMatch(/roll back your transaction and run it again/);
        expect(message).toMatch(/REPEATABLE READ or SERIALIZABLE.*fails the same way/);
        // What the error says: the same transaction keeps its snapshot, so handling the message again there conflicts again.
        const again = await runtime
          .handle(scriptedSaga, { type: 'Start', key, actions: [{ op: 'inc', by: 10 }] }, { em, messageId: `${key}-m` })
          .catch((e: unknown) => e);
        expect(again).toMatchObject({ code: 'CONFLICT_IN_APP_TRANSACTION' });
        // Rolled back to its savepoint each time, the unit left the transaction able to go on.
        writeArticle(em, key);
        await em.commit();
      } catch (error) {
        await em.rollback();
        throw error;
      }
      expect(await committedArticle(db().orm, key)).toMatchObject({ id: key });
      const rows = rowsOf(db().orm);
      expect((await rows.sagas()).filter((saga) => saga.key === key)).toMatchObject([{ counter: 0, version: 0 }]);

      // Run again: a new snapshot sees the saga the other transaction started.
      const retried = await db().orm.em.transactional(
        (tx) => runtime.handle(scriptedSaga, { type: 'Start', key, actions: [{ op: 'inc', by: 10 }] }, { em: tx, messageId: `${key}-m` }),
        { isolationLevel },
      );
      expect(retried).toMatchObject({ outcome: 'handled', version: 1 });
      expect(await rows.saga(key)).toMatchObject({ counter: 10, version: 1 });
    });
  }

  it('repeatable read: a start duplicating another unique column of a row the snapshot sees is UNIQUE_VIOLATION, not a conflict', async () => {
    const runtime = new SagaRuntime({ em: db().orm.em, sagas: [badgeSaga] });
    const badge = uniqueKey('badge');
    await runtime.handle(badgeSaga, { type: 'Issue', holder: uniqueKey('first'), badge });
    const error = await db()
      .orm.em.transactional((em) => runtime.handle(badgeSaga, { type: 'Issue', holder: uniqueKey('second'), badge }, { em }), {
        isolationLevel: IsolationLevel.REPEATABLE_READ,
      })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(SagaPersistenceError);
    expect(error).toMatchObject({ code: 'UNIQUE_VIOLATION', details: { table: 'badge_saga', constraint: 'badge_saga_badge_unique' } });
    expect(runtime.stats().concurrencyConflicts).toBe(0);
  });
});
