/**
 * Figures "outbox relay, 1 and 2 processes": N due outbox rows relayed to a no-op publisher by our
 * dispatcher, by a hand-written batch claim, and by graphile-worker's batched mode, each in 1 or 2
 * processes of its own on one PostgreSQL database.
 */
import { makeWorkerUtils, runMigrations } from 'graphile-worker';
import pg from 'pg';
import { createBenchDatabase } from './bench-database.js';
import { runTogether } from './child-processes.js';
import { compare, type FigureResult, interleave } from './figure-stats.js';

/**
 * Settings of every relay, ours and the baselines alike: batches of 100, as many deliveries at once (a
 * no-op publisher never waits, so a delivery slot per claimed row is the best setting for each of them).
 */
const RELAY = {
  batchSize: Number(process.env.BENCH_RELAY_BATCH ?? 100),
  concurrency: Number(process.env.BENCH_RELAY_CONCURRENCY ?? 100),
};

/** Inserts `rows` outbox rows due an hour ago, in one statement. */
async function seedOutbox(url: string, rows: number): Promise<void> {
  const client = new pg.Client(url);
  await client.connect();
  try {
    await client.query(
      `insert into saga_outbox (id, saga_type, saga_id, message_type, payload, headers, available_at, token, attempts, created_at)
       select gen_random_uuid(), 'scripted', gen_random_uuid(), 'Relayed', json_build_object('type', 'Relayed', 'n', i), '{}',
         now() - interval '1 hour', gen_random_uuid(), 0, now() - interval '1 hour'
       from generate_series(1, $1::int) as i`,
      [rows],
    );
  } finally {
    await client.end();
  }
}

/** Adds `rows` graphile-worker jobs. */
async function seedJobs(pgPool: pg.Pool, rows: number): Promise<void> {
  const utils = await makeWorkerUtils({ pgPool });
  try {
    for (let i = 0; i < rows; i += 1_000) {
      const count = Math.min(1_000, rows - i);
      await utils.addJobs(Array.from({ length: count }, (_, j) => ({ identifier: 'relay', payload: { type: 'Relayed', n: i + j } })));
    }
  } finally {
    await utils.release();
  }
}

/** Seeds, relays with `processes` processes of `kind`, checks every row was published once; rows per second. */
async function relayOnce(url: string, jobs: pg.Pool, kind: string, processes: number, rows: number): Promise<number> {
  await (kind === 'graphile-worker' ? seedJobs(jobs, rows) : seedOutbox(url, rows));
  const args = Array.from({ length: processes }, () => [kind, url, JSON.stringify(RELAY)]);
  const { seconds, done } = await runTogether('bench/relay-process.ts', args);
  const published = done.reduce((sum, line) => sum + Number(line.published), 0);
  if (published !== rows) throw new Error(`${kind} with ${processes} process(es) published ${published} of ${rows} rows`);
  return rows / seconds;
}

export async function outboxRelayFigures(reps: number, rows: number): Promise<FigureResult[]> {
  const db = await createBenchDatabase('postgresql');
  // graphile-worker gets a pool of ours, ended before the database is dropped: a pool it made itself could
  // still hold idle connections then, and their termination is an unhandled 'error' that ends this process.
  const jobs = new pg.Pool({ connectionString: db.location, max: 2 });
  jobs.on('error', () => undefined);
  try {
    await runMigrations({ pgPool: jobs });
    const figures: FigureResult[] = [];
    const oneProcess: number[] = [];
    for (const processes of [1, 2]) {
      const samples = await interleave(reps, {
        ours: () => relayOnce(db.location, jobs, 'ours', processes, rows),
        raw: () => relayOnce(db.location, jobs, 'raw', processes, rows),
        graphile: () => relayOnce(db.location, jobs, 'graphile-worker', processes, rows),
      });
      const name = `outbox relay, ${rows} rows, no-op publisher, ${processes} process${processes > 1 ? 'es' : ''} (PostgreSQL)`;
      figures.push(compare(name, 'rows/s', samples.ours, { name: 'raw batch claim + batch stamp', samples: samples.raw }, 0.8));
      figures.push(compare(name, 'rows/s', samples.ours, { name: 'graphile-worker, batched mode', samples: samples.graphile }, 1));
      if (processes === 1) oneProcess.push(...samples.ours);
      else
        figures.push(
          compare('outbox relay: ours, 2 processes vs 1', 'rows/s', samples.ours, { name: 'ours, 1 process', samples: oneProcess }, 1),
        );
    }
    return figures;
  } finally {
    await jobs.end();
    await db.dispose();
  }
}
