import { randomUUID } from 'node:crypto';
import { rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type AnyEntity, type EntityClass, type EntitySchema, MikroORM, type Options } from '@mikro-orm/core';
import { Migrator } from '@mikro-orm/migrations';
import { PostgreSqlDriver } from '@mikro-orm/postgresql';
import { SqliteDriver } from '@mikro-orm/sqlite';
import { inject } from 'vitest';
import { SAGA_MIGRATIONS } from '../../migrations/index.js';
import { SAGA_ENTITIES } from '../../src/index.js';
import { migrateUp, updateSchema } from '../../src/orm/index.js';
import { adminQuery, withDatabase } from './postgres-server.js';

/** The databases every behaviour suite runs on. */
export const DIALECTS = ['postgresql', 'sqlite'] as const;
export type DialectName = (typeof DIALECTS)[number];

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

/** Connection settings for a fresh database; exported for child processes in reliability tests. */
export function connectionOptions(dialect: DialectName, location: string, entities: TestEntity[]): Options {
  const common = {
    entities: [...SAGA_ENTITIES, ...entities],
    extensions: [Migrator],
    allowGlobalContext: false,
    debug: process.env.MIKRO_ORM_DEBUG === 'true',
  };
  return dialect === 'postgresql'
    ? {
        ...common,
        driver: PostgreSqlDriver,
        clientUrl: location,
        pool: { min: 0, max: 20 },
        migrations: { migrationsList: [...SAGA_MIGRATIONS.postgresql], snapshot: false, silent: true },
      }
    : {
        ...common,
        driver: SqliteDriver,
        dbName: location,
        migrations: { migrationsList: [...SAGA_MIGRATIONS.sqlite], snapshot: false, silent: true },
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
      await rm(`${location}-journal`, { force: true });
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
      for (const other of others) await other.close(true);
      await orm.close(true);
      await drop();
    },
  };
}
