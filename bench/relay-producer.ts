/**
 * The producer of the relay latency figure: commits rows at a steady rate, a few per transaction.
 *
 *   node --import tsx bench/relay-producer.ts <outbox|jobs> <postgres url> <rows per second> <rows>
 *
 * Connects, prints `{"event":"ready"}`, starts when a line arrives on stdin. Every 10 ms it commits the rows
 * owed by then (10 at 1,000 rows/s) in one statement, its own transaction: outbox rows whose `created_at` and
 * `available_at` are `clock_timestamp()` (the commit follows within the statement), each commit followed by the
 * NOTIFY a runtime sends after committing outbox rows, or graphile-worker jobs
 * through `addJobs` (one `add_jobs` call; `run_at` is its transaction's `now()`). Prints
 * `{"event":"done","inserted":n,"behindMs":..}` after `rows` rows; `behindMs` is the most a statement
 * ended after the time its last row was due (a few ms when the producer kept the rate).
 */
import pg from 'pg';

const [target, url, rateText, rowsText] = process.argv.slice(2);
const rate = Number(rateText);
const rows = Number(rowsText);
if ((target !== 'outbox' && target !== 'jobs') || !url || !(rate > 0) || !(rows > 0)) {
  console.error('usage: relay-producer.ts <outbox|jobs> <postgres url> <rows per second> <rows>');
  process.exit(2);
}

const TICK_MS = 10;

async function producer(): Promise<{ insert(count: number, first: number): Promise<void>; close(): Promise<void> }> {
  if (target === 'outbox') {
    const client = new pg.Client(url);
    await client.connect();
    return {
      async insert(count, first) {
        await client.query(
          `insert into saga_outbox (id, saga_type, saga_id, message_type, payload, headers, available_at, token, attempts, created_at)
           select gen_random_uuid(), 'scripted', gen_random_uuid(), 'Relayed', json_build_object('type', 'Relayed', 'n', i), '{}',
             clock_timestamp(), gen_random_uuid(), 0, clock_timestamp()
           from generate_series($1::int, $2::int) as i`,
          [first, first + count - 1],
        );
        // As a runtime does after a unit of work committed outbox rows: wakes the dispatchers listening on the
        // library's channel (the bench database's tables have the default names).
        await client.query("select pg_notify('mikro_orm_saga:saga_outbox', '')");
      },
      close: () => client.end(),
    };
  }
  const { makeWorkerUtils } = await import('graphile-worker');
  const pool = new pg.Pool({ connectionString: url, max: 1 });
  pool.on('error', () => undefined);
  pool.on('connect', (client) => client.on('error', () => undefined));
  const utils = await makeWorkerUtils({ pgPool: pool });
  return {
    async insert(count, first) {
      await utils.addJobs(Array.from({ length: count }, (_, j) => ({ identifier: 'relay', payload: { type: 'Relayed', n: first + j } })));
    },
    async close() {
      await utils.release();
      await pool.end();
    },
  };
}

const sink = await producer();
process.stdout.write(`${JSON.stringify({ event: 'ready' })}\n`);
await new Promise<void>((resolve) => process.stdin.once('data', () => resolve()));
process.stdin.pause();
const started = performance.now();
let inserted = 0;
let behindMs = 0;
while (inserted < rows) {
  const elapsed = performance.now() - started;
  const owed = Math.min(rows, Math.floor((elapsed / 1000) * rate)) - inserted;
  if (owed > 0) {
    await sink.insert(owed, inserted + 1);
    inserted += owed;
    behindMs = Math.max(behindMs, performance.now() - started - (inserted / rate) * 1000);
  }
  const next = started + (Math.floor((performance.now() - started) / TICK_MS) + 1) * TICK_MS;
  await new Promise((resolve) => setTimeout(resolve, Math.max(0, next - performance.now())));
}
process.stdout.write(`${JSON.stringify({ event: 'done', inserted, behindMs: Math.round(behindMs) })}\n`);
await sink.close();
