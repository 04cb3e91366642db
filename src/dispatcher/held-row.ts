import type { DeliveryCounts, DispatchPassResult } from '../contracts.js';
import type { Claim, DispatchTable } from '../sql/dispatch-tables.js';
import type { ClaimedOutboxRow } from './claim-due-rows.js';

/** `T` with every field writable, at every depth: the counters a pass fills in as its deliveries end. */
export type Mutable<T> = { -readonly [K in keyof T]: Mutable<T[K]> };

/** The counters of one table in the pass being run. */
export type Counts = Mutable<DeliveryCounts>;

/** A claimed row as the delivery machinery sees it, whichever its table. */
export interface HeldRow extends Claim {
  readonly sagaType: string;
  /** The row's saga within its type: its id, or a staged delivery's correlation value (`saga_key`). */
  readonly sagaId: string;
  readonly attempts: number;
  readonly lastError?: string | null;
  /** A timer's name, for logs. */
  readonly name?: string;
  /** The message type, for logs. */
  readonly messageType?: string;
}

/** The counters of a pass before it claimed anything. */
export function emptyPassResult(): Mutable<DispatchPassResult> {
  const common = { claimed: 0, failed: 0, deadLettered: 0, released: 0, interrupted: 0, lost: 0 };
  return {
    timers: { ...common, fired: 0, stale: 0, missed: 0, contended: 0 },
    outbox: { ...common, published: 0 },
    inbox: { ...common, delivered: 0, duplicates: 0, ignored: 0, stale: 0, contended: 0 },
  };
}

/** The held row of a claimed outbox row. */
export function heldOutboxRow({ envelope, token, lastError }: ClaimedOutboxRow): HeldRow {
  const { id, sagaType, sagaId, attempts, type: messageType } = envelope;
  return { id, token, sagaType, sagaId, attempts, lastError, messageType };
}

/** The fields that name a held row in a log line: its table, id, saga, and a timer's name or the message type. */
export function rowFields(table: DispatchTable, row: HeldRow): Record<string, unknown> {
  return {
    table,
    id: row.id,
    sagaType: row.sagaType,
    sagaId: row.sagaId,
    ...(row.name === undefined ? {} : { timerName: row.name }),
    ...(row.messageType === undefined ? {} : { messageType: row.messageType }),
  };
}
