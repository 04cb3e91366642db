import { COLUMN_LIMITS } from '../entities/dispatch-states.js';
import { freshFork } from '../orm/index.js';
import { MAX_CORRELATION_BYTES } from '../saga/correlation-value.js';
import { storedDateProblem, storedValueInvalid } from '../saga/stored-values.js';
import type { InboxProperty, OutboxProperty, TimerProperty } from '../sql/database-context.js';
import { DISPATCH_TABLES, type DispatchTable, dispatchTableNames } from '../sql/dispatch-tables.js';
import { queryRows } from '../sql/sql-executor.js';
import { checkedInput, checkLimit, checkName, checkOneOf, checkUuid, invalidInput } from './operation-input.js';
import {
  DISPATCH_ROW_STATUSES,
  type DispatchRowQuery,
  type DispatchRowStatus,
  type HandledMessageRow,
  type InboxRow,
  type OutboxRow,
  type Page,
  type SagaDetail,
  type TimerRow,
} from './operation-types.js';
import type { OperationsContext } from './operations-context.js';
import { decodeCursor, encodeCursor } from './page-cursor.js';

/** The statuses a row of each table can have. */
export const TABLE_STATUSES: Readonly<Record<DispatchTable, readonly DispatchRowStatus[]>> = {
  [DISPATCH_TABLES.timer]: ['pending', 'leased', 'dead_lettered', 'missed', 'fired', 'discarded'],
  [DISPATCH_TABLES.outbox]: ['pending', 'leased', 'dead_lettered', 'published'],
  [DISPATCH_TABLES.inbox]: ['pending', 'leased', 'dead_lettered', 'delivered', 'duplicate', 'ignored'],
};

/** The columns every dispatch table shows an operator (`DispatchRowFields`). */
const SHARED_COLUMNS = [
  'id',
  'sagaType',
  'messageType',
  'payload',
  'availableAt',
  'attempts',
  'lastError',
  'lockedUntil',
  'dispatchedAt',
  'outcome',
  'deadLetteredAt',
  'deadLetterReason',
  'correlationId',
  'createdAt',
] as const satisfies readonly (TimerProperty & OutboxProperty & InboxProperty)[];
/** The columns each table shows an operator. */
const TABLE_COLUMNS: Readonly<Record<DispatchTable, readonly string[]>> = {
  [DISPATCH_TABLES.timer]: [...SHARED_COLUMNS, 'sagaId', 'name', 'step', 'dueAt'] satisfies TimerProperty[],
  [DISPATCH_TABLES.outbox]: [...SHARED_COLUMNS, 'sagaId', 'headers'] satisfies OutboxProperty[],
  [DISPATCH_TABLES.inbox]: [...SHARED_COLUMNS, 'sagaKey', 'messageId', 'orderKey'] satisfies InboxProperty[],
};

/** The operation that lists each table's rows, for error messages. */
const LIST_OPERATION = {
  [DISPATCH_TABLES.timer]: 'listTimers',
  [DISPATCH_TABLES.outbox]: 'listOutbox',
  [DISPATCH_TABLES.inbox]: 'listInbox',
} as const;

/** Every column of `table`, by property: those every table has and its own. */
function columnsOf(ops: OperationsContext, table: DispatchTable): Readonly<Record<string, string>> {
  return dispatchTableNames(ops.db, table).column;
}

/** `select` list of a table's operator columns, aliased to property names. */
function selectList(ops: OperationsContext, table: DispatchTable): string {
  const column = columnsOf(ops, table);
  return TABLE_COLUMNS[table].map((p) => `${column[p]} as "${p}"`).join(', ');
}

/** The SQL condition (and its parameters) of one status, at `now`. */
export function statusCondition(ops: OperationsContext, table: DispatchTable, status: DispatchRowStatus, now: Date) {
  const c = dispatchTableNames(ops.db, table).column;
  if (status === DISPATCH_ROW_STATUSES.PENDING) {
    return { sql: `${c.dispatchedAt} is null and (${c.lockedUntil} is null or ${c.lockedUntil} <= ?)`, params: [now] };
  }
  if (status === DISPATCH_ROW_STATUSES.LEASED) return { sql: `${c.dispatchedAt} is null and ${c.lockedUntil} > ?`, params: [now] };
  return { sql: `${c.dispatchedAt} is not null and ${c.outcome} = ?`, params: [status] };
}

type RowOf<T extends DispatchTable> = T extends typeof DISPATCH_TABLES.timer
  ? TimerRow
  : T extends typeof DISPATCH_TABLES.outbox
    ? OutboxRow
    : InboxRow;

/** Reads the rows of `table` matching `where`, ordered and limited in SQL, as operator rows. */
async function readRows<T extends DispatchTable>(
  ops: OperationsContext,
  table: T,
  where: readonly string[],
  params: readonly unknown[],
  orderBy: string,
  limit: number,
): Promise<RowOf<T>[]> {
  const now = ops.clock.now();
  const rows = await queryRows<Record<string, unknown>>(freshFork(ops.db.em), {
    sql: `select ${selectList(ops, table)} from ${dispatchTableNames(ops.db, table).table}
     ${where.length ? `where ${where.join(' and ')}` : ''} order by ${orderBy} limit ?`,
    params: [...params, limit],
  });
  return rows.map((row) => rowOf(ops, table, row, now) as RowOf<T>);
}

function rowOf(ops: OperationsContext, table: DispatchTable, row: Record<string, unknown>, now: Date): TimerRow | OutboxRow | InboxRow {
  const { readJson } = ops.db.dialect;
  const date = storedDates(ops, table, row);
  const dispatchedAt = date('dispatchedAt');
  const lockedUntil = date('lockedUntil');
  const status: DispatchRowStatus = dispatchedAt
    ? (String(row.outcome) as DispatchRowStatus)
    : lockedUntil && lockedUntil > now
      ? DISPATCH_ROW_STATUSES.LEASED
      : DISPATCH_ROW_STATUSES.PENDING;
  const common = {
    id: String(row.id),
    status,
    sagaType: String(row.sagaType),
    messageType: String(row.messageType),
    payload: readJsonLeniently(readJson, row.payload),
    availableAt: date('availableAt', true)!,
    attempts: Number(row.attempts),
    lastError: (row.lastError as string | null) ?? null,
    lockedUntil,
    dispatchedAt,
    deadLetteredAt: date('deadLetteredAt'),
    deadLetterReason: (row.deadLetterReason as string | null) ?? null,
    correlationId: (row.correlationId as string | null) ?? null,
    createdAt: date('createdAt', true)!,
  };
  if (table === DISPATCH_TABLES.inbox) {
    const messageId = (row.messageId as string | null) ?? null;
    return { ...common, sagaKey: String(row.sagaKey), messageId, orderKey: String(row.orderKey) };
  }
  const sagaId = String(row.sagaId);
  if (table === DISPATCH_TABLES.outbox) {
    return { ...common, sagaId, headers: readJsonLeniently(readJson, row.headers) as Record<string, string> };
  }
  return { ...common, sagaId, name: String(row.name), step: (row.step as string | null) ?? null, dueAt: date('dueAt', true)! };
}

/**
 * Reads the timestamp columns of one listed row as the runtime and the dispatcher read them: a value that is not
 * a timestamp from year 1 to 9999 is `STORED_VALUE_INVALID` naming the row and the column, never a Date that
 * prints as null (a dispatched row shown pending) or fails to print.
 */
function storedDates(ops: OperationsContext, table: DispatchTable, row: Record<string, unknown>) {
  return (property: 'availableAt' | 'lockedUntil' | 'dispatchedAt' | 'deadLetteredAt' | 'createdAt' | 'dueAt', required = false) => {
    const value = row[property];
    if (value == null && !required) return null;
    const date = value == null ? null : ops.db.dialect.readDate(value);
    const problem = storedDateProblem(date);
    if (problem === undefined) return date;
    const { name, field } = dispatchTableNames(ops.db, table);
    const column = (field as Readonly<Record<string, string>>)[property]!;
    const where = {
      table: name,
      sagaType: String(row.sagaType),
      sagaId: String(row.sagaId ?? row.sagaKey),
      rowId: String(row.id),
    };
    throw storedValueInvalid(where, column, problem, 'set it to a timestamp from year 1 to 9999, or delete the row');
  };
}

/** A payload that is not JSON (a row written by hand) is shown as its text rather than failing the listing. */
function readJsonLeniently(readJson: (value: unknown) => unknown, value: unknown): unknown {
  try {
    return readJson(value);
  } catch {
    return value;
  }
}

function checkRowQuery(table: DispatchTable, query: DispatchRowQuery) {
  if (typeof query !== 'object' || query === null) throw invalidInput('Listing rows needs a query object with a limit.');
  const limit = checkLimit(query.limit, 'limit');
  const filters = {
    table,
    status: checkOneOf(query.status, 'status', TABLE_STATUSES[table]),
    sagaType: checkName(query.sagaType, 'The sagaType filter', COLUMN_LIMITS.sagaType),
    sagaId: query.sagaId === undefined ? undefined : checkUuid(query.sagaId, 'The sagaId filter'),
    // A correlation value is at most MAX_CORRELATION_BYTES bytes, so at most as many code points.
    sagaKey: checkName(query.sagaKey, 'The sagaKey filter', MAX_CORRELATION_BYTES),
    messageType: checkName(query.messageType, 'The messageType filter', COLUMN_LIMITS.messageType),
    name: checkName(query.name, 'The name filter', COLUMN_LIMITS.timerName),
  };
  if (filters.name !== undefined && table !== DISPATCH_TABLES.timer) throw invalidInput('Only timers have a name to filter by.');
  if (filters.sagaId !== undefined && table === DISPATCH_TABLES.inbox) {
    throw invalidInput('Staged deliveries name their saga by correlation value: filter by sagaKey instead of sagaId.');
  }
  if (filters.sagaKey !== undefined && table !== DISPATCH_TABLES.inbox)
    throw invalidInput('Only staged deliveries have a sagaKey to filter by.');
  const { cursor } = query;
  const after = cursor === undefined ? undefined : decodeCursor(cursor, filters, new Set());
  return { limit, filters, after };
}

/** Lists timers, outbox rows or staged deliveries newest first (created_at, id), filtered and paged in SQL. */
export async function listDispatchRows<T extends DispatchTable>(
  ops: OperationsContext,
  table: T,
  query: DispatchRowQuery,
): Promise<Page<RowOf<T>>> {
  const { limit, filters, after } = checkedInput(LIST_OPERATION[table], () => checkRowQuery(table, query));
  const c = columnsOf(ops, table);
  const where: string[] = [];
  const params: unknown[] = [];
  if (filters.status) {
    const condition = statusCondition(ops, table, filters.status, ops.clock.now());
    where.push(condition.sql);
    params.push(...condition.params);
  }
  for (const key of ['sagaType', 'sagaId', 'sagaKey', 'messageType', 'name'] as const) {
    if (filters[key] === undefined) continue;
    where.push(`${c[key]} = ?`);
    params.push(filters[key]);
  }
  if (after) {
    const at = new Date(after.createdAtMs);
    where.push(`(${c.createdAt} < ? or (${c.createdAt} = ? and ${c.id} < ?))`);
    params.push(at, at, after.id);
  }
  const rows = await readRows(ops, table, where, params, `${c.createdAt} desc, ${c.id} desc`, limit + 1);
  const items = rows.slice(0, limit);
  const last = items[items.length - 1];
  const nextCursor =
    rows.length > limit && last ? encodeCursor({ createdAtMs: last.createdAt.getTime(), sagaType: '', id: last.id }, filters) : null;
  return { items, nextCursor };
}

/** A saga's pending and recent timers, outbox rows and handled message ids, `recent` of each at most. */
export async function sagaDispatchRows(
  ops: OperationsContext,
  sagaType: string,
  sagaId: string,
  recent: number,
): Promise<Pick<SagaDetail, 'pendingTimers' | 'recentTimers' | 'outbox' | 'messageIds'>> {
  const t = ops.db.tables.timer.column;
  const o = ops.db.tables.outbox.column;
  const ofTimer = [`${t.sagaType} = ?`, `${t.sagaId} = ?`];
  const ofOutbox = [`${o.sagaType} = ?`, `${o.sagaId} = ?`];
  const key = [sagaType, sagaId];
  return {
    pendingTimers: await readRows(
      ops,
      DISPATCH_TABLES.timer,
      [...ofTimer, `${t.dispatchedAt} is null`],
      key,
      `${t.dueAt}, ${t.id}`,
      recent,
    ),
    recentTimers: await readRows(
      ops,
      DISPATCH_TABLES.timer,
      [...ofTimer, `${t.dispatchedAt} is not null`],
      key,
      `${t.dispatchedAt} desc, ${t.id} desc`,
      recent,
    ),
    outbox: await readRows(ops, DISPATCH_TABLES.outbox, ofOutbox, key, `${o.createdAt} desc, ${o.id} desc`, recent),
    messageIds: await handledMessages(ops, sagaType, sagaId, recent),
  };
}

async function handledMessages(ops: OperationsContext, sagaType: string, sagaId: string, limit: number): Promise<HandledMessageRow[]> {
  const { name, table, column: c, field } = ops.db.tables.handledMessage;
  const rows = await queryRows<Record<string, unknown>>(freshFork(ops.db.em), {
    sql: `select ${c.id} as "id", ${c.messageId} as "messageId", ${c.version} as "version", ${c.processedAt} as "processedAt" from ${table}
     where ${c.sagaType} = ? and ${c.sagaId} = ? order by ${c.processedAt} desc, ${c.id} desc limit ?`,
    params: [sagaType, sagaId, limit],
  });
  return rows.map((row) => {
    const processedAt = ops.db.dialect.readDate(row.processedAt);
    const problem = storedDateProblem(processedAt);
    if (problem) {
      const where = { table: name, sagaType, sagaId, rowId: String(row.id) };
      throw storedValueInvalid(where, field.processedAt, problem, 'set it to a timestamp from year 1 to 9999, or delete the row');
    }
    return { messageId: String(row.messageId), version: Number(row.version), processedAt: processedAt! };
  });
}
