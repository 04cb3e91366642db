import type { DeliveryCounts } from '../contracts.js';
import type { Claim } from '../sql/dispatch-tables.js';
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
}

/** The held row of a claimed outbox row. */
export function heldOutboxRow({ envelope, token, lastError }: ClaimedOutboxRow): HeldRow {
  return { id: envelope.id, token, sagaType: envelope.sagaType, sagaId: envelope.sagaId, attempts: envelope.attempts, lastError };
}
