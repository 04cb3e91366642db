// Scheduling timers on every database: a pending name is replaced in place, racing schedules of one name collide,
// completion removes timers, step-scoped timers follow the step, calendars make delays business time.
import { UniqueConstraintViolationException } from '@mikro-orm/core';
import { describe, expect, it } from 'vitest';
import { SagaRuntime, WeekdayCalendar } from '../../src/index.js';
import { createDatabaseContext } from '../../src/sql/database-context.js';
import { runStatement } from '../../src/sql/sql-executor.js';
import { insertTimers } from '../../src/sql/timer-statements.js';
import { FakeClock } from '../../src/testing/index.js';
import { ScriptedSaga, scriptedSaga, scriptedVariant } from '../fixtures/scripted-saga.js';
import { DIALECTS } from '../support/databases.js';
import { rowsOf } from '../support/rows.js';
import { deferred, uniqueKey, useDatabase } from '../support/suite.js';

for (const dialect of DIALECTS) {
  describe(`scheduling timers (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);
    const setup = () => {
      // 2026-01-09 is a Friday.
      const clock = new FakeClock('2026-01-09T16:00:00.000Z');
      const runtime = new SagaRuntime({
        em: db().orm.em,
        sagas: [scriptedSaga],
        clock,
        calendars: { weekdays: new WeekdayCalendar() },
      });
      return { clock, runtime, rows: rowsOf(db().orm) };
    };
    const start = async (runtime: SagaRuntime, prefix: string) => {
      const key = uniqueKey(prefix);
      const result = await runtime.handle(scriptedSaga, { type: 'Start', key });
      return { key, sagaId: result.sagaId! };
    };

    describe('scheduling a pending name replaces it', () => {
      it('in a later unit of work: one pending row, same id, new due time, new token', async () => {
        const { runtime, rows, clock } = setup();
        const { key, sagaId } = await start(runtime, 'replace');
        await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'schedule', name: 'r', after: 1_000 }] });
        const [first] = await rows.pendingTimers(sagaId);
        clock.advance(500);
        await runtime.handle(scriptedSaga, {
          type: 'Do',
          key,
          actions: [{ op: 'schedule', name: 'r', after: 60_000, message: { type: 'Tick', label: 'second' } }],
        });
        const pending = await rows.pendingTimers(sagaId);
        expect(pending).toHaveLength(1);
        expect(pending[0]?.id).toBe(first?.id);
        expect(pending[0]?.token).not.toBe(first?.token);
        expect(pending[0]?.dueAt).toEqual(new Date(clock.now().getTime() + 60_000));
        expect(pending[0]?.payload).toEqual({ type: 'Tick', label: 'second' });
      });

      it('cancel then schedule of one name in one step leaves exactly one pending row', async () => {
        const { runtime, rows } = setup();
        const { key, sagaId } = await start(runtime, 'cancel-schedule');
        await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'schedule', name: 'r', after: 1_000 }] });
        const result = await runtime.handle(scriptedSaga, {
          type: 'Do',
          key,
          actions: [
            { op: 'cancel', name: 'r' },
            { op: 'schedule', name: 'r', after: 9_000 },
          ],
        });
        expect(result.timersScheduled).toBe(1);
        const pending = await rows.pendingTimers(sagaId);
        expect(pending.map((t) => t.name)).toEqual(['r']);
      });

      it('cancelAll then schedule keeps only what was scheduled after it', async () => {
        const { runtime, rows } = setup();
        const { key, sagaId } = await start(runtime, 'cancel-all');
        await runtime.handle(scriptedSaga, {
          type: 'Do',
          key,
          actions: [
            { op: 'schedule', name: 'a' },
            { op: 'schedule', name: 'b' },
          ],
        });
        const result = await runtime.handle(scriptedSaga, {
          type: 'Do',
          key,
          actions: [{ op: 'schedule', name: 'c' }, { op: 'cancelAll' }, { op: 'schedule', name: 'a' }],
        });
        expect(result).toMatchObject({ timersScheduled: 1, timersCancelled: 2 });
        expect((await rows.pendingTimers(sagaId)).map((t) => t.name)).toEqual(['a']);
      });

      it('cancel removes the pending timer and leaves others', async () => {
        const { runtime, rows } = setup();
        const { key, sagaId } = await start(runtime, 'cancel');
        await runtime.handle(scriptedSaga, {
          type: 'Do',
          key,
          actions: [
            { op: 'schedule', name: 'a' },
            { op: 'schedule', name: 'b' },
          ],
        });
        const result = await runtime.handle(scriptedSaga, {
          type: 'Do',
          key,
          actions: [
            { op: 'cancel', name: 'a' },
            { op: 'cancel', name: 'zzz' },
          ],
        });
        expect(result.timersCancelled).toBe(1);
        expect((await rows.pendingTimers(sagaId)).map((t) => t.name)).toEqual(['b']);
        expect(await rows.timers({ sagaId, name: 'a' })).toEqual([]);
      });

      it('an absolute due date is stored as given', async () => {
        const { runtime, rows } = setup();
        const { key, sagaId } = await start(runtime, 'absolute');
        await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'schedule', name: 'at', at: '2026-03-01T12:00:00.000Z' }] });
        expect((await rows.pendingTimers(sagaId))[0]?.dueAt).toEqual(new Date('2026-03-01T12:00:00.000Z'));
      });

      it('a calendar key makes the delay business time and is stored on the timer', async () => {
        const { runtime, rows } = setup();
        const { key, sagaId } = await start(runtime, 'calendar');
        // Friday 16:00 + 1 business day = Monday 16:00.
        await runtime.handle(scriptedSaga, {
          type: 'Do',
          key,
          actions: [
            { op: 'schedule', name: 'biz', after: { days: 1 }, calendar: 'weekdays' },
            { op: 'schedule', name: 'wall', after: { days: 1 } },
          ],
        });
        const pending = await rows.pendingTimers(sagaId);
        expect(pending.find((t) => t.name === 'biz')).toMatchObject({
          calendarKey: 'weekdays',
          dueAt: new Date('2026-01-12T16:00:00.000Z'),
        });
        expect(pending.find((t) => t.name === 'wall')).toMatchObject({ calendarKey: null, dueAt: new Date('2026-01-10T16:00:00.000Z') });
      });
    });

    describe('racing schedules of one name collide instead of both inserting', () => {
      it('two transactions inserting the same pending name: the second hits the filtered unique index', async () => {
        const orm = db().orm;
        const sagaId = crypto.randomUUID();
        const row = (id: string) => ({
          id,
          sagaType: 'scripted',
          sagaId,
          name: 'same',
          step: null,
          dueAt: new Date(),
          messageType: 'Tick',
          payloadJson: '{"type":"Tick"}',
          calendarKey: null,
          correlationId: null,
          traceContext: null,
          token: crypto.randomUUID(),
          createdAt: new Date(),
        });
        const context = createDatabaseContext(orm.em);
        const first = orm.em.fork();
        await first.begin();
        await runStatement(first, insertTimers(context, [row(crypto.randomUUID())]));
        // On PostgreSQL the second insert waits for the first transaction; on SQLite the single writer
        // makes it wait for the connection. Either way it runs after the first commits.
        const second = orm.em.fork();
        const secondResult = (async () => {
          await second.begin();
          try {
            await runStatement(second, insertTimers(context, [row(crypto.randomUUID())]));
            await second.commit();
            return 'inserted';
          } catch (error) {
            await second.rollback();
            return error;
          }
        })();
        await first.commit();
        expect(await secondResult).toBeInstanceOf(UniqueConstraintViolationException);
        const pending = await rowsOf(orm).pendingTimers(sagaId);
        expect(pending).toHaveLength(1);
      });

      it('two units of work scheduling the same name at once leave exactly one pending row', async () => {
        const { runtime, rows } = setup();
        const { key, sagaId } = await start(runtime, 'race-name');
        const results = await Promise.all(
          [1_000, 2_000, 3_000, 4_000].map((after) =>
            runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'schedule', name: 'race', after }] }),
          ),
        );
        expect(results.every((r) => r.timersScheduled === 1)).toBe(true);
        expect(await rows.pendingTimers(sagaId)).toHaveLength(1);
      });

      it('a unit of work that decided on a stale version re-runs before writing its timers', async () => {
        const { runtime, rows } = setup();
        const { key, sagaId } = await start(runtime, 'stale-schedule');
        const gate = deferred();
        const entered = deferred();
        let runs = 0;
        // The first unit reads version 0 and decides to schedule 'late', then waits; meanwhile the saga
        // completes. Its timer must not be written for the completed saga.
        const slow = scriptedVariant('Slow', async (saga, _m, ctx) => {
          runs++;
          if (saga.completedAt) return;
          ctx.schedule('late', 5_000, { type: 'Slow', key });
          if (runs === 1) {
            entered.resolve();
            await gate.promise;
          }
        });
        const slowRuntime = new SagaRuntime({ em: db().orm.em, sagas: [slow] });
        const slowResult = slowRuntime.handle(slow, { type: 'Slow', key });
        await entered.promise;
        await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'complete' }] });
        gate.resolve();
        expect(await slowResult).toMatchObject({ conflicts: 1, attempts: 2, timersScheduled: 0 });
        expect(await rows.pendingTimers(sagaId)).toEqual([]);
      });
    });

    describe('completion removes timers', () => {
      it('a completing step discards the timers it scheduled and removes every pending one', async () => {
        const { runtime, rows } = setup();
        const { key, sagaId } = await start(runtime, 'complete');
        await runtime.handle(scriptedSaga, {
          type: 'Do',
          key,
          actions: [
            { op: 'schedule', name: 'a', scope: 'saga' },
            { op: 'schedule', name: 'b' },
          ],
        });
        const result = await runtime.handle(scriptedSaga, {
          type: 'Do',
          key,
          actions: [{ op: 'schedule', name: 'c' }, { op: 'send', message: { type: 'Done' } }, { op: 'complete' }],
        });
        expect(result).toMatchObject({ completed: true, timersScheduled: 0, timersCancelled: 2, messagesSent: 1, version: 1 });
        expect(await rows.timers({ sagaId })).toEqual([]);
        const saga = await rows.saga(key);
        expect(saga?.completedAt).not.toBeNull();
        expect(runtime.stats().completed).toBe(1);
      });

      it('a start step that completes at once writes no timers', async () => {
        const { runtime, rows } = setup();
        const key = uniqueKey('instant');
        const result = await runtime.handle(scriptedSaga, {
          type: 'Start',
          key,
          actions: [{ op: 'schedule', name: 'x' }, { op: 'complete' }],
        });
        expect(result).toMatchObject({ outcome: 'started', completed: true, timersScheduled: 0 });
        expect(await rows.timers({ sagaId: result.sagaId })).toEqual([]);
      });
    });

    describe('step-scoped timers', () => {
      it('changing the step cancels the pending timers of the old step, keeps saga-scoped ones and the new step ones', async () => {
        const { runtime, rows } = setup();
        const { key, sagaId } = await start(runtime, 'steps');
        await runtime.handle(scriptedSaga, {
          type: 'Do',
          key,
          actions: [
            { op: 'schedule', name: 'open-timeout' },
            { op: 'schedule', name: 'overall', scope: 'saga' },
          ],
        });
        expect((await rows.pendingTimers(sagaId)).map((t) => [t.name, t.step])).toEqual([
          ['open-timeout', 'open'],
          ['overall', null],
        ]);
        const result = await runtime.handle(scriptedSaga, {
          type: 'Do',
          key,
          actions: [
            { op: 'stage', stage: 'paying' },
            { op: 'schedule', name: 'payment-timeout' },
          ],
        });
        expect(result).toMatchObject({ step: 'paying', timersCancelled: 1, timersScheduled: 1 });
        expect((await rows.pendingTimers(sagaId)).map((t) => [t.name, t.step])).toEqual([
          ['overall', null],
          ['payment-timeout', 'paying'],
        ]);
      });

      it('staying in the same step keeps its timers', async () => {
        const { runtime, rows } = setup();
        const { key, sagaId } = await start(runtime, 'same-step');
        await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'schedule', name: 't' }] });
        const result = await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }, { op: 'stage', stage: 'open' }] });
        expect(result.timersCancelled).toBe(0);
        expect((await rows.pendingTimers(sagaId)).map((t) => t.name)).toEqual(['t']);
      });

      it('a timer replaced across a step change moves to the new step', async () => {
        const { runtime, rows } = setup();
        const { key, sagaId } = await start(runtime, 'move');
        await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'schedule', name: 't' }] });
        await runtime.handle(scriptedSaga, {
          type: 'Do',
          key,
          actions: [
            { op: 'stage', stage: 'next' },
            { op: 'schedule', name: 't' },
          ],
        });
        const pending = await rows.pendingTimers(sagaId);
        expect(pending.map((t) => [t.name, t.step])).toEqual([['t', 'next']]);
      });
    });
  });
}
