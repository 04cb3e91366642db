// The shipped migrations create exactly what the entity metadata describes, partial indexes included.
import { describe, expect, it } from 'vitest';
import { ScriptedSaga } from './fixtures/scripted-saga.js';
import { DIALECTS } from './support/databases.js';
import { useDatabase } from './support/suite.js';

async function indexSql(dialect: string, execute: (sql: string) => Promise<Record<string, unknown>[]>, table: string) {
  const rows =
    dialect === 'postgresql'
      ? await execute(`select indexdef as sql from pg_indexes where tablename = '${table}' order by indexname`)
      : await execute(`select sql from sqlite_master where type = 'index' and tbl_name = '${table}' and sql is not null order by name`);
  return rows.map((r) => String(r.sql).replaceAll('"', '').replaceAll('`', '').toLowerCase());
}

for (const dialect of DIALECTS) {
  describe(`migrations (${dialect})`, () => {
    // No saga entities of our own: the library tables alone, built by the migrations.
    const libraryOnly = useDatabase(dialect, []);
    const withSaga = useDatabase(dialect, [ScriptedSaga]);

    it('after migrating, the schema diff against the entity metadata is empty', async () => {
      const diff = await libraryOnly().orm.getSchemaGenerator().getUpdateSchemaSQL({ wrap: false });
      expect(diff.trim()).toBe('');
    });

    it('creates the filtered unique index over pending timer names and the partial due indexes', async () => {
      const em = libraryOnly().orm.em.fork();
      const execute = (sql: string) => em.getConnection().execute<Record<string, unknown>[]>(sql);
      const timer = await indexSql(dialect, execute, 'saga_timer');
      expect(timer).toEqual(
        expect.arrayContaining([
          expect.stringMatching(
            /unique index saga_timer_pending_name_uniq on .*saga_timer.*\(saga_type, saga_id, name\) where \(?dispatched_at is null\)?/,
          ),
          expect.stringMatching(/index saga_timer_due_idx on .*saga_timer.*\(available_at\) where \(?dispatched_at is null\)?/),
          expect.stringMatching(/index saga_timer_dispatched_at_idx on .*saga_timer.*\(dispatched_at\)$/),
        ]),
      );
      const outbox = await indexSql(dialect, execute, 'saga_outbox');
      expect(outbox).toEqual(
        expect.arrayContaining([
          expect.stringMatching(/index saga_outbox_due_idx on .*saga_outbox.*\(available_at\) where \(?dispatched_at is null\)?/),
        ]),
      );
    });

    it('gives every saga table a partial index over active rows, and the diff stays empty', async () => {
      const orm = withSaga().orm;
      const em = orm.em.fork();
      const sagaIndexes = await indexSql(dialect, (sql) => em.getConnection().execute<Record<string, unknown>[]>(sql), 'scripted_saga');
      expect(sagaIndexes).toEqual(
        expect.arrayContaining([
          expect.stringMatching(
            /index scripted_saga_completed_at_index on .*scripted_saga.*\(created_at\) where \(?completed_at is null\)?/,
          ),
        ]),
      );
      expect((await orm.getSchemaGenerator().getUpdateSchemaSQL({ wrap: false })).trim()).toBe('');
    });
  });
}
