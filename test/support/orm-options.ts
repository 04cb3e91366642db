/**
 * MikroORM settings for a test database without the migrator: what a child process of the reliability tests opens
 * (its parent built the database), so it does not load `@mikro-orm/migrations` (about a third of its start-up).
 * `connectionOptions` (databases.ts) adds the migrations to them.
 */
import type { Options } from '@mikro-orm/core';
import { PostgreSqlDriver } from '@mikro-orm/postgresql';
import { SqliteDriver } from '@mikro-orm/sqlite';
import { SAGA_ENTITIES } from '../../src/index.js';
import type { DialectName, TestEntity } from './databases.js';
import { LOADED_ORM_MAJOR } from './orm-leg.js';

/** Parses a dialect named on a child process's command line. */
export function parseDialect(name: string | undefined): DialectName | undefined {
  return ['postgresql', 'sqlite', 'better-sqlite'].includes(name ?? '') ? (name as DialectName) : undefined;
}

// Loaded only on 6: the MikroORM 7 leg resolves every `@mikro-orm/*` import from its own folder, which lacks it.
// The name is a variable so that vite does not resolve it when it transforms this file (on 7 that fails).
const BETTER_SQLITE_PACKAGE = '@mikro-orm/better-sqlite';
const BetterSqliteDriver =
  LOADED_ORM_MAJOR === 6
    ? ((await import(BETTER_SQLITE_PACKAGE)) as typeof import('@mikro-orm/better-sqlite')).BetterSqliteDriver
    : undefined;

/** The MikroORM driver class for a SQLite dialect. */
function sqliteDriver(dialect: 'sqlite' | 'better-sqlite'): Options['driver'] {
  if (dialect === 'sqlite') return SqliteDriver;
  if (!BetterSqliteDriver) throw new Error('@mikro-orm/better-sqlite exists for MikroORM 6 only');
  return BetterSqliteDriver;
}

/** The driver, connection and entities (the library's and `entities`) of a test database, no migrations. */
export function ormOptions(dialect: DialectName, location: string, entities: TestEntity[]): Options {
  const common = {
    entities: [...SAGA_ENTITIES, ...entities],
    allowGlobalContext: false,
    debug: process.env.MIKRO_ORM_DEBUG === 'true',
  };
  return dialect === 'postgresql'
    ? { ...common, driver: PostgreSqlDriver, clientUrl: location, pool: { min: 0, max: 20 } }
    : { ...common, driver: sqliteDriver(dialect), dbName: location };
}

/**
 * Settings that give each SQLite connection a busy timeout of `ms` (the defaults: 1,000 ms with node-sqlite3,
 * 5,000 ms with better-sqlite3). On 6 knex hands each new connection to `pool.afterCreate`; on 7 `driverOptions`
 * go to better-sqlite3's constructor (test/transactions/sqlite/drivers.test.ts pins both).
 */
export function sqliteBusyTimeout(dialect: 'sqlite' | 'better-sqlite', ms: number): Partial<Options> {
  if (LOADED_ORM_MAJOR >= 7) return { driverOptions: { timeout: ms } } as Partial<Options>;
  const afterCreate =
    dialect === 'better-sqlite'
      ? (conn: { pragma(sql: string): unknown }, done: (error: Error | null, conn: unknown) => void) => {
          conn.pragma(`busy_timeout = ${ms}`);
          done(null, conn);
        }
      : (conn: { run(sql: string, cb: (error: Error | null) => void): void }, done: (error: Error | null, conn: unknown) => void) =>
          conn.run(`pragma busy_timeout = ${ms}`, (error) => done(error, conn));
  return { pool: { afterCreate } } as Partial<Options>;
}
