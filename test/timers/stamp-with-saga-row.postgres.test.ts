// On PostgreSQL a timer's delivery writes its saga row and stamps the timer in one statement (two UPDATEs as WITH
// queries; src/sql/saga-statements.ts, updateSagaRowAndStampTimer): one round trip instead of two. What must still
// hold: the saga row is locked before the timer row (the order of every unit of work on the instance), a stale
// timer rolls the saga row's write back, a version conflict is retried, and a failure names both tables.
import { randomUUID } from 'node:crypto';
import type { MikroORM } from '@mikro-orm/core';
import { afterEach, describe, expect, it } from 'vitest';
import { SagaRuntime, type TimerDelivery } from '../../src/index.js';
import { ScriptedSaga, scriptedSaga, scriptedSagaWithTick } from '../fixtures/scripted-saga.js';
import { statementsSent } from '../support/pg-statements.js';
import { untilLockWaiters } from '../support/row-locks.js';
import { refuseInserts, rowsOf } from '../support/rows.js';
import { uniqueKey, useDatabase } from '../support/suite.js';

describe('a timer delivery writes its saga row and its stamp in one statement (postgresql)', () => {
  const db = useDatabase('postgresql', [ScriptedSaga]);
  const opened: MikroORM[] = [];
  afterEach(async () => {
    for (const orm of opened.splice(0)) await orm.close();
  });

  /** A saga with one pending timer, claimed as a dispatcher would: the delivery to hand to `deliverTimer`. */
  async function claimedTimer(runtime: SagaRuntime, key: string): Promise<TimerDelivery> {
    await runtime.handle(scriptedSaga, { type: 'Start', key, actions: [{ op: 'schedule', name: 'reminder', after: 60_000 }] });
    const saga = (await rowsOf(db().orm).saga(key))!;
    const [timer] = await rowsOf(db().orm).pendingTimers(saga.id);
    const token = randomUUID();
    await db()
      .orm.em.fork()
      .getConnection()
      .execute('update saga_timer set token = ?, locked_until = ? where id = ?', [token, new Date(Date.now() + 600_000), timer!.id]);
    return {
      id: timer!.id,
      token,
      sagaType: 'scripted',
      sagaId: saga.id,
      name: 'reminder',
      messageType: 'Tick',
      payload: { type: 'Tick', label: 'reminder' },
      dueAt: timer!.dueAt,
      attempts: 0,
      correlationId: null,
    };
  }

  async function timerRow(id: string) {
    const rows = await db()
      .orm.em.fork()
      .getConnection()
      .execute<{ dispatched_at: Date | null; outcome: string | null }[]>('select dispatched_at, outcome from saga_timer where id = ?', [
        id,
      ]);
    return rows[0];
  }

  it('one statement writes both: a round trip less than two UPDATEs, and both rows are written', async () => {
    const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga] });
    const key = uniqueKey('one-trip');
    const delivery = await claimedTimer(runtime, key);
    let result: Awaited<ReturnType<SagaRuntime['deliverTimer']>> | undefined;
    const sent = await statementsSent(async () => {
      result = await runtime.deliverTimer(delivery);
    });
    expect(result?.outcome).toBe('handled');
    const writes = sent.filter((sql) => /update "saga_timer"|update "scripted_saga"/.test(sql));
    expect(writes).toHaveLength(1);
    expect(writes[0]).toMatch(/"saga_row_written" as \(update "scripted_saga".*"saga_timer_stamped" as \(update "saga_timer"/s);
    // The read, then BEGIN with the statement, then COMMIT.
    expect(sent).toHaveLength(3);
    expect(await rowsOf(db().orm).saga(key)).toMatchObject({ version: 1, log: 'started;tick:reminder;' });
    expect(await timerRow(delivery.id)).toMatchObject({ outcome: 'fired' });
  });

  it('the saga row is locked before the timer row: while another transaction holds the saga row, the timer row stays free', async () => {
    const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga], groupCommit: false });
    const key = uniqueKey('lock-order');
    const delivery = await claimedTimer(runtime, key);
    const holder = await db().openAnother({ pool: { min: 1, max: 1 } });
    opened.push(holder);
    const held = holder.em.fork();
    await held.begin();
    await held
      .getConnection()
      .execute('select 1 from scripted_saga where id = ? for update', [delivery.sagaId], 'all', held.getTransactionContext());

    const unit = runtime.deliverTimer(delivery);
    await untilLockWaiters(db().orm);
    // The unit waits for the saga row; had it stamped the timer first, it would hold the timer row now.
    const probe = await db().openAnother({ pool: { min: 1, max: 1 } });
    opened.push(probe);
    const locked = await probe.em
      .fork()
      .getConnection()
      .execute('select id from saga_timer where id = ? for update nowait', [delivery.id])
      .then(
        () => 'free',
        (error: { code?: string }) => error.code ?? 'error',
      );
    await held.rollback();
    const result = await unit;
    expect(locked).toBe('free');
    expect(result.outcome).toBe('handled');
    expect(await timerRow(delivery.id)).toMatchObject({ outcome: 'fired' });
  });

  it('a timer whose claim was lost meanwhile is stale, and the saga row is not written', async () => {
    const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga] });
    const key = uniqueKey('stale');
    const delivery = await claimedTimer(runtime, key);
    // Another dispatcher claimed it after ours (its token replaced ours).
    await db().orm.em.fork().getConnection().execute('update saga_timer set token = ? where id = ?', [randomUUID(), delivery.id]);
    const result = await runtime.deliverTimer(delivery);
    expect(result.outcome).toBe('stale');
    expect(await rowsOf(db().orm).saga(key)).toMatchObject({ version: 0, log: 'started;' });
    expect(await timerRow(delivery.id)).toMatchObject({ dispatched_at: null, outcome: null });
  });

  it('a saga row changed after the read is a version conflict: retried, the timer stamped once, the step applied once', async () => {
    const key = uniqueKey('conflict');
    let interfere = true;
    // The step of the first attempt lets another transaction write the saga row after the unit read it.
    const ticking = scriptedSagaWithTick(async (saga) => {
      if (interfere) {
        interfere = false;
        await db()
          .orm.em.fork()
          .getConnection()
          .execute('update scripted_saga set version = version + 1, counter = counter + 5 where key = ?', [key]);
      }
      saga.log += 'tick;';
    });
    const runtime = new SagaRuntime({ em: db().orm.em, sagas: [ticking], concurrency: { baseDelayMs: 0 } });
    const delivery = await claimedTimer(new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga] }), key);
    const result = await runtime.deliverTimer(delivery);
    expect(result).toMatchObject({ outcome: 'handled', conflicts: 1 });
    expect(await rowsOf(db().orm).saga(key)).toMatchObject({ version: 2, counter: 5, log: 'started;tick;' });
    expect(await timerRow(delivery.id)).toMatchObject({ outcome: 'fired' });
  });

  it('a failure of the statement names both tables it writes, and nothing of the unit is written', async () => {
    const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga] });
    const key = uniqueKey('refused');
    const delivery = await claimedTimer(runtime, key);
    const allow = await refuseInserts(db().orm, 'saga_timer', 'outcome', 'fired');
    try {
      const error = await runtime.deliverTimer(delivery).catch((e: unknown) => e);
      expect(error).toMatchObject({ code: 'PERSISTENCE_FAILED', details: { operation: 'update', table: 'scripted_saga' } });
      expect((error as Error).message).toContain('update on scripted_saga and saga_timer failed');
      expect((error as Error).message).not.toContain(delivery.token);
    } finally {
      await allow();
    }
    expect(await rowsOf(db().orm).saga(key)).toMatchObject({ version: 0, log: 'started;' });
    expect(await timerRow(delivery.id)).toMatchObject({ dispatched_at: null });
  });
});
