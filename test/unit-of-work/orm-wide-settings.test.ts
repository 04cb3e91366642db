// ORM-wide MikroORM settings under which every message of a saga is still handled as under the defaults.
// Read settings: the unit of work reads its saga row with a SELECT of its own when the mapping allows, else with
// em.findOne (src/saga/unit-of-work/load-instance.ts); with `disableIdentityMap` em.findOne returns an entity its
// EntityManager does not manage, and with a global `resultCache` the cached first answer. Both reads must read afresh
// into the unit of work. `forceUndefined: true` hydrates and compares a null column as undefined: the start message
// (MikroORM's flush inserts the row), a later message (the library's own UPDATE, or MikroORM's flush), a timer fired by
// the dispatcher and a saga with a nullable property of its own must still be written.
import { defineEntity, type MikroORM, type Options } from '@mikro-orm/core';
import { beforeAll, describe, expect, it } from 'vitest';
import { defineSaga, SagaDispatcher, SagaRuntime, SagaState, SagaStateSchema, silentLogger } from '../../src/index.js';
import { FakeClock } from '../../src/testing/index.js';
import { DIALECTS } from '../support/databases.js';
import { uniqueKey, useDatabase } from '../support/suite.js';

class PlainConfigSaga extends SagaState {
  key!: string;
  count: number = 0;
}

const PlainConfigSagaSchema = defineEntity({
  class: PlainConfigSaga,
  extends: SagaStateSchema,
  tableName: 'plain_config_saga',
  properties: {
    key: { type: 'string', fieldName: 'key', unique: true },
    count: { type: 'integer', fieldName: 'count' },
  },
});

/** A formula: read by em.findOne, not by the library's own SELECT. */
class FormulaConfigSaga extends SagaState {
  key!: string;
  count: number = 0;
  doubled?: number;
}

const FormulaConfigSagaSchema = defineEntity({
  class: FormulaConfigSaga,
  extends: SagaStateSchema,
  tableName: 'formula_config_saga',
  properties: {
    key: { type: 'string', fieldName: 'key', unique: true },
    count: { type: 'integer', fieldName: 'count' },
    doubled: { type: 'integer', formula: (alias: string) => `${alias}.count * 2`, persist: false, nullable: true },
  },
});

type Message = { readonly type: 'Start'; readonly key: string } | { readonly type: 'Inc'; readonly key: string };

function counterSaga(name: string, state: typeof PlainConfigSaga | typeof FormulaConfigSaga) {
  return defineSaga<PlainConfigSaga, Message>({
    name,
    state,
    correlation: { property: 'key', from: { Start: (m) => m.key, Inc: (m) => m.key } },
    startedBy: ['Start'],
    steps: {
      Start() {},
      Inc(saga) {
        saga.count++;
      },
    },
  });
}

const SAGAS = [
  { saga: counterSaga('plain-config', PlainConfigSaga), state: PlainConfigSaga },
  { saga: counterSaga('formula-config', FormulaConfigSaga), state: FormulaConfigSaga },
];

const CONFIGS: Partial<Options>[] = [{ disableIdentityMap: true }, { resultCache: { global: 60_000 } }];

for (const dialect of DIALECTS) {
  describe(`the saga read under ORM-wide read settings (${dialect})`, () => {
    const db = useDatabase(dialect, [PlainConfigSagaSchema, FormulaConfigSagaSchema]);

    for (const overrides of CONFIGS) {
      it(`${JSON.stringify(overrides)}: every step sees the saga's row and its changes are written, whatever the mapping`, async () => {
        const orm = await db().openAnother(overrides);
        for (const { saga, state } of SAGAS) {
          const runtime = new SagaRuntime({ em: orm.em, sagas: [saga] });
          const key = uniqueKey(saga.name);
          expect(await runtime.handle(saga, { type: 'Start', key }), saga.name).toMatchObject({ outcome: 'started' });
          expect(await runtime.handle(saga, { type: 'Inc', key }), saga.name).toMatchObject({ outcome: 'handled', version: 1 });
          expect(await runtime.handle(saga, { type: 'Inc', key }), saga.name).toMatchObject({ outcome: 'handled', version: 2 });
          expect(await db().orm.em.fork().findOneOrFail(state, { key }), saga.name).toMatchObject({ count: 2, version: 2 });
        }
      });
    }
  });
}

class UndefinedCounterSaga extends SagaState {
  key!: string;
  count: number = 0;
  fired: number = 0;
}

const UndefinedCounterSagaSchema = defineEntity({
  class: UndefinedCounterSaga,
  extends: SagaStateSchema,
  tableName: 'undefined_counter_saga',
  properties: {
    key: { type: 'string', fieldName: 'key', unique: true },
    count: { type: 'integer', fieldName: 'count' },
    fired: { type: 'integer', fieldName: 'fired' },
  },
});

class UndefinedNoteSaga extends SagaState {
  key!: string;
  note: string | null = null;
  count: number = 0;
}

const UndefinedNoteSagaSchema = defineEntity({
  class: UndefinedNoteSaga,
  extends: SagaStateSchema,
  tableName: 'undefined_note_saga',
  properties: {
    key: { type: 'string', fieldName: 'key', unique: true },
    note: { type: 'text', fieldName: 'note', nullable: true },
    count: { type: 'integer', fieldName: 'count' },
  },
});

type CounterMessage =
  | { readonly type: 'Start'; readonly key: string }
  | { readonly type: 'Inc'; readonly key: string }
  | { readonly type: 'Remind'; readonly key: string };

const undefinedCounterSaga = defineSaga<UndefinedCounterSaga, CounterMessage>({
  name: 'undefined-counter',
  state: UndefinedCounterSaga,
  correlation: { property: 'key', from: { Start: (m) => m.key, Inc: (m) => m.key, Remind: (m) => m.key } },
  startedBy: ['Start'],
  steps: {
    Start(saga, message, ctx) {
      ctx.schedule('remind', { minutes: 5 }, { type: 'Remind', key: message.key });
      saga.count = 0;
    },
    Inc(saga) {
      saga.count++;
    },
    Remind(saga) {
      saga.fired++;
    },
  },
});

type NoteMessage =
  | { readonly type: 'Start'; readonly key: string }
  | { readonly type: 'Note'; readonly key: string; readonly note: string | null }
  | { readonly type: 'Inc'; readonly key: string };

const undefinedNoteSaga = defineSaga<UndefinedNoteSaga, NoteMessage>({
  name: 'undefined-note',
  state: UndefinedNoteSaga,
  correlation: { property: 'key', from: { Start: (m) => m.key, Note: (m) => m.key, Inc: (m) => m.key } },
  startedBy: ['Start'],
  steps: {
    Start() {},
    Note(saga, message) {
      saga.note = message.note;
    },
    Inc(saga) {
      saga.count++;
    },
  },
});

for (const dialect of DIALECTS) {
  describe(`sagas under MikroORM's forceUndefined: true (${dialect})`, () => {
    const db = useDatabase(dialect, [UndefinedCounterSagaSchema, UndefinedNoteSagaSchema]);
    let orm: MikroORM;
    beforeAll(async () => {
      orm = await db().openAnother({ forceUndefined: true });
    });

    it('a start message inserts the saga and a second message updates it', async () => {
      const clock = new FakeClock();
      const runtime = new SagaRuntime({ em: orm.em, sagas: [undefinedCounterSaga], clock });
      const key = uniqueKey('start');
      expect(await runtime.handle(undefinedCounterSaga, { type: 'Start', key })).toMatchObject({ outcome: 'started', version: 0 });
      expect(await runtime.handle(undefinedCounterSaga, { type: 'Inc', key })).toMatchObject({ outcome: 'handled', version: 1 });
      expect(await runtime.handle(undefinedCounterSaga, { type: 'Inc', key })).toMatchObject({ outcome: 'handled', version: 2 });
      // Not completed: a null completed_at is hydrated as undefined, and still means active.
      const [row] = await orm.em
        .fork()
        .getConnection()
        .execute('select count, version, completed_at from undefined_counter_saga where key = ?', [key]);
      expect(row).toMatchObject({ count: 2, version: 2, completed_at: null });
    });

    it('a timer fires through the dispatcher', async () => {
      const clock = new FakeClock();
      const runtime = new SagaRuntime({ em: orm.em, sagas: [undefinedCounterSaga], clock });
      const key = uniqueKey('timer');
      await runtime.handle(undefinedCounterSaga, { type: 'Start', key });
      const dispatcher = new SagaDispatcher({ runtime, logger: silentLogger });
      clock.advance({ minutes: 6 });
      // Other tests' sagas of this database scheduled the same reminder: this saga's row tells what fired for it.
      const pass = await dispatcher.runOnce();
      expect(pass.timers.fired).toBeGreaterThanOrEqual(1);
      expect(pass.timers.fired).toBe(pass.timers.claimed);
      const [row] = await orm.em
        .fork()
        .getConnection()
        .execute('select fired, version, completed_at from undefined_counter_saga where key = ?', [key]);
      expect(row).toMatchObject({ fired: 1, version: 1, completed_at: null });
    });

    it('a saga with a nullable property: null, a value and null again are written', async () => {
      const runtime = new SagaRuntime({ em: orm.em, sagas: [undefinedNoteSaga] });
      const key = uniqueKey('note');
      expect(await runtime.handle(undefinedNoteSaga, { type: 'Start', key })).toMatchObject({ outcome: 'started', version: 0 });
      expect(await runtime.handle(undefinedNoteSaga, { type: 'Inc', key })).toMatchObject({ outcome: 'handled', version: 1 });
      expect(await runtime.handle(undefinedNoteSaga, { type: 'Note', key, note: 'hello' })).toMatchObject({
        outcome: 'handled',
        version: 2,
      });
      expect((await orm.em.fork().findOneOrFail(UndefinedNoteSaga, { key })).note).toBe('hello');
      expect(await runtime.handle(undefinedNoteSaga, { type: 'Note', key, note: null })).toMatchObject({ outcome: 'handled', version: 3 });
      const [row] = await orm.em
        .fork()
        .getConnection()
        .execute('select note, count, version from undefined_note_saga where key = ?', [key]);
      expect(row).toMatchObject({ note: null, count: 1, version: 3 });
      const [state] = await orm.em.fork().getConnection().execute('select completed_at from undefined_note_saga where key = ?', [key]);
      expect(state).toMatchObject({ completed_at: null });
    });
  });
}
