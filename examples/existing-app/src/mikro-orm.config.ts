/**
 * The app's MikroORM config, found by the MikroORM CLI through package.json `mikro-orm.configPaths` and
 * imported by the server. SQLite (`SQLITE_PATH`, default ./app.sqlite), or PostgreSQL when `DATABASE_URL` is set.
 */
import type { Options } from '@mikro-orm/core';
import { Migrator } from '@mikro-orm/migrations';
import { PostgreSqlDriver } from '@mikro-orm/postgresql';
import { SqliteDriver } from '@mikro-orm/sqlite';
import { SAGA_ENTITIES } from 'mikro-orm-saga';

const dialect = process.env.DATABASE_URL ? 'postgresql' : 'sqlite';

const common = {
  // Folder-based discovery for the app's entities; the library's entities are classes in node_modules, so
  // they go by reference into BOTH lists (MikroORM reads one of them per run).
  entities: ['./dist/modules/**/*.entity.js', ...SAGA_ENTITIES],
  entitiesTs: ['./src/modules/**/*.entity.ts', ...SAGA_ENTITIES],
  // The CLI runs this file as TypeScript (through tsx), the server runs the compiled copy: each reads its own
  // entities and migrations.
  preferTs: import.meta.url.endsWith('.ts'),
  metadataCache: { enabled: true },
  extensions: [Migrator],
  migrations: {
    path: `./dist/migrations/${dialect}`,
    pathTs: `./src/migrations/${dialect}`,
    emit: 'ts',
    // `migration:create` diffs the entities against the migrated database.
    snapshot: false,
  },
} satisfies Options;

const config: Options =
  dialect === 'postgresql'
    ? { ...common, driver: PostgreSqlDriver, clientUrl: process.env.DATABASE_URL }
    : { ...common, driver: SqliteDriver, dbName: process.env.SQLITE_PATH ?? './app.sqlite' };

export default config;
