// The app's MikroORM configuration, for its own code (app.ts) and for its own MikroORM 7 CLI, which reads the
// compiled dist/mikro-orm.config.js (MIKRO_ORM_CLI_CONFIG) with SAGA_APP_DIALECT, SAGA_APP_DB and
// SAGA_APP_MIGRATIONS (the folder `migration:create` writes to and `migration:up` runs from).
import type { Options } from '@mikro-orm/core';
import { Migrator } from '@mikro-orm/migrations';
import { PostgreSqlDriver } from '@mikro-orm/postgresql';
import { SqliteDriver } from '@mikro-orm/sqlite';
import { SAGA_ENTITIES } from 'mikro-orm-saga';
import { APP_ENTITIES } from './entities.js';

export type Dialect = 'postgresql' | 'sqlite';

/** `location`: a PostgreSQL URL or a SQLite file; `migrations`: MikroORM's migrations options. */
export function appConfig(
  dialect: Dialect,
  location: string,
  migrations: Options['migrations'],
  extra: Pick<Partial<Options>, 'metadataProvider' | 'debug' | 'logger'> = {},
): Partial<Options> {
  const common = { entities: [...SAGA_ENTITIES, ...APP_ENTITIES], extensions: [Migrator], migrations, ...extra };
  return dialect === 'postgresql'
    ? { ...common, driver: PostgreSqlDriver, clientUrl: location }
    : { ...common, driver: SqliteDriver, dbName: location };
}

export default appConfig(process.env.SAGA_APP_DIALECT === 'postgresql' ? 'postgresql' : 'sqlite', process.env.SAGA_APP_DB ?? 'cli.sqlite', {
  path: process.env.SAGA_APP_MIGRATIONS ?? 'dist/cli-migrations',
  // `cjs`: MikroORM 7 writes JavaScript migrations as CommonJS; a `.js` file would be ESM in this `type: module` app.
  glob: '*.cjs',
  emit: 'cjs',
  snapshot: false,
  silent: true,
});
