// handle(saga, message, { em }) inside the application's own transaction, on every database: the saga row, its timers,
// its outbox rows and the message id are written in that transaction, after a savepoint of the unit's own. They are
// durable when the application commits, with the application's own entity, and gone when it rolls back.
import type { EntityManager } from '@mikro-orm/core';
import { afterEach, describe, expect, it } from 'vitest';
import { type OutboxEnvelope, SagaDispatcher, SagaRuntime, SagaTimer, silentLogger } from '../../../src/index.js';
import { FakeClock } from '../../../src/testing/index.js';
import { ArticleSchema, committedArticle, writeArticle } from '../../fixtures/article.js';
import { type Action, ScriptedSaga, scriptedSaga } from '../../fixtures/scripted-saga.js';
import { DIALECTS } from '../../support/databases.js';
import { rowsOf } from '../../support/rows.js';
import { uniqueKey, useDatabase } from '../../support/suite.js';

/** A start that schedules a timer due at once and one a minute ahead, and sends a message. */
const startActions: Action[] = [
  { op: 'inc' },
  { op: 'schedule', name: 'now', after: 0 },
  { op: 'schedule', name: 'later', after: 60_000 },
  { op: 'send', message: { type: 'ReviewRequested' } },
];

for (const dialect of DIALECTS) {
  describe(`a unit of work joined to the application's transaction (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga, ArticleSchema]);
    const dispatchers: SagaDispatcher[] = [];
    afterEach(async () => {
      const running = dispatchers.splice(0).filter((d) => d.running);
      await Promise.all(running.map((d) => d.stop()));
      expect(running, 'a dispatcher was left running').toEqual([]);
    });
    const setup = () => {
      const clock = new FakeClock('2026-03-02T09:00:00.000Z');
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
      return { clock, runtime, rows: rowsOf(db().orm) };
    };
    /** Everything a saga of `key` has in the database, as another connection sees it. */
    const sagaRows = async (key: string) => {
      const rows = rowsOf(db().orm);
      const saga = await rows.saga(key);
      if (!saga) return { saga: null, timers: 0, outbox: 0, messageIds: 0 };
      const [timers, outbox, messageIds] = await Promise.all([
        rows.timers({ sagaId: saga.id }),
        rows.outbox(saga.id),
        rows.handledMessages(saga.id),
      ]);
      return { saga, timers: timers.length, outbox: outbox.length, messageIds: messageIds.length };
    };

    it('the application commits: the saga row, its timers, outbox rows and message id are durable with its own entity', async () => {
      const { runtime } = setup();
      const key = uniqueKey('commit');
      const result = await db().orm.em.transactional(async (em) => {
        writeArticle(em, key);
        return runtime.handle(scriptedSaga, { type: 'Start', key, actions: startActions }, { em, messageId: `${key}-m` });
      });
      expect(result).toMatchObject({ outcome: 'started', version: 0, timersScheduled: 2, messagesSent: 1, attempts: 1 });
      expect(await committedArticle(db().orm, key)).toMatchObject({ id: key });
      expect(await sagaRows(key)).toMatchObject({
        saga: { counter: 1, version: 0, id: result.sagaId },
        timers: 2,
        outbox: 1,
        messageIds: 1,
      });
      expect(runtime.stats()).toMatchObject({ started: 1, timersScheduled: 2, messagesSent: 1 });
    });

    it('after em.begin(): nothing of the unit is visible to another connection until the application commits', async () => {
      const { runtime } = setup();
      const key = uniqueKey('invisible');
      const other = rowsOf(await db().openAnother());
      // em.begin() and em.commit() rather than em.transactional(): inside its callback MikroORM resolves every
      // `orm.em` (another ORM's too, by its context name) to the transaction's EntityManager.
      const em = db().orm.em.fork();
      await em.begin();
      try {
        writeArticle(em, key);
        await runtime.handle(scriptedSaga, { type: 'Start', key, actions: startActions }, { em });
        // Read through the application's transaction, the saga is there; through another connection, not yet.
        expect(await em.findOne(ScriptedSaga, { key })).toMatchObject({ key, counter: 1 });
        expect(await other.saga(key)).toBeNull();
        await em.commit();
      } catch (error) {
        await em.rollback();
        throw error;
      }
      expect(await other.saga(key)).toMatchObject({ counter: 1 });
      expect(await committedArticle(db().orm, key)).toMatchObject({ id: key });
    });

    it('the application rolls back after handle(): no saga row, timer, outbox row or message id, and no entity of its own', async () => {
      const { runtime } = setup();
      const key = uniqueKey('rollback');
      const failed = db()
        .orm.em.transactional(async (em) => {
          writeArticle(em, key);
          const result = await runtime.handle(scriptedSaga, { type: 'Start', key, actions: startActions }, { em, messageId: `${key}-m` });
          expect(result.outcome).toBe('started');
          throw new Error('the application failed after handle()');
        })
        .catch((error: unknown) => error);
      expect(await failed).toMatchObject({ message: 'the application failed after handle()' });
      expect(await committedArticle(db().orm, key)).toBeNull();
      expect(await sagaRows(key)).toEqual({ saga: null, timers: 0, outbox: 0, messageIds: 0 });
      // stats() counted the unit at its savepoint's release: the rollback does not take it back.
      expect(runtime.stats()).toMatchObject({ started: 1, timersScheduled: 2, messagesSent: 1 });
      // The message id was never recorded: the same message handled again is applied, not a duplicate.
      const again = await runtime.handle(scriptedSaga, { type: 'Start', key }, { messageId: `${key}-m` });
      expect(again.outcome).toBe('started');
    });

    it("a step that throws: the application gets its error, nothing of the unit is written, and the application's own writes commit", async () => {
      const { runtime } = setup();
      const key = uniqueKey('throws');
      await runtime.handle(scriptedSaga, { type: 'Start', key });
      const throwing: Action[] = [{ op: 'inc' }, { op: 'send', message: { type: 'Never' } }, { op: 'throw', message: 'step failed' }];
      await db().orm.em.transactional(async (em) => {
        const error = await runtime
          .handle(scriptedSaga, { type: 'Do', key, actions: throwing }, { em, messageId: `${key}-m` })
          .catch((e) => e);
        expect(error).toMatchObject({ message: 'step failed' });
        writeArticle(em, key);
      });
      expect(await committedArticle(db().orm, key)).toMatchObject({ id: key });
      expect(await sagaRows(key)).toMatchObject({ saga: { counter: 0, version: 0 }, timers: 0, outbox: 0, messageIds: 0 });
    });

    it('a message id already recorded answers duplicate and writes nothing, committed before or earlier in the same transaction', async () => {
      const { runtime } = setup();
      const key = uniqueKey('duplicate');
      await runtime.handle(scriptedSaga, { type: 'Start', key }, { messageId: `${key}-start` });
      const inc: Action[] = [{ op: 'inc' }, { op: 'send', message: { type: 'Counted' } }];
      const results = await db().orm.em.transactional(async (em) => [
        await runtime.handle(scriptedSaga, { type: 'Start', key, actions: inc }, { em, messageId: `${key}-start` }),
        await runtime.handle(scriptedSaga, { type: 'Do', key, actions: inc }, { em, messageId: `${key}-do` }),
        await runtime.handle(scriptedSaga, { type: 'Do', key, actions: inc }, { em, messageId: `${key}-do` }),
      ]);
      expect(results.map((r) => [r.outcome, r.version])).toEqual([
        ['duplicate', 0],
        ['handled', 1],
        ['duplicate', 1],
      ]);
      expect(await sagaRows(key)).toMatchObject({ saga: { counter: 1, version: 1 }, outbox: 1, messageIds: 2 });
      expect(runtime.stats().duplicates).toBe(2);
    });

    it('onHandled hears a joined unit once its savepoint is released, before the application commits; a failed unit is not heard', async () => {
      const heard: { outcome: string; sagaType: string; appCommitted: boolean }[] = [];
      let appCommitted = false;
      const runtime = new SagaRuntime({
        em: db().orm.em,
        sagas: [scriptedSaga],
        onHandled: ({ result }) => heard.push({ outcome: result.outcome, sagaType: result.sagaType, appCommitted }),
      });
      const key = uniqueKey('heard');
      const em = db().orm.em.fork();
      await em.begin();
      try {
        await runtime.handle(scriptedSaga, { type: 'Start', key }, { em, messageId: `${key}-m` });
        await runtime.handle(scriptedSaga, { type: 'Start', key }, { em, messageId: `${key}-m` });
        const failed = await runtime
          .handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'throw', message: 'step failed' }] }, { em })
          .catch((e: unknown) => e);
        expect(failed).toMatchObject({ message: 'step failed' });
        await em.commit();
        appCommitted = true;
      } catch (error) {
        await em.rollback();
        throw error;
      }
      expect(heard).toEqual([
        { outcome: 'started', sagaType: 'scripted', appCommitted: false },
        { outcome: 'duplicate', sagaType: 'scripted', appCommitted: false },
      ]);
    });

    it('route() joins each saga’s unit in turn, and a nested em.transactional() is joined as well', async () => {
      const { runtime } = setup();
      const key = uniqueKey('route');
      await db().orm.em.transactional(async (em) => {
        writeArticle(em, key);
        await em.transactional(async (nested: EntityManager) => {
          const results = await runtime.route({ type: 'Start', key, actions: [{ op: 'inc' }] }, { em: nested });
          expect(results).toMatchObject([{ outcome: 'started', sagaType: 'scripted' }]);
        });
        await runtime.route({ type: 'Do', key, actions: [{ op: 'inc' }] }, { em });
      });
      expect(await committedArticle(db().orm, key)).toMatchObject({ id: key });
      expect(await sagaRows(key)).toMatchObject({ saga: { counter: 2, version: 1 } });
    });

    it('the outbox row and the timer due at once are relayed and fired by a dispatcher pass once the application commits', async () => {
      const { clock, runtime, rows } = setup();
      const published: OutboxEnvelope[] = [];
      const dispatcher = new SagaDispatcher({ runtime, logger: silentLogger, publish: async (envelope) => void published.push(envelope) });
      dispatchers.push(dispatcher);
      // Only this test's rows: what earlier tests left pending would come due with the clock.
      await db().orm.em.fork().nativeDelete(SagaTimer, {});
      await dispatcher.runOnce();
      published.length = 0;
      const key = uniqueKey('relay');
      await db().orm.em.transactional(async (em) => {
        writeArticle(em, key);
        await runtime.handle(scriptedSaga, { type: 'Start', key, actions: startActions }, { em });
      });
      const pass = await dispatcher.runOnce();
      expect(pass.timers).toMatchObject({ claimed: 1, fired: 1 });
      expect(pass.outbox).toMatchObject({ claimed: 1, published: 1 });
      expect(published.map((envelope) => envelope.type)).toEqual(['ReviewRequested']);
      expect(await rows.saga(key)).toMatchObject({ log: 'started;tick:now;' });
      clock.advance(60_000);
      expect((await dispatcher.runOnce()).timers).toMatchObject({ claimed: 1, fired: 1 });
    });
  });
}
