/**
 * Opens the demo's database: an embedded SQLite file (no setup), or PostgreSQL when DATABASE_URL is set.
 * The library tables come from the library's migrations; the demo's own saga table from its entity.
 */
import { mkdirSync, rmSync } from 'node:fs';
import { MikroORM, type Options } from '@mikro-orm/core';
import { Migrator } from '@mikro-orm/migrations';
import { PostgreSqlDriver } from '@mikro-orm/postgresql';
import { SqliteDriver } from '@mikro-orm/sqlite';
import { SAGA_MIGRATIONS } from '../../migrations/index.js';
import { SAGA_ENTITIES } from '../../src/index.js';
import { dropSchema, migrateUp, updateSchema } from '../../src/orm/schema-tools.js';
import { OrderSagaState } from './order-saga.js';

export async function openDemoDatabase(): Promise<{ orm: MikroORM; where: string }> {
  const url = process.env.DATABASE_URL;
  const entities = [...SAGA_ENTITIES, OrderSagaState];
  let options: Options;
  let where: string;
  if (url) {
    options = {
      driver: PostgreSqlDriver,
      clientUrl: url,
      entities,
      extensions: [Migrator],
      migrations: { migrationsList: [...SAGA_MIGRATIONS.postgresql], tableName: 'saga_demo_migrations', silent: true, snapshot: false },
    };
    where = `PostgreSQL (${new URL(url).host}${new URL(url).pathname})`;
  } else {
    mkdirSync('.tmp', { recursive: true });
    rmSync('.tmp/demo.sqlite', { force: true });
    options = {
      driver: SqliteDriver,
      dbName: '.tmp/demo.sqlite',
      entities,
      extensions: [Migrator],
      migrations: { migrationsList: [...SAGA_MIGRATIONS.sqlite], silent: true, snapshot: false },
    };
    where = 'SQLite (.tmp/demo.sqlite)';
  }
  const orm = await MikroORM.init(options);
  if (url) {
    // Start from empty tables on a shared server: the demo owns these three tables and its migrations table.
    await dropSchema(orm, { dropMigrationsTable: false });
    await orm.em.getConnection().execute('drop table if exists "saga_demo_migrations"');
  }
  await migrateUp(orm);
  await updateSchema(orm);
  return { orm, where };
}
