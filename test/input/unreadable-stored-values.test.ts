// A row written by another application or by hand can hold what JavaScript cannot: PostgreSQL's infinity and
// -infinity, text in a SQLite timestamp column, a SQLite version above 2^53 - 1, JSON nested thousands of levels
// deep. The runtime, the dispatcher, the operator API and the CLI agree on one answer: STORED_VALUE_INVALID naming
// the row and the column, and nothing written (never an Invalid Date taken for "active", a conflict retried ten
// times, a step blamed for the stored value, or an untyped "Invalid time value").
import { defineEntity } from '@mikro-orm/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  defineSaga,
  SagaDispatcher,
  type SagaError,
  SagaPersistenceError,
  SagaRuntime,
  SagaState,
  SagaStateSchema,
  silentLogger,
} from '../../src/index.js';
import { SagaOperations } from '../../src/operations/index.js';
import { FakeClock } from '../../src/testing/index.js';
import { type Action, ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { cliApp } from '../support/cli-process.js';
import { DIALECTS, isSqlite } from '../support/databases.js';
import { refusal } from '../support/refusal.js';
import { rowsOf } from '../support/rows.js';
import { uniqueKey, useDatabase } from '../support/suite.js';

/** A saga with a JSON column, for state nested too deep for MikroORM's JSON.stringify. */
class JsonSaga extends SagaState {
  key!: string;
  data: unknown = null;
}

const JsonSagaSchema = defineEntity({
  class: JsonSaga,
  extends: SagaStateSchema,
  tableName: 'json_saga',
  properties: {
    key: { type: 'string', length: 100, fieldName: 'key', unique: true },
    data: { type: 'json', fieldName: 'data', nullable: true },
  },
});

type JsonMessage =
  | { readonly type: 'Nest'; readonly key: string; readonly depth: number }
  | { readonly type: 'Touch'; readonly key: string }
  | { readonly type: 'Wake'; readonly key?: string };

/** `depth` arrays inside each other around a 1: `[[[1]]]` is 3 deep. */
const nested = (depth: number): unknown => {
  let value: unknown = 1;
  for (let i = 0; i < depth; i++) value = [value];
  return value;
};

const jsonSaga = defineSaga<JsonSaga, JsonMessage>({
  name: 'json',
  state: JsonSaga,
  correlation: { property: 'key', from: { Nest: (m) => m.key, Touch: (m) => m.key } },
  startedBy: ['Nest', 'Touch'],
  steps: {
    Nest(saga, message, ctx) {
      saga.data = nested(message.depth);
      ctx.schedule('wake', 1_000, { type: 'Wake' });
    },
    Touch(saga) {
      saga.data = [saga.data];
    },
    Wake() {},
  },
});

/** Expects STORED_VALUE_INVALID naming `column` (and the saga when `sagaId` is given), with the fix. */
function expectUnreadable(error: SagaError, column: string, sagaId?: string): void {
  expect(error).toBeInstanceOf(SagaPersistenceError);
  expect(error).toMatchObject({ code: 'STORED_VALUE_INVALID', details: { column } });
  expect(error.message).toContain(`column ${column}`);
  expect(error.message).toContain('Correct the row');
  if (sagaId) expect(error.message).toContain(sagaId);
}

for (const dialect of DIALECTS) {
  describe(`values JavaScript cannot read, stored in a row (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga, JsonSagaSchema]);
    const app = cliApp(db);
    beforeAll(() => app.create());
    afterAll(() => app.remove());

    const setup = () => {
      const clock = new FakeClock('2026-03-02T10:00:00Z');
      const runtime = new SagaRuntime({ em: db().orm.em, sagas: [scriptedSaga, jsonSaga], clock });
      const dispatcher = new SagaDispatcher({
        runtime,
        logger: silentLogger,
        maxAttempts: 2,
        backoff: { baseMs: 1_000, maxMs: 1_000, jitter: false },
      });
      return { clock, runtime, dispatcher, ops: new SagaOperations({ runtime }), rows: rowsOf(db().orm) };
    };
    const execute = (sql: string, params: unknown[] = []) => db().orm.em.getConnection().execute(sql, params);
    /** What JavaScript cannot read as a Date: infinity on PostgreSQL, text on SQLite. */
    const unreadableDate = (sign = '') => (isSqlite(dialect) ? `'${sign}someday'` : `'${sign}infinity'`);
    /** A scripted saga with a pending timer `tick`, due a second after the clock. */
    const started = async (runtime: SagaRuntime, actions: Action[] = [{ op: 'schedule', name: 'tick', after: 1_000 }]) => {
      const key = uniqueKey('stored');
      const { sagaId } = await runtime.handle(scriptedSaga, { type: 'Start', key, actions });
      return { key, sagaId: sagaId! };
    };

    it('a completed_at of infinity (text on SQLite): every entry point says STORED_VALUE_INVALID; a timer is charged no conflicts', async () => {
      const { clock, runtime, dispatcher, ops, rows } = setup();
      const { key, sagaId } = await started(runtime);
      await execute(`update scripted_saga set completed_at = ${unreadableDate()} where id = ?`, [sagaId]);
      const before = await rows.counts();

      // 'Do' is handled on completed sagas: before, the step ran and the runtime blamed it for completedAt.
      expectUnreadable(await refusal(runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] })), 'completed_at', sagaId);
      expectUnreadable(await refusal(ops.getSaga({ sagaType: 'scripted', sagaId })), 'completed_at', sagaId);
      expectUnreadable(await refusal(ops.listSagas({ sagaType: 'scripted', correlation: key, limit: 5 })), 'completed_at', sagaId);
      for (const change of [ops.forceComplete, ops.reopen]) {
        const error = await refusal(change.call(ops, { sagaType: 'scripted', sagaId, reason: 'operator' }));
        expectUnreadable(error, 'completed_at', sagaId);
      }
      expect(await rows.counts()).toEqual(before);
      expect(await rows.saga(key)).toMatchObject({ version: 0, counter: 0 });

      // The timer's delivery fails once per pass, with the reason, and no concurrency conflict is retried.
      clock.advance(1_000);
      expect((await dispatcher.runOnce()).timers).toMatchObject({ failed: 1, deadLettered: 0 });
      clock.advance(1_000);
      expect((await dispatcher.runOnce()).timers).toMatchObject({ deadLettered: 1 });
      expect(runtime.stats().concurrencyConflicts).toBe(0);
      const [timer] = await rows.timers({ sagaId });
      expect(timer).toMatchObject({ attempts: 2, outcome: 'dead_lettered' });
      expect(timer!.deadLetterReason).toContain('column completed_at');
      expect(timer!.deadLetterReason).toContain('Correct the row');

      // Corrected, the saga is handled again.
      await execute('update scripted_saga set completed_at = null where id = ?', [sagaId]);
      expect(await runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] })).toMatchObject({ outcome: 'handled' });
    });

    it('a created_at of -infinity (text on SQLite) is STORED_VALUE_INVALID, not a step that set createdAt', async () => {
      const { runtime, ops, rows } = setup();
      const { key, sagaId } = await started(runtime, []);
      await execute(`update scripted_saga set created_at = ${unreadableDate('-')} where id = ?`, [sagaId]);
      const error = await refusal(runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] }));
      expectUnreadable(error, 'created_at', sagaId);
      expect(error.message).not.toContain('A step');
      expectUnreadable(await refusal(ops.listSagas({ sagaType: 'scripted', correlation: key, limit: 5 })), 'created_at', sagaId);
      expect(await rows.saga(key)).toMatchObject({ version: 0, counter: 0 });
    });

    it('a timer or outbox row with a timestamp JavaScript cannot read is STORED_VALUE_INVALID in the listings, naming the row', async () => {
      const { runtime, ops } = setup();
      const { sagaId } = await started(runtime, [
        { op: 'schedule', name: 'tick', after: 1_000 },
        { op: 'send', message: { type: 'Hello' } },
      ]);
      const [timer] = (await ops.listTimers({ sagaId, limit: 5 })).items;
      await execute(`update saga_timer set locked_until = ${unreadableDate()} where id = ?`, [timer!.id]);
      const [message] = (await ops.listOutbox({ sagaId, limit: 5 })).items;
      await execute(`update saga_outbox set dispatched_at = ${unreadableDate('-')}, outcome = 'published' where id = ?`, [message!.id]);
      // Before, the listings showed an Invalid Date: null in JSON, a published message as pending, a crash in a table.
      const timers = await refusal(ops.listTimers({ sagaId, limit: 5 }));
      expectUnreadable(timers, 'locked_until', sagaId);
      expect(timers.message).toContain(`Row ${timer!.id} of table saga_timer (saga scripted/${sagaId})`);
      expectUnreadable(await refusal(ops.listOutbox({ sagaId, limit: 5 })), 'dispatched_at', sagaId);
      expectUnreadable(await refusal(ops.getSaga({ sagaType: 'scripted', sagaId })), 'locked_until', sagaId);
    });

    it('the CLI prints STORED_VALUE_INVALID, also with --json, and exits 1', async () => {
      const { runtime } = setup();
      const { key, sagaId } = await started(runtime);
      await execute(`update scripted_saga set completed_at = ${unreadableDate()} where id = ?`, [sagaId]);
      const runs = [
        await app.cliInProcess('sagas', 'show', 'scripted', sagaId, '--json'),
        await app.cliInProcess('sagas', 'list', '--type', 'scripted', '--correlation', key, '--json'),
      ];
      for (const run of runs) {
        expect(run.code, run.stderr).toBe(1);
        expect(JSON.parse(run.stdout)).toEqual({
          error: { code: 'STORED_VALUE_INVALID', message: expect.stringContaining('column completed_at') },
        });
        expect(run.stderr).toContain('[STORED_VALUE_INVALID]');
      }
      const text = await app.cliInProcess('sagas', 'show', 'scripted', sagaId);
      expect(text).toMatchObject({ code: 1, stderr: expect.stringContaining('Correct the row') });
      expect(text.stderr).not.toContain('Invalid time value');
    });

    if (isSqlite(dialect)) {
      // PostgreSQL's version column is a 32-bit integer: it holds no such value.
      it('a version above 2^53 - 1 is STORED_VALUE_INVALID at once, not ten conflicts and CONCURRENCY_CONFLICT', async () => {
        const { runtime, ops, rows } = setup();
        const { key, sagaId } = await started(runtime, []);
        await execute('update scripted_saga set version = 9007199254740993 where id = ?', [sagaId]);
        const error = await refusal(runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] }));
        expectUnreadable(error, 'version', sagaId);
        expect(runtime.stats().concurrencyConflicts).toBe(0);
        expectUnreadable(await refusal(ops.listSagas({ sagaType: 'scripted', correlation: key, limit: 5 })), 'version', sagaId);
        const forced = await refusal(ops.forceComplete({ sagaType: 'scripted', sagaId, reason: 'operator' }));
        expectUnreadable(forced, 'version', sagaId);
        expect((await rows.saga(key))!.counter).toBe(0);
      });
    }

    describe('JSON nested 5,000 levels deep', () => {
      it('set by a step: STATE_VALUE_INVALID naming the JSON property, nothing written', async () => {
        const { runtime } = setup();
        const key = uniqueKey('deep');
        const error = await refusal(runtime.handle(jsonSaga, { type: 'Nest', key, depth: 5_000 }));
        expect(error).toMatchObject({ code: 'STATE_VALUE_INVALID', details: { sagaType: 'json' } });
        expect(error.message).toContain('JSON property data');
        expect(await db().orm.em.fork().count(JsonSaga, { key })).toBe(0);
      });

      it('stored by hand: STORED_VALUE_INVALID naming the column in the runtime, the dispatcher and the operator API', async () => {
        const { clock, runtime, dispatcher, ops } = setup();
        const key = uniqueKey('deep');
        const { sagaId } = await runtime.handle(jsonSaga, { type: 'Nest', key, depth: 3 });
        const deep = `${'['.repeat(5_000)}1${']'.repeat(5_000)}`;
        await execute('update json_saga set data = ? where id = ?', [deep, sagaId]);
        // Before: PERSISTENCE_FAILED "reading json_saga failed (RangeError)" for every message.
        expectUnreadable(await refusal(runtime.handle(jsonSaga, { type: 'Touch', key })), 'data');
        expectUnreadable(await refusal(ops.getSaga({ sagaType: 'json', sagaId: sagaId! })), 'data', sagaId!);
        expectUnreadable(await refusal(ops.getSaga({ sagaType: 'json', correlation: key })), 'data');
        clock.advance(1_000);
        await dispatcher.runOnce();
        const [timer] = (await ops.listTimers({ sagaId: sagaId!, limit: 5 })).items;
        expect(timer!.lastError).toContain(`Saga json/${sagaId} (table json_saga): column data holds JSON nested too deep`);
      });
    });
  });
}
