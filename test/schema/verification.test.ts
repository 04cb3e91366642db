// Schema verification on every database: a schema built from the migrations fits; a broken one is a SagaSchemaError
// naming every missing or different item and the fix, on demand and at start-up.
import { randomUUID } from 'node:crypto';
import type { MikroORM } from '@mikro-orm/core';
import { afterEach, describe, expect, it } from 'vitest';
import { SagaDispatchError, SagaDispatcher, SagaOutbox, SagaRuntime, SagaSchemaError, silentLogger } from '../../src/index.js';
import { inspectSagaSchema, SagaOperations, SCHEMA_FIX, verifySagaSchema } from '../../src/operations/index.js';
import { FakeClock } from '../../src/testing/index.js';
import { NumberedSaga, numberedSaga } from '../fixtures/numbered-saga.js';
import { ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { createTestDatabase, DIALECTS, type DialectName, type TestDatabase } from '../support/databases.js';

const sagas = [scriptedSaga, numberedSaga];

/** The name of the saga table's active-row index, as the catalog has it. */
async function activeIndexOf(orm: MikroORM, dialect: DialectName, table: string): Promise<string> {
  const em = orm.em.fork() as unknown as { execute(sql: string, params: unknown[]): Promise<Record<string, string>[]> };
  const rows =
    dialect === 'postgresql'
      ? await em.execute(`select indexname as name from pg_indexes where tablename = ? and indexdef like '%completed_at IS NULL%'`, [table])
      : await em.execute(
          `select name from sqlite_master where type = 'index' and tbl_name = ? and sql like '%where "completed_at" is null%'`,
          [table],
        );
  return rows[0]!.name!;
}

for (const dialect of DIALECTS) {
  describe(`schema verification (${dialect})`, () => {
    let db: TestDatabase | undefined;
    afterEach(async () => {
      await db?.dispose();
      db = undefined;
    });
    const fresh = async () => {
      db = await createTestDatabase(dialect, [ScriptedSaga, NumberedSaga]);
      return db;
    };
    const run = (orm: MikroORM, sql: string) => orm.em.getConnection().execute(sql);

    it('a database built from the migrations fits, saga tables included', async () => {
      const { orm } = await fresh();
      expect(await inspectSagaSchema({ em: orm.em, sagas })).toEqual([]);
      await expect(verifySagaSchema({ em: orm.em, sagas })).resolves.toBeUndefined();
    });

    it('names every missing table, column and index, and the command that fixes them', async () => {
      const { orm } = await fresh();
      const activeIndex = await activeIndexOf(orm, dialect, 'numbered_saga');
      await run(orm, 'drop index "saga_timer_pending_name_uniq"');
      await run(orm, 'drop index "saga_outbox_claim_idx"');
      await run(orm, 'alter table "saga_timer" drop column "calendar_key"');
      await run(orm, 'drop table "saga_handled_message"');
      await run(orm, `drop index "${activeIndex}"`);
      await run(orm, 'alter table "scripted_saga" drop column "version"');
      const error = await verifySagaSchema({ em: orm.em, sagas }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(SagaSchemaError);
      expect(error).toMatchObject({ code: 'SCHEMA_INVALID' });
      const problems = (error as SagaSchemaError).details.problems as { kind: string; table: string; item: string }[];
      expect(problems.map((p) => [p.kind, p.table, p.item]).sort()).toEqual(
        [
          ['column_missing', 'saga_timer', 'calendar_key'],
          ['column_missing', 'scripted_saga', 'version'],
          ['index_missing', 'numbered_saga', 'active-row index on numbered_saga'],
          ['index_missing', 'saga_outbox', 'saga_outbox_claim_idx'],
          ['index_missing', 'saga_timer', 'saga_timer_pending_name_uniq'],
          ['table_missing', 'saga_handled_message', 'saga_handled_message'],
        ].sort(),
      );
      const message = (error as Error).message;
      for (const item of [
        'calendar_key',
        'scripted_saga.version',
        'saga_timer_pending_name_uniq',
        'saga_outbox_claim_idx',
        'saga_handled_message',
      ]) {
        expect(message).toContain(item);
      }
      expect(message).toContain(SCHEMA_FIX);
      expect(message).toContain('npx mikro-orm migration:create');
    });

    it('names a column of another type or nullability, and an index with another definition', async () => {
      const { orm } = await fresh();
      await run(orm, 'drop table "saga_handled_message"');
      await run(
        orm,
        'create table "saga_handled_message" ("id" varchar(36) not null primary key, "saga_type" varchar(100) not null, "saga_id" varchar(36) not null, "message_id" varchar(200) not null, "version" varchar(10) not null, "processed_at" timestamp null)',
      );
      await run(orm, 'create unique index "saga_handled_message_uniq" on "saga_handled_message" ("saga_type", "saga_id", "message_id")');
      await run(orm, 'drop index "saga_timer_pending_name_uniq"');
      await run(orm, 'create unique index "saga_timer_pending_name_uniq" on "saga_timer" ("saga_type", "saga_id", "name")');
      const problems = await inspectSagaSchema({ em: orm.em, sagas });
      const byItem = Object.fromEntries(problems.map((p) => [`${p.table}.${p.item}`, p]));
      expect(byItem['saga_handled_message.version']).toMatchObject({ kind: 'column_type', expected: 'integer' });
      expect(byItem['saga_handled_message.processed_at']).toMatchObject({
        kind: 'column_nullability',
        expected: 'not null',
        actual: 'null',
      });
      expect(byItem['saga_timer.saga_timer_pending_name_uniq']).toMatchObject({ kind: 'index_different' });
      if (dialect === 'postgresql') {
        // PostgreSQL keeps uuid columns typed: varchar is another family there (SQLite stores uuids as text).
        expect(byItem['saga_handled_message.id']).toMatchObject({ kind: 'column_type', expected: 'uuid' });
      }
    });

    it('an operator call on a missing table is SCHEMA_INVALID naming the call, never the SQL or the values', async () => {
      const { orm } = await fresh();
      const secret = 'secret-order-7';
      await run(orm, 'drop table "scripted_saga"');
      await run(orm, 'drop table "saga_timer"');
      const ops = new SagaOperations({ em: orm.em, sagas });
      // Each call starts when the loop reaches it: started together, a later one that failed while an earlier one was
      // awaited would be an unhandled rejection until its turn (seen on MikroORM 7 under load).
      for (const [call, attempt] of [
        ['listSagas', () => ops.listSagas({ sagaType: 'scripted', correlation: secret, limit: 5 })],
        ['listTimers', () => ops.listTimers({ messageType: secret, limit: 5 })],
        [
          'forceComplete',
          () => ops.forceComplete({ sagaType: 'scripted', sagaId: '00000000-0000-4000-8000-000000000000', reason: secret }),
        ],
      ] as const) {
        const error = await (attempt as () => Promise<unknown>)().catch((e: unknown) => e);
        expect(error, call).toBeInstanceOf(SagaSchemaError);
        expect(error).toMatchObject({ code: 'SCHEMA_INVALID', details: { operation: call } });
        const message = (error as Error).message;
        expect(message).toContain(`${call} failed`);
        expect(message).not.toContain(secret);
        expect(message).not.toMatch(/select |from "/i);
        expect(String(((error as Error).cause as Error).message)).toMatch(/scripted_saga|saga_timer/);
      }
    });

    it('a requeue on a column that is missing is SCHEMA_INVALID at the first id, not a failed item per id, and changes nothing', async () => {
      const { orm } = await fresh();
      const at = new Date('2026-11-30T09:00:00Z');
      const ids = [randomUUID(), randomUUID()];
      const dead = { sagaType: 'scripted', messageType: 'M', payload: {}, headers: {}, availableAt: at, attempts: 2, createdAt: at };
      await orm.em.fork().insertMany(
        SagaOutbox,
        ids.map((id) => ({ ...dead, id, sagaId: randomUUID(), token: randomUUID(), dispatchedAt: at, outcome: 'dead_lettered' as const })),
      );
      await run(orm, 'alter table "saga_outbox" drop column "delivery_started_at"');
      const error = await new SagaOperations({ em: orm.em, sagas }).requeueOutbox(ids).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(SagaSchemaError);
      expect(error).toMatchObject({ code: 'SCHEMA_INVALID', details: { operation: 'requeueOutbox' } });
      const rows = await orm.em.getConnection().execute('select "outcome" from "saga_outbox"');
      expect(rows.map((row: { outcome: string }) => row.outcome)).toEqual(['dead_lettered', 'dead_lettered']);
    });

    it('the runtime checks before its first unit of work, and writes nothing on a mismatch; verifySchema: false skips it', async () => {
      const { orm } = await fresh();
      await run(orm, 'drop index "saga_timer_claim_idx"');
      const runtime = new SagaRuntime({ em: orm.em, sagas, clock: new FakeClock() });
      const error = await runtime.handle(scriptedSaga, { type: 'Start', key: 'k' }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(SagaSchemaError);
      expect((error as Error).message).toContain('saga_timer_claim_idx');
      expect(await orm.em.fork().count(ScriptedSaga)).toBe(0);
      await expect(runtime.verifySchema()).rejects.toBeInstanceOf(SagaSchemaError);

      const unchecked = new SagaRuntime({ em: orm.em, sagas, clock: new FakeClock(), verifySchema: false });
      expect(await unchecked.handle(scriptedSaga, { type: 'Start', key: 'k' })).toMatchObject({ outcome: 'started' });
    });

    it('the dispatcher checks before its first pass: the pass fails with the schema error as cause', async () => {
      const { orm } = await fresh();
      await run(orm, 'drop index "saga_outbox_claim_idx"');
      const runtime = new SagaRuntime({ em: orm.em, sagas, clock: new FakeClock(), verifySchema: false });
      const dispatcher = new SagaDispatcher({ runtime, logger: silentLogger });
      const error = await dispatcher.runOnce().catch((e: unknown) => e);
      expect(error).toBeInstanceOf(SagaDispatchError);
      expect((error as Error).cause).toBeInstanceOf(SagaSchemaError);
      expect(((error as Error).cause as Error).message).toContain('saga_outbox_claim_idx');
      const unchecked = new SagaDispatcher({ runtime, logger: silentLogger, verifySchema: false });
      expect(await unchecked.runOnce()).toMatchObject({ timers: { claimed: 0 } });
    });
  });
}
