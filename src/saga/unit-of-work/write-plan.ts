import type { EntityManager, EntityMetadata } from '@mikro-orm/core';
import { dialectOf } from '../../dialect/dialect-adapter.js';
import type { SagaState } from '../../entities/saga-state.js';
import {
  executeSql,
  isNeverSent,
  isRefusedByServer,
  markWritten,
  plainRowUpdate,
  quoteName,
  recordInsertedNulls,
  tableOf,
  type UnitTransaction,
  type UnitTransactions,
} from '../../orm/index.js';
import { insertHandledMessage } from '../../sql/handled-message-statements.js';
import { insertOutboxMessages } from '../../sql/outbox-statements.js';
import {
  guardSagaVersion,
  type SagaRowChange,
  sagaRowUpdate,
  updateSagaRow,
  writeSagaRowAndStampTimer,
} from '../../sql/saga-statements.js';
import {
  deleteAllPendingTimers,
  deletePendingTimers,
  deletePendingTimersOfOtherSteps,
  insertTimers,
  lockPendingTimers,
  PENDING_BY_ID,
  replacePendingTimer,
  stampTimer,
  stampTimerStatement,
  type TimerStamp,
  type TimerWrite,
} from '../../sql/timer-statements.js';
import type { UnitOfWorkPlan } from './unit-of-work-plan.js';

/** What a statement does, for error messages: never its SQL or parameters. */
export type StatementOperation = 'read' | 'lock' | 'begin' | 'insert' | 'update' | 'delete' | 'savepoint' | 'commit';

/** One statement of a plan, named by what it does to which table. */
export interface PlannedStatement {
  readonly operation: StatementOperation;
  readonly table: string;
  /**
   * Runs the statement inside the open transaction; returns the rows it deleted (0 for other statements). A
   * statement that {@link PlannedStatement.takesLockBound} is given the transaction's lock bound when it runs first,
   * and sends it (folded into its own SQL, or before it). `alone`: the transaction this statement is the only one
   * of, so it may carry that transaction's COMMIT (see `UnitTransaction.commitWithNextStatement`).
   */
  readonly run: (em: EntityManager, lockBound?: string, alone?: UnitTransaction) => Promise<number>;
  /** Whether `run` sends a lock bound it is given; the bound of a plan whose first statement does not is sent before it. */
  readonly takesLockBound?: boolean;
  /** A second table the statement writes (the saga row's UPDATE that also stamps the delivered timer). */
  readonly alsoTable?: string;
  /**
   * What `run` writes, as statements ready to be sent with other units' in one round trip instead; undefined when
   * they cannot be (MikroORM's flush writes the row). Only the saga row's statement has it: a plan of that statement
   * alone can be written so ({@link preparedWrite}).
   */
  readonly prepare?: (em: EntityManager) => PreparedWrite | undefined;
}

/**
 * A unit's write as statements of the library's own, to be sent with other units' ({@link PlannedStatement.prepare}):
 * the saga row's versioned UPDATE, and the delivered timer's stamp after it.
 */
export interface PreparedWrite {
  readonly statements: readonly { readonly sql: string; readonly params: readonly unknown[] }[];
  /** The tables the statements write, quoted as in them. */
  readonly tables: readonly string[];
  /**
   * What the statements' answers (one each, in order) mean: `written`; `conflict` (another unit of work changed the
   * saga row first, and nothing was written); `partial` (one statement changed its row and the other did not: the
   * saga row without the stamp when the timer's claim was lost, or the reverse: the transaction must not commit it).
   */
  readonly read: (answers: readonly { readonly affectedRows: number }[]) => 'written' | 'conflict' | 'partial';
  /** Tells the unit's EntityManager the row was written, once the write stands (as `run` does after its statement). */
  readonly written: () => void;
  /** Undoes what preparing changed on the unit's state (its version): the statements are not sent, `run` will write it. */
  readonly cancel: () => void;
}

/** The write of a plan that is one statement with a {@link PlannedStatement.prepare}, prepared; undefined otherwise. */
export function preparedWrite(em: EntityManager, plan: UnitOfWorkPlan, target: SagaRowTarget): PreparedWrite | undefined {
  const statements = statementsOf(plan, target, dialectOf(em).updatesInWith);
  return statements.length === 1 ? statements[0]!.prepare?.(em) : undefined;
}

/** Another unit of work changed the saga between our read and our write. */
export class VersionConflict extends Error {}

/** The timer being delivered lost its claim (cancelled, replaced or fired meanwhile). */
export class StaleTimer extends Error {}

/** A statement (or BEGIN, or COMMIT) failed; `cause` is the driver's error. */
export class StatementFailure extends Error {
  constructor(
    readonly operation: StatementOperation,
    /** The table the statement touched; undefined for BEGIN and COMMIT. */
    readonly table: string | undefined,
    override readonly cause: unknown,
    /** How long the statement ran before it failed, in milliseconds. */
    readonly elapsedMs: number,
    /** A second table the statement wrote, when it wrote two. */
    readonly alsoTable?: string,
  ) {
    super(`${operation} ${table ?? ''}${alsoTable ? ` and ${alsoTable}` : ''} failed`);
  }
}

/** What the write phase did. */
export interface WriteReport {
  readonly timersCancelled: number;
}

/** Where the plan's saga row lives: the managed entity and its metadata. */
export interface SagaRowTarget {
  readonly state: SagaState | undefined;
  readonly meta: EntityMetadata;
  /**
   * Throws when the state changed since the step's changes were checked (a callback the step did not await).
   * Called right before the flush, with nothing awaited in between.
   */
  readonly verifyUnchanged?: () => void;
}

/**
 * The statements of `plan`, in the order they must run:
 * 1. the saga row, first: it is the lock every unit of work on this instance takes first, so timer and
 *    outbox writes of two units never interleave or deadlock;
 * 1a. on PostgreSQL, when the plan may write two or more existing timer rows: every pending timer of the
 *    instance, locked in id order, the order of the dispatcher's lease renewal and start marks (which hold
 *    rows of a saga without its saga row lock);
 * 2. the delivering timer's stamp, token-checked;
 * 3. timer deletes, before the writes below: the filtered unique index must never see two pending rows of
 *    one name, and MikroORM would order a flush's INSERTs before its DELETEs;
 * 4. timer replacements in place, then inserts; 5. outbox rows; 6. the caller's message id.
 */
export function statementsOf(plan: UnitOfWorkPlan, target: SagaRowTarget, updatesInWith = false): PlannedStatement[] {
  const statements: PlannedStatement[] = [];
  const several = writesSeveralTimerRows(plan);
  const stamp = plan.timerStamp;
  // 1 and 2 in one statement where the database allows it and nothing is locked between them.
  const kind = plan.sagaRow.kind;
  const together = updatesInWith && !several && (kind === 'update' || kind === 'guard') ? stamp : undefined;
  const sagaStatement = sagaRowStatement(plan, target, together);
  if (sagaStatement) statements.push(sagaStatement);
  if (several) {
    statements.push({
      operation: 'lock',
      table: 'saga_timer',
      run: async (em) => {
        if (dialectOf(em).supportsSkipLocked) await lockPendingTimers(em, plan.sagaType, plan.sagaId);
        return 0;
      },
    });
  }
  if (stamp && !together) statements.push(timerStampStatement(stamp));
  const { sagaType, sagaId, timerDeletes } = plan;
  const deletes = (run: PlannedStatement['run']): PlannedStatement => ({ operation: 'delete', table: 'saga_timer', run });
  if (timerDeletes.all) statements.push(deletes((em) => deleteAllPendingTimers(em, sagaType, sagaId)));
  const otherSteps = timerDeletes.otherStepsThan;
  if (otherSteps) statements.push(deletes((em) => deletePendingTimersOfOtherSteps(em, sagaType, sagaId, otherSteps.step)));
  if (timerDeletes.names.length > 0) statements.push(deletes((em) => deletePendingTimers(em, sagaType, sagaId, timerDeletes.names)));
  if (plan.timers.length > 0) statements.push(...timerStatements(plan.timers, plan.replaceTimers));
  if (plan.outbox.length > 0) {
    statements.push({ operation: 'insert', table: 'saga_outbox', run: (em) => insertOutboxMessages(em, plan.outbox).then(() => 0) });
  }
  const handled = plan.handledMessage;
  if (handled) {
    // A racing delivery of the same id collides here (or on the saga row) and, retried, finds this record.
    statements.push({ operation: 'insert', table: 'saga_handled_message', run: (em) => insertHandledMessage(em, handled).then(() => 0) });
  }
  return statements;
}

/**
 * Phase 4 of a unit of work: runs the plan's statements and commits, in one transaction of `em` opened by
 * `transactions`; `prelude` (the group's lock timeout) runs first in it.
 * On any failure everything is rolled back and the error is rethrown: {@link VersionConflict},
 * {@link StaleTimer}, or a {@link StatementFailure} naming the operation and table.
 */
export async function writePlan(
  transactions: UnitTransactions,
  em: EntityManager,
  plan: UnitOfWorkPlan,
  target: SagaRowTarget,
  prelude?: ((em: EntityManager) => Promise<unknown>) | string,
): Promise<WriteReport> {
  const transaction = await runNamed('begin', undefined, () => transactions.begin(em));
  try {
    if (typeof prelude === 'function') await runNamed('begin', undefined, () => prelude(em));
    const lockBound = typeof prelude === 'string' ? prelude : undefined;
    const report = await runPlanStatements(transaction, em, plan, target, lockBound, true);
    // em.commit() flushes before it sends COMMIT (normally nothing is left to write): flushed here, what that flush
    // throws is named after the saga row it writes, not reported as a COMMIT whose outcome is unknown. A statement
    // that carried COMMIT was the whole write (the library's UPDATE covered every change): nothing is left.
    if (!transaction.committedWithStatement) await runNamed('update', target.meta.tableName, () => em.flush());
    await runNamed('commit', undefined, () => transaction.commit());
    return report;
  } catch (error) {
    await transaction.rollback().catch(() => undefined);
    throw error;
  }
}

/**
 * Runs the statements of `plan` on `em`, which must be inside `transaction` (its own, or a group's it joined):
 * throws {@link VersionConflict}, {@link StaleTimer} or a {@link StatementFailure} at the first that fails.
 * `lockBound` (a statement without parameters bounding the transaction's lock waits) is sent with the first
 * statement when that statement can carry it, else on its own before it. `ownTransaction`: the transaction holds
 * this plan only (not a group's savepoint), so a plan of one statement may send COMMIT with it.
 */
export async function runPlanStatements(
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
    // the WITH query the UPDATE would join (planned as a join, measured 2026-12-02: 50-130 us more per unit).
    const sql = bound;
    await runNamed('begin', undefined, () => transaction.sendWithNextStatement(sql, em));
    bound = undefined;
  }
  const statements = statementsOf(plan, target, dialectOf(em).updatesInWith);
  const alone = ownTransaction && statements.length === 1 ? transaction : undefined;
  for (const statement of statements) {
    if (bound && !statement.takesLockBound) {
      const sql = bound;
      await runNamed('begin', undefined, () => executeSql(em, sql, [], 'run'));
      bound = undefined;
    }
    const carried = bound;
    bound = undefined;
    const deleted = await runNamed(statement.operation, statement.table, () => statement.run(em, carried, alone), statement.alsoTable);
    if (statement.operation === 'delete') timersCancelled += deleted;
  }
  return { timersCancelled };
}

/** Runs `fn`; what it throws (other than the write phase's own signals) becomes a {@link StatementFailure}. */
export async function runNamed<T>(
  operation: StatementOperation,
  table: string | undefined,
  fn: () => Promise<T>,
  alsoTable?: string,
): Promise<T> {
  const started = performance.now();
  try {
    return await fn();
  } catch (error) {
    if (error instanceof VersionConflict || error instanceof StaleTimer || error instanceof StatementFailure) throw error;
    throw new StatementFailure(operation, table, error, Math.round(performance.now() - started), alsoTable);
  }
}

/**
 * The statement writing the saga row, which also stamps the delivered timer when `stamp` is given (a saga row
 * that is updated or guarded; see `writeSagaRowAndStampTimer`). A statement that stamps the timer never carries
 * COMMIT: a stale timer rolls back the saga row's write.
 */
function sagaRowStatement(
  plan: UnitOfWorkPlan,
  { state, meta, verifyUnchanged }: SagaRowTarget,
  stamp?: TimerStamp,
): PlannedStatement | undefined {
  const row = plan.sagaRow;
  const table = meta.tableName;
  /** Writes the row (and the stamp) with the library's own statement; false when another unit changed the row first. */
  const write = async (em: EntityManager, change: SagaRowChange, lockBound: string | undefined, alone: UnitTransaction | undefined) => {
    if (!stamp) {
      const written = () =>
        change.columns === 'guard'
          ? guardSagaVersion(em, meta, change.sagaId, change.loadedVersion, lockBound)
          : updateSagaRow(em, meta, change.sagaId, change.loadedVersion, change.columns, lockBound);
      return carryingCommit(em, alone, written);
    }
    const { sagaRow, stamped } = await writeSagaRowAndStampTimer(em, meta, change, stamp, lockBound);
    if (sagaRow && !stamped) throw new StaleTimer();
    return sagaRow;
  };
  const prepared = (em: EntityManager, change: SagaRowChange, written: () => void, cancel: () => void): PreparedWrite => {
    // Prepared writes go to PostgreSQL only (`runsStatementsTogether`).
    const statements = [sagaRowUpdate(em, meta, change), ...(stamp ? [stampTimerStatement(stamp, undefined, PENDING_BY_ID)] : [])];
    const read = (answers: readonly { readonly affectedRows: number }[]) => {
      const changed = answers.map((answer) => answer.affectedRows === 1);
      return changed.every(Boolean) ? 'written' : changed.some(Boolean) ? 'partial' : 'conflict';
    };
    const tables = [tableOf(em, meta), ...(stamp ? [quoteName(em, TIMER_TABLE)] : [])];
    return { statements, tables, written, cancel, read };
  };
  const statement = { operation: 'update', table, takesLockBound: true, ...(stamp ? { alsoTable: TIMER_TABLE } : {}) } as const;
  switch (row.kind) {
    case 'none':
      return undefined;
    case 'guard': {
      const guard = { sagaId: plan.sagaId, loadedVersion: row.loadedVersion, columns: 'guard' } as const;
      return {
        ...statement,
        run: async (em, lockBound, alone) => {
          if (!(await write(em, guard, lockBound, alone))) throw new VersionConflict();
          return 0;
        },
        prepare: (em) => prepared(em, guard, nothing, nothing),
      };
    }
    case 'insert':
      return {
        operation: 'insert',
        table,
        run: async (em) => {
          verifyUnchanged?.();
          await em.flush();
          // Under forceUndefined the commit's flush would otherwise see the inserted nulls as changed.
          if (state) recordInsertedNulls(em, state);
          return 0;
        },
      };
    case 'update':
      return {
        ...statement,
        run: async (em, lockBound, alone) => {
          verifyUnchanged?.();
          state!.version = row.version;
          state!.updatedAt = row.updatedAt;
          // The change set as plain columns, written with one UPDATE of our own; MikroORM's flush when a hook,
          // a subscriber or a column needs it. Either way the row is guarded by the version read.
          const columns = plainRowUpdate(em, meta, state!);
          if (!columns) {
            // MikroORM's flush sends the UPDATE: the bound goes first, on its own; the stamp after it.
            if (lockBound) await executeSql(em, lockBound, [], 'run');
            await em.flush();
            if (stamp) await runNamed('update', TIMER_TABLE, () => stampOrStale(em, stamp));
            return 0;
          }
          const change = { sagaId: plan.sagaId, loadedVersion: row.loadedVersion, columns };
          if (!(await write(em, change, lockBound, alone))) throw new VersionConflict();
          markWritten(em, state!);
          return 0;
        },
        prepare: (em) => {
          verifyUnchanged?.();
          const before = { version: state!.version, updatedAt: state!.updatedAt };
          const cancel = () => Object.assign(state!, before);
          state!.version = row.version;
          state!.updatedAt = row.updatedAt;
          const columns = plainRowUpdate(em, meta, state!);
          if (!columns) {
            cancel();
            return undefined;
          }
          const change = { sagaId: plan.sagaId, loadedVersion: row.loadedVersion, columns };
          return prepared(em, change, () => markWritten(em, state!), cancel);
        },
      };
  }
}

const TIMER_TABLE = 'saga_timer';

function nothing(): void {}

/** The delivered timer's stamp, token-checked, as a statement of its own. */
function timerStampStatement(stamp: TimerStamp): PlannedStatement {
  return { operation: 'update', table: TIMER_TABLE, run: (em) => stampOrStale(em, stamp).then(() => 0) };
}

/** Stamps the delivered timer; throws {@link StaleTimer} when its claim no longer holds. */
async function stampOrStale(em: EntityManager, stamp: TimerStamp): Promise<void> {
  if ((await stampTimer(em, stamp)) !== 1) throw new StaleTimer();
}

/**
 * Runs `send` (the statement of a plan that is the only one of `alone`, its transaction, when given), asking for the
 * transaction's COMMIT to go with it where the ORM and database allow (`commitWithNextStatement`). A failure of
 * such a statement without a server's error (the connection dropped) may have come after COMMIT was applied: it is
 * reported as COMMIT's failure, whose outcome is unknown. A server's error stopped the statement itself, before
 * COMMIT ran: the statement's own failure, as always.
 */
async function carryingCommit<T>(em: EntityManager, alone: UnitTransaction | undefined, send: () => Promise<T>): Promise<T> {
  if (!alone?.commitWithNextStatement()) return send();
  const started = performance.now();
  try {
    return await send();
  } catch (error) {
    // Refused by the server, or never sent (pg refuses a client whose connection had failed): COMMIT was not applied.
    // SQLite commits in-process (a statement sent alone is its own transaction): its error is the statement's.
    if (isRefusedByServer(error) || isNeverSent(error) || !dialectOf(em).commitCanFailAfterApplying) throw error;
    throw new StatementFailure('commit', undefined, error, Math.round(performance.now() - started));
  }
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

function timerStatements(timers: readonly TimerWrite[], replace: boolean): PlannedStatement[] {
  const inserts: TimerWrite[] = [];
  return [
    {
      operation: 'update',
      table: 'saga_timer',
      run: async (em) => {
        for (const timer of timers) {
          if (!replace || (await replacePendingTimer(em, timer)) === 0) inserts.push(timer);
        }
        return 0;
      },
    },
    {
      operation: 'insert',
      table: 'saga_timer',
      run: (em) => (inserts.length > 0 ? insertTimers(em, inserts).then(() => 0) : Promise.resolve(0)),
    },
  ];
}
