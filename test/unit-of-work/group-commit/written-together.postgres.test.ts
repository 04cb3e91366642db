// On PostgreSQL a group whose units each write only their saga row's versioned UPDATE (and a delivered timer's
// stamp) sends all those statements in one round trip after BEGIN and the lock bound, then COMMIT (src/saga/
// unit-of-work/group-commit.ts, writeTogether), on MikroORM 6 and 7 alike (on 7 the library holds the unit's
// transaction on a pg connection itself). What must hold as in the group written a unit at a time: lock order, a
// version conflict failing its unit alone, a stale timer and a failing statement failing their unit alone (the group
// is then written again, a unit at a time), nothing of a failed unit written. Where MikroORM 7 leaves the transaction
// to kysely, the statements go as WITH queries instead: written-as-one-statement.postgres.test.ts.
import { describe, expect, it } from 'vitest';
import { SagaPersistenceError, type SagaRuntime, type TimerDelivery } from '../../../src/index.js';
import { ScriptedSaga } from '../../fixtures/scripted-saga.js';
import { claimTimer } from '../../support/claimed-timer.js';
import type { GatedSaga } from '../../support/gated-saga.js';
import { groupWriting } from '../../support/one-group.js';
import { TOGETHER_START } from '../../support/pg-statements.js';
import { refuseInserts, rowsOf } from '../../support/rows.js';
import { uniqueKey, useDatabase } from '../../support/suite.js';

describe('a group of one-statement units written together (postgresql)', () => {
  const db = useDatabase('postgresql', [ScriptedSaga]);
  const { setUp, asOneGroup } = groupWriting(db);

  /** A claimed delivery of the pending timer 'ping' of the saga `key` (scheduled through `plain`); or one whose claim was lost. */
  async function delivery(plain: SagaRuntime, saga: GatedSaga, key: string, claimed: boolean, later = false): Promise<TimerDelivery> {
    const scheduled = await plain.handle(saga, { type: 'Do', key, schedule: 'ping' });
    const [timer] = await rowsOf(db().orm).pendingTimers(scheduled.sagaId!);
    return claimTimer(db().orm, timer!, { type: 'Tick', inc: 1, gated: true, later }, { lost: !claimed });
  }

  const timerOf = async (id: string) =>
    (
      await db().orm.em.fork().getConnection().execute<{ outcome: string | null }[]>('select outcome from saga_timer where id = ?', [id])
    )[0];

  it('messages and timer deliveries: one round trip for their statements, one for COMMIT; a unit conflicting on another of the group is retried', async () => {
    const [a, b, c] = ['a', 'b', 'c'].map((n) => uniqueKey(`together-${n}`)) as [string, string, string];
    const { gate, saga, plain, runtime } = await setUp([a, b, c], 3);
    const timer = await delivery(plain, saga, c, true);
    const { first, started, recording } = await asOneGroup(gate, runtime, saga, a, () => ({
      b1: runtime.handle(saga, { type: 'Do', key: b, inc: 1, gated: true }),
      b2: runtime.handle(saga, { type: 'Do', key: b, inc: 10, gated: true }),
      c: runtime.deliverTimer(timer),
    }));
    expect(await first).toMatchObject({ outcome: 'handled', version: 1 });
    const results = { b1: await started.b1, b2: await started.b2, c: await started.c };
    recording.stop();
    // One of b's two units wrote first in the group; the other found its version gone and was retried.
    expect([results.b1.conflicts + results.b2.conflicts, results.c.conflicts]).toEqual([1, 0]);
    expect(results.c.outcome).toBe('handled');
    expect(await rowsOf(db().orm).saga(b)).toMatchObject({ counter: 11, version: 2 });
    expect(await rowsOf(db().orm).saga(c)).toMatchObject({ counter: 1, version: 1 });
    expect(await timerOf(timer.id)).toMatchObject({ outcome: 'fired' });
    // The group of three: BEGIN, the lock bound and their three statements in one string; then COMMIT.
    const group = recording.sent.findIndex((sql) => sql.startsWith(TOGETHER_START));
    expect(recording.sent[group]!.match(/update "scripted_saga"/g)).toHaveLength(3);
    expect(recording.sent[group]!.match(/update "saga_timer" set "dispatched_at"/g)).toHaveLength(1);
    expect(recording.sent[group + 1]).toBe('commit');
    expect(recording.sent.some((sql) => /savepoint/i.test(sql))).toBe(false);
  });

  it('units of different sagas: their statements go as one string after BEGIN and the lock bound; every unit commits', async () => {
    const [a, b, c, d] = ['a', 'b', 'c', 'd'].map((n) => uniqueKey(`together-one-${n}`)) as [string, string, string, string];
    const { gate, saga, plain, runtime } = await setUp([a, b, c, d], 3);
    const timer = await delivery(plain, saga, d, true);
    const { first, started, recording } = await asOneGroup(gate, runtime, saga, a, () => ({
      b: runtime.handle(saga, { type: 'Do', key: b, inc: 1, gated: true }),
      c: runtime.handle(saga, { type: 'Do', key: c, inc: 2, gated: true }),
      d: runtime.deliverTimer(timer),
    }));
    await first;
    const results = { b: await started.b, c: await started.c, d: await started.d };
    recording.stop();
    expect(results.b).toMatchObject({ outcome: 'handled', version: 1, conflicts: 0 });
    expect(results.c).toMatchObject({ outcome: 'handled', version: 1, conflicts: 0 });
    expect(results.d).toMatchObject({ outcome: 'handled', version: 1, conflicts: 0 });
    expect(await rowsOf(db().orm).saga(b)).toMatchObject({ counter: 1, version: 1 });
    expect(await rowsOf(db().orm).saga(c)).toMatchObject({ counter: 2, version: 1 });
    expect(await rowsOf(db().orm).saga(d)).toMatchObject({ counter: 1, version: 1 });
    expect(await timerOf(timer.id)).toMatchObject({ outcome: 'fired' });
    const group = recording.sent.findIndex((sql) => sql.startsWith(TOGETHER_START));
    expect(recording.sent[group]!.match(/update "scripted_saga"/g)).toHaveLength(3);
    expect(recording.sent[group]!.match(/update "saga_timer" set "dispatched_at"/g)).toHaveLength(1);
    expect(recording.sent[group + 1]).toBe('commit');
    expect(recording.sent.some((sql) => /savepoint/i.test(sql))).toBe(false);
  });

  it('a message and a timer delivery of one saga in one group: the one written second conflicts and is retried; both applied once', async () => {
    const [a, c] = ['a', 'c'].map((n) => uniqueKey(`together-same-${n}`)) as [string, string];
    const { gate, saga, plain, runtime } = await setUp([a, c], 2);
    // The delivery reaches the group second: its saga row UPDATE finds the message's version and changes nothing,
    // while its stamp would change the timer row; the group is written again, the delivery retried.
    const timer = await delivery(plain, saga, c, true, true);
    const { first, started, recording } = await asOneGroup(gate, runtime, saga, a, () => ({
      message: runtime.handle(saga, { type: 'Do', key: c, inc: 10, gated: true }),
      timer: runtime.deliverTimer(timer),
    }));
    await first;
    const results = { message: await started.message, timer: await started.timer };
    recording.stop();
    expect([results.message.outcome, results.timer.outcome]).toEqual(['handled', 'handled']);
    expect([results.message.conflicts, results.timer.conflicts]).toEqual([0, 1]);
    expect(await rowsOf(db().orm).saga(c)).toMatchObject({ counter: 11, version: 2 });
    expect(await timerOf(timer.id)).toMatchObject({ outcome: 'fired' });
  });

  it('a timer whose claim was lost: the group is written again a unit at a time; the delivery is stale, the others commit', async () => {
    const [a, b, c] = ['a', 'b', 'c'].map((n) => uniqueKey(`together-stale-${n}`)) as [string, string, string];
    const { gate, saga, plain, runtime } = await setUp([a, b, c], 2);
    const timer = await delivery(plain, saga, c, false);
    const { first, started, recording } = await asOneGroup(gate, runtime, saga, a, () => ({
      b: runtime.handle(saga, { type: 'Do', key: b, inc: 1, gated: true }),
      c: runtime.deliverTimer(timer),
    }));
    await first;
    const results = { b: await started.b, c: await started.c };
    recording.stop();
    expect(results.b).toMatchObject({ outcome: 'handled', version: 1, conflicts: 0 });
    expect(results.c).toMatchObject({ outcome: 'stale' });
    expect(await rowsOf(db().orm).saga(b)).toMatchObject({ counter: 1, version: 1 });
    // The delivery's saga row write was rolled back with its unit.
    expect(await rowsOf(db().orm).saga(c)).toMatchObject({ counter: 0, version: 0 });
    expect(await timerOf(timer.id)).toMatchObject({ outcome: null });
    // Tried together first (one string), then written again a unit at a time, each in a savepoint, after the group's
    // ROLLBACK.
    expect(recording.sent.some((sql) => sql.startsWith(TOGETHER_START))).toBe(true);
    expect(recording.sent.some((sql) => /savepoint saga_unit_1/.test(sql))).toBe(true);
    expect(recording.sent).toContain('rollback');
  });

  it('a statement of the group that fails: the group is written again a unit at a time; that unit fails alone, typed, and the others commit', async () => {
    const [a, b, c] = ['a', 'b', 'c'].map((n) => uniqueKey(`together-fail-${n}`)) as [string, string, string];
    const { gate, saga, plain, runtime } = await setUp([a, b, c], 2);
    const timer = await delivery(plain, saga, c, true);
    const allow = await refuseInserts(db().orm, 'saga_timer', 'id', timer.id);
    try {
      const { first, started, recording } = await asOneGroup(gate, runtime, saga, a, () => ({
        b: runtime.handle(saga, { type: 'Do', key: b, inc: 1, gated: true }),
        c: runtime.deliverTimer(timer).catch((error: unknown) => error),
      }));
      await first;
      const results = { b: await started.b, c: await started.c };
      recording.stop();
      expect(results.b).toMatchObject({ outcome: 'handled', version: 1 });
      expect(results.c).toBeInstanceOf(SagaPersistenceError);
      expect(results.c).toMatchObject({ code: 'PERSISTENCE_FAILED', details: { table: 'scripted_saga' } });
      expect((results.c as Error).message).toContain('update on scripted_saga and saga_timer failed');
      expect(await rowsOf(db().orm).saga(b)).toMatchObject({ counter: 1, version: 1 });
      expect(await rowsOf(db().orm).saga(c)).toMatchObject({ counter: 0, version: 0 });
      expect(await timerOf(timer.id)).toMatchObject({ outcome: null });
    } finally {
      await allow();
    }
  });
});
