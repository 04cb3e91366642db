import { type EntityMetadata, type EntityProperty, JsonType } from '@mikro-orm/core';
import type { SagaState } from '../entities/saga-state.js';
import { SagaPersistenceError } from '../errors.js';
import { EARLIEST_STATE_DATE_MS, LATEST_STATE_DATE_MS } from './state-values.js';

/**
 * Why a stored timestamp is not one the library reads, or undefined when it is. The library reads the Dates it
 * writes, from year 1 to 9999; anything else was written by another application or by hand: PostgreSQL's
 * `infinity` and `-infinity`, a year JavaScript cannot hold or past 9999, text in a SQLite column.
 */
export function storedDateProblem(value: unknown): string | undefined {
  if (!(value instanceof Date)) return 'holds no timestamp';
  const ms = value.getTime();
  if (Number.isNaN(ms)) {
    return 'holds a value JavaScript cannot read as a Date (such as infinity or -infinity on PostgreSQL, or text on SQLite)';
  }
  return ms < EARLIEST_STATE_DATE_MS || ms > LATEST_STATE_DATE_MS ? 'holds a timestamp outside years 1 to 9999' : undefined;
}

/** Why a stored `version` is not one the runtime can compare and bump exactly, or undefined when it is. */
export function storedVersionProblem(value: unknown): string | undefined {
  if (typeof value === 'number' && Number.isSafeInteger(value) && value >= 0) return undefined;
  return typeof value === 'number' && value > Number.MAX_SAFE_INTEGER
    ? 'holds a number above 2^53 - 1, which JavaScript cannot hold exactly'
    : 'holds no integer from 0 to 2^53 - 1';
}

/** Whether `error` is JavaScript's stack overflow (a recursion over data nested too deep: `JSON.stringify`). */
export function isStackOverflow(error: unknown): boolean {
  return error instanceof RangeError && /call stack/i.test(error.message);
}

/** A stored row the library read: its table and, when known, its saga and id. */
export interface StoredRow {
  readonly table: string;
  readonly sagaType: string;
  readonly sagaId?: string | undefined;
  /** The row's own id when it is not the saga's (a timer, an outbox row, a handled message id). */
  readonly rowId?: string | undefined;
}

/** Names the row for a message: `Row <id> of table saga_timer (saga order/<id>)`, `Saga order/<id> (table order_saga)`. */
function rowLabel(row: StoredRow): string {
  const saga = `${row.sagaType}${row.sagaId ? `/${row.sagaId}` : ''}`;
  return row.rowId ? `Row ${row.rowId} of table ${row.table} (saga ${saga})` : `Saga ${saga} (table ${row.table})`;
}

/**
 * A row holds a value the library cannot read as what it means: `STORED_VALUE_INVALID`, naming the row and
 * the column (never the value), and how to correct it. Nothing was written because of it.
 */
export function storedValueInvalid(row: StoredRow, column: string, problem: string, fix: string, cause?: unknown): SagaPersistenceError {
  return new SagaPersistenceError(
    'STORED_VALUE_INVALID',
    `${rowLabel(row)}: column ${column} ${problem}. It is not read as any other value, so nothing was written. Correct the row: ${fix}.`,
    { sagaType: row.sagaType, sagaId: row.sagaId, table: row.table, column, rowId: row.rowId },
    cause === undefined ? undefined : { cause },
  );
}

/** How to correct each runtime-owned column of a saga row. */
export const SAGA_COLUMN_FIXES = {
  createdAt: 'set it to a timestamp from year 1 to 9999',
  updatedAt: 'set it to a timestamp from year 1 to 9999',
  completedAt: 'set it to the timestamp the saga completed at (years 1 to 9999), or to null if the saga is active',
  version: 'set it to an integer from 0 to 2^53 - 1 (every unit of work that changes the row adds one)',
} as const;

/** The column of `property`, unquoted, as MikroORM's metadata names it. */
export function fieldOf(meta: EntityMetadata, property: string): string {
  return (meta.properties[property as never] as EntityProperty | undefined)?.fieldNames?.[0] ?? property;
}

/**
 * Checks the runtime-owned columns of a saga row as read (`createdAt`, `updatedAt`, `completedAt`, `version`):
 * the runtime decides on them (completed or not, the version guard), so a value it cannot read is refused
 * rather than taken for another one (an Invalid Date for "active", a rounded version for a conflict).
 * @throws SagaPersistenceError `STORED_VALUE_INVALID` naming the saga, the table and the column.
 */
export function checkStoredSagaRow(sagaType: string, meta: EntityMetadata, state: SagaState): void {
  const row = { table: meta.tableName, sagaType, sagaId: String(state.id) };
  const problems: [keyof typeof SAGA_COLUMN_FIXES, string | undefined][] = [
    ['createdAt', storedDateProblem(state.createdAt)],
    ['updatedAt', storedDateProblem(state.updatedAt)],
    ['completedAt', state.completedAt == null ? undefined : storedDateProblem(state.completedAt)],
    ['version', storedVersionProblem(state.version)],
  ];
  for (const [property, problem] of problems) {
    if (problem) throw storedValueInvalid(row, fieldOf(meta, property), problem, SAGA_COLUMN_FIXES[property]);
  }
}

/** The JSON properties of a saga entity (json properties, and embeddables stored as one JSON column). */
export function jsonPropertiesOf(meta: EntityMetadata): EntityProperty[] {
  return meta.props.filter(
    (p) => p.customType instanceof JsonType || String(p.type).toLowerCase() === 'json' || (p.kind === 'embedded' && p.object === true),
  );
}

/**
 * A saga row MikroORM could not hydrate because a JSON value in it is nested too deep: MikroORM writes every
 * JSON value back to text with `JSON.stringify` when it hydrates or compares it, which overflows JavaScript's
 * call stack past about 4,000 levels.
 */
export function jsonTooDeep(meta: EntityMetadata, row: Omit<StoredRow, 'table'>, cause: unknown): SagaPersistenceError {
  const columns = jsonPropertiesOf(meta).flatMap((p) => p.fieldNames ?? [p.name]);
  const column = columns.length > 0 ? columns.join(' or ') : '(a JSON column)';
  return storedValueInvalid(
    { ...row, table: meta.tableName },
    column,
    'holds JSON nested too deep for MikroORM to read (its JSON.stringify overflowed the call stack)',
    'store that value nested less deep (a few hundred levels at most)',
    cause,
  );
}
