/**
 * Figures "SQLite, 3 processes vs 1" (issue 7, point 6): how fast one and three dispatcher processes drain
 * the same due timers from one SQLite file, in rollback-journal and in WAL mode. Each process is
 * `test/support/dispatcher-process.ts` in `drain` mode; all start together once connected. SQLite has one
 * write lock, so three processes cannot beat one: the target is 0.9 of one process, and every process must
 * claim timers in every run (the figures carry what each claimed).
 *
 * Alone: `BENCH_SQLITE_TIMERS=2000 BENCH_REPS=2 node --import tsx bench/sqlite-processes.ts` prints each run
 * (wall time, what each process claimed, failed passes). Knobs: `BENCH_PER_SAGA` (timers per saga, 10),
 * `BENCH_BATCH` and `BENCH_CONC` (the processes' batchSize and concurrency; default: the dispatcher's),
 * `BENCH_DRIVER=better-sqlite` (the processes on @mikro-orm/better-sqlite, MikroORM 6 only).
 */
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { MikroORM } from '@mikro-orm/core';
import { migrateUp, updateSchema } from '../src/orm/schema-tools.js';
import { ScriptedSaga } from '../test/fixtures/scripted-saga.js';
import { type ChildLine, seedDueTimers, seedingRuntime, startChild } from '../test/support/child-dispatchers.js';
import { connectionOptions } from '../test/support/databases.js';
import { removeSqliteFile } from './bench-database.js';
import { runTogether } from './child-processes.js';
import { compare, type FigureResult, interleave } from './figure-stats.js';

const PER_SAGA = Number(process.env.BENCH_PER_SAGA ?? 10);
/** The driver of the dispatcher processes (the file is seeded through @mikro-orm/sqlite either way). */
const DRIVER: 'sqlite' | 'better-sqlite' = process.env.BENCH_DRIVER === 'better-sqlite' ? 'better-sqlite' : 'sqlite';
/** Dispatcher options of every process; unset, the dispatcher's defaults (batchSize 2 x concurrency on SQLite). */
const DISPATCHER = {
  ...(process.env.BENCH_BATCH ? { batchSize: Number(process.env.BENCH_BATCH) } : {}),
  ...(process.env.BENCH_CONC ? { concurrency: Number(process.env.BENCH_CONC) } : {}),
};
type Journal = 'delete' | 'wal';
/** Three processes against one on one write lock: hand-written SQL does not reach 1.0 either. */
const TARGET_VS_ONE = 0.9;
/** One drain's throughput and what each process claimed. */
type Drained = { readonly perSecond: number; readonly claimed: number[] };

async function prepare(file: string, journal: Journal, timers: number): Promise<void> {
  removeSqliteFile(file);
  const orm = await MikroORM.init(connectionOptions('sqlite', file, [ScriptedSaga]));
  await migrateUp(orm);
  await updateSchema(orm);
  await orm.em.getConnection().execute(`pragma journal_mode = ${journal}`);
  await seedDueTimers(seedingRuntime(orm), 'bench', Math.ceil(timers / PER_SAGA), PER_SAGA);
  await orm.close(true);
}

/** One drain: wall time from the start signal to the last exit, what each process claimed, failed passes. */
export interface DrainRun {
  readonly seconds: number;
  readonly claimed: number[];
  readonly failedPasses: number;
}

async function drainWith(processes: number, file: string): Promise<DrainRun> {
  const lines: ChildLine[] = [];
  let ready = 0;
  let go!: () => void;
  const allReady = new Promise<void>((resolve) => {
    go = resolve;
  });
  const onLine = (line: ChildLine) => {
    lines.push(line);
    if (line.event === 'ready' && ++ready === processes) go();
  };
  const children = Array.from({ length: processes }, () => startChild('drain', DRIVER, file, onLine, { waitForGo: true, ...DISPATCHER }));
  await allReady;
  const started = process.hrtime.bigint();
  for (const { child } of children) child.stdin?.write('go\n');
  const codes = await Promise.all(children.map((c) => c.exited));
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  if (codes.some((code) => code !== 0)) throw new Error(`a dispatcher process failed: exit codes ${codes.join(', ')}`);
  const done = lines.filter((l) => l.event === 'done');
  return {
    seconds,
    claimed: done.map((d) => Number(d.claimed)),
    failedPasses: done.reduce((sum, d) => sum + Number(d.failedPasses), 0),
  };
}

/** Prepares a file with `timers` due timers and drains it with `processes` processes; logs the run. */
async function timedDrain(
  file: string,
  journal: Journal,
  processes: number,
  timers: number,
  log: (line: string) => void,
): Promise<Drained> {
  await prepare(file, journal, timers);
  const run = await drainWith(processes, file);
  const fired = run.claimed.reduce((a, b) => a + b, 0);
  if (fired < timers) throw new Error(`${processes} process(es) claimed ${fired} of ${timers} timers`);
  log(
    `  sqlite ${journal}, ${processes} process(es): ${run.seconds.toFixed(1)} s, claimed ${run.claimed.join(' + ')}, failed passes ${run.failedPasses}`,
  );
  return { perSecond: timers / run.seconds, claimed: run.claimed };
}

/**
 * The raw-SQL baseline: `processes` copies of `bench/sqlite-raw-drain.ts` (node-sqlite3, hand-written claim and
 * batch transaction, no library) drain a file prepared as for the dispatchers; logs the run.
 */
async function timedRawDrain(
  file: string,
  journal: Journal,
  processes: number,
  timers: number,
  log: (line: string) => void,
): Promise<Drained> {
  await prepare(file, journal, timers);
  const batch = String(DISPATCHER.batchSize ?? 20);
  const { seconds, done } = await runTogether(
    'bench/sqlite-raw-drain.ts',
    Array.from({ length: processes }, () => [file, batch]),
  );
  const fired = done.reduce((sum, d) => sum + Number(d.fired), 0);
  if (fired !== timers) throw new Error(`raw: ${processes} process(es) fired ${fired} of ${timers} timers`);
  const claimed = done.map((d) => Number(d.claimed));
  log(
    `  sqlite ${journal}, raw SQL, ${processes} process(es): ${seconds.toFixed(1)} s, claimed ${claimed.join(' + ')}, busy ${done.reduce((sum, d) => sum + Number(d.failedPasses), 0)}`,
  );
  return { perSecond: timers / seconds, claimed };
}

export async function sqliteProcessFigures(reps: number, timers: number, log: (line: string) => void = () => {}): Promise<FigureResult[]> {
  const file = join(tmpdir(), `saga-bench-processes-${process.pid}.sqlite`);
  const figures: FigureResult[] = [];
  try {
    for (const journal of ['delete', 'wal'] as const) {
      // The three-process drains' claims, run by run, beside their throughputs.
      const claims = { three: [] as number[][], rawThree: [] as number[][] };
      const measured = (drain: Promise<Drained>, into?: number[][]) =>
        drain.then(({ perSecond, claimed }) => {
          into?.push(claimed);
          return perSecond;
        });
      const samples = await interleave(reps, {
        three: () => measured(timedDrain(file, journal, 3, timers, log), claims.three),
        one: () => measured(timedDrain(file, journal, 1, timers, log)),
        rawThree: () => measured(timedRawDrain(file, journal, 3, timers, log), claims.rawThree),
        rawOne: () => measured(timedRawDrain(file, journal, 1, timers, log)),
      });
      const mode = journal === 'wal' ? 'WAL' : 'rollback journal';
      const name = `SQLite dispatcher, ${timers} due timers, 3 processes vs 1 (${mode})`;
      figures.push(
        compare(name, 'timers/s', samples.three, { name: 'ours, 1 process', samples: samples.one }, TARGET_VS_ONE, {
          claimedPerProcess: claims.three,
        }),
      );
      // The same question asked of hand-written SQL, in the same run: what SQLite's one write lock allows here.
      const raw = `SQLite, hand-written SQL (no library), ${timers} due timers, 3 processes vs 1 (${mode})`;
      figures.push(
        compare(raw, 'timers/s', samples.rawThree, { name: 'raw SQL, 1 process', samples: samples.rawOne }, TARGET_VS_ONE, {
          claimedPerProcess: claims.rawThree,
        }),
      );
    }
  } finally {
    removeSqliteFile(file);
  }
  return figures;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { formatTable } = await import('./figure-stats.js');
  const figures = await sqliteProcessFigures(
    Number(process.env.BENCH_REPS ?? 1),
    Number(process.env.BENCH_SQLITE_TIMERS ?? 2_000),
    console.info,
  );
  console.info(formatTable(figures));
}
