import type { EntityManager } from '@mikro-orm/core';
import type { UnitTransaction } from '../../orm/index.js';
import type { DatabaseContext } from '../../sql/database-context.js';
import { sendStatement } from '../../sql/sql-executor.js';
import { statementsOf } from './plan-statements.js';
import type { PreparedWrite, SagaRowTarget } from './planned-statement.js';
import type { UnitOfWorkPlan } from './unit-of-work-plan.js';
import { runNamed } from './write-failures.js';

/** What the write phase did. */
export interface WriteReport {
  readonly timersCancelled: number;
}

/**
 * Phase 4 of a unit of work: runs the plan's statements and commits, in one transaction of `em` opened by the
 * context's `transactions`; `prelude` (the group's lock timeout) runs first in it.
 * On any failure everything is rolled back and the error is rethrown: `VersionConflict`, `StaleClaim`, or a
 * `StatementFailure` naming the operation and table.
 */
export async function writePlan(
  db: DatabaseContext,
  em: EntityManager,
  plan: UnitOfWorkPlan,
  target: SagaRowTarget,
  prelude?: ((em: EntityManager) => Promise<unknown>) | string,
): Promise<WriteReport> {
  const transaction = await runNamed('begin', undefined, () => db.transactions.begin(em));
  try {
    if (typeof prelude === 'function') await runNamed('begin', undefined, () => prelude(em));
    const lockBound = typeof prelude === 'string' ? prelude : undefined;
    const report = await runPlanStatements(db, transaction, em, plan, target, lockBound, true);
    // em.commit() flushes before it sends COMMIT (normally nothing is left to write): flushed here, what that flush
    // throws is named after the saga row it writes, not reported as a COMMIT whose outcome is unknown. A statement
    // that carried COMMIT was the whole write (the library's UPDATE covered every change): nothing is left.
    if (!transaction.committedWithStatement) await runNamed('update', db.tables.saga(target.meta).name, () => em.flush());
    await runNamed('commit', undefined, () => transaction.commit());
    return report;
  } catch (error) {
    await transaction.rollback().catch(() => undefined);
    throw error;
  }
}

/**
 * Runs the statements of `plan` on `em`, which must be inside `transaction` (its own, or a group's it joined):
 * throws `VersionConflict`, `StaleClaim` or a `StatementFailure` at the first that fails.
 * `lockBound` (a statement without parameters bounding the transaction's lock waits) is sent with the first
 * statement when that statement can carry it, else on its own before it. `ownTransaction`: the transaction holds
 * this plan only (not a group's savepoint), so a plan of one statement may send COMMIT with it.
 */
export async function runPlanStatements(
  db: DatabaseContext,
  transaction: UnitTransaction,
  em: EntityManager,
  plan: UnitOfWorkPlan,
  target: SagaRowTarget,
  lockBound?: string,
  ownTransaction = false,
): Promise<WriteReport> {
  let timersCancelled = 0;
  let bound = lockBound;
  if (bound && transaction.foldsStatements) {
    // Goes with the first statement as a statement of its own, in the same round trip: cheaper for PostgreSQL than
    // the WITH query the UPDATE would join (planned as a join: 50-130 us more per unit).
    const sql = bound;
    await runNamed('begin', undefined, () => transaction.sendWithNextStatement(sql, em));
    bound = undefined;
  }
  const statements = statementsOf(db, plan, target);
  const alone = ownTransaction && statements.length === 1 ? transaction : undefined;
  for (const statement of statements) {
    if (bound && !statement.takesLockBound) {
      const sql = bound;
      await runNamed('begin', undefined, () => sendStatement(em, { sql, params: [] }));
      bound = undefined;
    }
    const carried = bound;
    bound = undefined;
    const deleted = await runNamed(statement.operation, statement.table, () => statement.run(em, carried, alone), statement.alsoTable);
    if (statement.operation === 'delete') timersCancelled += deleted;
  }
  return { timersCancelled };
}

/** The write of a plan that is one statement with a `prepare` (the saga row's), prepared; undefined otherwise. */
export function preparedWrite(
  db: DatabaseContext,
  em: EntityManager,
  plan: UnitOfWorkPlan,
  target: SagaRowTarget,
): PreparedWrite | undefined {
  const statements = statementsOf(db, plan, target);
  return statements.length === 1 ? statements[0]!.prepare?.(em) : undefined;
}
