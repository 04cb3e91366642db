// A saga state property of MikroORM's `date` or `time` type holds a string ('2026-03-04', '13:45:10'). The
// state check (STATE_VALUE_INVALID) took it for a varchar of the property's `length`, which MikroORM sets to 0
// for these columns on PostgreSQL: every non-empty value was refused ("longer than 0 characters"), so no step
// could set one. The row, once written, must also be what MikroORM's own flush writes.
import { defineEntity } from '@mikro-orm/core';
import { describe, expect, it } from 'vitest';
import { defineSaga, SagaRuntime, SagaState, SagaStateSchema } from '../../src/index.js';
import { DIALECTS } from '../support/databases.js';
import { uniqueKey, useDatabase } from '../support/suite.js';

class CalendarSaga extends SagaState {
  key!: string;
  day: string | null = null;
  at: string | null = null;
  when: Date | null = null;
}

const CalendarSagaSchema = defineEntity({
  class: CalendarSaga,
  extends: SagaStateSchema,
  tableName: 'calendar_saga',
  properties: {
    key: { type: 'string', fieldName: 'key', unique: true },
    day: { type: 'date', fieldName: 'day', nullable: true },
    at: { type: 'time', fieldName: 'at', nullable: true },
    when: { type: 'Date', fieldName: 'when_', nullable: true },
  },
});

interface Slot {
  readonly day: string;
  readonly at: string;
  readonly when: string;
}

type CalendarMessage =
  | { readonly type: 'Start'; readonly key: string }
  | { readonly type: 'Book'; readonly key: string; readonly slot: Slot };

const applySlot = (saga: CalendarSaga, slot: Slot) => Object.assign(saga, { day: slot.day, at: slot.at, when: new Date(slot.when) });

const calendarSaga = defineSaga<CalendarSaga, CalendarMessage>({
  name: 'calendar',
  state: CalendarSaga,
  correlation: { property: 'key', from: { Start: (m) => m.key, Book: (m) => m.key } },
  startedBy: ['Start'],
  steps: {
    Start() {},
    Book(saga, { slot }) {
      applySlot(saga, slot);
    },
  },
});

const SLOT: Slot = { day: '2026-03-04', at: '13:45:10', when: '2026-03-04T23:30:00.123Z' };

for (const dialect of DIALECTS) {
  describe(`date and time state columns (${dialect})`, () => {
    const db = useDatabase(dialect, [CalendarSagaSchema]);
    const rowOf = async (key: string) => {
      const [row] = await db().orm.em.fork().getConnection().execute(`select * from calendar_saga where key = ?`, [key]);
      const { id: _id, key: _key, created_at: _c, updated_at: _u, ...rest } = row as Record<string, unknown>;
      return rest;
    };

    it("a step sets them, and the row is what MikroORM's flush writes", async () => {
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [calendarSaga] });
      const ours = uniqueKey('ours');
      const flushed = uniqueKey('flushed');
      await runtime.handle(calendarSaga, { type: 'Start', key: ours });
      await runtime.handle(calendarSaga, { type: 'Start', key: flushed });

      expect(await runtime.handle(calendarSaga, { type: 'Book', key: ours, slot: SLOT })).toMatchObject({ outcome: 'handled', version: 1 });
      const em = db().orm.em.fork();
      const reference = await em.findOneOrFail(CalendarSaga, { key: flushed });
      applySlot(reference, SLOT);
      reference.version = 1;
      await em.flush();

      expect(await rowOf(ours)).toEqual(await rowOf(flushed));
      const read = await db().orm.em.fork().findOneOrFail(CalendarSaga, { key: ours });
      expect([read.day, read.at?.slice(0, 8), read.when?.toISOString()]).toEqual([SLOT.day, SLOT.at, SLOT.when]);
    });
  });
}
