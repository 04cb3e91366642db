/**
 * Figures "saga step at 1, 4 and 16 callers": a message to an existing saga (load it, run the step, one
 * versioned UPDATE in a transaction; it writes the state only, no outbox row, no message id) through
 * `runtime.handle`, against the same step in plain MikroORM on the same ORM (`bench/plain-orm-step.ts`: what a
 * user compares us with, the baseline with the target), and against the same statements by hand (the limit,
 * its ratio printed): `pg` on PostgreSQL (a pool of one connection per caller), and on SQLite the driver the
 * ORM itself runs on, on one connection as MikroORM has: `sqlite3` for MikroORM 6's `@mikro-orm/sqlite`,
 * `better-sqlite3` for 6's `@mikro-orm/better-sqlite` and for MikroORM 7's `@mikro-orm/sqlite`.
 */
import { copyFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import pg from 'pg';
import sqlite3 from 'sqlite3';
import { SagaRuntime } from '../src/index.js';
import { ORM_MAJOR } from '../src/orm/orm-major.js';
import { queryRows } from '../src/orm/sql-execution.js';
import { FakeClock } from '../src/testing/index.js';
import { scriptedSaga } from '../test/fixtures/scripted-saga.js';
import type { DialectName } from '../test/support/databases.js';
import { type BenchDatabase, createBenchDatabase, removeSqliteFile } from './bench-database.js';
import { compare, type FigureResult, interleave, secondsOf } from './figure-stats.js';
import { PlainStepStateSchema, plainOrmStep, seedPlainStates } from './plain-orm-step.js';

const CALLERS = [1, 4, 16] as const;
/** Sagas each caller works on, in turn (callers never share a saga: no version conflicts). */
const SAGAS_PER_CALLER = 5;
/** Ours against plain MikroORM: at least as fast as what a user would write instead. */
const TARGET_VS_PLAIN = 1;
/** How the plain MikroORM baseline is named in the figures. */
const PLAIN_NAME = 'plain MikroORM: fork, em.transactional, findOne by key, flush with version check';

interface SagaRow {
  id: string;
  version: number;
  counter: number;
}

/** The step by hand: read the saga by key, then bump counter and version in a transaction. */
type RawStep = (key: string) => Promise<void>;

function rawPostgres(url: string, callers: number): { step: RawStep; close: () => Promise<void> } {
  const pool = new pg.Pool({ connectionString: url, max: callers });
  const step: RawStep = async (key) => {
    const { rows } = await pool.query<SagaRow>('select * from scripted_saga where key = $1 limit 1', [key]);
    const saga = rows[0]!;
    const client = await pool.connect();
    try {
      await client.query('begin');
      await client.query('update scripted_saga set version = $1, counter = $2 where id = $3 and version = $4', [
        saga.version + 1,
        saga.counter + 1,
        saga.id,
        saga.version,
      ]);
      await client.query('commit');
    } finally {
      client.release();
    }
  };
  return { step, close: () => pool.end() };
}

function rawSqlite(file: string): { step: RawStep; close: () => Promise<void> } {
  const db = new sqlite3.Database(file);
  const get = (sql: string, params: unknown[]) =>
    new Promise<SagaRow>((resolve, reject) => db.get(sql, params, (error, row) => (error ? reject(error) : resolve(row as SagaRow))));
  const run = (sql: string, params: unknown[] = []) =>
    new Promise<void>((resolve, reject) => db.run(sql, params, (error) => (error ? reject(error) : resolve())));
  // One connection, as MikroORM's SQLite driver has: a caller's transaction runs alone.
  let tail = Promise.resolve();
  const step: RawStep = (key) => {
    const mine = tail.then(async () => {
      const saga = await get('select * from scripted_saga where key = ? limit 1', [key]);
      await run('begin');
      await run('update scripted_saga set version = ?, counter = ? where id = ? and version = ?', [
        saga.version + 1,
        saga.counter + 1,
        saga.id,
        saga.version,
      ]);
      await run('commit');
    });
    tail = mine.catch(() => undefined);
    return mine;
  };
  return { step, close: () => new Promise((resolve) => db.close(() => resolve())) };
}

/** The slice of better-sqlite3's `Database` the raw step uses (the package ships no types). */
interface BetterSqliteDatabase {
  prepare(sql: string): { get(...params: unknown[]): unknown; run(...params: unknown[]): unknown };
  exec(sql: string): void;
  close(): void;
}

/**
 * The step by hand on better-sqlite3, statement by statement as the ORM runs them (prepared each time). Loaded on
 * demand, on MikroORM 7 from the leg (its Node.js needs the leg's build of the native module).
 */
async function rawBetterSqlite(file: string): Promise<{ step: RawStep; close: () => Promise<void> }> {
  // On MikroORM 7 the leg's own copy (built for its Node.js), the one its `@mikro-orm/sqlite` runs on.
  const Database =
    ORM_MAJOR === 7
      ? (createRequire(new URL('../legs/mikro-orm-7/package.json', import.meta.url))('better-sqlite3') as new (
          file: string,
        ) => BetterSqliteDatabase)
      : ((await import('better-sqlite3' as string)) as { default: new (file: string) => BetterSqliteDatabase }).default;
  const db = new Database(file);
  // Synchronous: a caller's step runs to its end before another's starts, as on MikroORM's one connection.
  const step: RawStep = async (key) => {
    const saga = db.prepare('select * from scripted_saga where key = ? limit 1').get(key) as SagaRow;
    db.exec('begin');
    db.prepare('update scripted_saga set version = ?, counter = ? where id = ? and version = ?').run(
      saga.version + 1,
      saga.counter + 1,
      saga.id,
      saga.version,
    );
    db.exec('commit');
  };
  return { step, close: async () => db.close() };
}

/**
 * The raw variant and its name for the dialect's figures. On SQLite it works on a copy of the file
 * ({@link copyForRaw}), never on the file the ORM has open.
 */
async function rawStepOf(
  db: BenchDatabase,
  callers: number,
  rawFile: string,
): Promise<{ step: RawStep; close: () => Promise<void>; name: string }> {
  if (db.dialect === 'postgresql') return { ...rawPostgres(db.location, callers), name: 'raw pg, same statements' };
  // MikroORM 7's `@mikro-orm/sqlite` runs on better-sqlite3: its baseline is the same driver, as on 6 for each.
  if (db.dialect === 'better-sqlite' || ORM_MAJOR === 7)
    return { ...(await rawBetterSqlite(rawFile)), name: 'raw better-sqlite3, same statements' };
  return { ...rawSqlite(rawFile), name: 'raw sqlite3, same statements' };
}

/**
 * A copy of the SQLite file for the raw variant, with the same rows. Two copies of the SQLite library in one process
 * (MikroORM 7's better-sqlite3 and the baseline's node-sqlite3) must never open the same file: closing a file
 * drops the POSIX locks the other copy holds on it, and SQLite then corrupts it ("database disk image is
 * malformed", seen here once at 2,400 messages per run). PostgreSQL needs none.
 */
async function copyForRaw(db: BenchDatabase): Promise<string> {
  if (db.dialect === 'postgresql') return db.location;
  await queryRows(db.orm.em.fork(), 'pragma wal_checkpoint(truncate)', []);
  const copy = `${db.location}.raw`;
  removeSqliteFile(copy);
  copyFileSync(db.location, copy);
  return copy;
}

/** How the figure names the database and driver (on MikroORM 7 'SQLite, WAL' is better-sqlite3: the leg's `@mikro-orm/sqlite`). */
const DATABASE_LABELS: Record<DialectName, string> = {
  postgresql: 'PostgreSQL',
  sqlite: 'SQLite, WAL',
  'better-sqlite': 'SQLite, WAL, @mikro-orm/better-sqlite',
};

/** The key of the saga a caller's `i`th message goes to. */
const keyOf = (caller: number, i: number) => `step-${caller}-${i % SAGAS_PER_CALLER}`;

/** Sends `messages` messages from `callers` concurrent callers; messages per second. */
async function drive(callers: number, messages: number, send: (key: string) => Promise<unknown>): Promise<number> {
  const perCaller = Math.ceil(messages / callers);
  const seconds = await secondsOf(() =>
    Promise.all(
      Array.from({ length: callers }, async (_, caller) => {
        for (let i = 0; i < perCaller; i++) await send(keyOf(caller, i));
      }),
    ),
  );
  return (perCaller * callers) / seconds;
}

async function stepFigures(db: BenchDatabase, reps: number, messages: number): Promise<FigureResult[]> {
  const runtime = new SagaRuntime({ em: db.orm.em, sagas: [scriptedSaga], clock: new FakeClock() });
  const keys = Array.from({ length: Math.max(...CALLERS) * SAGAS_PER_CALLER }, (_, n) => keyOf(Math.floor(n / SAGAS_PER_CALLER), n));
  for (const key of keys) await runtime.handle(scriptedSaga, { type: 'Start', key });
  await seedPlainStates(db.orm, keys);
  const figures: FigureResult[] = [];
  const database = DATABASE_LABELS[db.dialect];
  const rawFile = await copyForRaw(db);
  try {
    for (const callers of CALLERS) figures.push(await callersFigure(db, runtime, callers, messages, reps, database, rawFile));
  } finally {
    if (rawFile !== db.location) removeSqliteFile(rawFile);
  }
  return figures;
}

async function callersFigure(
  db: BenchDatabase,
  runtime: SagaRuntime,
  callers: number,
  messages: number,
  reps: number,
  database: string,
  rawFile: string,
): Promise<FigureResult> {
  const raw = await rawStepOf(db, callers, rawFile);
  try {
    const samples = await interleave(
      reps,
      {
        ours: () => drive(callers, messages, (key) => runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] })),
        plain: () => drive(callers, messages, (key) => plainOrmStep(db.orm, key)),
        raw: () => drive(callers, messages, raw.step),
      },
      { warmUp: true },
    );
    const name = `saga step, ${callers} caller${callers > 1 ? 's' : ''} (${database})`;
    return compare(name, 'messages/s', samples.ours, { name: PLAIN_NAME, samples: samples.plain }, TARGET_VS_PLAIN, {
      limit: { name: raw.name, samples: samples.raw },
    });
  } finally {
    await raw.close();
  }
}

export async function sagaStepFigures(dialect: DialectName, reps: number, messages: number): Promise<FigureResult[]> {
  const db = await createBenchDatabase(dialect, { entities: [PlainStepStateSchema] });
  try {
    return await stepFigures(db, reps, messages);
  } finally {
    await db.dispose();
  }
}
