/**
 * Figure "empty dispatcher pass with N rows of history, after VACUUM": the pass a dispatcher runs when nothing is
 * due (it claims timers and outbox rows and finds none), on a database whose `saga_timer` and `saga_outbox` each
 * hold N rows delivered long ago, against the same pass on a database with no history. The history is written the
 * way the library writes it: pending rows, then stamped fired or published (each stamp leaves a dead row version
 * and a dead entry in the pending rows' claim index until VACUUM), then `VACUUM ANALYZE`, as autovacuum does (see
 * docs/performance.md for the settings the migrations give both tables).
 */
import pg from 'pg';
import { SagaDispatcher, SagaRuntime, silentLogger } from '../src/index.js';
import { scriptedSaga } from '../test/fixtures/scripted-saga.js';
import { type BenchDatabase, createBenchDatabase } from './bench-database.js';
import { compare, type FigureResult, interleave, secondsOf } from './figure-stats.js';

/** Rows inserted per statement while seeding (one statement of a million rows holds too much at once). */
const SEED_CHUNK = 200_000;

/** Runs `sql` on its own connection to `url`. */
async function run(url: string, sql: string, params: unknown[] = []): Promise<void> {
  const client = new pg.Client(url);
  await client.connect();
  try {
    await client.query(sql, params);
  } finally {
    await client.end();
  }
}

/** Writes `rows` delivered timers and `rows` published outbox rows, as pending rows stamped afterwards, then vacuums. */
async function seedHistory(url: string, rows: number): Promise<void> {
  for (let done = 0; done < rows; done += SEED_CHUNK) {
    const count = Math.min(SEED_CHUNK, rows - done);
    await run(
      url,
      `insert into saga_timer (id, saga_type, saga_id, name, due_at, available_at, message_type, payload, token, attempts, created_at)
       select gen_random_uuid(), 'scripted', gen_random_uuid(), 'tick', now() - interval '1 day', now() - interval '1 day', 'Tick',
         '{"type":"Tick"}', gen_random_uuid(), 0, now() - interval '1 day'
       from generate_series(1, $1::int)`,
      [count],
    );
    await run(
      url,
      `insert into saga_outbox (id, saga_type, saga_id, message_type, payload, headers, available_at, token, attempts, created_at)
       select gen_random_uuid(), 'scripted', gen_random_uuid(), 'Relayed', '{"type":"Relayed"}', '{}', now() - interval '1 day',
         gen_random_uuid(), 0, now() - interval '1 day'
       from generate_series(1, $1::int)`,
      [count],
    );
    await run(url, `update saga_timer set dispatched_at = now(), outcome = 'fired' where dispatched_at is null`);
    await run(url, `update saga_outbox set dispatched_at = now(), outcome = 'published' where dispatched_at is null`);
  }
  await run(url, 'vacuum analyze saga_timer');
  await run(url, 'vacuum analyze saga_outbox');
}

/** A dispatcher relaying to a no-op publisher; `passes` passes that find nothing due, in passes per second. */
function emptyPasses(db: BenchDatabase, passes: number): () => Promise<number> {
  const runtime = new SagaRuntime({ em: db.orm.em, sagas: [scriptedSaga] });
  const dispatcher = new SagaDispatcher({ runtime, logger: silentLogger, publish: async () => undefined });
  return async () => {
    const seconds = await secondsOf(async () => {
      for (let i = 0; i < passes; i++) {
        const { timers, outbox } = await dispatcher.runOnce();
        if (timers.claimed + outbox.claimed > 0) throw new Error('an empty pass claimed rows: the history was not all delivered');
      }
    });
    return passes / seconds;
  };
}

export async function dispatchHistoryFigures(reps: number, historyRows: number, passes: number): Promise<FigureResult[]> {
  const empty = await createBenchDatabase('postgresql');
  const history = await createBenchDatabase('postgresql');
  try {
    await seedHistory(history.location, historyRows);
    const samples = await interleave(reps, { history: emptyPasses(history, passes), empty: emptyPasses(empty, passes) }, { warmUp: true });
    return [
      compare(
        `empty dispatcher pass, ${historyRows} delivered timers and ${historyRows} published messages of history, after VACUUM (PostgreSQL)`,
        'passes/s',
        samples.history,
        { name: 'the same pass, no history', samples: samples.empty },
        // Issue 8: within 1.5x of an empty history.
        Math.round((1 / 1.5) * 100) / 100,
      ),
    ];
  } finally {
    await history.dispose();
    await empty.dispose();
  }
}
