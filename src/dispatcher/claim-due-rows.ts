import type { SpanContext } from '@opentelemetry/api';
import type { StagedDelivery, TimerDelivery } from '../contracts.js';
import { type ClaimGuard, claimDueRows, type StartAtClaim } from '../sql/claim-statements.js';
import type { DatabaseContext } from '../sql/database-context.js';
import { type Claim, DISPATCH_TABLES, type DispatchTable, dispatchTableNames } from '../sql/dispatch-tables.js';
import { readStoredTraceContext } from '../telemetry/trace-context.js';
import type { OutboxEnvelope } from './outbox-envelope.js';

/** A claimed timer: the delivery for the runtime, and the trace context stored when it was scheduled. */
export interface ClaimedTimer extends TimerDelivery {
  /** The stored trace context, when the row holds a valid one (`readStoredTraceContext`); never fails the claim. */
  readonly trace: SpanContext | undefined;
}

/** A claimed staged delivery, and the trace context stored when it was staged. */
export interface ClaimedStagedDelivery extends StagedDelivery {
  /** The stored trace context, when the row holds a valid one (`readStoredTraceContext`); never fails the claim. */
  readonly trace: SpanContext | undefined;
}

/** A claimed outbox row: the envelope, the claim token, and the trace context stored when it was written. */
export interface ClaimedOutboxRow {
  readonly envelope: OutboxEnvelope;
  readonly token: string;
  readonly lastError: string | null;
  /** Whether the claim marked its delivery started (see {@link StartAtClaim}): it must start at once. */
  readonly startedAtClaim: boolean;
  /** The stored trace context, when the row holds a valid one (`readStoredTraceContext`); never fails the claim. */
  readonly trace: SpanContext | undefined;
}

/**
 * A claimed row that cannot be turned into a delivery (its payload or headers are not JSON of the right
 * shape, a timestamp is unreadable): it is dead-lettered alone, without a delivery.
 */
export interface UndecodableRow extends Claim {
  readonly table: DispatchTable;
  readonly sagaType: string;
  /** The row's saga: its id, or a staged delivery's correlation value (`saga_key`). */
  readonly sagaId: string;
  /** What is wrong with the row, without quoting it. */
  readonly problem: string;
}

/** The rows one claim took: those to deliver, oldest first, and those that cannot be decoded. */
export interface ClaimedRows<T> {
  readonly rows: T[];
  readonly undecodable: UndecodableRow[];
}

/** Claims due timers and turns them into deliveries for the runtime. */
export async function claimDueTimers(
  db: DatabaseContext,
  now: Date,
  leaseUntil: Date,
  limit: number,
  guard?: ClaimGuard,
): Promise<ClaimedRows<ClaimedTimer>> {
  const raw = await claimDueRows(db, DISPATCH_TABLES.timer, now, leaseUntil, limit, guard);
  const column = db.tables.timer.field;
  return decodeAll(db, DISPATCH_TABLES.timer, raw, (row, read) => ({
    id: String(row.id),
    token: String(row.token),
    sagaType: String(row.sagaType),
    sagaId: String(row.sagaId),
    name: String(row.name),
    messageType: String(row.messageType),
    payload: read.message(column.payload, row.payload),
    dueAt: read.date(column.dueAt, row.dueAt),
    attempts: Number(row.attempts),
    correlationId: row.correlationId == null ? null : String(row.correlationId),
    lastError: row.lastError == null ? null : String(row.lastError),
    trace: readStoredTraceContext(row.traceContext),
  }));
}

/**
 * Claims due staged deliveries (the first pending row of each saga, see `claimDueRows`) and turns them into
 * deliveries for the runtime.
 */
export async function claimDueStagedDeliveries(
  db: DatabaseContext,
  now: Date,
  leaseUntil: Date,
  limit: number,
  guard?: ClaimGuard,
): Promise<ClaimedRows<ClaimedStagedDelivery>> {
  const raw = await claimDueRows(db, DISPATCH_TABLES.inbox, now, leaseUntil, limit, guard);
  const column = db.tables.inbox.field;
  return decodeAll(db, DISPATCH_TABLES.inbox, raw, (row, read) => ({
    id: String(row.id),
    token: String(row.token),
    sagaType: String(row.sagaType),
    sagaKey: String(row.sagaKey),
    messageType: String(row.messageType),
    payload: read.message(column.payload, row.payload),
    messageId: row.messageId == null ? null : String(row.messageId),
    correlationId: row.correlationId == null ? null : String(row.correlationId),
    attempts: Number(row.attempts),
    lastError: row.lastError == null ? null : String(row.lastError),
    trace: readStoredTraceContext(row.traceContext),
  }));
}

/**
 * Claims due outbox rows and turns them into envelopes for the publisher; with `startAtClaim`, marks the
 * deliveries the caller starts at once started in the same statement.
 */
export async function claimDueOutboxRows(
  db: DatabaseContext,
  now: Date,
  leaseUntil: Date,
  limit: number,
  guard?: ClaimGuard,
  startAtClaim?: StartAtClaim,
): Promise<ClaimedRows<ClaimedOutboxRow>> {
  const raw = await claimDueRows(db, DISPATCH_TABLES.outbox, now, leaseUntil, limit, guard, startAtClaim);
  const column = db.tables.outbox.field;
  return decodeAll(db, DISPATCH_TABLES.outbox, raw, (row, read) => ({
    token: String(row.token),
    lastError: row.lastError == null ? null : String(row.lastError),
    startedAtClaim: row.deliveryStartedAt != null,
    trace: readStoredTraceContext(row.traceContext),
    envelope: {
      id: String(row.id),
      type: String(row.messageType),
      payload: read.message(column.payload, row.payload),
      headers: read.headers(column.headers, row.headers),
      sagaType: String(row.sagaType),
      sagaId: String(row.sagaId),
      correlationId: row.correlationId == null ? null : String(row.correlationId),
      attempts: Number(row.attempts),
      createdAt: read.date(column.createdAt, row.createdAt),
    },
  }));
}

/** A column that does not hold what it must; the message names the column and the problem, never the value. */
class Undecodable extends Error {}

/** Reads the columns of one claimed row that can hold something other than what the library wrote. */
interface ColumnReader {
  message(column: string, value: unknown): Record<string, unknown>;
  headers(column: string, value: unknown): Record<string, string>;
  date(column: string, value: unknown): Date;
}

function readerFor(db: DatabaseContext): ColumnReader {
  const json = (column: string, value: unknown): unknown => {
    try {
      return db.dialect.readJson(value);
    } catch {
      const size = typeof value === 'string' ? ` (${value.length} characters)` : '';
      throw new Undecodable(`${column} is not valid JSON${size}`);
    }
  };
  const object = (column: string, value: unknown): Record<string, unknown> => {
    const parsed = json(column, value);
    if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) {
      throw new Undecodable(
        `${column} is JSON but not an object (found ${parsed === null ? 'null' : Array.isArray(parsed) ? 'an array' : `a ${typeof parsed}`})`,
      );
    }
    return parsed as Record<string, unknown>;
  };
  return {
    message(column, value) {
      const message = object(column, value);
      if (typeof message.type !== 'string' || message.type === '') throw new Undecodable(`${column} has no string 'type'`);
      return message;
    },
    headers(column, value) {
      const headers = object(column, value);
      if (Object.values(headers).some((header) => typeof header !== 'string'))
        throw new Undecodable(`${column} has a value that is not a string`);
      return headers as Record<string, string>;
    },
    date(column, value) {
      const date = db.dialect.readDate(value);
      if (!date || Number.isNaN(date.getTime())) throw new Undecodable(`${column} is not a timestamp`);
      return date;
    },
  };
}

function decodeAll<T>(
  db: DatabaseContext,
  table: DispatchTable,
  raw: readonly Record<string, unknown>[],
  decode: (row: Record<string, unknown>, read: ColumnReader) => T,
): ClaimedRows<T> {
  const read = readerFor(db);
  const availableAt = dispatchTableNames(db, table).field.availableAt;
  const decoded: { row: T; at: number; id: string }[] = [];
  const undecodable: UndecodableRow[] = [];
  for (const row of raw) {
    const id = String(row.id);
    try {
      decoded.push({ row: decode(row, read), at: read.date(availableAt, row.availableAt).getTime(), id });
    } catch (error) {
      if (!(error instanceof Undecodable)) throw error;
      undecodable.push({
        table,
        id,
        token: String(row.token),
        sagaType: String(row.sagaType),
        sagaId: String(row.sagaId ?? row.sagaKey),
        problem: error.message,
      });
    }
  }
  // RETURNING gives no order: deliver oldest first, as claimed.
  decoded.sort((a, b) => a.at - b.at || a.id.localeCompare(b.id));
  return { rows: decoded.map((d) => d.row), undecodable };
}
