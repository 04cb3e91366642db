/**
 * Figures "saga step at 1, 4 and 16 callers": a message to an existing saga (load it, run the step, one
 * versioned UPDATE in a transaction) through `runtime.handle`, against the same statements by hand: `pg` on
 * PostgreSQL (a pool of one connection per caller), `sqlite3` on SQLite (one connection, as MikroORM has), and
 * `better-sqlite3` for SQLite through `@mikro-orm/better-sqlite` (MikroORM 6 only).
 */
import pg from 'pg';
import sqlite3 from 'sqlite3';
import { SagaRuntime } from '../src/index.js';
import { FakeClock } from '../src/testing/index.js';
import { scriptedSaga } from '../test/fixtures/scripted-saga.js';
import type { DialectName } from '../test/support/databases.js';
import { type BenchDatabase, createBenchDatabase } from './bench-database.js';
import { compare, type FigureResult, interleave, secondsOf } from './figure-stats.js';

const CALLERS = [1, 4, 16] as const;
/** Sagas each caller works on, in turn (callers never share a saga: no version conflicts). */
const SAGAS_PER_CALLER = 5;

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
 * The step by hand on better-sqlite3, statement by statement as knex runs them (prepared each time). Loaded on
 * demand: the MikroORM 7 leg (another Node.js) never measures this figure and must not load the native module.
 */
async function rawBetterSqlite(file: string): Promise<{ step: RawStep; close: () => Promise<void> }> {
  const { default: Database } = (await import('better-sqlite3' as string)) as { default: new (file: string) => BetterSqliteDatabase };
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

/** The raw variant and its name for the dialect's figures. */
async function rawStepOf(db: BenchDatabase, callers: number): Promise<{ step: RawStep; close: () => Promise<void>; name: string }> {
  if (db.dialect === 'postgresql') return { ...rawPostgres(db.location, callers), name: 'raw pg, same statements' };
  if (db.dialect === 'better-sqlite') return { ...(await rawBetterSqlite(db.location)), name: 'raw better-sqlite3, same statements' };
  return { ...rawSqlite(db.location), name: 'raw sqlite3, same statements' };
}

/** How the figure names the database and driver. */
const DATABASE_LABELS: Record<DialectName, string> = {
  postgresql: 'PostgreSQL',
  sqlite: 'SQLite, WAL',
  'better-sqlite': 'SQLite, WAL, @mikro-orm/better-sqlite',
};

/** Sends `messages` messages from `callers` concurrent callers; messages per second. */
async function drive(callers: number, messages: number, send: (key: string) => Promise<unknown>): Promise<number> {
  const perCaller = Math.ceil(messages / callers);
  const seconds = await secondsOf(() =>
    Promise.all(
      Array.from({ length: callers }, async (_, caller) => {
        for (let i = 0; i < perCaller; i++) await send(`step-${caller}-${i % SAGAS_PER_CALLER}`);
      }),
    ),
  );
  return (perCaller * callers) / seconds;
}

async function stepFigures(db: BenchDatabase, reps: number, messages: number): Promise<FigureResult[]> {
  const runtime = new SagaRuntime({ em: db.orm.em, sagas: [scriptedSaga], clock: new FakeClock() });
  for (let caller = 0; caller < Math.max(...CALLERS); caller++) {
    for (let i = 0; i < SAGAS_PER_CALLER; i++) await runtime.handle(scriptedSaga, { type: 'Start', key: `step-${caller}-${i}` });
  }
  const figures: FigureResult[] = [];
  const database = DATABASE_LABELS[db.dialect];
  for (const callers of CALLERS) {
    const raw = await rawStepOf(db, callers);
    try {
      const samples = await interleave(
        reps,
        {
          ours: () => drive(callers, messages, (key) => runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] })),
          raw: () => drive(callers, messages, raw.step),
        },
        { warmUp: true },
      );
      const name = `saga step, ${callers} caller${callers > 1 ? 's' : ''} (${database})`;
      figures.push(compare(name, 'messages/s', samples.ours, { name: raw.name, samples: samples.raw }, 0.6));
    } finally {
      await raw.close();
    }
  }
  return figures;
}

export async function sagaStepFigures(dialect: DialectName, reps: number, messages: number): Promise<FigureResult[]> {
  const db = await createBenchDatabase(dialect);
  try {
    return await stepFigures(db, reps, messages);
  } finally {
    await db.dispose();
  }
}
