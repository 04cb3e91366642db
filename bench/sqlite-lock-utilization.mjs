// How much of a SQLite drain some process held the write lock, from the intervals `sqlite-lock-profile.mjs`
// wrote ($LOCKPROF_INTERVALS; one JSON line per process). Lines whose lock intervals overlap in time are one run
// (processes of one run drain together; runs follow each other).
//   node bench/sqlite-lock-utilization.mjs .tmp/lock-intervals.jsonl
// Prints per run: processes, span (first lock to last release), the union of the held intervals and its share of
// the span (the rest the lock was free: every process was between writes, or asleep in SQLite's busy handler),
// the sum over processes (greater than the union only when intervals overlap, which one lock forbids: a check),
// and the mean wait of a transaction's first write.
import { readFileSync } from 'node:fs';

const processes = readFileSync(process.argv[2] ?? 'lock-intervals.jsonl', 'utf8')
  .trim()
  .split('\n')
  .map((line) => JSON.parse(line))
  .map((p) => ({ ...p, from: Math.min(...p.held.map((h) => h[0])), to: Math.max(...p.held.map((h) => h[1])) }))
  .sort((a, b) => a.from - b.from);
const runs = [];
for (const p of processes) {
  const run = runs.at(-1);
  if (run && p.from < run.to) {
    run.members.push(p);
    run.to = Math.max(run.to, p.to);
  } else runs.push({ members: [p], to: p.to });
}
for (const { members } of runs) {
  const intervals = members.flatMap((p) => p.held).sort((a, b) => a[0] - b[0]);
  let union = 0;
  let current;
  for (const [from, to] of intervals) {
    if (!current || from > current[1]) {
      if (current) union += current[1] - current[0];
      current = [from, to];
    } else current[1] = Math.max(current[1], to);
  }
  union += current[1] - current[0];
  const span = intervals.at(-1)[1] - intervals[0][0];
  const sum = intervals.reduce((total, [from, to]) => total + (to - from), 0);
  const waits = members.flatMap((p) => p.firstWrites);
  const meanWait = waits.reduce((a, b) => a + b, 0) / Math.max(1, waits.length);
  console.info(
    `${members.length} process(es): span ${span.toFixed(0)} ms; lock held ${union.toFixed(0)} ms (${((100 * union) / span).toFixed(0)}%), ` +
      `sum ${sum.toFixed(0)} ms; ${waits.length} transactions, first write ${meanWait.toFixed(1)} ms on average`,
  );
}
