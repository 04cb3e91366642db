/**
 * Figures "saga step at 1, 4 and 16 callers": a message to an existing saga (load it, run the step, one
 * versioned UPDATE in a transaction) through `runtime.handle`, against the same statements by hand: `pg` on
 * PostgreSQL (a pool of one connection per caller), `sqlite3` on SQLite (one connection, as MikroORM has).
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
  const database = db.dialect === 'postgresql' ? 'PostgreSQL' : 'SQLite, WAL';
  for (const callers of CALLERS) {
    const raw = db.dialect === 'postgresql' ? rawPostgres(db.location, callers) : rawSqlite(db.location);
    try {
      const samples = await interleave(reps, {
        ours: () => drive(callers, messages, (key) => runtime.handle(scriptedSaga, { type: 'Do', key, actions: [{ op: 'inc' }] })),
        raw: () => drive(callers, messages, raw.step),
      });
      const baseline = db.dialect === 'postgresql' ? 'raw pg, same statements' : 'raw sqlite3, same statements';
      const name = `saga step, ${callers} caller${callers > 1 ? 's' : ''} (${database})`;
      figures.push(compare(name, 'messages/s', samples.ours, { name: baseline, samples: samples.raw }, 0.6));
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
