import type { EntityManager } from '@mikro-orm/core';
import { freshFork, inFreshTransaction } from '../orm/index.js';
import { MAX_PURGE_BATCH_SIZE } from '../saga/handled-messages.js';
import { DISPATCH_TABLES, type DispatchTable, dispatchTableNames } from '../sql/dispatch-tables.js';
import { placeholders, queryRows, runStatement } from '../sql/sql-executor.js';
import { checkDate, checkedInput, checkLimit, invalidInput, OPERATIONS_DEFAULTS } from './operation-input.js';
import { DISPATCH_ROW_STATUSES, type PurgeOptions, type PurgeReport } from './operation-types.js';
import type { OperationsContext } from './operations-context.js';
import type { SagaTable } from './saga-table.js';

export { MAX_PURGE_BATCH_SIZE };

interface Batching {
  readonly batchSize: number;
  readonly maxBatches: number;
}

/** Runs `batch` until it deletes fewer than `batchSize` rows or `maxBatches` ran; returns rows and batches. */
async function inBatches(batching: Batching, batch: () => Promise<number>): Promise<{ deleted: number; batches: number }> {
  let deleted = 0;
  let batches = 0;
  while (batches < batching.maxBatches) {
    const count = await batch();
    batches++;
    deleted += count;
    if (count < batching.batchSize) break;
  }
  return { deleted, batches };
}

/**
 * `for update skip locked` where the database has it: concurrent purges take disjoint batches instead of
 * waiting on each other's rows; elsewhere (SQLite) a statement holds the write lock, so purges run in turn.
 */
function skipLocked(ops: OperationsContext): string {
  return ops.db.dialect.supportsSkipLocked ? ' for update skip locked' : '';
}

/**
 * MikroORM's SQLite dialect runs every raw statement that starts with `delete` through the driver's `run`,
 * which returns no rows even with RETURNING (it makes an exception for INSERT and UPDATE only); a leading
 * comment makes it fetch the rows. Harmless on PostgreSQL.
 */
const ROWS_WANTED = '/* rows */ ';

/** Deletes one batch of dispatched rows of `table` that left the pending set before `cutoff`. */
function deleteDispatched(ops: OperationsContext, table: DispatchTable, cutoff: Date, includeDeadLettered: boolean, limit: number) {
  const { table: name, column: c } = dispatchTableNames(ops.db, table);
  const keep = includeDeadLettered ? '' : ` and ${c.outcome} <> ?`;
  return runStatement(freshFork(ops.db.em), {
    sql: `delete from ${name} where ${c.id} in (select ${c.id} from ${name}
       where ${c.dispatchedAt} is not null and ${c.dispatchedAt} < ?${keep} order by ${c.dispatchedAt} limit ?${skipLocked(ops)})`,
    params: includeDeadLettered ? [cutoff, limit] : [cutoff, DISPATCH_ROW_STATUSES.DEAD_LETTERED, limit],
  });
}

/**
 * Deletes one batch of sagas of one type completed before `cutoff`, in one transaction with their timers,
 * dispatched outbox rows and handled message ids. A saga with an outbox row still pending is left for later.
 */
function deleteCompletedSagas(ops: OperationsContext, saga: SagaTable, cutoff: Date, limit: number): Promise<number> {
  const s = saga.column;
  const o = ops.db.tables.outbox;
  const pendingOutbox = `select 1 from ${o.table} where ${o.column.sagaType} = ? and ${o.column.sagaId} = ${saga.table}.${s.id} and ${o.column.dispatchedAt} is null`;
  return inFreshTransaction(ops.db.em, async (em) => {
    const rows = await queryRows<{ id: string }>(em, {
      sql: `${ROWS_WANTED}delete from ${saga.table} where ${s.id} in (select ${s.id} from ${saga.table}
         where ${s.completedAt} is not null and ${s.completedAt} < ? and not exists (${pendingOutbox})
         order by ${s.completedAt} limit ?${skipLocked(ops)})
       returning ${s.id} as "id"`,
      params: [cutoff, saga.sagaType, limit],
    });
    const ids = rows.map((row) => String(row.id));
    if (ids.length > 0) await deleteLeftovers(ops, em, saga.sagaType, ids);
    return ids.length;
  });
}

/** Deletes the timers, outbox rows and handled message ids of deleted sagas (inside the same transaction). */
async function deleteLeftovers(ops: OperationsContext, em: EntityManager, sagaType: string, ids: readonly string[]): Promise<void> {
  const { timer, outbox, handledMessage } = ops.db.tables;
  for (const { table, column: c } of [timer, outbox, handledMessage]) {
    await runStatement(em, {
      sql: `delete from ${table} where ${c.sagaType} = ? and ${c.sagaId} in (${placeholders(ids.length)})`,
      params: [sagaType, ...ids],
    });
  }
}

function checkPurge(options: PurgeOptions) {
  if (typeof options !== 'object' || options === null) throw invalidInput('purge needs an options object.');
  const batchSize =
    options.batchSize === undefined ? OPERATIONS_DEFAULTS.purgeBatchSize : checkLimit(options.batchSize, 'batchSize', MAX_PURGE_BATCH_SIZE);
  const maxBatches = options.maxBatches ?? Number.POSITIVE_INFINITY;
  if (maxBatches !== Number.POSITIVE_INFINITY) checkLimit(maxBatches, 'maxBatches', Number.MAX_SAFE_INTEGER);
  const checked = {
    dispatchedBefore: checkDate(options.dispatchedBefore, 'dispatchedBefore'),
    completedSagasBefore: checkDate(options.completedSagasBefore, 'completedSagasBefore'),
    includeDeadLettered: options.includeDeadLettered ?? false,
    expiredMessageIds: options.expiredMessageIds ?? false,
    batching: { batchSize, maxBatches },
  };
  if (typeof checked.includeDeadLettered !== 'boolean' || typeof checked.expiredMessageIds !== 'boolean') {
    throw invalidInput('includeDeadLettered and expiredMessageIds are booleans.');
  }
  if (!checked.dispatchedBefore && !checked.completedSagasBefore && !checked.expiredMessageIds) {
    throw invalidInput('purge has nothing to do: give dispatchedBefore, completedSagasBefore or expiredMessageIds: true.');
  }
  return checked;
}

/**
 * Deletes what retention allows, each part in batches of `batchSize` rows, each batch one short statement
 * (or, for sagas, one short transaction). Safe to run from several processes at once: a row is deleted by
 * exactly one of them.
 */
export async function purge(ops: OperationsContext, options: PurgeOptions): Promise<PurgeReport> {
  const { dispatchedBefore, completedSagasBefore, includeDeadLettered, expiredMessageIds, batching } = checkedInput('purge', () =>
    checkPurge(options),
  );
  let batches = 0;
  const run = async (batch: () => Promise<number>) => {
    const done = await inBatches(batching, batch);
    batches += done.batches;
    return done.deleted;
  };
  const { batchSize } = batching;
  const sagas: Record<string, number> = {};
  if (completedSagasBefore) {
    for (const saga of ops.sagas.values()) {
      sagas[saga.sagaType] = await run(() => deleteCompletedSagas(ops, saga, completedSagasBefore, batchSize));
    }
  }
  const timers = dispatchedBefore
    ? await run(() => deleteDispatched(ops, DISPATCH_TABLES.timer, dispatchedBefore, includeDeadLettered, batchSize))
    : 0;
  const outbox = dispatchedBefore
    ? await run(() => deleteDispatched(ops, DISPATCH_TABLES.outbox, dispatchedBefore, includeDeadLettered, batchSize))
    : 0;
  const inbox = dispatchedBefore
    ? await run(() => deleteDispatched(ops, DISPATCH_TABLES.inbox, dispatchedBefore, includeDeadLettered, batchSize))
    : 0;
  let messageIds = 0;
  if (expiredMessageIds) {
    const result = await ops.runtime.purgeExpiredMessageIds(batching);
    messageIds = result.deleted;
    batches += result.batches;
  }
  return { timers, outbox, inbox, sagas, messageIds, batches };
}
