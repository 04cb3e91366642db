/**
 * Figure "RSS while draining N timers": a dispatcher in this process fires N due timers, one on each of N sagas
 * (claim, start mark, load, versioned update and fired stamp, 10 at once), and the process's resident set is read
 * once a tenth of them fired and again at the end. Issue 8 allows it to grow by 50 MB at most over that stretch;
 * the figure reports what is left of that budget (MB left / 50 MB), so that, like every figure, higher is better:
 * the target 0 is met while the growth stays within the budget. Both readings follow a full garbage collection:
 * without one, the resident set swings by 60 MB and more between collections (measured draining 60,000 timers:
 * 175 to 242 MB), which says when V8 last collected, not whether memory leaks.
 */
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import pg from 'pg';
import { SagaDispatcher, SagaRuntime, silentLogger } from '../src/index.js';
import { scriptedSaga } from '../test/fixtures/scripted-saga.js';
import { createBenchDatabase } from './bench-database.js';
import { compare, type FigureResult } from './figure-stats.js';

/** The growth issue 8 allows, in MB. */
const BUDGET_MB = 50;

/** Inserts `count` scripted sagas with one timer each, due an hour ago, straight into the tables. */
async function seed(url: string, count: number): Promise<void> {
  const client = new pg.Client(url);
  await client.connect();
  try {
    await client.query(
      `insert into scripted_saga (id, created_at, updated_at, version, key, stage, counter, log)
       select gen_random_uuid(), now() - interval '1 hour', now() - interval '1 hour', 1, 'memory-' || i, 'open', 0, 'started;'
       from generate_series(1, $1::int) as i`,
      [count],
    );
    await client.query(
      `insert into saga_timer (id, saga_type, saga_id, name, due_at, available_at, message_type, payload, token, attempts, created_at)
       select gen_random_uuid(), 'scripted', s.id, 'reminder', now() - interval '1 hour', now() - interval '1 hour', 'Tick',
         '{"type":"Tick","label":"reminder"}', gen_random_uuid(), 0, now() - interval '1 hour'
       from scripted_saga as s`,
    );
    await client.query('vacuum analyze scripted_saga');
    await client.query('vacuum analyze saga_timer');
  } finally {
    await client.end();
  }
}

const megabytes = (bytes: number) => bytes / 1024 / 1024;

/** The resident set after a full garbage collection (`gc()` made reachable without `--expose-gc` on the command line). */
function settledRss(): number {
  setFlagsFromString('--expose_gc');
  (runInNewContext('gc') as () => void)();
  return process.memoryUsage().rss;
}

export async function dispatchMemoryFigures(timers: number): Promise<FigureResult[]> {
  const db = await createBenchDatabase('postgresql');
  try {
    await seed(db.location, timers);
    const runtime = new SagaRuntime({ em: db.orm.em, sagas: [scriptedSaga] });
    const dispatcher = new SagaDispatcher({ runtime, logger: silentLogger, concurrency: 10, batchSize: 100 });
    let fired = 0;
    let tenth: number | undefined;
    for (;;) {
      const { timers: pass } = await dispatcher.runOnce();
      if (pass.claimed === 0) break;
      fired += pass.fired;
      if (tenth === undefined && fired >= timers / 10) tenth = settledRss();
    }
    if (fired !== timers || tenth === undefined) throw new Error(`the dispatcher fired ${fired} of ${timers} timers`);
    // A resident set that shrank (V8 handed memory back) grew by nothing: the whole budget is left.
    const growth = Math.max(0, megabytes(settledRss() - tenth));
    const left = BUDGET_MB - growth;
    return [
      compare(
        `RSS while draining ${timers} timers on ${timers} sagas: the ${BUDGET_MB} MB growth budget left after the first tenth (PostgreSQL)`,
        'MB',
        [left],
        { name: `the ${BUDGET_MB} MB budget`, samples: [BUDGET_MB] },
        0,
      ),
    ];
  } finally {
    await db.dispose();
  }
}
