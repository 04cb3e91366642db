// The state check (src/saga/state-values.ts) judges a state value by the column type it is stored in. A built-in
// string column however declared (a type instance, a type name such as 'text', a columnType only) is checked: a
// U+0000 string is STATE_VALUE_INVALID before anything is written. A `date` or `time` property holds a string
// ('2026-03-04', '13:45:10') of any length (MikroORM gives those columns length 0 on PostgreSQL), and the row is what
// MikroORM's own flush writes. A user-defined `Type` is left to the type and the database: an array held by a type
// stored as text is written, not refused.
import { defineEntity, StringType, TextType, types } from '@mikro-orm/core';
import { describe, expect, it } from 'vitest';
import { defineSaga, SagaRuntime, SagaState, SagaStateSchema } from '../../src/index.js';
import { LabelListType } from '../fixtures/label-list-type.js';
import { DIALECTS } from '../support/databases.js';
import { uniqueKey, useDatabase } from '../support/suite.js';

class StyledSaga extends SagaState {
  key!: string;
  a?: string;
  b?: string;
  c?: string;
  d?: string;
  e?: string;
  f?: string;
  g?: string;
}

const StyledSagaSchema = defineEntity({
  class: StyledSaga,
  extends: SagaStateSchema,
  tableName: 'styled_saga',
  properties: {
    key: { type: 'string', fieldName: 'key', unique: true },
    a: { type: 'string', nullable: true },
    b: { type: 'text', nullable: true },
    c: { type: types.string, nullable: true },
    d: { type: new StringType(), nullable: true } as never,
    e: { type: TextType, nullable: true },
    f: { type: types.text, nullable: true },
    g: { type: 'string', columnType: 'varchar(20)', nullable: true },
  },
});

const PROPS = ['a', 'b', 'c', 'd', 'e', 'f', 'g'] as const;
type Msg = { readonly type: 'Start'; readonly key: string; readonly prop: (typeof PROPS)[number]; readonly text: string };

const styledSaga = defineSaga<StyledSaga, Msg>({
  name: 'styled',
  state: StyledSaga,
  correlation: { property: 'key', from: { Start: (m) => m.key } },
  startedBy: ['Start'],
  steps: {
    Start(saga, message) {
      saga[message.prop] = message.text;
    },
  },
});

for (const dialect of DIALECTS) {
  describe(`a built-in string column however declared is checked (${dialect})`, () => {
    const db = useDatabase(dialect, [StyledSagaSchema]);
    for (const prop of PROPS) {
      it(`refuses U+0000 in ${prop} with STATE_VALUE_INVALID`, async () => {
        const runtime = new SagaRuntime({ em: db().orm.em, sagas: [styledSaga] });
        const key = uniqueKey('styled');
        await expect(runtime.handle(styledSaga, { type: 'Start', key, prop, text: 'a\u0000b' })).rejects.toMatchObject({
          code: 'STATE_VALUE_INVALID',
        });
        const rows = await db().orm.em.fork().getConnection().execute('select count(*) as n from styled_saga where key = ?', [key]);
        expect(Number(rows[0].n)).toBe(0);
      });
    }
  });
}

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

class LabelledSaga extends SagaState {
  key!: string;
  labels: string[] = [];
}

const LabelledSagaSchema = defineEntity({
  class: LabelledSaga,
  extends: SagaStateSchema,
  tableName: 'labelled_saga',
  properties: {
    key: { type: 'string', fieldName: 'key', unique: true },
    labels: { type: LabelListType, fieldName: 'labels' },
  },
});

type LabelMessage =
  | { readonly type: 'Start'; readonly key: string }
  | { readonly type: 'Label'; readonly key: string; readonly label: string };

const labelledSaga = defineSaga<LabelledSaga, LabelMessage>({
  name: 'labelled',
  state: LabelledSaga,
  correlation: { property: 'key', from: { Start: (m) => m.key, Label: (m) => m.key } },
  startedBy: ['Start'],
  steps: {
    Start(saga) {
      saga.labels = ['new'];
    },
    Label(saga, message) {
      saga.labels = [...saga.labels, message.label];
    },
  },
});

for (const dialect of DIALECTS) {
  describe(`a state property of a custom type (${dialect})`, () => {
    const db = useDatabase(dialect, [LabelledSagaSchema]);

    it('holds an array through a type stored as text: written on start and on a later step, read back as the array', async () => {
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [labelledSaga] });
      const key = uniqueKey('labels');
      expect(await runtime.handle(labelledSaga, { type: 'Start', key })).toMatchObject({ outcome: 'started' });
      expect(await runtime.handle(labelledSaga, { type: 'Label', key, label: 'vip' })).toMatchObject({ outcome: 'handled' });
      const stored = await db().orm.em.fork().getConnection().execute('select labels from labelled_saga where key = ?', [key]);
      expect(stored).toEqual([{ labels: 'new,vip' }]);
      const saga = await db().orm.em.fork().findOneOrFail(LabelledSaga, { key });
      expect(saga.labels).toEqual(['new', 'vip']);
      expect(saga.version).toBe(1);
    });
  });
}
