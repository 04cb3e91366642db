import { wrap } from '@mikro-orm/core';
import { COLUMN_LIMITS } from '../entities/dispatch-states.js';
import type { SagaState } from '../entities/saga-state.js';
import { SagaValidationError } from '../errors.js';
import { freshFork } from '../orm/index.js';
import { labelOf } from '../saga/stored-text.js';
import { checkStoredSagaRow, isStackOverflow, jsonTooDeep } from '../saga/stored-values.js';
import { countActiveRows } from '../sql/count-statements.js';
import { queryRows } from '../sql/sql-executor.js';
import { sagaDispatchRows } from './dispatch-row-queries.js';
import {
  checkDate,
  checkedInput,
  checkLimit,
  checkName,
  checkOneOf,
  checkUuid,
  invalidInput,
  OPERATIONS_DEFAULTS,
} from './operation-input.js';
import {
  type ActiveSagaCount,
  type Page,
  SAGA_STATUSES,
  type SagaDetail,
  type SagaListQuery,
  type SagaLookup,
  type SagaStatus,
  type SagaSummary,
} from './operation-types.js';
import type { OperationsContext } from './operations-context.js';
import { decodeCursor, encodeCursor, type PagePosition } from './page-cursor.js';
import { checkCorrelationValue, type SagaTable } from './saga-table.js';

/** The registered saga table of `sagaType`. @throws SagaValidationError `SAGA_TYPE_UNKNOWN`. */
export function sagaTableOf(ops: OperationsContext, sagaType: unknown): SagaTable {
  const table = typeof sagaType === 'string' ? ops.sagas.get(sagaType) : undefined;
  if (!table) {
    throw new SagaValidationError(
      'SAGA_TYPE_UNKNOWN',
      `Saga type ${labelOf(sagaType)} is not registered with these operations: pass one of ${[...ops.sagas.keys()].join(', ') || '(none)'}, or register its definition.`,
    );
  }
  return table;
}

interface SagaFilters {
  readonly types: readonly SagaTable[];
  readonly status: SagaStatus;
  readonly correlation: unknown;
  readonly step: string | undefined;
  readonly createdAfter: Date | undefined;
  readonly createdBefore: Date | undefined;
}

function checkSagaQuery(ops: OperationsContext, query: SagaListQuery): SagaFilters {
  if (typeof query !== 'object' || query === null) throw invalidInput('listSagas needs a query object with a limit.');
  // Each property read once: what is checked is what is used.
  const { sagaType, status, correlation, step, createdAfter, createdBefore } = query;
  const single = sagaType === undefined ? undefined : sagaTableOf(ops, sagaType);
  if ((correlation !== undefined || step !== undefined) && !single) {
    throw invalidInput('Filtering by correlation or step needs a sagaType: each saga type has its own columns.');
  }
  if (step !== undefined && single?.column.step === null) {
    throw invalidInput(`Saga ${single.sagaType} has no stepProperty, so it cannot be filtered by step.`, { sagaType: single.sagaType });
  }
  return {
    types: single ? [single] : [...ops.sagas.values()],
    status: checkOneOf(status, 'status', Object.values(SAGA_STATUSES)) ?? SAGA_STATUSES.ALL,
    correlation: correlation === undefined ? undefined : checkCorrelationValue(single!, correlation, 'The correlation filter'),
    step: checkName(step, 'The step filter', COLUMN_LIMITS.step),
    createdAfter: checkDate(createdAfter, 'createdAfter'),
    createdBefore: checkDate(createdBefore, 'createdBefore'),
  };
}

/** One saga table's part of a listing: its filters and the keyset condition after `after`. */
function sagaBranch(saga: SagaTable, filters: SagaFilters, after: PagePosition | undefined, limit: number, rank: number) {
  const c = saga.column;
  const where: string[] = [];
  const params: unknown[] = [rank, saga.sagaType];
  const add = (sql: string, ...values: unknown[]) => {
    where.push(sql);
    params.push(...values);
  };
  if (filters.status === SAGA_STATUSES.ACTIVE) add(`${c.completedAt} is null`);
  if (filters.status === SAGA_STATUSES.COMPLETED) add(`${c.completedAt} is not null`);
  if (filters.correlation !== undefined) add(`${c.correlation} = ?`, filters.correlation);
  if (filters.step !== undefined && c.step) add(`${c.step} = ?`, filters.step);
  if (filters.createdAfter) add(`${c.createdAt} >= ?`, filters.createdAfter);
  if (filters.createdBefore) add(`${c.createdAt} < ?`, filters.createdBefore);
  if (after) {
    // Newest first over (created_at, saga type, id): the saga type is constant within a table, so it decides here,
    // compared as the statement orders it (by rank, see typeRanks), never by a database collation.
    const at = new Date(after.createdAtMs);
    if (saga.sagaType < after.sagaType) add(`${c.createdAt} <= ?`, at);
    else if (saga.sagaType > after.sagaType) add(`${c.createdAt} < ?`, at);
    else add(`(${c.createdAt} < ? or (${c.createdAt} = ? and ${c.id} < ?))`, at, at, after.id);
  }
  params.push(limit);
  const step = c.step ? `cast(${c.step} as text)` : 'cast(null as text)';
  const sql = `select * from (select cast(? as integer) as "typeRank", cast(? as text) as "sagaType", ${c.id} as "id", cast(${c.correlation} as text) as "correlation",
      ${step} as "step", ${c.version} as "version", ${c.createdAt} as "createdAt", ${c.updatedAt} as "updatedAt",
      ${c.completedAt} as "completedAt"
    from ${saga.table}${where.length ? ` where ${where.join(' and ')}` : ''}
    order by ${c.createdAt} desc, ${c.id} desc limit ?) as "part${rank}"`;
  return { sql, params };
}

/** Lists sagas newest first, filtered and paged in SQL (one statement over every type asked for). */
export async function listSagas(ops: OperationsContext, query: SagaListQuery): Promise<Page<SagaSummary>> {
  const { filters, limit, fingerprint, after } = checkedInput('listSagas', () => {
    const filters = checkSagaQuery(ops, query);
    const limit = checkLimit(query.limit, 'limit');
    const { cursor } = query;
    const fingerprint = { ...filters, types: filters.types.map((t) => t.sagaType) };
    const after = cursor === undefined ? undefined : decodeCursor(cursor, fingerprint, new Set(ops.sagas.keys()));
    return { filters, limit, fingerprint, after };
  });
  if (filters.types.length === 0) return { items: [], nextCursor: null };
  // One more than the page, to know whether a next page exists.
  const branches = typeRanks(filters.types).map(([saga, rank]) => sagaBranch(saga, filters, after, limit + 1, rank));
  const rows = await queryRows<Record<string, unknown>>(freshFork(ops.db.em), {
    sql: `${branches.map((b) => b.sql).join(' union all ')} order by "createdAt" desc, "typeRank" desc, "id" desc limit ?`,
    params: [...branches.flatMap((b) => b.params), limit + 1],
  });
  const items = rows.slice(0, limit).map((row) => summaryOf(ops, row));
  const last = items[items.length - 1];
  const nextCursor =
    rows.length > limit && last
      ? encodeCursor({ createdAtMs: last.createdAt.getTime(), sagaType: last.sagaType, id: last.id }, fingerprint)
      : null;
  return { items, nextCursor };
}

/**
 * Each type with its rank in JavaScript's string order, which the cursor comparison uses: the statement orders
 * by the rank, so a database collation (ICU, case-insensitive) cannot order the types otherwise.
 */
function typeRanks(types: readonly SagaTable[]): [SagaTable, number][] {
  const sorted = [...types].sort((a, b) => (a.sagaType < b.sagaType ? -1 : a.sagaType > b.sagaType ? 1 : 0));
  return sorted.map((saga, rank) => [saga, rank]);
}

/** A listed saga; its runtime-owned columns are checked as the runtime checks them (`STORED_VALUE_INVALID`). */
function summaryOf(ops: OperationsContext, row: Record<string, unknown>): SagaSummary {
  const { readDate } = ops.db.dialect;
  const summary: SagaSummary = {
    sagaType: String(row.sagaType),
    id: String(row.id),
    correlation: row.correlation == null ? null : String(row.correlation),
    step: row.step == null ? null : String(row.step),
    version: row.version == null || row.version === '' ? Number.NaN : Number(row.version),
    createdAt: readDate(row.createdAt)!,
    updatedAt: readDate(row.updatedAt)!,
    completedAt: readDate(row.completedAt),
  };
  checkStoredSagaRow(summary.sagaType, sagaTableOf(ops, summary.sagaType).meta, summary as unknown as SagaState);
  return summary;
}

/**
 * One saga with its state, pending and recent timers, outbox rows and handled message ids.
 * @returns undefined when no saga of that type has that id (or correlation value).
 */
export async function getSaga(ops: OperationsContext, lookup: SagaLookup): Promise<SagaDetail | undefined> {
  const { saga, recent, where, sagaId } = checkedInput('getSaga', () => checkLookup(ops, lookup));
  const entity = await findSaga(ops, saga, where, sagaId);
  if (!entity) return undefined;
  checkStoredSagaRow(saga.sagaType, saga.meta, entity);
  const state = wrap(entity as object).toObject() as Record<string, unknown>;
  const id = String(state.id);
  const summary = summaryFromState(saga, state);
  return { ...summary, state, ...(await sagaDispatchRows(ops, saga.sagaType, id, recent)) };
}

function checkLookup(ops: OperationsContext, lookup: SagaLookup) {
  if (typeof lookup !== 'object' || lookup === null) throw invalidInput('getSaga needs { sagaType, sagaId } or { sagaType, correlation }.');
  const saga = sagaTableOf(ops, lookup.sagaType);
  const { sagaId, correlation } = lookup;
  if ((sagaId === undefined) === (correlation === undefined)) {
    throw invalidInput('getSaga needs exactly one of sagaId and correlation.', { sagaType: saga.sagaType });
  }
  const recent = lookup.recent === undefined ? OPERATIONS_DEFAULTS.recentLimit : checkLimit(lookup.recent, 'recent');
  const id = sagaId === undefined ? undefined : checkUuid(sagaId, 'sagaId');
  const where =
    id !== undefined
      ? { id }
      : { [saga.definition.correlationProperty]: checkCorrelationValue(saga, correlation, 'The correlation lookup') };
  return { saga, recent, where, sagaId: id };
}

/** The saga entity `where` finds; a row MikroORM cannot hydrate (JSON nested too deep) is `STORED_VALUE_INVALID`. */
async function findSaga(ops: OperationsContext, saga: SagaTable, where: object, sagaId: string | undefined): Promise<SagaState | null> {
  try {
    return (await freshFork(ops.db.em).findOne(saga.meta.class, where as never)) as SagaState | null;
  } catch (error) {
    if (!isStackOverflow(error)) throw error;
    throw jsonTooDeep(saga.meta, { sagaType: saga.sagaType, sagaId }, error);
  }
}

function summaryFromState(saga: SagaTable, state: Record<string, unknown>): SagaSummary {
  const stepProperty = saga.definition.stepProperty;
  const correlation = state[saga.definition.correlationProperty];
  const step = stepProperty === undefined ? null : state[stepProperty];
  return {
    sagaType: saga.sagaType,
    id: String(state.id),
    correlation: correlation == null ? null : String(correlation),
    step: step == null ? null : String(step),
    version: Number(state.version),
    createdAt: state.createdAt as Date,
    updatedAt: state.updatedAt as Date,
    completedAt: (state.completedAt as Date | null) ?? null,
  };
}

/** Active sagas per registered type (one count per table over its active-row index), in registration order. */
export async function countActiveSagas(ops: OperationsContext): Promise<ActiveSagaCount[]> {
  const em = freshFork(ops.db.em);
  const counts: ActiveSagaCount[] = [];
  for (const saga of ops.sagas.values()) {
    const rows = await queryRows<{ n: number | string }>(em, { sql: `select (${countActiveRows(saga)}) as "n"`, params: [] });
    counts.push({ sagaType: saga.sagaType, active: Number(rows[0]?.n ?? 0) });
  }
  return counts;
}
