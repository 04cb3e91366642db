/**
 * Figure "timer firing end to end": N sagas with one due timer each, fired by our dispatcher (claim, start
 * mark, load, versioned update, fired stamp) and by hand-written SQL doing the same claim, load, versioned
 * update and fired stamp, both with 10 deliveries at once on PostgreSQL.
 */
import pg from 'pg';
import { SagaDispatcher, SagaRuntime, silentLogger } from '../src/index.js';
import { drainDueTimers, FakeClock } from '../src/testing/index.js';
import { scriptedSaga } from '../test/fixtures/scripted-saga.js';
import { type BenchDatabase, createBenchDatabase } from './bench-database.js';
import { compare, type FigureResult, interleave, secondsOf } from './figure-stats.js';

const CONCURRENCY = 10;
const BATCH = 100;

/** Starts `count` sagas, each with one timer due at once (through the library: the rows it writes). */
async function seed(runtime: SagaRuntime, prefix: string, count: number): Promise<void> {
  for (let i = 0; i < count; i += 25) {
    const keys = Array.from({ length: Math.min(25, count - i) }, (_, j) => `${prefix}-${i + j}`);
    await Promise.all(
      keys.map((key) => runtime.handle(scriptedSaga, { type: 'Start', key, actions: [{ op: 'schedule', name: 'reminder', after: 1 }] })),
    );
  }
}

async function fireOurs(db: BenchDatabase, clock: FakeClock, runtime: SagaRuntime, count: number): Promise<number> {
  const dispatcher = new SagaDispatcher({ runtime, clock, logger: silentLogger, concurrency: CONCURRENCY, batchSize: BATCH });
  let fired = 0;
  const seconds = await secondsOf(async () => {
    fired = (await drainDueTimers(dispatcher)).timers.fired;
  });
  if (fired !== count) throw new Error(`ours fired ${fired} of ${count} timers (${db.dialect})`);
  return count / seconds;
}

/** One timer's delivery by hand: load the saga, then the versioned update and the fired stamp in one transaction. */
async function fireOneRaw(pool: pg.Pool, row: { id: string; token: string; saga_id: string }, now: Date): Promise<number> {
  const { rows } = await pool.query<{ version: number; log: string }>('select * from scripted_saga where id = $1 limit 1', [row.saga_id]);
  const saga = rows[0]!;
  const client = await pool.connect();
  try {
    await client.query('begin');
    await client.query('update scripted_saga set updated_at = $1, version = $2, log = $3 where id = $4 and version = $5', [
      now,
      saga.version + 1,
      `${saga.log}tick:reminder;`,
      row.saga_id,
      saga.version,
    ]);
    const stamped = await client.query(
      `update saga_timer set dispatched_at = $1, outcome = 'fired', locked_until = null where id = $2 and token = $3 and dispatched_at is null`,
      [now, row.id, row.token],
    );
    await client.query('commit');
    return stamped.rowCount ?? 0;
  } finally {
    client.release();
  }
}

async function fireRaw(pool: pg.Pool, now: Date, count: number): Promise<number> {
  let fired = 0;
  const seconds = await secondsOf(async () => {
    for (;;) {
      const { rows } = await pool.query<{ id: string; token: string; saga_id: string }>(
        `update saga_timer set token = gen_random_uuid(), locked_until = $1::timestamptz + interval '30 seconds'
         where id in (select id from saga_timer where dispatched_at is null and available_at <= $1
           and (locked_until is null or locked_until <= $1) order by available_at, id limit $2 for update skip locked)
         returning id, token, saga_id, payload`,
        [now, BATCH],
      );
      if (rows.length === 0) return;
      const queue = [...rows];
      await Promise.all(
        Array.from({ length: CONCURRENCY }, async () => {
          for (let row = queue.shift(); row; row = queue.shift()) {
            const stamped = await fireOneRaw(pool, row, now);
            fired += stamped;
          }
        }),
      );
    }
  });
  if (fired !== count) throw new Error(`raw fired ${fired} of ${count} timers`);
  return count / seconds;
}

export async function timerFiringFigures(reps: number, timers: number): Promise<FigureResult[]> {
  const db = await createBenchDatabase('postgresql');
  const pool = new pg.Pool({ connectionString: db.location, max: CONCURRENCY });
  try {
    const clock = new FakeClock(new Date(Date.now() - 3_600_000));
    const runtime = new SagaRuntime({ em: db.orm.em, sagas: [scriptedSaga], clock });
    let round = 0;
    const samples = await interleave(
      reps,
      {
        ours: async () => {
          await seed(runtime, `o${round++}`, timers);
          clock.advance({ seconds: 1 });
          return fireOurs(db, clock, runtime, timers);
        },
        raw: async () => {
          await seed(runtime, `r${round++}`, timers);
          clock.advance({ seconds: 1 });
          return fireRaw(pool, clock.now(), timers);
        },
      },
      { warmUp: true },
    );
    const name = `timer firing end to end, ${timers} timers on ${timers} sagas, 10 at once (PostgreSQL)`;
    return [
      compare(name, 'timers/s', samples.ours, { name: 'raw claim + load + versioned update + fired stamp', samples: samples.raw }, 0.7),
    ];
  } finally {
    await pool.end();
    await db.dispose();
  }
}
