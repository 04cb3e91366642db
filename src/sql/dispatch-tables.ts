import type { DatabaseContext, DispatchTableNames } from './database-context.js';

export type { DispatchProperty, DispatchTableNames } from './database-context.js';

/**
 * The tables the dispatcher drains, as the library names them to its callers (telemetry, errors, options): timers,
 * the outbox and the deliveries staged from the application's transactions. They share their dispatch columns. The
 * statements read the tables' real names from the context (`dispatchTableNames`).
 */
export const DISPATCH_TABLES = { timer: 'saga_timer', outbox: 'saga_outbox', inbox: 'saga_inbox' } as const;
export type DispatchTable = (typeof DISPATCH_TABLES)[keyof typeof DISPATCH_TABLES];

/** The context's key of each dispatch table. */
const CONTEXT_KEY = { saga_timer: 'timer', saga_outbox: 'outbox', saga_inbox: 'inbox' } as const satisfies Record<
  DispatchTable,
  keyof typeof DISPATCH_TABLES
>;

/** The names of `table` as the context read them from MikroORM's metadata. */
export function dispatchTableNames(db: DatabaseContext, table: DispatchTable): DispatchTableNames {
  return db.tables.dispatch[CONTEXT_KEY[table]];
}

/** One claimed row: its id and the token of the claim. */
export interface Claim {
  readonly id: string;
  readonly token: string;
}

/**
 * Most UTF-16 code units stored in `last_error` / `dead_letter_reason`. Error text is made storable first
 * (U+0000 and lone surrogates replaced): a statement refused for its text would leave the failure uncounted.
 */
export const ERROR_TEXT_LIMIT = 2_000;

/** The `last_error` a claim records when it takes over a row whose started delivery lost its lease. */
export const LEASE_EXPIRED_ERROR = 'LeaseExpired: the dispatcher delivering it stopped before finishing (crash or kill)';

/** How {@link LEASE_EXPIRED_ERROR} begins: a `last_error` beginning so marks a delivery that died with its dispatcher. */
export const LEASE_EXPIRED_PREFIX = 'LeaseExpired:';

/** Whether `lastError` says the row's last delivery died with its dispatcher. */
export function diedWithItsDispatcher(lastError: string | null | undefined): boolean {
  return lastError?.startsWith(LEASE_EXPIRED_PREFIX) ?? false;
}

/** The columns {@link lockedInSagaOrder} orders by: a dispatch table's id, saga type and the column naming its saga. */
interface SagaOrderColumns {
  readonly id: string;
  readonly sagaType: string;
  readonly saga: string;
}

/**
 * The ids of the rows of `table` matching `condition`, locked in the order of their saga (type, id), then id.
 * A group commit (docs/guarantees.md) holds the timer rows its units stamped or deleted until its COMMIT and
 * takes them in that same order; a statement updating many rows in the order of its plan's scan could hold one
 * row a group needs while it waits for another the group holds: a deadlock. PostgreSQL only (SQLite has no
 * row locks; a write takes the database's one write lock).
 */
export function lockedInSagaOrder(c: SagaOrderColumns, table: string, condition: string, skipLocked = false): string {
  return `select ${c.id} from ${table} where ${condition}
         order by ${c.sagaType} collate "C", ${c.saga}, ${c.id} for update${skipLocked ? ' skip locked' : ''}`;
}
