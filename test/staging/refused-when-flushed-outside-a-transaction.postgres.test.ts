// On PostgreSQL a staged delivery takes its saga's advisory lock in the flush's transaction, so that it is numbered in
// commit order. MikroORM flushes outside a transaction when the ORM is configured with `implicitTransactions: false`
// and no transaction is open: that flush is refused with OPTION_INVALID, whose message names that setting, and nothing
// of it is written (the application's entity, a staged message and the delivery). Inside em.transactional() the same
// ORM stages as usual. (`disableTransactions` is not that case: MikroORM still wraps a flush in a transaction then.)
import { describe, expect, it } from 'vitest';
import { SAGA_ENTITIES, SagaDefinitionError, SagaOutbox, SagaRuntime } from '../../src/index.js';
import { FakeClock } from '../../src/testing/index.js';
import { ArticleSchema, committedArticle, writeArticle } from '../fixtures/article.js';
import { ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { stagedRowsOf } from '../support/staged-rows.js';
import { uniqueKey, useDatabase } from '../support/suite.js';

describe('a staged delivery flushed outside a transaction (postgresql)', () => {
  const db = useDatabase('postgresql', [ScriptedSaga, ArticleSchema]);

  it('implicitTransactions: false and no transaction open: the flush is refused, naming the setting; nothing is written', async () => {
    // The application's entity first in the list: were it inserted before the refusal, it would stay (autocommit).
    const orm = await db().openAnother({ implicitTransactions: false, entities: [ArticleSchema, ScriptedSaga, ...SAGA_ENTITIES] });
    const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga], clock: new FakeClock('2026-01-05T09:00:00.000Z') });
    const [article, key] = [uniqueKey('article'), uniqueKey('outside')];
    const em = orm.em.fork();
    writeArticle(em, article);
    const message = runtime.stageMessage(em, { type: 'ArticleCreated', article });
    runtime.stageDelivery(em, scriptedSaga, { type: 'Start', key });

    const refusal = await em.flush().then(
      () => undefined,
      (error: unknown) => error,
    );
    expect(refusal).toBeInstanceOf(SagaDefinitionError);
    expect(refusal).toMatchObject({ code: 'OPTION_INVALID' });
    expect((refusal as Error).message).toMatch(/implicitTransactions: false/);
    expect((refusal as Error).message).not.toMatch(/disableTransactions/);
    expect(await committedArticle(db().orm, article)).toBeNull();
    expect(await db().orm.em.fork().count(SagaOutbox, { id: message.id })).toBe(0);
    expect(await stagedRowsOf(db().orm, key)).toEqual([]);

    // Inside a transaction the same ORM stages as usual.
    await orm.em.fork().transactional(async (tx) => {
      runtime.stageDelivery(tx, scriptedSaga, { type: 'Start', key });
    });
    expect(await stagedRowsOf(db().orm, key)).toMatchObject([{ sagaKey: key, outcome: null }]);
  });
});
