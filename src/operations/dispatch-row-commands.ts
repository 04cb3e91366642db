import { classifyDriverError, freshFork, isDriverException } from '../orm/index.js';
import { DISPATCH_TABLES, type DispatchTable, dispatchTableNames } from '../sql/dispatch-tables.js';
import { placeholders, queryRows, runStatement } from '../sql/sql-executor.js';
import { checkDate, checkedInput, checkIds, invalidInput } from './operation-input.js';
import {
  type BulkItem,
  type BulkResult,
  type CancelStatus,
  DISPATCH_ROW_STATUSES,
  ITEM_STATUSES,
  type ItemStatus,
  type RequeueStatus,
  type RescheduleStatus,
} from './operation-types.js';
import type { OperationsContext } from './operations-context.js';

/** A row of `ids` as {@link rowStates} reads it. */
interface RowState {
  readonly outcome: string | null;
  readonly sagaType: string;
  /** The row's saga: its id, or a staged delivery's correlation value. */
  readonly sagaId: string;
  readonly messageType: string;
}

/** Which of `ids` exist in `table`, whether each is pending or dead-lettered, and whose saga it belongs to. */
async function rowStates(ops: OperationsContext, table: DispatchTable, ids: readonly string[]): Promise<Map<string, RowState>> {
  if (ids.length === 0) return new Map();
  const { table: name, column: c, sagaColumn } = dispatchTableNames(ops.db, table);
  const rows = await queryRows<RowState & { id: string }>(freshFork(ops.db.em), {
    sql: `select ${c.id} as "id", ${c.outcome} as "outcome", ${c.sagaType} as "sagaType", ${sagaColumn} as "sagaId", ${c.messageType} as "messageType"
     from ${name} where ${c.id} in (${placeholders(ids.length)})`,
    params: [...ids],
  });
  return new Map(rows.map((row) => [String(row.id), row]));
}

/**
 * Dead-lettered timers that would be discarded if requeued: their saga is gone (`saga_not_found`), or completed
 * and its definition does not handle the timer's message once completed (`saga_completed`). Only sagas of a
 * type these operations know can be read; a timer of another type is not judged here.
 */
async function undeliverableTimers(ops: OperationsContext, states: ReadonlyMap<string, RowState>): Promise<Map<string, RequeueStatus>> {
  const dead = [...states].filter(([, row]) => row.outcome === DISPATCH_ROW_STATUSES.DEAD_LETTERED && ops.sagas.has(row.sagaType));
  const verdicts = new Map<string, RequeueStatus>();
  for (const sagaType of new Set(dead.map(([, row]) => row.sagaType))) {
    const saga = ops.sagas.get(sagaType)!;
    const ofType = dead.filter(([, row]) => row.sagaType === sagaType);
    const sagaIds = [...new Set(ofType.map(([, row]) => row.sagaId))];
    const found = await queryRows<{ id: string; completedAt: unknown }>(freshFork(ops.db.em), {
      sql: `select ${saga.column.id} as "id", ${saga.column.completedAt} as "completedAt" from ${saga.table} where ${saga.column.id} in (${placeholders(sagaIds.length)})`,
      params: sagaIds,
    });
    const completed = new Map(found.map((row) => [String(row.id), row.completedAt !== null && row.completedAt !== undefined]));
    for (const [id, row] of ofType) {
      if (!completed.has(row.sagaId)) verdicts.set(id, ITEM_STATUSES.SAGA_NOT_FOUND);
      else if (completed.get(row.sagaId) && !saga.definition.handlesCompleted(row.messageType))
        verdicts.set(id, ITEM_STATUSES.SAGA_COMPLETED);
    }
  }
  return verdicts;
}

/** The database refused a statement or could not be reached (not a bug, not a schema that does not fit). */
function refusedByDatabase(error: Error): boolean {
  const kind = classifyDriverError(error);
  if (kind === 'no free connection') return true;
  return isDriverException(error) && kind !== 'missing table' && kind !== 'missing column';
}

/**
 * Runs `change` once per id (each its own short statement) and collects one status per id. A statement the
 * database refuses or does not answer makes that id `failed` (with the exception's class name, never its
 * message) and the next id is tried: the call never throws after a change committed. A table or column that
 * does not fit fails the same statement for every id, so it throws at the first (`SCHEMA_INVALID`).
 */
async function perItem<TStatus extends ItemStatus>(
  ids: readonly string[],
  change: (id: string) => Promise<TStatus>,
  affectedStatus: TStatus,
): Promise<BulkResult<TStatus | typeof ITEM_STATUSES.FAILED>> {
  const items: BulkItem<TStatus | typeof ITEM_STATUSES.FAILED>[] = [];
  for (const id of ids) {
    try {
      items.push({ id, status: await change(id) });
    } catch (error) {
      if (!(error instanceof Error) || !refusedByDatabase(error)) throw error;
      items.push({ id, status: ITEM_STATUSES.FAILED, error: error.constructor.name });
    }
  }
  return {
    requested: ids.length,
    affected: items.filter((item) => item.status === affectedStatus).length,
    items,
  };
}

/** The operation that requeues each table's rows, for error messages. */
const REQUEUE_OPERATION = {
  [DISPATCH_TABLES.timer]: 'requeueTimers',
  [DISPATCH_TABLES.outbox]: 'requeueOutbox',
  [DISPATCH_TABLES.inbox]: 'requeueInbox',
} as const;

/**
 * Puts dead-lettered rows back in the pending set: due now, attempts and lease reset, a new token, the
 * dead-letter stamp cleared (`last_error` is kept). A timer whose name is pending again on its saga stays
 * dead-lettered and is reported `conflict`; one whose saga would discard it stays dead-lettered and is reported
 * `saga_completed` or `saga_not_found` ({@link undeliverableTimers}). A staged delivery keeps its order key: it is
 * delivered before its saga's deliveries that are still pending and were committed after it.
 */
export async function requeueRows(ops: OperationsContext, table: DispatchTable, ids: unknown): Promise<BulkResult<RequeueStatus>> {
  const checked = checkedInput(REQUEUE_OPERATION[table], () => checkIds(ids, 'ids'));
  const { table: name, column: c } = dispatchTableNames(ops.db, table);
  const states = await rowStates(ops, table, checked);
  const undeliverable = table === DISPATCH_TABLES.timer ? await undeliverableTimers(ops, states) : new Map<string, RequeueStatus>();
  return perItem<RequeueStatus>(
    checked,
    async (id) => {
      if (!states.has(id)) return ITEM_STATUSES.NOT_FOUND;
      const verdict = undeliverable.get(id);
      if (verdict !== undefined) return verdict;
      try {
        const changed = await runStatement(freshFork(ops.db.em), {
          sql: `update ${name} set ${c.dispatchedAt} = null, ${c.outcome} = null, ${c.deadLetteredAt} = null, ${c.deadLetterReason} = null,
             ${c.attempts} = 0, ${c.availableAt} = ?, ${c.lockedUntil} = null, ${c.deliveryStartedAt} = null, ${c.token} = ${ops.db.dialect.newTokenSql}
           where ${c.id} = ? and ${c.outcome} = ?`,
          params: [ops.clock.now(), id, DISPATCH_ROW_STATUSES.DEAD_LETTERED],
        });
        return changed === 1 ? ITEM_STATUSES.REQUEUED : ITEM_STATUSES.NOT_DEAD_LETTERED;
      } catch (error) {
        // The filtered unique index: a pending timer of that name exists on the saga again.
        if (classifyDriverError(error) === 'unique violation') return ITEM_STATUSES.CONFLICT;
        throw error;
      }
    },
    ITEM_STATUSES.REQUEUED,
  );
}

/** Deletes pending timers. A timer being delivered right now loses its claim: its firing is dropped as stale. */
export async function cancelTimers(ops: OperationsContext, ids: unknown): Promise<BulkResult<CancelStatus>> {
  const checked = checkedInput('cancelTimers', () => checkIds(ids, 'ids'));
  const { table, column: c } = ops.db.tables.timer;
  const states = await rowStates(ops, DISPATCH_TABLES.timer, checked);
  return perItem<CancelStatus>(
    checked,
    async (id) => {
      if (!states.has(id)) return ITEM_STATUSES.NOT_FOUND;
      const deleted = await runStatement(freshFork(ops.db.em), {
        sql: `delete from ${table} where ${c.id} = ? and ${ops.db.dialect.pendingById(c.dispatchedAt)}`,
        params: [id],
      });
      return deleted === 1 ? ITEM_STATUSES.CANCELLED : ITEM_STATUSES.NOT_PENDING;
    },
    ITEM_STATUSES.CANCELLED,
  );
}

/** Moves pending timers to a new due time, with a new token (a delivery in flight can no longer fire it). */
export async function rescheduleTimers(ops: OperationsContext, ids: unknown, dueAt: unknown): Promise<BulkResult<RescheduleStatus>> {
  const { checked, due } = checkedInput('rescheduleTimers', () => {
    const checked = checkIds(ids, 'ids');
    const due = checkDate(dueAt, 'dueAt');
    if (!due) throw invalidInput('rescheduleTimers needs dueAt: the new due time (a Date).');
    return { checked, due };
  });
  const { table, column: c } = ops.db.tables.timer;
  const states = await rowStates(ops, DISPATCH_TABLES.timer, checked);
  return perItem<RescheduleStatus>(
    checked,
    async (id) => {
      if (!states.has(id)) return ITEM_STATUSES.NOT_FOUND;
      const changed = await runStatement(freshFork(ops.db.em), {
        sql: `update ${table} set ${c.dueAt} = ?, ${c.availableAt} = ?, ${c.lockedUntil} = null, ${c.deliveryStartedAt} = null,
           ${c.token} = ${ops.db.dialect.newTokenSql}
         where ${c.id} = ? and ${ops.db.dialect.pendingById(c.dispatchedAt)}`,
        params: [due, due, id],
      });
      return changed === 1 ? ITEM_STATUSES.RESCHEDULED : ITEM_STATUSES.NOT_PENDING;
    },
    ITEM_STATUSES.RESCHEDULED,
  );
}
