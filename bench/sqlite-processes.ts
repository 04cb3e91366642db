/**
 * `npx tsx bench/sqlite-processes.ts`: how long one and three dispatcher processes take to drain the same
 * due timers from one SQLite file (issue 7, point 6). Each process is `test/support/dispatcher-process.ts`
 * in `drain` mode; all start together once connected. Prints wall time per run and what each process claimed.
 *
 *   BENCH_TIMERS=2000 BENCH_REPS=2 npx tsx bench/sqlite-processes.ts
 *   BENCH_JOURNAL=wal npx tsx bench/sqlite-processes.ts      # the same in WAL mode
 */
import { rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { MikroORM } from '@mikro-orm/core';
import { migrateUp, updateSchema } from '../src/orm/index.js';
import { ScriptedSaga } from '../test/fixtures/scripted-saga.js';
import { type ChildLine, seedDueTimers, seedingRuntime, startChild } from '../test/support/child-dispatchers.js';
import { connectionOptions } from '../test/support/databases.js';

const TIMERS = Number(process.env.BENCH_TIMERS ?? 2_000);
const REPS = Number(process.env.BENCH_REPS ?? 1);
const PER_SAGA = 10;

async function prepare(file: string): Promise<void> {
  for (const suffix of ['', '-journal', '-wal', '-shm']) rmSync(`${file}${suffix}`, { force: true });
  const orm = await MikroORM.init(connectionOptions('sqlite', file, [ScriptedSaga]));
  await migrateUp(orm);
  await updateSchema(orm);
  if (process.env.BENCH_JOURNAL === 'wal') await orm.em.getConnection().execute('pragma journal_mode = wal');
  await seedDueTimers(seedingRuntime(orm), 'bench', TIMERS / PER_SAGA, PER_SAGA);
  await orm.close(true);
}

async function drainWith(
  processes: number,
  file: string,
): Promise<{ seconds: number; claimed: number[]; failedPasses: number; interrupted: number }> {
  const lines: ChildLine[] = [];
  let ready = 0;
  let go!: () => void;
  const allReady = new Promise<void>((resolve) => {
    go = resolve;
  });
  const children = Array.from({ length: processes }, () =>
    startChild(
      'drain',
      'sqlite',
      file,
      (line) => {
        lines.push(line);
        if (line.event === 'ready' && ++ready === processes) go();
      },
      { waitForGo: true },
    ),
  );
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
    interrupted: done.reduce((sum, d) => sum + Number(d.interrupted), 0),
  };
}

const file = join(tmpdir(), `saga-bench-processes-${process.pid}.sqlite`);
console.info(`${TIMERS} due timers (${PER_SAGA} per saga), SQLite journal mode ${process.env.BENCH_JOURNAL ?? 'delete'}, ${REPS} rep(s)`);
for (let rep = 0; rep < REPS; rep++) {
  for (const processes of [1, 3]) {
    await prepare(file);
    const run = await drainWith(processes, file);
    console.info(
      `${processes} process(es): ${run.seconds.toFixed(1)} s, ${Math.round(TIMERS / run.seconds)} timers/s; claimed ${run.claimed.join(' + ')}; failed passes ${run.failedPasses}; interrupted ${run.interrupted}`,
    );
  }
}
for (const suffix of ['', '-journal', '-wal', '-shm']) rmSync(`${file}${suffix}`, { force: true });
