// The schema check says what happened, not only what is missing. SAGA_ENTITIES in `entities` but not in
// `entitiesTs` makes `migration:create` (run through tsx, so reading `entitiesTs`) write `drop table` for the
// library's tables: the check names SAGA_ENTITIES and 'entitiesTs' while the config is wrong, and once such a
// migration ran, it names the likely cause of the missing tables and the fix. PostgreSQL autovacuum settings the
// library's migrations set are advice: verify-schema says the schema fits, with advice.
import { randomUUID } from 'node:crypto';
import { rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { MikroORM } from '@mikro-orm/core';
import { afterEach, describe, expect, it } from 'vitest';
import { SagaDefinitionError, SagaRuntime, SagaSchemaError } from '../../src/index.js';
import { adviseSagaSchema, inspectSagaSchema, RECOMMENDED_AUTOVACUUM_SETTINGS, verifySagaSchema } from '../../src/operations/index.js';
import { createMigration } from '../../src/orm/schema-tools.js';
import { FakeClock } from '../../src/testing/index.js';
import { ScriptedSaga, scriptedSaga } from '../fixtures/scripted-saga.js';
import { cliDatabaseEnv, FIXTURE_FLAGS, runCliInProcess } from '../support/cli-process.js';
import { createTestDatabase, DIALECTS, type DialectName, type TestDatabase } from '../support/databases.js';
import { REPO_ROOT } from '../support/repository.js';

const fixtures = join(REPO_ROOT, 'test', 'fixtures');
const LIBRARY_TABLES = ['saga_handled_message', 'saga_inbox', 'saga_outbox', 'saga_timer'];

for (const dialect of DIALECTS) {
  describe(`the schema check explains missing library entities and tables (${dialect})`, () => {
    let db: TestDatabase | undefined;
    const dirs: string[] = [];
    afterEach(async () => {
      await db?.dispose();
      db = undefined;
      for (const dir of dirs.splice(0)) await rm(dir, { recursive: true, force: true });
    });

    /** A migrated database, and an ORM on it whose config has SAGA_ENTITIES in `entities` only, with `preferTs`. */
    async function trap(): Promise<{ db: TestDatabase; trapped: MikroORM; dropTables: () => Promise<void> }> {
      db = await createTestDatabase(dialect, [ScriptedSaga]);
      const trapped = await db.openAnother({ entitiesTs: [ScriptedSaga], preferTs: true });
      const dir = join(tmpdir(), `saga-trap-${randomUUID().slice(0, 8)}`);
      dirs.push(dir);
      const created = await createMigration(trapped, dir);
      const opened = db;
      // The generated migration's up(), statement by statement, as `migration:up` would run it.
      const dropTables = async () => {
        for (const sql of created.diff.up.filter((line) => line.trim() !== '')) await opened.orm.em.getConnection().execute(sql);
      };
      const dropped = created.diff.up.filter((sql) => /drop table/i.test(sql)).map((sql) => sql.match(/saga_\w+/)?.[0]);
      expect(dropped.sort()).toEqual(LIBRARY_TABLES);
      return { db: opened, trapped, dropTables };
    }

    it("without SAGA_ENTITIES in 'entitiesTs', the generated migration drops the library's tables and the check names both config keys", async () => {
      const { trapped } = await trap();
      const error = await inspectSagaSchema({ em: trapped.em, sagas: [scriptedSaga] }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(SagaDefinitionError);
      expect(error).toMatchObject({
        code: 'DEFINITION_INVALID',
        details: { missing: expect.arrayContaining(['SagaTimer', 'SagaOutbox']) },
      });
      const message = (error as Error).message;
      expect(message).toContain('SAGA_ENTITIES');
      expect(message).toContain("'entitiesTs'");
      expect(message).toContain("drops the library's tables");
      await expect(verifySagaSchema({ em: trapped.em })).rejects.toThrow("drops the library's tables");
      expect(() => new SagaRuntime({ em: trapped.em, sagas: [scriptedSaga] })).toThrow("drops the library's tables");
    });

    it('verify-schema with that config fails naming SAGA_ENTITIES, entitiesTs and the dropping migration', async () => {
      const { db } = await trap();
      const config = join(fixtures, 'entities-ts-without-saga-entities.config.ts');
      const sagas = ['--sagas', join(fixtures, 'scripted-saga.ts')];
      const run = await runCliInProcess(['verify-schema', '--config', config, ...sagas], REPO_ROOT, cliDatabaseEnv(db));
      expect(run.code).toBe(1);
      expect(run.stderr).toContain('DEFINITION_INVALID');
      expect(run.stderr).toContain("'entitiesTs'");
      expect(run.stderr).toContain("drops the library's tables");
    });

    it("after that migration ran, the runtime's start-up check names the likely cause and the fix, and writes nothing", async () => {
      const { db, dropTables } = await trap();
      await dropTables();
      const runtime = new SagaRuntime({ em: db.orm.em, sagas: [scriptedSaga], clock: new FakeClock() });
      const error = await runtime.handle(scriptedSaga, { type: 'Start', key: 'k' }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(SagaSchemaError);
      const message = (error as Error).message;
      expect(message).toContain(
        "Likely cause: the library's tables saga_timer, saga_outbox, saga_handled_message, saga_inbox were dropped by a migration generated without SAGA_ENTITIES",
      );
      expect(message).toContain("both 'entities' and 'entitiesTs'");
      expect((error as SagaSchemaError).details.causes).toHaveLength(1);
      expect(await db.orm.em.fork().count(ScriptedSaga)).toBe(0);
    });

    it('after that migration ran, verify-schema names the likely cause in text and JSON (exit 3)', async () => {
      const { db, dropTables } = await trap();
      await dropTables();
      const text = await runCliInProcess(['verify-schema', ...FIXTURE_FLAGS], REPO_ROOT, cliDatabaseEnv(db));
      expect(text.code).toBe(3);
      expect(text.stdout).toMatch(/Likely cause: the library's tables .* were dropped by a migration generated without SAGA_ENTITIES/);
      const json = await runCliInProcess(['verify-schema', '--json', ...FIXTURE_FLAGS], REPO_ROOT, cliDatabaseEnv(db));
      const report = JSON.parse(json.stdout);
      expect(report).toMatchObject({ ok: false, causes: [expect.stringContaining("'entitiesTs'")] });
      expect(report.problems.map((p: { table: string }) => p.table).sort()).toEqual(LIBRARY_TABLES);
    });

    it('a missing saga table has no library cause: the error names the table and the fix only', async () => {
      db = await createTestDatabase(dialect, [ScriptedSaga]);
      await db.orm.em.getConnection().execute('drop table "scripted_saga"');
      const error = await verifySagaSchema({ em: db.orm.em, sagas: [scriptedSaga] }).catch((e: unknown) => e);
      expect(error).toMatchObject({ code: 'SCHEMA_INVALID', details: { causes: [] } });
      expect((error as Error).message).not.toContain('Likely cause');
    });
  });
}

/** Every recommended setting of `table`, as advice. */
const adviceFor = (table: string) =>
  Object.entries(RECOMMENDED_AUTOVACUUM_SETTINGS).map(([setting, recommended]) => ({ table, setting, recommended }));

async function verifySchemaCli(db: TestDatabase, ...flags: string[]) {
  return runCliInProcess(['verify-schema', ...flags, ...FIXTURE_FLAGS], REPO_ROOT, cliDatabaseEnv(db));
}

for (const dialect of DIALECTS) {
  describe(`advice on table settings (${dialect})`, () => {
    let db: TestDatabase | undefined;
    afterEach(async () => {
      await db?.dispose();
      db = undefined;
    });
    const fresh = async (name: DialectName) => {
      db = await createTestDatabase(name, [ScriptedSaga]);
      return db;
    };

    if (dialect === 'postgresql') {
      it('the autovacuum settings missing are advice: verify-schema says the schema fits, with advice, in text and JSON', async () => {
        const db = await fresh(dialect);
        expect(await adviseSagaSchema({ em: db.orm.em })).toEqual([]);
        expect((await verifySchemaCli(db)).stdout.trim()).toBe('The schema fits mikro-orm-saga and the registered sagas.');

        const settings = Object.keys(RECOMMENDED_AUTOVACUUM_SETTINGS).join(', ');
        await db.orm.em.getConnection().execute(`alter table "saga_timer" reset (${settings})`);
        // A value of the app's own is its choice: only settings that are not set at all are advised.
        await db.orm.em.getConnection().execute(`alter table "saga_outbox" reset (${settings})`);
        await db.orm.em.getConnection().execute('alter table "saga_outbox" set (autovacuum_vacuum_scale_factor = 0.05)');
        const expected = [
          ...adviceFor('saga_timer'),
          ...adviceFor('saga_outbox').filter((a) => a.setting !== 'autovacuum_vacuum_scale_factor'),
        ];
        expect(await adviseSagaSchema({ em: db.orm.em })).toEqual(expected);
        await expect(verifySagaSchema({ em: db.orm.em, sagas: [scriptedSaga] })).resolves.toBeUndefined();

        const text = await verifySchemaCli(db);
        expect(text.code).toBe(0);
        expect(text.stdout).toContain('The schema fits mikro-orm-saga and the registered sagas, with advice:');
        expect(text.stdout).toContain(
          'alter table "saga_timer" set (autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_threshold = 1000, autovacuum_analyze_scale_factor = 0.02, autovacuum_analyze_threshold = 1000);',
        );
        expect(text.stdout).toContain('alter table "saga_outbox" set (autovacuum_vacuum_threshold = 1000,');
        const json = await verifySchemaCli(db, '--json');
        expect(json.code).toBe(0);
        expect(JSON.parse(json.stdout)).toEqual({ ok: true, problems: [], advice: expected });
      });
    } else {
      it('SQLite has no table settings: no advice, and verify-schema says the schema fits', async () => {
        const db = await fresh(dialect);
        expect(await adviseSagaSchema({ em: db.orm.em })).toEqual([]);
        const json = await verifySchemaCli(db, '--json');
        expect(JSON.parse(json.stdout)).toEqual({ ok: true, problems: [], advice: [] });
      });
    }
  });
}
