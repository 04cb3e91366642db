// A staged delivery is stamped in the transaction of the saga change it causes, only while its claim holds, on every
// database: a delivery whose lease ran out and was taken over writes nothing when it finally commits (its step ran once
// in effect); one whose dispatcher died after it started is charged that lost delivery once, and its saga's later rows
// wait for it; a row that cannot be decoded is dead-lettered alone; staging inside the application's transaction on a
// pool of one connection (SQLite's, or a PostgreSQL pool of one) asks for no second connection.
import type { MikroORM } from '@mikro-orm/core';
import { afterEach, describe, expect, it } from 'vitest';
import { claimDueStagedDeliveries } from '../../src/dispatcher/claim-due-rows.js';
import { SagaDispatcher, SagaRuntime, silentLogger } from '../../src/index.js';
import { executeSql } from '../../src/orm/sql-execution.js';
import { markDeliveriesStarted } from '../../src/sql/delivery-statements.js';
import { DISPATCH_TABLES } from '../../src/sql/dispatch-tables.js';
import { drainDueTimers, FakeClock } from '../../src/testing/index.js';
import { ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { DIALECTS, isSqlite } from '../support/databases.js';
import { rowsOf } from '../support/rows.js';
import { clearStagedRows, stagedRowsOf } from '../support/staged-rows.js';
import { uniqueKey, useDatabase } from '../support/suite.js';

for (const dialect of DIALECTS) {
  describe(`a staged delivery's stamp and claim (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);
    const dispatchers: SagaDispatcher[] = [];
    const opened: MikroORM[] = [];
    const setup = (orm: MikroORM = db().orm) => {
      const clock = new FakeClock('2026-01-05T09:00:00.000Z');
      const runtime = new SagaRuntime({ em: orm.em, sagas: [scriptedSaga], clock });
      const dispatcher = new SagaDispatcher({ runtime, logger: silentLogger, leaseMs: 1_000 });
      dispatchers.push(dispatcher);
      return { clock, runtime, dispatcher, rows: rowsOf(db().orm) };
    };
    afterEach(async () => {
      const running = dispatchers.splice(0).filter((d) => d.running);
      await Promise.all(running.map((d) => d.stop()));
      expect(running, 'a dispatcher was left running').toEqual([]);
      for (const orm of opened.splice(0)) await orm.close();
      await clearStagedRows(db().orm);
    });

    it('a delivery taken over after its lease ran out writes nothing when it commits: one step in effect', async () => {
      const { runtime, dispatcher, rows, clock } = setup();
      const key = uniqueKey('taken-over');
      await db()
        .orm.em.fork()
        .transactional(async (em) => runtime.stageDelivery(em, scriptedSaga, { type: 'Start', key, actions: [{ op: 'inc' }] }));
      // A dispatcher claims it, then stalls past its lease.
      const now = clock.now();
      const {
        rows: [stalled],
      } = await claimDueStagedDeliveries(runtime.context, now, new Date(now.getTime() + 1_000), 10);
      expect(stalled).toMatchObject({ sagaType: 'scripted', sagaKey: key, messageType: 'Start', attempts: 0 });
      clock.advance(1_001);
      expect((await drainDueTimers(dispatcher)).inbox).toMatchObject({ claimed: 1, delivered: 1 });
      // The stalled delivery runs its step and commits late: its claim no longer holds, so nothing of it is written.
      const late = await runtime.deliverStaged(stalled!);
      expect(late).toMatchObject({ outcome: 'stale', changed: false });
      expect(await rows.saga(key)).toMatchObject({ counter: 1, version: 0 });
      expect(await stagedRowsOf(db().orm, key)).toMatchObject([{ outcome: 'delivered' }]);
    });

    it("a delivery whose dispatcher died after it started: charged once after the delivery timeout, the saga's next row waits", async () => {
      const { runtime, rows, clock } = setup();
      const key = uniqueKey('died');
      await db()
        .orm.em.fork()
        .transactional(async (em) => {
          runtime.stageDelivery(em, scriptedSaga, { type: 'Start', key, actions: [{ op: 'note', text: '1' }] });
          runtime.stageDelivery(em, scriptedSaga, { type: 'Do', key, actions: [{ op: 'note', text: '2' }] });
        });
      // A dispatcher claims the saga's first row, starts delivering it, and dies: its lease is never renewed.
      const now = clock.now();
      const { rows: claimed } = await claimDueStagedDeliveries(runtime.context, now, new Date(now.getTime() + 1_000), 10);
      expect(claimed.map((row) => row.messageType)).toEqual(['Start']);
      await markDeliveriesStarted(runtime.context, DISPATCH_TABLES.inbox, claimed, now);
      const dispatcher = new SagaDispatcher({ runtime, logger: silentLogger, leaseMs: 1_000, deliveryTimeoutMs: 5_000 });
      dispatchers.push(dispatcher);
      // Past the lease but within the delivery timeout it may still run: neither it nor the row behind it is claimed.
      clock.advance(2_000);
      expect((await dispatcher.runOnce()).inbox.claimed).toBe(0);
      clock.advance(5_000);
      expect((await drainDueTimers(dispatcher)).inbox).toMatchObject({ claimed: 2, delivered: 2, failed: 0 });
      expect(await rows.saga(key)).toMatchObject({ log: 'started;1;2;', version: 1 });
      expect(await stagedRowsOf(db().orm, key)).toMatchObject([
        { outcome: 'delivered', attempts: 1, lastError: expect.stringMatching(/^LeaseExpired/) },
        { outcome: 'delivered', attempts: 0, lastError: null },
      ]);
    });

    it('a row whose payload is not a message is dead-lettered alone; the others are delivered', async () => {
      const { runtime, dispatcher, rows } = setup();
      const [good, bad] = [uniqueKey('good'), uniqueKey('bad')];
      await db()
        .orm.em.fork()
        .transactional(async (em) => {
          runtime.stageDelivery(em, scriptedSaga, { type: 'Start', key: good });
          runtime.stageDelivery(em, scriptedSaga, { type: 'Start', key: bad });
        });
      await executeSql(db().orm.em.fork(), `update saga_inbox set payload = '[1, 2]' where saga_key = ?`, [bad], 'run');
      const drained = await drainDueTimers(dispatcher);
      expect(drained.inbox).toMatchObject({ claimed: 2, delivered: 1, deadLettered: 1 });
      expect(await rows.saga(good)).not.toBeNull();
      expect(await rows.saga(bad)).toBeNull();
      const [dead] = await stagedRowsOf(db().orm, bad);
      expect(dead).toMatchObject({ outcome: 'dead_lettered', attempts: 0 });
      expect(dead!.deadLetterReason).toContain('payload is JSON but not an object');
    });

    it("staging inside the application's transaction on a pool of one connection commits without waiting for another", {
      timeout: 15_000,
    }, async () => {
      // SQLite has one connection whatever the pool says; PostgreSQL gets a pool of one.
      const orm = isSqlite(dialect) ? db().orm : await db().openAnother({ pool: { min: 0, max: 1 } });
      if (orm !== db().orm) opened.push(orm);
      const { runtime, dispatcher, rows } = setup(orm);
      const key = uniqueKey('one-connection');
      await orm.em.fork().transactional(async (em) => {
        await em.findOne(ScriptedSaga, { key }); // the application's own read, on the transaction's connection
        runtime.stageDelivery(em, scriptedSaga, { type: 'Start', key });
        runtime.stageMessage(em, { type: 'Written', key });
        await em.flush();
        runtime.stageDelivery(em, scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] });
      });
      await drainDueTimers(dispatcher);
      expect(await rows.saga(key)).toMatchObject({ counter: 1 });
    });
  });
}
