import { randomUUID } from 'node:crypto';
import { rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { MikroORM } from '@mikro-orm/core';
import pg from 'pg';
import { migrateUp, updateSchema } from '../src/orm/schema-tools.js';
import { queryRows } from '../src/orm/sql-execution.js';
import { ScriptedSaga } from '../test/fixtures/scripted-saga.js';
import { connectionOptions, type DialectName, type TestEntity } from '../test/support/databases.js';
import { POSTGRES_URL } from './bench-settings.js';

/** A fresh database with the library's migrations and the scripted saga's table, and an ORM on it. */
export interface BenchDatabase {
  readonly dialect: DialectName;
  /** A PostgreSQL URL or a SQLite file path. */
  readonly location: string;
  readonly orm: MikroORM;
  dispose(): Promise<void>;
}

/** Runs one statement on the PostgreSQL server (creating and dropping databases). */
async function admin(sql: string, params: unknown[] = []): Promise<{ count: string }[]> {
  const client = new pg.Client(POSTGRES_URL);
  await client.connect();
  try {
    return (await client.query<{ count: string }>(sql, params)).rows;
  } finally {
    await client.end();
  }
}

/** How long a drop waits for the closed pools' connections to leave the server before it forces them out. */
const DROP_WAIT_MS = 5_000;

/**
 * Drops a bench database once the connections of its closed pools are gone: a pool may report itself ended
 * while a client's terminate is still on its way (seen with MikroORM 7), and `drop ... with (force)` would then
 * kill that client with an error its pool, having no error handler, throws out of the process.
 */
async function dropWhenIdle(name: string): Promise<void> {
  const until = Date.now() + DROP_WAIT_MS;
  const count = 'select count(*) from pg_stat_activity where datname = $1';
  while (Date.now() < until && Number((await admin(count, [name]))[0]?.count) > 0) {
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  await admin(`drop database if exists "${name}" with (force)`);
}

/** Removes a SQLite file and its journals. */
export function removeSqliteFile(file: string): void {
  for (const suffix of ['', '-journal', '-wal', '-shm']) rmSync(`${file}${suffix}`, { force: true });
}

/**
 * Creates the database (SQLite in WAL mode unless `journal` says otherwise), with a table for each of `entities`
 * besides the library's and the scripted saga's.
 */
export async function createBenchDatabase(
  dialect: DialectName,
  { journal = 'wal', entities = [] }: { readonly journal?: 'wal' | 'delete'; readonly entities?: TestEntity[] } = {},
): Promise<BenchDatabase> {
  const name = `saga_bench_${randomUUID().replaceAll('-', '').slice(0, 12)}`;
  let location: string;
  let drop: () => Promise<void>;
  if (dialect === 'postgresql') {
    await admin(`create database "${name}"`);
    const url = new URL(POSTGRES_URL);
    url.pathname = `/${name}`;
    location = url.toString();
    drop = () => dropWhenIdle(name);
  } else {
    location = join(tmpdir(), `${name}.sqlite`);
    drop = async () => removeSqliteFile(location);
  }
  const orm = await MikroORM.init(connectionOptions(dialect, location, [ScriptedSaga, ...entities]));
  await migrateUp(orm);
  await updateSchema(orm);
  if (dialect !== 'postgresql') await queryRows(orm.em, `pragma journal_mode = ${journal}`, []);
  return {
    dialect,
    location,
    orm,
    async dispose() {
      await orm.close(true);
      await drop();
    },
  };
}

/** Whether the PostgreSQL server answers. */
export async function postgresReachable(): Promise<boolean> {
  const client = new pg.Client({ connectionString: POSTGRES_URL, connectionTimeoutMillis: 2_000 });
  try {
    await client.connect();
    return true;
  } catch {
    return false;
  } finally {
    await client.end().catch(() => undefined);
  }
}
