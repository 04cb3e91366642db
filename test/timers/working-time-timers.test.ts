// Timers in working time on every database: scheduled with a calendar key, the due instant is computed in the
// business's own zone and the key is stored on the row; the dispatcher fires it at that instant of the fake clock,
// not before; a timer's step schedules its successor in working time; replacing and rescheduling keep the rules;
// an unknown key is refused at scheduling with nothing written.
import { describe, expect, it } from 'vitest';
import { SagaDispatcher, SagaRuntime, silentLogger, WorkingTimeCalendar } from '../../src/index.js';
import { SagaOperations } from '../../src/operations/index.js';
import { FakeClock } from '../../src/testing/index.js';
import { ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { DIALECTS } from '../support/databases.js';
import { rowsOf } from '../support/rows.js';
import { uniqueKey, useDatabase } from '../support/suite.js';

const OFFICE = {
  monday: ['09:00-12:30', '13:30-17:30'],
  tuesday: ['09:00-12:30', '13:30-17:30'],
  wednesday: ['09:00-12:30', '13:30-17:30'],
  thursday: ['09:00-12:30', '13:30-17:30'],
  friday: ['09:00-12:30', '13:30-17:30'],
  saturday: ['09:00-13:00'],
};

for (const dialect of DIALECTS) {
  describe(`timers in working time (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);
    const setup = () => {
      // Friday 2026-03-27, 16:00 in Berlin; the clocks go forward on Sunday.
      const clock = new FakeClock('2026-03-27T16:00:00+01:00');
      const runtime = new SagaRuntime({
        em: db().orm.em,
        sagas: [scriptedSaga],
        clock,
        calendars: { 'berlin-office': new WorkingTimeCalendar({ timeZone: 'Europe/Berlin', hours: OFFICE, holidays: ['2026-04-03'] }) },
      });
      const dispatcher = new SagaDispatcher({ runtime, clock, logger: silentLogger });
      return { clock, runtime, dispatcher, rows: rowsOf(db().orm) };
    };
    const start = async (runtime: SagaRuntime) => {
      const key = uniqueKey('office');
      const result = await runtime.handle(scriptedSaga, { type: 'Start', key });
      return { key, sagaId: result.sagaId! };
    };

    it('fires at the working-time instant of the fake clock, and its step schedules the next one in working time', async () => {
      const { clock, runtime, dispatcher, rows } = setup();
      const { key, sagaId } = await start(runtime);
      // The woken step asks for 7 more working hours: all of Monday's, so it is due when Tuesday opens.
      const next = { op: 'schedule', name: 'follow-up', after: { hours: 7 }, calendar: 'berlin-office' } as const;
      await runtime.handle(scriptedSaga, {
        type: 'Do',
        key,
        actions: [
          {
            op: 'schedule',
            name: 'follow-up',
            after: { hours: 6 },
            calendar: 'berlin-office',
            message: { type: 'Tick', label: 'first', actions: [next] },
          },
        ],
      });
      // Friday 1.5 h, Saturday 4 h, Monday (summer time) the last 30 minutes.
      const due = new Date('2026-03-30T09:30:00+02:00');
      expect(await rows.pendingTimers(sagaId)).toMatchObject([{ name: 'follow-up', calendarKey: 'berlin-office', dueAt: due }]);

      clock.set(new Date(due.getTime() - 1));
      expect((await dispatcher.runOnce()).timers).toMatchObject({ claimed: 0, fired: 0 });
      clock.set(due);
      expect((await dispatcher.runOnce()).timers).toMatchObject({ claimed: 1, fired: 1 });

      expect((await rows.saga(key))?.log).toBe('started;tick:first;');
      const timers = await rows.timers({ sagaId });
      expect(timers.filter((t) => t.outcome === 'fired')).toMatchObject([{ dueAt: due, calendarKey: 'berlin-office' }]);
      expect(await rows.pendingTimers(sagaId)).toMatchObject([
        { name: 'follow-up', calendarKey: 'berlin-office', dueAt: new Date('2026-03-31T09:00:00+02:00') },
      ]);
    });

    it('replacing a pending calendar timer recomputes its due instant in place; without a key it is wall time again', async () => {
      const { clock, runtime, rows } = setup();
      const { key, sagaId } = await start(runtime);
      await runtime.handle(scriptedSaga, {
        type: 'Do',
        key,
        actions: [{ op: 'schedule', name: 'r', after: { hours: 2 }, calendar: 'berlin-office' }],
      });
      const [first] = await rows.pendingTimers(sagaId);
      expect(first).toMatchObject({ calendarKey: 'berlin-office', dueAt: new Date('2026-03-28T09:30:00+01:00') });

      // Thursday before Easter, 17:00: Good Friday (2026-04-03) is a holiday, so the hour ends on Saturday.
      clock.set(new Date('2026-04-02T17:00:00+02:00'));
      await runtime.handle(scriptedSaga, {
        type: 'Do',
        key,
        actions: [{ op: 'schedule', name: 'r', after: { hours: 1 }, calendar: 'berlin-office' }],
      });
      const [replaced] = await rows.pendingTimers(sagaId);
      expect(replaced).toMatchObject({ id: first!.id, calendarKey: 'berlin-office', dueAt: new Date('2026-04-04T09:30:00+02:00') });
      expect(replaced!.token).not.toBe(first!.token);

      await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'schedule', name: 'r', after: { hours: 1 } }] });
      expect(await rows.pendingTimers(sagaId)).toMatchObject([
        { id: first!.id, calendarKey: null, dueAt: new Date('2026-04-02T18:00:00+02:00') },
      ]);
    });

    it('an absolute date moves to the next opening; an operator reschedule keeps the key', async () => {
      const { runtime, rows } = setup();
      const { key, sagaId } = await start(runtime);
      await runtime.handle(scriptedSaga, {
        type: 'Do',
        key,
        actions: [{ op: 'schedule', name: 'at', at: '2026-03-29T10:00:00+02:00', calendar: 'berlin-office' }],
      });
      const [timer] = await rows.pendingTimers(sagaId);
      expect(timer).toMatchObject({ calendarKey: 'berlin-office', dueAt: new Date('2026-03-30T09:00:00+02:00') });

      const ops = new SagaOperations({ runtime });
      const moved = new Date('2026-03-30T15:00:00+02:00');
      expect(await ops.rescheduleTimers([timer!.id], moved)).toMatchObject({ affected: 1 });
      expect(await rows.pendingTimers(sagaId)).toMatchObject([{ id: timer!.id, calendarKey: 'berlin-office', dueAt: moved }]);
    });

    it('an unknown calendar key is CALENDAR_UNKNOWN at scheduling, naming the registered keys, and writes nothing', async () => {
      const { runtime, rows } = setup();
      const { key, sagaId } = await start(runtime);
      const before = await rows.saga(key);
      const error = await runtime
        .handle(scriptedSaga, {
          type: 'Do',
          key,
          actions: [{ op: 'inc' }, { op: 'schedule', name: 't', after: 1_000, calendar: 'berlin' }],
        })
        .catch((e: unknown) => e);
      expect(error).toMatchObject({ code: 'CALENDAR_UNKNOWN', details: { timerName: 't', calendarKey: "'berlin'" } });
      expect((error as Error).message).toContain('(registered: berlin-office)');
      expect(await rows.pendingTimers(sagaId)).toEqual([]);
      expect(await rows.saga(key)).toMatchObject({ version: before!.version, counter: 0 });
    });
  });
}
