// An application that ends its transaction while a handle() joined to it is still writing (it did not await the
// call), on every database: the statements the unit sent before the COMMIT are durable with it, the unit's next
// statement finds the transaction gone. The unit's outcome is then unknown and may be partial, and its error says so
// (COMMIT_OUTCOME_UNKNOWN), with what to do: await handle() before ending the transaction. It does not claim that
// the database is unreachable or that nothing was written.
import type { MikroORM } from '@mikro-orm/core';
import { afterEach, describe, expect, it } from 'vitest';
import { SagaPersistenceError, SagaRuntime } from '../../../src/index.js';
import { FakeClock } from '../../../src/testing/index.js';
import { ArticleSchema } from '../../fixtures/article.js';
import { ScriptedSaga, scriptedSaga } from '../../fixtures/scripted-saga.js';
import { DIALECTS } from '../../support/databases.js';
import { FlushHold } from '../../support/flush-hold.js';
import { rowsOf } from '../../support/rows.js';
import { uniqueKey, useDatabase } from '../../support/suite.js';

for (const dialect of DIALECTS) {
  describe(`the application's transaction ends while a joined unit writes (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga, ArticleSchema]);
    const opened: MikroORM[] = [];
    afterEach(async () => {
      for (const orm of opened.splice(0)) await orm.close();
    });

    it('COMMIT_OUTCOME_UNKNOWN: what the unit wrote before the COMMIT is durable, and the error says its effects may be partial', async () => {
      // An ORM of its own: the hold is a subscriber of its event manager.
      const orm = await db().openAnother();
      opened.push(orm);
      const hold = new FlushHold();
      orm.em.getEventManager().registerSubscriber(hold);
      const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga], clock: new FakeClock() });
      const key = uniqueKey('ended');
      const { sagaId } = await runtime.handle(scriptedSaga, { type: 'Start', key });
      const em = orm.em.fork();
      await em.begin();
      // The unit wrote its saga row (its first flush) and its timer and message id; it waits at its last flush,
      // before RELEASE SAVEPOINT.
      const held = hold.arm(key, 1);
      const unit = runtime
        .handle(
          scriptedSaga,
          { type: 'Do', key, actions: [{ op: 'inc' }, { op: 'schedule', name: 'later', after: 60_000 }] },
          { em, messageId: `${key}-m` },
        )
        .catch((error: unknown) => error);
      await held.reached.promise;
      await em.commit();
      held.release.resolve();
      const error = (await unit) as SagaPersistenceError;
      expect(error).toBeInstanceOf(SagaPersistenceError);
      expect(error).toMatchObject({ code: 'COMMIT_OUTCOME_UNKNOWN', details: { sagaType: 'scripted', messageType: 'Do' } });
      expect(error.message).toMatch(/your transaction ended \(committed or rolled back\) while the unit of work of 'Do' was writing in it/);
      expect(error.message).toMatch(/may be partial/);
      expect(error.message).toMatch(/Await handle\(\) and route\(\) before you commit or roll back your transaction/);
      expect(error.message).not.toMatch(/cannot reach|Nothing of it was committed/);
      const rows = rowsOf(db().orm);
      expect(await rows.saga(key)).toMatchObject({ counter: 1, version: 1 });
      expect(await rows.pendingTimers(sagaId!)).toHaveLength(1);
      expect(await rows.handledMessages(sagaId!)).toHaveLength(1);
    });
  });
}
