// Where a SQLite dispatcher process spends its time holding the write lock (docs/timers.md, "Claim size on
// SQLite"). Load it into every process of a run and read one line per process from $LOCKPROF_OUT:
//   LOCKPROF_OUT=/tmp/lockprof.txt NODE_OPTIONS="--import $PWD/bench/sqlite-lock-profile.mjs" \
//     BENCH_SQLITE_TIMERS=1000 BENCH_REPS=1 node --import tsx bench/sqlite-processes.ts
// It wraps node-sqlite3's Database.prototype.run/all/get/exec (the calls knex makes for @mikro-orm/sqlite 6) and
// sums, per process: the time from each BEGIN's call to its COMMIT's (or ROLLBACK's) callback, the time between
// call and callback of the statements inside those transactions, and that of writes outside them (autocommit).
import { appendFileSync } from 'node:fs';
import { createRequire } from 'node:module';

const sqlite3 = createRequire(`${process.cwd()}/package.json`)('sqlite3');
const out = process.env.LOCKPROF_OUT ?? 'lockprof.txt';
const totals = { transactions: 0, inTransactions: 0, statementsInside: 0, statementTime: 0, autocommitWrites: 0, autocommitTime: 0 };
let openedAt = 0;
const began = performance.now();

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
          openedAt = start;
        } else if (openedAt && (text.startsWith('commit') || (text.startsWith('rollback') && !text.includes(' to ')))) {
          totals.transactions++;
          totals.inTransactions += now - openedAt;
          openedAt = 0;
        } else if (openedAt) {
          totals.statementsInside++;
          totals.statementTime += now - start;
        } else if (/^(update|insert|delete)/.test(text)) {
          totals.autocommitWrites++;
          totals.autocommitTime += now - start;
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
});
