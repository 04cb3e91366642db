// The shipped migrations create exactly what the entity metadata describes, partial indexes included; and
// migrations an application generates itself keep them, with MikroORM's metadata cache on.
import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { readdir, readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { type MigrationObject, MikroORM } from '@mikro-orm/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SAGA_MIGRATIONS, sagaMigration } from '../../migrations/index.js';
import { inspectSagaSchema } from '../../src/index.js';
import { ORM_MAJOR } from '../../src/orm/orm-major.js';
import { migrateUp, updateSchemaSql } from '../../src/orm/schema-tools.js';
import { ScriptedSaga } from '../fixtures/scripted-saga.js';
import { connectionOptions, createEmptyDatabase, DIALECTS, type EmptyDatabase, sagaDialectOf } from '../support/databases.js';
import { REPO_ROOT } from '../support/repository.js';
import { useDatabase } from '../support/suite.js';

const run = promisify(execFile);
// MikroORM 6's CLI has an ESM entry; 7 is ESM only (`cli.js`), installed in the v7 leg.
const cliEntry =
  ORM_MAJOR === 6
    ? join(REPO_ROOT, 'node_modules', '@mikro-orm', 'cli', 'esm.js')
    : join(REPO_ROOT, 'legs', 'mikro-orm-7', 'node_modules', '@mikro-orm', 'cli', 'cli.js');
// A decorated app entity (it has a source path, so MikroORM caches its metadata), in the decorators of the major.
const decorated = {
  file: join(REPO_ROOT, 'test', 'fixtures', ...(ORM_MAJOR === 6 ? ['v6', 'decorators-saga.ts'] : ['v7', 'legacy-decorators-saga.ts'])),
  entity: 'OrderSaga',
  table: 'order_saga',
};

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
      expect(await updateSchemaSql(libraryOnly().orm)).toBe('');
    });

    it('creates the filtered unique index over pending timer names and the partial claim indexes', async () => {
      const em = libraryOnly().orm.em.fork();
      const execute = (sql: string) => em.getConnection().execute<Record<string, unknown>[]>(sql);
      const timer = await indexSql(dialect, execute, 'saga_timer');
      expect(timer).toEqual(
        expect.arrayContaining([
          expect.stringMatching(
            /unique index saga_timer_pending_name_uniq on .*saga_timer.*\(saga_type, saga_id, name\) where \(?dispatched_at is null\)?/,
          ),
          expect.stringMatching(/index saga_timer_claim_idx on .*saga_timer.*\(available_at, id\) where \(?dispatched_at is null\)?/),
          expect.stringMatching(/index saga_timer_dispatched_at_idx on .*saga_timer.*\(dispatched_at\)$/),
        ]),
      );
      const outbox = await indexSql(dialect, execute, 'saga_outbox');
      expect(outbox).toEqual(
        expect.arrayContaining([
          expect.stringMatching(/index saga_outbox_claim_idx on .*saga_outbox.*\(available_at, id\) where \(?dispatched_at is null\)?/),
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
      expect(await updateSchemaSql(orm)).toBe('');
    });
  });
}

// Once MikroORM's metadata cache is warm (the default with the ts-morph provider), the saga table's partial index
// must not come back as a plain `(completed_at)` index: `migration:create` would write the wrong index, and a second
// `migration:create` after `migration:up` would not be clean. The cache and the migrations are made through the real
// CLI, one process per command, because that is when the cache is read back (and because vitest's decorator
// transform hides entity source paths from MikroORM, so it never reads the cache in-process). Applying the generated
// migration reads no metadata: the test runs it in this process, from the generated file.
for (const dialect of DIALECTS) {
  describe(`an app's own generated migrations, metadata cache on (${dialect})`, () => {
    // Inside the repository, so the generated migrations resolve @mikro-orm/migrations.
    const dir = join(REPO_ROOT, '.tmp', `generated-${randomUUID().slice(0, 8)}`);
    let db: EmptyDatabase;
    beforeAll(async () => {
      db = await createEmptyDatabase(dialect);
    });
    afterAll(async () => {
      await db?.drop();
      await rm(dir, { recursive: true, force: true });
    });

    const cli = async (command: string) => {
      const { stdout } = await run(process.execPath, ['--import', 'tsx', cliEntry, command], {
        // MikroORM 7's CLI checks that every @mikro-orm/* package in the cwd's package.json has its version: run it
        // from the leg, whose package.json lists 7's packages only.
        cwd: ORM_MAJOR === 6 ? REPO_ROOT : join(REPO_ROOT, 'legs', 'mikro-orm-7'),
        env: {
          ...process.env,
          MIKRO_ORM_CLI_CONFIG: join(REPO_ROOT, 'test', 'fixtures', 'generated-migrations.config.ts'),
          MIKRO_ORM_CLI_USE_TS_NODE: 'false',
          MIKRO_ORM_CLI_ALWAYS_ALLOW_TS: 'true',
          MIKRO_ORM_CLI_PREFER_TS: 'true',
          // Logs discovery, "using cached metadata for entity ..." included: the test checks the cache is read.
          MIKRO_ORM_CLI_VERBOSE: 'true',
          MIKRO_ORM_COLORS: 'false',
          SAGA_TEST_DIALECT: dialect,
          SAGA_TEST_LOCATION: db.location,
          SAGA_TEST_DIR: dir,
          SAGA_TEST_ENTITY_FILE: decorated.file,
        },
      });
      return stdout;
    };

    it('create -> up -> create reports no changes, and the partial index reaches the database', async () => {
      await cli('cache:generate'); // warms the metadata cache; every command below reads it
      const created = await cli('migration:create');
      expect(created).toContain(`using cached metadata for entity ${decorated.entity}`);
      const [file] = await readdir(join(dir, 'migrations'));
      const migration = (await readFile(join(dir, 'migrations', file!), 'utf8')).replaceAll('`', '"').replaceAll('\\"', '"');
      expect(migration).toMatch(
        new RegExp(
          `create index "${decorated.table}_completed_at_index" on "${decorated.table}" \\("created_at"\\) where "completed_at" is null`,
        ),
      );

      const { [decorated.entity]: entity } = await import(decorated.file);
      const generated = Object.values(await import(join(dir, 'migrations', file!)))[0] as MigrationObject['class'];
      const orm = await MikroORM.init({
        ...connectionOptions(dialect, db.location, [entity]),
        migrations: { migrationsList: [{ name: file!.replace(/\.ts$/, ''), class: generated }], snapshot: false, silent: true },
      });
      try {
        await migrateUp(orm);
        expect(await cli('migration:create')).toContain('No changes required');
        const em = orm.em.fork();
        const indexes = await indexSql(dialect, (sql) => em.getConnection().execute<Record<string, unknown>[]>(sql), decorated.table);
        expect(indexes).toEqual(
          expect.arrayContaining([
            expect.stringMatching(
              new RegExp(`index ${decorated.table}_completed_at_index on .*\\(created_at\\) where \\(?completed_at is null\\)?`),
            ),
          ]),
        );
      } finally {
        await orm.close(true);
      }
    }, 120_000);
  });
}

for (const dialect of DIALECTS) {
  describe(`the trace context migration (${dialect})`, () => {
    const db = useDatabase(dialect, [ScriptedSaga]);
    const name = dialect === 'postgresql' ? 'Migration20261207000000' : 'Migration20261207000001';

    it('adds saga_timer.trace_context and saga_outbox.trace_context; without them the schema check names both; down() drops them', async () => {
      const { em } = db().orm;
      expect(await inspectSagaSchema({ em })).toEqual([]);
      const migrator = db().orm.migrator as unknown as {
        down(options: { migrations: string[] }): Promise<unknown>;
        up(options: { migrations: string[] }): Promise<unknown>;
      };
      await migrator.down({ migrations: [name] });
      expect(await inspectSagaSchema({ em })).toEqual([
        { kind: 'column_missing', table: 'saga_timer', item: 'trace_context' },
        { kind: 'column_missing', table: 'saga_outbox', item: 'trace_context' },
      ]);
      await migrator.up({ migrations: [name] });
      expect(await inspectSagaSchema({ em })).toEqual([]);
      expect(await updateSchemaSql(db().orm)).toBe('');
    });
  });
}

describe('autovacuum settings of the dispatch tables (postgresql)', () => {
  const db = useDatabase('postgresql', []);
  const settingsOf = async () => {
    const rows = await db()
      .orm.em.fork()
      .getConnection()
      .execute<{ relname: string; reloptions: string[] | null }[]>(
        `select relname, reloptions from pg_class where relname in ('saga_timer', 'saga_outbox') and relkind = 'r' order by relname`,
      );
    return (rows as { relname: string; reloptions: string[] | null }[]).map((row) => ({
      table: row.relname,
      settings: [...(row.reloptions ?? [])].sort(),
    }));
  };
  const twoPercent = [
    'autovacuum_analyze_scale_factor=0.02',
    'autovacuum_analyze_threshold=1000',
    'autovacuum_vacuum_scale_factor=0.02',
    'autovacuum_vacuum_threshold=1000',
  ];

  it('vacuums and analyzes saga_timer and saga_outbox after 2% of their rows (at least 1,000) changed; down() resets them', async () => {
    expect(await settingsOf()).toEqual([
      { table: 'saga_outbox', settings: twoPercent },
      { table: 'saga_timer', settings: twoPercent },
    ]);
    const migrator = db().orm.migrator as unknown as {
      down(options: { to: string }): Promise<unknown>;
      up(): Promise<unknown>;
    };
    await migrator.down({ to: 'Migration20261201011500' });
    expect(await settingsOf()).toEqual([
      { table: 'saga_outbox', settings: [] },
      { table: 'saga_timer', settings: [] },
    ]);
    await migrator.up();
    expect((await settingsOf()).map((row: { settings: string[] }) => row.settings)).toEqual([twoPercent, twoPercent]);
  });
});

describe('sagaMigration, for an app that keeps its migrations in a folder', () => {
  it('returns the named migration class of the dialect', () => {
    for (const dialect of DIALECTS.map(sagaDialectOf)) {
      for (const migration of SAGA_MIGRATIONS[dialect]) expect(sagaMigration(dialect, migration.name)).toBe(migration.class);
    }
  });

  it('refuses a name the dialect does not have, listing the ones it has', () => {
    const sqliteName = SAGA_MIGRATIONS.sqlite[0]!.name;
    expect(() => sagaMigration('postgresql', sqliteName)).toThrow(
      expect.objectContaining({ code: 'OPTION_INVALID', message: expect.stringContaining(SAGA_MIGRATIONS.postgresql[0]!.name) }),
    );
  });
});
