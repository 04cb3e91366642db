/**
 * MikroORM configuration for this repository's own tooling: generating and running the library's
 * migrations with the MikroORM CLI (`npm run mikro-orm -- migration:create`), for one dialect at a time.
 *
 *   SAGA_DIALECT=postgresql DATABASE_URL=postgres://postgres@127.0.0.1:5432/test npm run mikro-orm -- migration:up
 *   SAGA_DIALECT=sqlite SQLITE_PATH=./saga.sqlite npm run mikro-orm -- migration:up
 *
 * No snapshot is kept: `migration:create` diffs the entities against a database migrated to the latest
 * version, so run `migration:up` on a scratch database first.
 *
 * Applications do not use this file: they register the library's entities and migrations in their own config
 * (see README "Add it to your MikroORM app").
 */

import { defineConfig, type Options } from '@mikro-orm/core';
import { Migrator } from '@mikro-orm/migrations';
import { PostgreSqlDriver } from '@mikro-orm/postgresql';
import { SqliteDriver } from '@mikro-orm/sqlite';
import { SAGA_ENTITIES } from './src/entities/index.js';

const dialect = process.env.SAGA_DIALECT ?? 'sqlite';

const common = {
  entities: [...SAGA_ENTITIES],
  extensions: [Migrator],
  debug: process.env.MIKRO_ORM_DEBUG === 'true',
} satisfies Options;

export default dialect === 'postgresql'
  ? defineConfig({
      ...common,
      driver: PostgreSqlDriver,
      clientUrl: process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test',
      migrations: { path: 'migrations/postgresql', emit: 'ts', snapshot: false },
    })
  : defineConfig({
      ...common,
      driver: SqliteDriver,
      dbName: process.env.SQLITE_PATH ?? '.tmp/migrations.sqlite',
      migrations: { path: 'migrations/sqlite', emit: 'ts', snapshot: false },
    });
