import type { MikroORM } from '@mikro-orm/core';
import type { TestDatabase } from './databases.js';
import { drainContinuations } from './flush-hold.js';
import { recordStatements } from './pg-statements.js';
import { lockWaiters, untilLockWaiters } from './row-locks.js';
import type { StepGate } from './step-gate.js';

/**
 * Locks the rows of `table` whose `column` is `value` (FOR UPDATE) in a transaction on an ORM of its own (pushed to
 * `opened`, for the test to close), until `release()`. PostgreSQL.
 */
export async function holdRow(database: TestDatabase, opened: MikroORM[], table: string, column: string, value: unknown) {
  const holder = await database.openAnother({ pool: { min: 1, max: 1 } });
  opened.push(holder);
  const held = holder.em.fork();
  await held.begin();
  await held.getConnection().execute(`select 1 from ${table} where ${column} = ? for update`, [value], 'all', held.getTransactionContext());
  return { release: () => held.rollback() };
}

/**
 * Makes the units `units()` starts one group, under a runtime writing one group at a time: `first` (a unit on the
 * row `held` locks) is written first, alone, and waits for that row; the units start meanwhile, their steps gated by
 * `gate`, reach their write phase together and queue for the next group, which starts once `held` is released.
 * The statements sent from the release on are recorded. PostgreSQL.
 */
export async function gatherOneGroup<R, T>(
  database: TestDatabase,
  gate: StepGate,
  held: { release(): Promise<unknown> },
  first: () => Promise<R>,
  units: () => T,
) {
  const before = await lockWaiters(database.orm);
  const firstDone = first();
  await untilLockWaiters(database.orm, before + 1);
  const started = units();
  await gate.all.promise;
  gate.go.resolve();
  await drainContinuations();
  await drainContinuations();
  const recording = recordStatements();
  await held.release();
  return { first: firstDone, started, recording };
}
