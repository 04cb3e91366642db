import type { EntityManager, EntityMetadata } from '@mikro-orm/core';
import { isNeverSent, isRefusedByServer, markWritten, plainRowUpdate, recordInsertedNulls, type UnitTransaction } from '../../orm/index.js';
import type { DatabaseContext } from '../../sql/database-context.js';
import { readSagaRowAndStamp, type SagaRowChange, updateSagaRow, updateSagaRowAndStampTimer } from '../../sql/saga-statements.js';
import { queryRows, runStatement, sendStatement } from '../../sql/sql-executor.js';
import { stampTimer, type TimerStamp } from '../../sql/timer-statements.js';
import type { PlannedStatement, PreparedWrite, SagaRowTarget } from './planned-statement.js';
import type { SagaRowWrite, UnitOfWorkPlan } from './unit-of-work-plan.js';
import { runNamed, StaleClaim, StatementFailure, VersionConflict } from './write-failures.js';

/**
 * The statement writing the saga row, which also stamps the delivered timer when `stamp` is given (a saga row
 * that is updated or guarded; see `updateSagaRowAndStampTimer`). A statement that stamps the timer never carries
 * COMMIT: a stale timer rolls back the saga row's write. Undefined when the plan does not touch the row.
 */
export function sagaRowStatement(
  db: DatabaseContext,
  plan: UnitOfWorkPlan,
  target: SagaRowTarget,
  stamp?: TimerStamp,
): PlannedStatement | undefined {
  const row = plan.sagaRow;
  switch (row.kind) {
    case 'none':
      return undefined;
    case 'insert':
      return insertStatement(db, target);
    case 'guard':
      return guardStatement(new SagaRowWriter(db, target.meta, stamp), {
        sagaId: plan.sagaId,
        loadedVersion: row.loadedVersion,
        columns: 'guard',
      });
    case 'update':
      return updateStatement(new SagaRowWriter(db, target.meta, stamp), plan.sagaId, row, target);
  }
}

/** A new instance: MikroORM's flush inserts it. */
function insertStatement(db: DatabaseContext, { state, meta, verifyUnchanged }: SagaRowTarget): PlannedStatement {
  return {
    operation: 'insert',
    table: db.tables.saga(meta).name,
    run: async (em) => {
      verifyUnchanged?.();
      await em.flush();
      // Under forceUndefined the commit's flush would otherwise see the inserted nulls as changed.
      if (state) recordInsertedNulls(em, state);
      return 0;
    },
  };
}

/** No column changed: the row's version is checked and its lock taken, with the library's own UPDATE. */
function guardStatement(writer: SagaRowWriter, guard: SagaRowChange): PlannedStatement {
  return {
    ...writer.statement,
    run: async (em, lockBound, alone) => {
      if (!(await writer.write(em, guard, lockBound, alone))) throw new VersionConflict();
      return 0;
    },
    prepare: () => writer.prepared(guard, nothing, nothing),
  };
}

/**
 * The changed columns: written with one UPDATE of the library's own, as plain columns, or by MikroORM's flush when a
 * hook, a subscriber or a column needs it. Either way the row is guarded by the version read.
 */
function updateStatement(
  writer: SagaRowWriter,
  sagaId: string,
  row: Extract<SagaRowWrite, { kind: 'update' }>,
  { state, meta, verifyUnchanged }: SagaRowTarget,
): PlannedStatement {
  /** The state at its new version; its change set as plain columns, or undefined when only MikroORM's flush writes it. */
  const advance = (em: EntityManager) => {
    verifyUnchanged?.();
    state!.version = row.version;
    state!.updatedAt = row.updatedAt;
    const columns = plainRowUpdate(em, meta, state!);
    return columns && { sagaId, loadedVersion: row.loadedVersion, columns };
  };
  return {
    ...writer.statement,
    run: async (em, lockBound, alone) => {
      const change = advance(em);
      if (!change) {
        // MikroORM's flush sends the UPDATE: the bound goes first, on its own; the stamp after it.
        if (lockBound) await sendStatement(em, { sql: lockBound, params: [] });
        await em.flush();
        await writer.stampAfterFlush(em);
        return 0;
      }
      if (!(await writer.write(em, change, lockBound, alone))) throw new VersionConflict();
      markWritten(em, state!);
      return 0;
    },
    prepare: (em) => {
      const before = { version: state!.version, updatedAt: state!.updatedAt };
      const cancel = () => Object.assign(state!, before);
      const change = advance(em);
      if (!change) {
        cancel();
        return undefined;
      }
      return writer.prepared(change, () => markWritten(em, state!), cancel);
    },
  };
}

/** Writes one saga table's row with the library's own statements, and with it the delivered timer's `stamp`, if any. */
class SagaRowWriter {
  /** What the statement is, for error messages: an UPDATE of the saga table (and of the timer table with a stamp). */
  readonly statement: Pick<PlannedStatement, 'operation' | 'table' | 'takesLockBound' | 'alsoTable'>;

  constructor(
    private readonly db: DatabaseContext,
    private readonly meta: EntityMetadata,
    private readonly stamp: TimerStamp | undefined,
  ) {
    const table = db.tables.saga(meta).name;
    this.statement = { operation: 'update', table, takesLockBound: true, ...(stamp ? { alsoTable: db.tables.timer.name } : {}) };
  }

  /** Writes the row (and the stamp); false when another unit changed the row first. */
  async write(
    em: EntityManager,
    change: SagaRowChange,
    lockBound: string | undefined,
    alone: UnitTransaction | undefined,
  ): Promise<boolean> {
    const { db, meta, stamp } = this;
    if (!stamp) {
      return carryingCommit(db, alone, async () => (await runStatement(em, updateSagaRow(db, meta, change, lockBound))) === 1);
    }
    const { sagaRow, stamped } = readSagaRowAndStamp(await queryRows(em, updateSagaRowAndStampTimer(db, meta, change, stamp, lockBound)));
    if (sagaRow && !stamped) throw new StaleClaim();
    return sagaRow;
  }

  /** After MikroORM's flush wrote the row: the stamp, as a statement of its own. */
  async stampAfterFlush(em: EntityManager): Promise<void> {
    const { db, stamp } = this;
    if (stamp) await runNamed('update', db.tables.timer.name, () => stampOrStale(db, em, stamp));
  }

  /** The write as statements to send with other units' (PostgreSQL only: `runsStatementsTogether`). */
  prepared(change: SagaRowChange, written: () => void, cancel: () => void): PreparedWrite {
    const { db, meta, stamp } = this;
    const statements = [updateSagaRow(db, meta, change), ...(stamp ? [stampTimer(db, stamp, { pendingById: true })] : [])];
    const read = (answers: readonly { readonly affectedRows: number }[]) => {
      const changed = answers.map((answer) => answer.affectedRows === 1);
      return changed.every(Boolean) ? 'written' : changed.some(Boolean) ? 'partial' : 'conflict';
    };
    const tables = [db.tables.saga(meta).table, ...(stamp ? [db.tables.timer.table] : [])];
    return { statements, tables, written, cancel, read };
  }
}

function nothing(): void {}

/** Stamps the delivered timer; throws {@link StaleClaim} when its claim no longer holds. */
export async function stampOrStale(db: DatabaseContext, em: EntityManager, stamp: TimerStamp): Promise<void> {
  if ((await runStatement(em, stampTimer(db, stamp))) !== 1) throw new StaleClaim();
}

/**
 * Runs `send` (the statement of a plan that is the only one of `alone`, its transaction, when given), asking for the
 * transaction's COMMIT to go with it where the ORM and database allow (`commitWithNextStatement`). A failure of
 * such a statement without a server's error (the connection dropped) may have come after COMMIT was applied: it is
 * reported as COMMIT's failure, whose outcome is unknown. A server's error stopped the statement itself, before
 * COMMIT ran: the statement's own failure, as always.
 */
async function carryingCommit<T>(db: DatabaseContext, alone: UnitTransaction | undefined, send: () => Promise<T>): Promise<T> {
  if (!alone?.commitWithNextStatement()) return send();
  const started = performance.now();
  try {
    return await send();
  } catch (error) {
    // Refused by the server, or never sent (pg refuses a client whose connection had failed): COMMIT was not applied.
    // SQLite commits in-process (a statement sent alone is its own transaction): its error is the statement's.
    if (isRefusedByServer(error) || isNeverSent(error) || !db.dialect.commitCanFailAfterApplying) throw error;
    throw new StatementFailure('commit', undefined, error, Math.round(performance.now() - started));
  }
}
