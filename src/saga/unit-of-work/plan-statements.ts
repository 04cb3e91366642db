import type { DatabaseContext } from '../../sql/database-context.js';
import { insertHandledMessage } from '../../sql/handled-message-statements.js';
import { stampStagedDelivery } from '../../sql/inbox-statements.js';
import { insertOutboxMessages } from '../../sql/outbox-statements.js';
import { queryRows, runStatement, type SqlStatement } from '../../sql/sql-executor.js';
import {
  deleteAllPendingTimers,
  deletePendingTimers,
  deletePendingTimersOfOtherSteps,
  insertTimers,
  lockPendingTimers,
  replacePendingTimer,
  type TimerWrite,
} from '../../sql/timer-statements.js';
import type { PlannedStatement, SagaRowTarget } from './planned-statement.js';
import { sagaRowStatement, stampOrStale } from './saga-row-statement.js';
import type { UnitOfWorkPlan } from './unit-of-work-plan.js';
import { StaleClaim } from './write-failures.js';

/**
 * The statements of `plan`, in the order they must run:
 * 1. the saga row, first: it is the lock every unit of work on this instance takes first, so timer and
 *    outbox writes of two units never interleave or deadlock;
 * 1a. on PostgreSQL, when the plan may write two or more existing timer rows: every pending timer of the
 *    instance, locked in id order, the order of the dispatcher's lease renewal and start marks (which hold
 *    rows of a saga without its saga row lock);
 * 2. the delivering timer's stamp, or the delivering staged row's, token-checked;
 * 3. timer deletes, before the writes below: the filtered unique index must never see two pending rows of
 *    one name, and MikroORM would order a flush's INSERTs before its DELETEs;
 * 4. timer replacements in place, then inserts; 5. outbox rows; 6. the caller's message id.
 * Where the database's WITH queries can be UPDATEs, 1 and 2 are one statement when nothing is locked between them.
 */
export function statementsOf(db: DatabaseContext, plan: UnitOfWorkPlan, target: SagaRowTarget): PlannedStatement[] {
  const statements: PlannedStatement[] = [];
  const several = writesSeveralTimerRows(plan);
  const stamp = plan.timerStamp;
  const kind = plan.sagaRow.kind;
  const together = db.dialect.updatesInWith && !several && (kind === 'update' || kind === 'guard') ? stamp : undefined;
  const sagaStatement = sagaRowStatement(db, plan, target, together);
  if (sagaStatement) statements.push(sagaStatement);
  if (several) statements.push(timerLockStatement(db, plan));
  const timer = db.tables.timer.name;
  if (stamp && !together) statements.push({ operation: 'update', table: timer, run: (em) => stampOrStale(db, em, stamp).then(() => 0) });
  const staged = plan.stagedStamp;
  if (staged) {
    statements.push({
      operation: 'update',
      table: db.tables.inbox.name,
      run: async (em) => {
        if ((await runStatement(em, stampStagedDelivery(db, staged))) !== 1) throw new StaleClaim();
        return 0;
      },
    });
  }
  const { sagaType, sagaId, timerDeletes } = plan;
  // Each statement's SQL is built when it runs: a plan written with other units' is never run this way.
  const deletes = (statement: () => SqlStatement): PlannedStatement => ({
    operation: 'delete',
    table: timer,
    run: (em) => runStatement(em, statement()),
  });
  if (timerDeletes.all) statements.push(deletes(() => deleteAllPendingTimers(db, sagaType, sagaId)));
  const otherSteps = timerDeletes.otherStepsThan;
  if (otherSteps) statements.push(deletes(() => deletePendingTimersOfOtherSteps(db, sagaType, sagaId, otherSteps.step)));
  if (timerDeletes.names.length > 0) statements.push(deletes(() => deletePendingTimers(db, sagaType, sagaId, timerDeletes.names)));
  if (plan.timers.length > 0) statements.push(...timerStatements(db, plan.timers, plan.replaceTimers));
  const inserts = (table: string, statement: () => SqlStatement): PlannedStatement => ({
    operation: 'insert',
    table,
    run: (em) => runStatement(em, statement()).then(() => 0),
  });
  if (plan.outbox.length > 0) statements.push(inserts(db.tables.outbox.name, () => insertOutboxMessages(db, plan.outbox)));
  const handled = plan.handledMessage;
  // A racing delivery of the same id collides here (or on the saga row) and, retried, finds this record.
  if (handled) statements.push(inserts(db.tables.handledMessage.name, () => insertHandledMessage(db, handled)));
  return statements;
}

/**
 * Whether the plan may write two or more existing timer rows: the delivered timer's stamp, deletes (a delete
 * of all timers, or of other steps', may match any number), and replacements in place.
 */
export function writesSeveralTimerRows(plan: UnitOfWorkPlan): boolean {
  const { timerDeletes, timerStamp } = plan;
  if (timerDeletes.all || timerDeletes.otherStepsThan) return true;
  // Stamped first, the delivered timer is no longer pending: its own name matches no other row.
  const others = (name: string) => name !== timerStamp?.name;
  const replacements = plan.replaceTimers ? new Set(plan.timers.map((t) => t.name).filter(others)).size : 0;
  return (timerStamp ? 1 : 0) + timerDeletes.names.filter(others).length + replacements >= 2;
}

/** The lock of every pending timer of the plan's instance, in id order (PostgreSQL; see `lockPendingTimers`). */
function timerLockStatement(db: DatabaseContext, plan: UnitOfWorkPlan): PlannedStatement {
  return {
    operation: 'lock',
    table: db.tables.timer.name,
    run: async (em) => {
      if (db.dialect.supportsSkipLocked) await queryRows(em, lockPendingTimers(db, plan.sagaType, plan.sagaId));
      return 0;
    },
  };
}

/** Replaces each of `timers` in place when `replace` and its name is pending, then inserts the others in one statement. */
function timerStatements(db: DatabaseContext, timers: readonly TimerWrite[], replace: boolean): PlannedStatement[] {
  const inserts: TimerWrite[] = [];
  const table = db.tables.timer.name;
  return [
    {
      operation: 'update',
      table,
      run: async (em) => {
        for (const timer of timers) {
          if (!replace || (await runStatement(em, replacePendingTimer(db, timer))) === 0) inserts.push(timer);
        }
        return 0;
      },
    },
    {
      operation: 'insert',
      table,
      run: (em) => (inserts.length > 0 ? runStatement(em, insertTimers(db, inserts)).then(() => 0) : Promise.resolve(0)),
    },
  ];
}
