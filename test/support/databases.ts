import { randomUUID } from 'node:crypto';
import { rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type AnyEntity, type EntityClass, type EntitySchema, MikroORM, type Options } from '@mikro-orm/core';
import { Migrator } from '@mikro-orm/migrations';
import { SAGA_MIGRATIONS } from '../../migrations/index.js';
import { migrateUp, updateSchema } from '../../src/orm/schema-tools.js';
import { LOADED_ORM_MAJOR } from './orm-leg.js';
import { ormOptions } from './orm-options.js';
import { adminQuery, withDatabase } from './postgres-server.js';

/**
 * The databases and drivers the behaviour suites run on: PostgreSQL, SQLite through `@mikro-orm/sqlite`, and on
 * MikroORM 6 SQLite through `@mikro-orm/better-sqlite` (better-sqlite3). MikroORM 7 has no `@mikro-orm/better-sqlite`:
 * its `@mikro-orm/sqlite` is itself built on better-sqlite3.
 */
export type DialectName = 'postgresql' | 'sqlite' | 'better-sqlite';
export const DIALECTS: readonly DialectName[] =
  LOADED_ORM_MAJOR === 6 ? ['postgresql', 'sqlite', 'better-sqlite'] : ['postgresql', 'sqlite'];

/** Whether `dialect` is a SQLite file (through either driver). */
export function isSqlite(dialect: DialectName): dialect is 'sqlite' | 'better-sqlite' {
  return dialect !== 'postgresql';
}

/**
 * Whether a statement waiting for a locked SQLite file blocks the whole process (better-sqlite3 waits
 * synchronously in the busy handler): `@mikro-orm/better-sqlite` on 6, `@mikro-orm/sqlite` on 7.
 */
export function waitsForLocksSynchronously(dialect: DialectName): boolean {
  return dialect === 'better-sqlite' || (dialect === 'sqlite' && LOADED_ORM_MAJOR >= 7);
}

/** The library's name for the database behind `dialect` (its migrations set, `sagaMigration`'s argument). */
export function sagaDialectOf(dialect: DialectName): 'postgresql' | 'sqlite' {
  return dialect === 'postgresql' ? 'postgresql' : 'sqlite';
}

export { parseDialect } from './orm-options.js';

/** An entity a test registers: a class (its EntitySchema or decorators map it) or an EntitySchema. */
export type TestEntity = EntityClass<AnyEntity> | EntitySchema;

/** A MikroORM instance on a fresh database of its own, built from the project's migrations. */
export interface TestDatabase {
  readonly dialect: DialectName;
  readonly orm: MikroORM;
  /** Connection settings, to open more ORM instances (or processes) on the same database. */
  readonly config: Options;
  /** Opens another MikroORM instance on the same database (its own connection pool), with `overrides`. */
  openAnother(overrides?: Partial<Options>): Promise<MikroORM>;
  /** Closes the ORM and drops the database. */
  dispose(): Promise<void>;
}

/** Connection settings for a fresh database: the driver, connection and entities, and the library's migrations. */
export function connectionOptions(dialect: DialectName, location: string, entities: TestEntity[]): Options {
  const migrationsList = [...SAGA_MIGRATIONS[sagaDialectOf(dialect)]];
  return {
    ...ormOptions(dialect, location, entities),
    extensions: [Migrator],
    migrations: { migrationsList, snapshot: false, silent: true },
  };
}

/** A new, empty database: where it is, and how to drop it. */
export interface EmptyDatabase {
  /** A PostgreSQL connection URL or a SQLite file path. */
  readonly location: string;
  drop(): Promise<void>;
}

/** Creates an empty database of its own: a PostgreSQL database on the test server, or a fresh SQLite file. */
export async function createEmptyDatabase(dialect: DialectName): Promise<EmptyDatabase> {
  const name = `saga_test_${randomUUID().replaceAll('-', '').slice(0, 16)}`;
  if (dialect === 'postgresql') {
    // Imported here, not at the top: child processes and CLI configs import this module too, without vitest.
    const { inject } = await import('vitest');
    const serverUrl = inject('postgresUrl');
    await adminQuery(serverUrl, `create database "${name}"`);
    return {
      location: withDatabase(serverUrl, name),
      drop: () => adminQuery(serverUrl, `drop database if exists "${name}" with (force)`),
    };
  }
  const location = join(tmpdir(), `${name}.sqlite`);
  return {
    location,
    async drop() {
      await rm(location, { force: true });
      for (const suffix of ['-journal', '-wal', '-shm']) await rm(`${location}${suffix}`, { force: true });
    },
  };
}

/**
 * Creates a database for one test file: a PostgreSQL database of its own on the test server, or a
 * fresh SQLite file. The library tables come from the project's migrations; the test's own saga
 * tables (`entities`) are created from their metadata afterwards.
 */
export async function createTestDatabase(dialect: DialectName, entities: TestEntity[]): Promise<TestDatabase> {
  const { location, drop } = await createEmptyDatabase(dialect);
  const config = connectionOptions(dialect, location, entities);
  const orm = await MikroORM.init(config);
  await migrateUp(orm);
  await updateSchema(orm);
  const others: MikroORM[] = [];
  return {
    dialect,
    orm,
    config,
    async openAnother(overrides = {}) {
      const other = await MikroORM.init({ ...config, ...overrides } as Options);
      others.push(other);
      return other;
    },
    async dispose() {
      for (const other of others) await closeOrReport(other);
      await closeOrReport(orm);
      await drop();
    },
  };
}

/**
 * `orm.close(true)`, bounded. On MikroORM 7, a connection left checked out makes the pool's close wait forever
 * (seen once in a full run of the v7 leg, in a file's cleanup after all its tests passed). The file's cleanup then
 * goes on after 20 s and says so on stderr; the database is dropped `with (force)`, ending its backends.
 */
async function closeOrReport(orm: MikroORM): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  const bound = new Promise<'late'>((resolve) => {
    timer = setTimeout(() => resolve('late'), 20_000);
  });
  const outcome = await Promise.race([orm.close(true).then(() => 'closed' as const), bound]);
  clearTimeout(timer);
  if (outcome === 'late') console.error('orm.close() did not finish within 20 s: a connection was left checked out');
}
