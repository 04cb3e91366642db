import type { DeliveryCounts } from '../contracts.js';
import type { Claim, DispatchTable } from '../sql/dispatch-tables.js';
import type { ClaimedOutboxRow } from './claim-due-rows.js';

/** `T` with every field writable, at every depth: the counters a pass fills in as its deliveries end. */
export type Mutable<T> = { -readonly [K in keyof T]: Mutable<T[K]> };

/** The counters of one table in the pass being run. */
export type Counts = Mutable<DeliveryCounts>;

/** A claimed row as the delivery machinery sees it, whichever its table. */
export interface HeldRow extends Claim {
  readonly sagaType: string;
  readonly sagaId: string;
  readonly attempts: number;
  readonly lastError?: string | null;
  /** A timer's name, for logs. */
  readonly name?: string;
  /** The message type, for logs. */
  readonly messageType?: string;
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
