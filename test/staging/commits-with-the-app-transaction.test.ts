// A delivery staged for a saga through the application's EntityManager commits or rolls back with the application's
// own writes, on every database: inside `em.transactional()`, and with a plain EntityManager before its flush. A
// committed one is delivered once by the dispatcher, through an ordinary unit of work that stamps it `delivered` in
// the saga's transaction; a rolled-back one never existed.
import { afterEach, describe, expect, it } from 'vitest';
import { SagaDispatcher, SagaRuntime, silentLogger } from '../../src/index.js';
import { drainDueTimers, FakeClock } from '../../src/testing/index.js';
import { ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { DIALECTS } from '../support/databases.js';
import { rowsOf } from '../support/rows.js';
import { stagedRowsOf } from '../support/staged-rows.js';
import { uniqueKey, useDatabase } from '../support/suite.js';

for (const dialect of DIALECTS) {
  describe(`staged deliveries commit with the application's transaction (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);
    const dispatchers: SagaDispatcher[] = [];
    const setup = () => {
      const clock = new FakeClock('2026-01-05T09:00:00.000Z');
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], clock });
      const dispatcher = new SagaDispatcher({ runtime, logger: silentLogger, backoff: { jitter: false } });
      dispatchers.push(dispatcher);
      return { clock, runtime, dispatcher, rows: rowsOf(db().orm) };
    };
    afterEach(async () => {
      const running = dispatchers.splice(0).filter((d) => d.running);
      await Promise.all(running.map((d) => d.stop()));
      expect(running, 'a dispatcher was left running').toEqual([]);
    });

    it('staged inside em.transactional() and committed: delivered once, through a unit of work, and stamped delivered', async () => {
      const { runtime, dispatcher, rows } = setup();
      const key = uniqueKey('commit');
      const staged = await db()
        .orm.em.fork()
        .transactional(async (em) => {
          return runtime.stageDelivery(em, scriptedSaga, {
            type: 'Start',
            key,
            actions: [{ op: 'inc' }, { op: 'send', message: { type: 'Hello' } }],
          });
        });
      expect(await rows.saga(key)).toBeNull();
      const drained = await drainDueTimers(dispatcher);
      expect(drained.inbox).toMatchObject({ claimed: 1, delivered: 1, failed: 0 });
      const saga = await rows.saga(key);
      expect(saga).toMatchObject({ counter: 1, version: 0, log: 'started;' });
      expect(await rows.outbox(saga!.id)).toMatchObject([{ messageType: 'Hello' }]);
      expect(await stagedRowsOf(db().orm, key)).toMatchObject([{ id: staged.id, outcome: 'delivered', lockedUntil: null }]);
      // Delivered once: another drain finds nothing.
      expect((await drainDueTimers(dispatcher)).inbox.claimed).toBe(0);
      expect(await rows.saga(key)).toMatchObject({ counter: 1, version: 0 });
      expect(runtime.stats().deliveriesStaged).toBe(1);
      expect(dispatcher.stats().stagedDelivered).toBe(1);
    });

    it("rolled back with the application's transaction: no row, nothing delivered, no saga", async () => {
      const { runtime, dispatcher, rows } = setup();
      const key = uniqueKey('rollback');
      const refused = new Error('the application changed its mind');
      await expect(
        db()
          .orm.em.fork()
          .transactional(async (em) => {
            runtime.stageDelivery(em, scriptedSaga, { type: 'Start', key });
            await em.flush(); // written, then rolled back
            throw refused;
          }),
      ).rejects.toBe(refused);
      expect(await stagedRowsOf(db().orm, key)).toEqual([]);
      expect((await drainDueTimers(dispatcher)).inbox.claimed).toBe(0);
      expect(await rows.saga(key)).toBeNull();
    });

    it("staged with a plain EntityManager: the application's flush writes it, in the flush's transaction", async () => {
      const { runtime, dispatcher, rows } = setup();
      const key = uniqueKey('flush');
      const em = db().orm.em.fork();
      runtime.stageDelivery(em, scriptedSaga, { type: 'Start', key });
      // Nothing is sent before the flush.
      expect(await stagedRowsOf(db().orm, key)).toEqual([]);
      await em.flush();
      expect(await stagedRowsOf(db().orm, key)).toMatchObject([
        { sagaType: 'scripted', sagaKey: key, messageType: 'Start', outcome: null },
      ]);
      await drainDueTimers(dispatcher);
      expect(await rows.saga(key)).toMatchObject({ log: 'started;', version: 0 });
    });

    it('a staged delivery whose saga does not exist and that does not start it is stamped ignored; no saga is created', async () => {
      const { runtime, dispatcher, rows } = setup();
      const key = uniqueKey('ignored');
      await db()
        .orm.em.fork()
        .transactional(async (em) => {
          runtime.stageDelivery(em, scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] });
        });
      const drained = await drainDueTimers(dispatcher);
      expect(drained.inbox).toMatchObject({ claimed: 1, ignored: 1, delivered: 0, failed: 0 });
      expect(await rows.saga(key)).toBeNull();
      expect(await stagedRowsOf(db().orm, key)).toMatchObject([{ outcome: 'ignored' }]);
      expect(runtime.stats().ignoredNoInstance).toBe(1);
    });

    it('a delay makes it due later, by the runtime clock; notBefore at an instant', async () => {
      const { runtime, dispatcher, rows, clock } = setup();
      const key = uniqueKey('delay');
      await db()
        .orm.em.fork()
        .transactional(async (em) => {
          runtime.stageDelivery(em, scriptedSaga, { type: 'Start', key }, { delay: { minutes: 5 } });
        });
      expect((await drainDueTimers(dispatcher)).inbox.claimed).toBe(0);
      clock.advance({ minutes: 5 });
      expect((await drainDueTimers(dispatcher)).inbox.delivered).toBe(1);
      expect(await rows.saga(key)).not.toBeNull();

      const later = uniqueKey('not-before');
      const at = new Date(clock.now().getTime() + 60_000);
      const staged = await db()
        .orm.em.fork()
        .transactional(async (em) => runtime.stageDelivery(em, scriptedSaga, { type: 'Start', key: later }, { notBefore: at }));
      expect(staged.availableAt).toEqual(at);
      expect((await drainDueTimers(dispatcher)).inbox.claimed).toBe(0);
      clock.advance(60_000);
      expect((await drainDueTimers(dispatcher)).inbox.delivered).toBe(1);
    });
  });
}
