/**
 * The raw-SQL baseline of "SQLite, 3 processes vs 1": one process draining the due timers of a file seeded by
 * `bench/sqlite-processes.ts`, with node-sqlite3 and hand-written statements, no ORM and no library. Started by
 * `runTogether` (`bench/child-processes.ts`): prints `{"event":"ready"}`, waits for a line on stdin, then runs
 * until a claim finds nothing, and prints `{"event":"done","claimed":n,"failedPasses":n}`.
 *
 * Per claim of `batch` rows (the dispatcher's SQLite default, 20), as the library does: one autocommit
 * `UPDATE ... RETURNING` that takes the write lock before it reads, then one write transaction for the batch
 * (`BEGIN IMMEDIATE`, which the library cannot send through knex), in which each timer reads its saga, writes the
 * versioned UPDATE of its log and the fired stamp checked by the claim's token. The lock wait is SQLite's busy
 * handler with node-sqlite3's busy timeout (1,000 ms), as for the library's processes; a statement still busy
 * after it counts as a failed pass and is sent again.
 *
 * `node --import tsx bench/sqlite-raw-drain.ts <file> [batch]`
 */
import sqlite3 from 'sqlite3';

const [file, batchArg] = process.argv.slice(2);
if (!file) {
  console.error('usage: sqlite-raw-drain.ts <file> [batch]');
  process.exit(2);
}
const BATCH = Number(batchArg ?? 20);
const LEASE_MS = 60_000;

const db = await new Promise<sqlite3.Database>((resolve, reject) => {
  const opened: sqlite3.Database = new sqlite3.Database(file, (error) => (error ? reject(error) : resolve(opened)));
});
db.configure('busyTimeout', 1_000);

function all<T>(sql: string, params: unknown[] = []): Promise<T[]> {
  return new Promise((resolve, reject) => db.all(sql, params, (error, rows) => (error ? reject(error) : resolve(rows as T[]))));
}
function run(sql: string, params: unknown[] = []): Promise<number> {
  return new Promise((resolve, reject) =>
    db.run(sql, params, function (this: sqlite3.RunResult, error: Error | null) {
      if (error) reject(error);
      else resolve(this.changes);
    }),
  );
}

interface Claimed {
  readonly id: string;
  readonly token: string;
  readonly saga_id: string;
  readonly payload: string;
}

function claim(now: number): Promise<Claimed[]> {
  return all<Claimed>(
    `update saga_timer set token = lower(hex(randomblob(16))), locked_until = ?
     where id in (select id from saga_timer where dispatched_at is null and available_at <= ?
       and (locked_until is null or locked_until <= ?) order by available_at, id limit ?)
     returning id, token, saga_id, payload`,
    [now + LEASE_MS, now, now, BATCH],
  );
}

/** Fires `rows` in one write transaction; returns how many were stamped. */
async function fire(rows: readonly Claimed[], now: number): Promise<number> {
  await run('begin immediate');
  try {
    let fired = 0;
    for (const row of rows) {
      const [saga] = await all<{ version: number; log: string }>('select version, log from scripted_saga where id = ?', [row.saga_id]);
      const { label } = JSON.parse(row.payload) as { label: string };
      await run('update scripted_saga set log = ?, version = ?, updated_at = ? where id = ? and version = ?', [
        `${saga!.log}tick:${label};`,
        saga!.version + 1,
        now,
        row.saga_id,
        saga!.version,
      ]);
      fired += await run(
        `update saga_timer set dispatched_at = ?, outcome = 'fired', locked_until = null where id = ? and token = ? and dispatched_at is null`,
        [now, row.id, row.token],
      );
    }
    await run('commit');
    return fired;
  } catch (error) {
    await run('rollback').catch(() => undefined);
    throw error;
  }
}

const print = (line: object) => process.stdout.write(`${JSON.stringify({ pid: process.pid, ...line })}\n`);
print({ event: 'ready' });
process.stdin.resume();
await new Promise<void>((resolve) => process.stdin.once('data', () => resolve()));
process.stdin.pause();

let claimed = 0;
let fired = 0;
let failedPasses = 0;
/** Runs `work` again while it fails with SQLITE_BUSY (the busy timeout ran out), counting each failure. */
async function untilNotBusy<T>(work: () => Promise<T>): Promise<T> {
  for (;;) {
    try {
      return await work();
    } catch (error) {
      if ((error as { code?: string }).code !== 'SQLITE_BUSY') throw error;
      failedPasses++;
    }
  }
}
for (;;) {
  const rows = await untilNotBusy(() => claim(Date.now()));
  if (rows.length === 0) break;
  claimed += rows.length;
  fired += await untilNotBusy(() => fire(rows, Date.now()));
}
await new Promise<void>((resolve, reject) => db.close((error) => (error ? reject(error) : resolve())));
print({ event: 'done', claimed, fired, failedPasses });
