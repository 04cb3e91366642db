import { randomUUID } from 'node:crypto';
import { rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { MikroORM } from '@mikro-orm/core';
import pg from 'pg';
import { migrateUp, queryRows, updateSchema } from '../src/orm/index.js';
import { ScriptedSaga } from '../test/fixtures/scripted-saga.js';
import { connectionOptions, type DialectName } from '../test/support/databases.js';
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
async function admin(sql: string): Promise<void> {
  const client = new pg.Client(POSTGRES_URL);
  await client.connect();
  try {
    await client.query(sql);
  } finally {
    await client.end();
  }
}

/** Removes a SQLite file and its journals. */
export function removeSqliteFile(file: string): void {
  for (const suffix of ['', '-journal', '-wal', '-shm']) rmSync(`${file}${suffix}`, { force: true });
}

/** Creates the database (SQLite in WAL mode unless `journal` says otherwise). */
export async function createBenchDatabase(dialect: DialectName, journal: 'wal' | 'delete' = 'wal'): Promise<BenchDatabase> {
  const name = `saga_bench_${randomUUID().replaceAll('-', '').slice(0, 12)}`;
  let location: string;
  let drop: () => Promise<void>;
  if (dialect === 'postgresql') {
    await admin(`create database "${name}"`);
    const url = new URL(POSTGRES_URL);
    url.pathname = `/${name}`;
    location = url.toString();
    drop = () => admin(`drop database if exists "${name}" with (force)`);
  } else {
    location = join(tmpdir(), `${name}.sqlite`);
    drop = async () => removeSqliteFile(location);
  }
  const orm = await MikroORM.init(connectionOptions(dialect, location, [ScriptedSaga]));
  await migrateUp(orm);
  await updateSchema(orm);
  if (dialect === 'sqlite') await queryRows(orm.em, `pragma journal_mode = ${journal}`, []);
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
