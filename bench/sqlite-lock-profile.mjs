// Where a SQLite dispatcher process spends its time holding the write lock (docs/performance.md, "Open items",
// three SQLite processes). Load it into every process of a run and read one line per process from $LOCKPROF_OUT:
//   mkdir -p .tmp; LOCKPROF_OUT=.tmp/lockprof.txt NODE_OPTIONS="--import $PWD/bench/sqlite-lock-profile.mjs" \
//     BENCH_SQLITE_TIMERS=1000 BENCH_REPS=1 node --import tsx bench/sqlite-processes.ts
// It wraps node-sqlite3's Database.prototype.run/all/get/exec (the calls knex makes for @mikro-orm/sqlite 6) and
// sums, per process: the time from each BEGIN's call to its COMMIT's (or ROLLBACK's) callback, the time between
// call and callback of the statements inside those transactions, and that of writes outside them (autocommit).
// A deferred BEGIN takes no lock: the lock is held from the transaction's first write to its COMMIT. With
// $LOCKPROF_INTERVALS set, every process also appends to that file one JSON line: the wall-clock intervals in
// which it held the lock (from its first write's callback to COMMIT's), and how long each first write took (the
// wait for the lock, mostly). `node bench/sqlite-lock-utilization.mjs <file>` then says, per run, how much of
// the drain some process held the lock. Only processes running test/support/dispatcher-process.ts write
// intervals (the bench's own process seeds the file between runs).
import { appendFileSync } from 'node:fs';
import { createRequire } from 'node:module';

const sqlite3 = createRequire(`${process.cwd()}/package.json`)('sqlite3');
const out = process.env.LOCKPROF_OUT ?? 'lockprof.txt';
const intervalsOut = process.argv.some((arg) => arg.includes('dispatcher-process')) ? process.env.LOCKPROF_INTERVALS : undefined;
const totals = { transactions: 0, inTransactions: 0, statementsInside: 0, statementTime: 0, autocommitWrites: 0, autocommitTime: 0 };
/** The open transaction: when BEGIN was called, and when its first write returned (0: none yet). */
let open;
/** [from, to] wall-clock ms in which this process held the write lock, and each first write's duration. */
const held = [];
const firstWrites = [];
const began = performance.now();
const wall = () => performance.timeOrigin + performance.now();
const isWrite = (text) => /^(update|insert|delete|with)/.test(text);

for (const method of ['run', 'all', 'get', 'exec']) {
  const original = sqlite3.Database.prototype[method];
  sqlite3.Database.prototype[method] = function (sql, ...args) {
    const text = String(sql).trim().toLowerCase();
    const callback = args.findIndex((arg) => typeof arg === 'function');
    if (callback >= 0) {
      const start = performance.now();
      const done = args[callback];
      args[callback] = function (...result) {
        const now = performance.now();
        if (text.startsWith('begin')) {
          open = { at: start, lockedAt: 0 };
        } else if (open && (text.startsWith('commit') || (text.startsWith('rollback') && !text.includes(' to ')))) {
          totals.transactions++;
          totals.inTransactions += now - open.at;
          if (open.lockedAt) held.push([open.lockedAt, wall()]);
          open = undefined;
        } else if (open) {
          totals.statementsInside++;
          totals.statementTime += now - start;
          if (!open.lockedAt && isWrite(text)) {
            open.lockedAt = wall();
            firstWrites.push(now - start);
          }
        } else if (isWrite(text)) {
          totals.autocommitWrites++;
          totals.autocommitTime += now - start;
          held.push([wall() - 0.1, wall()]);
        }
        return done.apply(this, result);
      };
    }
    return original.call(this, sql, ...args);
  };
}

process.on('exit', () => {
  const ms = (value) => `${value.toFixed(0)} ms`;
  appendFileSync(
    out,
    `pid ${process.pid}: alive ${ms(performance.now() - began)}; ${totals.transactions} transactions, ${ms(totals.inTransactions)} in them ` +
      `(${totals.statementsInside} statements inside, ${ms(totals.statementTime)} from call to callback); ` +
      `${totals.autocommitWrites} autocommit writes, ${ms(totals.autocommitTime)}\n`,
  );
  if (intervalsOut && held.length > 0) appendFileSync(intervalsOut, `${JSON.stringify({ pid: process.pid, held, firstWrites })}\n`);
});
