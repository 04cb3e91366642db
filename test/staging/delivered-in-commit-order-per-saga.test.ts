// The deliveries staged for one saga (type and correlation value) are delivered one at a time, in the order their
// transactions committed, on every database: the dispatcher claims a staged row only when no earlier pending row of
// its saga exists. An earlier one that fails and backs off holds the later ones; once dead-lettered it frees them;
// requeued, it takes its place again. Other sagas are not held. A message id staged twice runs one step. The drain
// helper drains a burst of one saga's deliveries, one per pass.
import { afterEach, describe, expect, it } from 'vitest';
import { SagaDispatcher, SagaRuntime, silentLogger } from '../../src/index.js';
import { SagaOperations } from '../../src/operations/index.js';
import { drainDueTimers, FakeClock } from '../../src/testing/index.js';
import { type Action, type ScriptedMessage, ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { DIALECTS } from '../support/databases.js';
import { rowsOf } from '../support/rows.js';
import { clearStagedRows, stagedRowsOf } from '../support/staged-rows.js';
import { uniqueKey, useDatabase } from '../support/suite.js';

const note = (text: string): Action[] => [{ op: 'note', text }];

for (const dialect of DIALECTS) {
  describe(`staged deliveries run in commit order per saga (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);
    const dispatchers: SagaDispatcher[] = [];
    const setup = () => {
      const clock = new FakeClock('2026-01-05T09:00:00.000Z');
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
      const dispatcher = new SagaDispatcher({ runtime, logger: silentLogger, backoff: { jitter: false, baseMs: 1_000 }, maxAttempts: 2 });
      dispatchers.push(dispatcher);
      return { clock, runtime, dispatcher, rows: rowsOf(db().orm), ops: new SagaOperations({ runtime }) };
    };
    afterEach(async () => {
      const running = dispatchers.splice(0).filter((d) => d.running);
      await Promise.all(running.map((d) => d.stop()));
      expect(running, 'a dispatcher was left running').toEqual([]);
      await clearStagedRows(db().orm);
    });
    /** Stages one message per transaction, in the order given. */
    const stageEach = async (runtime: SagaRuntime, messages: ScriptedMessage[]) => {
      const ids: string[] = [];
      for (const message of messages) {
        ids.push(
          (
            await db()
              .orm.em.fork()
              .transactional(async (em) => runtime.stageDelivery(em, scriptedSaga, message))
          ).id,
        );
      }
      return ids;
    };

    it("delivers one saga's deliveries one per pass, in commit order, and other sagas' alongside", async () => {
      const { runtime, dispatcher, rows } = setup();
      const [a, b] = [uniqueKey('a'), uniqueKey('b')];
      await stageEach(runtime, [
        { type: 'Start', key: a, actions: note('a1') },
        { type: 'Start', key: b, actions: note('b1') },
        { type: 'Do', key: a, actions: note('a2') },
        { type: 'Do', key: a, actions: note('a3') },
        { type: 'Do', key: b, actions: note('b2') },
      ]);
      const first = await dispatcher.runOnce();
      // The first row of each saga only.
      expect(first.inbox).toMatchObject({ claimed: 2, delivered: 2 });
      const drained = await drainDueTimers(dispatcher);
      expect(drained.inbox).toMatchObject({ claimed: 3, delivered: 3 });
      expect(await rows.saga(a)).toMatchObject({ log: 'started;a1;a2;a3;', version: 2 });
      expect(await rows.saga(b)).toMatchObject({ log: 'started;b1;b2;', version: 1 });
      const orderKeys = (await stagedRowsOf(db().orm, a)).map((row) => Number(row.orderKey));
      expect(orderKeys).toEqual([...orderKeys].sort((x, y) => x - y));
    });

    it('one transaction staging several messages for one saga: delivered in the order staged', async () => {
      const { runtime, dispatcher, rows } = setup();
      const key = uniqueKey('one-tx');
      await db()
        .orm.em.fork()
        .transactional(async (em) => {
          runtime.stageDelivery(em, scriptedSaga, { type: 'Start', key, actions: note('1') });
          runtime.stageDelivery(em, scriptedSaga, { type: 'Do', key, actions: note('2') });
          await em.flush();
          runtime.stageDelivery(em, scriptedSaga, { type: 'Do', key, actions: note('3') });
        });
      await drainDueTimers(dispatcher);
      expect(await rows.saga(key)).toMatchObject({ log: 'started;1;2;3;' });
    });

    it("a failing delivery backs off and holds its saga's later ones; dead-lettered, it frees them; requeued, it runs again", async () => {
      const { runtime, dispatcher, rows, clock, ops } = setup();
      const [key, other] = [uniqueKey('held'), uniqueKey('free')];
      const [, failing] = await stageEach(runtime, [
        { type: 'Start', key, actions: note('1') },
        { type: 'Do', key, actions: [{ op: 'throw', message: 'boom' }] },
        { type: 'Do', key, actions: note('3') },
        { type: 'Start', key: other, actions: note('x') },
      ]);
      await drainDueTimers(dispatcher);
      // The failed one backs off; the one after it waits; the other saga is not held.
      expect(await rows.saga(key)).toMatchObject({ log: 'started;1;' });
      expect(await rows.saga(other)).toMatchObject({ log: 'started;x;' });
      expect(await stagedRowsOf(db().orm, key)).toMatchObject([
        { outcome: 'delivered' },
        { outcome: null, attempts: 1, lastError: expect.stringContaining('boom') },
        { outcome: null, attempts: 0 },
      ]);
      clock.advance(1_000);
      const second = await drainDueTimers(dispatcher);
      expect(second.inbox).toMatchObject({ deadLettered: 1 });
      // Dead-lettered (maxAttempts 2), it frees the next.
      expect(await rows.saga(key)).toMatchObject({ log: 'started;1;3;' });
      const dead = await ops.listInbox({ status: 'dead_lettered', sagaKey: key, limit: 10 });
      expect(dead.items).toMatchObject([{ id: failing, sagaType: 'scripted', sagaKey: key, messageType: 'Do', status: 'dead_lettered' }]);
      expect(dead.items[0]!.deadLetterReason).toContain('boom');

      const requeued = await ops.requeueInbox([failing!]);
      expect(requeued).toMatchObject({ requested: 1, affected: 1, items: [{ id: failing, status: 'requeued' }] });
      const third = await drainDueTimers(dispatcher);
      // It fails again (the message still throws), is retried and dead-lettered again: nothing else changed.
      expect(third.inbox).toMatchObject({ claimed: 1, failed: 1 });
      expect(await stagedRowsOf(db().orm, key)).toMatchObject([{}, { outcome: null, attempts: 1 }, { outcome: 'delivered' }]);
    });

    it('the same message id staged twice, in two transactions: one step; the second is stamped duplicate', async () => {
      const { runtime, dispatcher, rows } = setup();
      const key = uniqueKey('dup');
      for (let i = 0; i < 2; i++) {
        await db()
          .orm.em.fork()
          .transactional(async (em) => {
            runtime.stageDelivery(em, scriptedSaga, { type: 'Start', key, actions: [{ op: 'inc' }] }, { messageId: `${key}-m1` });
          });
      }
      const drained = await drainDueTimers(dispatcher);
      expect(drained.inbox).toMatchObject({ claimed: 2, delivered: 1, duplicates: 1 });
      const saga = await rows.saga(key);
      expect(saga).toMatchObject({ counter: 1, version: 0 });
      expect(await rows.handledMessages(saga!.id)).toMatchObject([{ messageId: `${key}-m1`, version: 0 }]);
      expect(await stagedRowsOf(db().orm, key)).toMatchObject([
        { outcome: 'delivered', messageId: `${key}-m1` },
        { outcome: 'duplicate', messageId: `${key}-m1` },
      ]);
      expect(runtime.stats().duplicates).toBe(1);
    });

    it('a message id handled through handle() makes the staged one a duplicate, and the reverse', async () => {
      const { runtime, dispatcher, rows } = setup();
      const key = uniqueKey('mixed');
      await runtime.handle(scriptedSaga, { type: 'Start', key }, { messageId: `${key}-s` });
      await db()
        .orm.em.fork()
        .transactional(async (em) => {
          runtime.stageDelivery(em, scriptedSaga, { type: 'Start', key, actions: [{ op: 'inc' }] }, { messageId: `${key}-s` });
          runtime.stageDelivery(em, scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] }, { messageId: `${key}-d` });
        });
      expect((await drainDueTimers(dispatcher)).inbox).toMatchObject({ delivered: 1, duplicates: 1 });
      expect(await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] }, { messageId: `${key}-d` })).toMatchObject({
        outcome: 'duplicate',
      });
      expect(await rows.saga(key)).toMatchObject({ counter: 1 });
    });
  });
}

// The drain helper's bound, whatever the database: one file's worth of passes is enough to pin it, on SQLite's file.
describe('drainDueTimers and a burst of staged deliveries for one saga (sqlite)', () => {
  const db = useDatabase('sqlite', [ScriptedSaga]);

  it('drains them one per pass, past its 1,000 spare passes', async () => {
    const clock = new FakeClock('2026-01-05T09:00:00.000Z');
    const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
    const dispatcher = new SagaDispatcher({ runtime, logger: silentLogger });
    const key = uniqueKey('burst');
    await db()
      .orm.em.fork()
      .transactional(async (em) => {
        runtime.stageDelivery(em, scriptedSaga, { type: 'Start', key });
        for (let i = 0; i < 1_004; i++) runtime.stageDelivery(em, scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] });
      });
    const drained = await drainDueTimers(dispatcher);
    expect(drained).toMatchObject({ passes: 1_006, inbox: { delivered: 1_005 } });
    expect(await rowsOf(db().orm).saga(key)).toMatchObject({ counter: 1_004 });
  }, 120_000);
});
