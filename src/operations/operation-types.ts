/** Which sagas a listing returns, by completion. */
export const SAGA_STATUSES = {
  /** `completed_at` is null. */
  ACTIVE: 'active',
  /** `completed_at` is set. */
  COMPLETED: 'completed',
  /** Both. */
  ALL: 'all',
} as const;
/** Which sagas a listing returns, by completion. */
export type SagaStatus = (typeof SAGA_STATUSES)[keyof typeof SAGA_STATUSES];

/**
 * Where a timer, outbox row or staged delivery stands. `pending` and `leased` rows are in the pending set
 * (`dispatched_at` is null); the others left it and say how (`outcome`).
 */
export const DISPATCH_ROW_STATUSES = {
  /** Waiting to be claimed (not leased, or its lease ran out). */
  PENDING: 'pending',
  /** Claimed by a dispatcher whose lease has not ended (by the operations' clock). */
  LEASED: 'leased',
  /** Retired after too many failed deliveries; can be requeued. */
  DEAD_LETTERED: 'dead_lettered',
  /** A timer the catch-up policy discarded. */
  MISSED: 'missed',
  /** A timer delivered to its saga. */
  FIRED: 'fired',
  /** A timer whose saga was gone or completed when it came due. */
  DISCARDED: 'discarded',
  /** An outbox row handed to the publisher. */
  PUBLISHED: 'published',
  /** A staged delivery delivered to its saga through a unit of work. */
  DELIVERED: 'delivered',
  /** A staged delivery whose message id its saga had handled already: no step ran. */
  DUPLICATE: 'duplicate',
  /** A staged delivery no step ran for: no instance and not a start message, or a completed saga. */
  IGNORED: 'ignored',
} as const;
/** Where a timer, outbox row or staged delivery stands. */
export type DispatchRowStatus = (typeof DISPATCH_ROW_STATUSES)[keyof typeof DISPATCH_ROW_STATUSES];

/** One page of a listing, newest first. */
export interface Page<T> {
  readonly items: readonly T[];
  /** Pass it as `cursor` to read the next page; null when this page is the last. */
  readonly nextCursor: string | null;
}

/** Filters of {@link SagaOperations.listSagas}. Every filter runs in SQL. */
export interface SagaListQuery {
  /** One registered saga type. Default: every registered type, merged newest first. */
  readonly sagaType?: string;
  /** Default `all`. */
  readonly status?: SagaStatus;
  /**
   * The correlation property's value (`order_id = ...`), checked against the property's type as an incoming
   * message's value is. Needs `sagaType`.
   */
  readonly correlation?: unknown;
  /** The value of the definition's `stepProperty`. Needs `sagaType`, and a saga that has a `stepProperty`. */
  readonly step?: string;
  /** Only sagas created at or after this instant. */
  readonly createdAfter?: Date;
  /** Only sagas created before this instant. */
  readonly createdBefore?: Date;
  /** Most sagas on the page: 1 to {@link MAX_PAGE_LIMIT}. Required. */
  readonly limit: number;
  /** `nextCursor` of the previous page, with the same filters. */
  readonly cursor?: string;
}

/** A saga in a listing. */
export interface SagaSummary {
  readonly sagaType: string;
  readonly id: string;
  /** The correlation property's value, as text. */
  readonly correlation: string | null;
  /** The `stepProperty` value; null without one. */
  readonly step: string | null;
  readonly version: number;
  readonly createdAt: Date;
  readonly updatedAt: Date;
  readonly completedAt: Date | null;
}

/** A saga with everything an operator looks at. */
export interface SagaDetail extends SagaSummary {
  /** Every property of the state entity, as MikroORM reads it. */
  readonly state: Readonly<Record<string, unknown>>;
  /** Its pending timers, soonest due first. */
  readonly pendingTimers: readonly TimerRow[];
  /** Its timers that left the pending set, most recently first (at most `recent`). */
  readonly recentTimers: readonly TimerRow[];
  /** Its outbox rows, newest first (at most `recent`). */
  readonly outbox: readonly OutboxRow[];
  /** The message ids it handled, newest first (at most `recent`). */
  readonly messageIds: readonly HandledMessageRow[];
}

/** Which saga {@link SagaOperations.getSaga} reads. */
export interface SagaLookup {
  readonly sagaType: string;
  /** The saga's id; or give `correlation`. */
  readonly sagaId?: string;
  /** The correlation property's value; or give `sagaId`. */
  readonly correlation?: unknown;
  /** Most rows per list of the detail (timers, outbox, message ids): 1 to {@link MAX_PAGE_LIMIT}. Default 20. */
  readonly recent?: number;
}

/** Active sagas of one type. */
export interface ActiveSagaCount {
  readonly sagaType: string;
  readonly active: number;
}

/**
 * What timers, outbox rows and staged deliveries share, as an operator sees them. `payload` and `deadLetterReason` may
 * hold sensitive data.
 */
export interface DispatchRowFields {
  readonly id: string;
  readonly status: DispatchRowStatus;
  readonly sagaType: string;
  readonly messageType: string;
  readonly payload: unknown;
  readonly availableAt: Date;
  readonly attempts: number;
  readonly lastError: string | null;
  readonly lockedUntil: Date | null;
  readonly dispatchedAt: Date | null;
  readonly deadLetteredAt: Date | null;
  readonly deadLetterReason: string | null;
  readonly correlationId: string | null;
  readonly createdAt: Date;
}

/** What timers and outbox rows share, as an operator sees them: the rows of one saga instance. */
export interface DispatchRow extends DispatchRowFields {
  /** The saga's id; for a message the application staged itself (`stageMessage`, saga type `''`), its ordering lane. */
  readonly sagaId: string;
}

/** A staged delivery (`saga_inbox`, `stageDelivery()`) as an operator sees it. */
export interface InboxRow extends DispatchRowFields {
  /** The saga's correlation value, as text: the saga may not exist yet. */
  readonly sagaKey: string;
  /** The id it was staged with (`messageId`), recorded when it is delivered; null for none. */
  readonly messageId: string | null;
  /** Its place among its saga's deliveries, assigned by the database in commit order (a decimal integer). */
  readonly orderKey: string;
}

/** A timer as an operator sees it. */
export interface TimerRow extends DispatchRow {
  readonly name: string;
  readonly step: string | null;
  readonly dueAt: Date;
}

/** An outbox row as an operator sees it. */
export interface OutboxRow extends DispatchRow {
  readonly headers: Readonly<Record<string, string>>;
}

/** A message id a saga handled. */
export interface HandledMessageRow {
  readonly messageId: string;
  /** The saga's version after handling it. */
  readonly version: number;
  readonly processedAt: Date;
}

/**
 * Filters of {@link SagaOperations.listTimers}, {@link SagaOperations.listOutbox} and {@link SagaOperations.listInbox}.
 * Every filter runs in SQL.
 */
export interface DispatchRowQuery {
  /** Default: any status. */
  readonly status?: DispatchRowStatus;
  readonly sagaType?: string;
  /** Timers and outbox rows only: the saga's id. */
  readonly sagaId?: string;
  /** Staged deliveries only: the saga's correlation value as text (`InboxRow.sagaKey`). */
  readonly sagaKey?: string;
  readonly messageType?: string;
  /** Timers only: the timer name. */
  readonly name?: string;
  /** Most rows on the page: 1 to {@link MAX_PAGE_LIMIT}. Required. */
  readonly limit: number;
  /** `nextCursor` of the previous page, with the same filters. */
  readonly cursor?: string;
}

/** What a call over many rows did to one of them. */
export const ITEM_STATUSES = {
  REQUEUED: 'requeued',
  CANCELLED: 'cancelled',
  RESCHEDULED: 'rescheduled',
  /** No row has that id. */
  NOT_FOUND: 'not_found',
  /** Requeue: the row is not dead-lettered. */
  NOT_DEAD_LETTERED: 'not_dead_lettered',
  /** Cancel or reschedule: the timer left the pending set. */
  NOT_PENDING: 'not_pending',
  /** Requeue of a timer whose name is pending again on its saga: left dead-lettered. */
  CONFLICT: 'conflict',
  /**
   * Requeue of a timer whose saga is completed and does not handle the timer's message once completed
   * (`handleCompleted`): it would be discarded when it fires, so it is left dead-lettered.
   */
  SAGA_COMPLETED: 'saga_completed',
  /** Requeue of a timer whose saga no longer exists: it would be discarded when it fires, so it is left dead-lettered. */
  SAGA_NOT_FOUND: 'saga_not_found',
  /**
   * The database refused the statement or did not answer (the item's `error` names the exception class). A
   * refused statement changed nothing; after a lost connection the change may have committed: read the row again.
   */
  FAILED: 'failed',
} as const;
/** What a call over many rows did to one of them. */
export type ItemStatus = (typeof ITEM_STATUSES)[keyof typeof ITEM_STATUSES];

/** What a call over many rows did to one id. */
export interface BulkItem<TStatus extends ItemStatus = ItemStatus> {
  readonly id: string;
  readonly status: TStatus;
  /** With status `failed` only: the class name of the database's exception (`DriverException`...), never its message. */
  readonly error?: string;
}

/** The result of a call over many rows: one item per requested id, in the order given. */
export interface BulkResult<TStatus extends ItemStatus = ItemStatus> {
  /** Distinct ids requested. */
  readonly requested: number;
  /** Rows changed. */
  readonly affected: number;
  readonly items: readonly BulkItem<TStatus>[];
}

/** Status of one requeued row. */
export type RequeueStatus = 'requeued' | 'not_found' | 'not_dead_lettered' | 'conflict' | 'saga_completed' | 'saga_not_found' | 'failed';
/** Status of one cancelled timer. */
export type CancelStatus = 'cancelled' | 'not_found' | 'not_pending' | 'failed';
/** Status of one rescheduled timer. */
export type RescheduleStatus = 'rescheduled' | 'not_found' | 'not_pending' | 'failed';

/** Which saga a force-complete or reopen changes, and why. */
export interface SagaChangeRequest {
  readonly sagaType: string;
  readonly sagaId: string;
  /** Why, for the audit message: 1 to {@link MAX_REASON_LENGTH} characters. Required. */
  readonly reason: string;
  /** The version the operator looked at; the change is refused (`VERSION_CONFLICT`) when the saga moved on. Default: the version read in the same transaction. */
  readonly expectedVersion?: number;
}

/** What a force-complete or reopen wrote, in one transaction. */
export interface SagaChange {
  readonly sagaType: string;
  readonly sagaId: string;
  /** The saga's version after the change. */
  readonly version: number;
  /** Pending timers deleted (force-complete). */
  readonly timersCancelled: number;
  /** The id of the audit message written to the outbox. */
  readonly auditMessageId: string;
}

/** The message types of the audit messages operator changes write to the outbox. */
export const OPERATOR_MESSAGE_TYPES = {
  /** Payload: `{ type, sagaType, sagaId, reason, version, timersCancelled }`. */
  FORCE_COMPLETED: 'SagaForceCompleted',
  /** Payload: `{ type, sagaType, sagaId, reason, version }`. */
  REOPENED: 'SagaReopened',
} as const;

/** What {@link SagaOperations.purge} deletes. Each part runs only when its cutoff (or flag) is given. */
export interface PurgeOptions {
  /**
   * Timers, outbox rows and staged deliveries that left the pending set before this instant (fired, missed, discarded,
   * published, delivered, duplicate, ignored).
   */
  readonly dispatchedBefore?: Date;
  /** With `dispatchedBefore`: dead-lettered rows too. Default false (kept for an operator). */
  readonly includeDeadLettered?: boolean;
  /**
   * Completed sagas completed before this instant, with their timers and handled message ids and dispatched
   * outbox rows. A saga with an outbox row still pending is kept until the row is relayed.
   */
  readonly completedSagasBefore?: Date;
  /** Handled message ids older than the retention (`messageIds.retentionMs`). Default false. */
  readonly expiredMessageIds?: boolean;
  /** Rows per statement (one short transaction each): 1 to 100,000. Default 1,000. */
  readonly batchSize?: number;
  /** Most batches per part. Default: until nothing is left. */
  readonly maxBatches?: number;
}

/** What {@link SagaOperations.purge} deleted. */
export interface PurgeReport {
  readonly timers: number;
  readonly outbox: number;
  /** Staged deliveries (`saga_inbox`). */
  readonly inbox: number;
  /** Completed sagas deleted, per saga type. */
  readonly sagas: Readonly<Record<string, number>>;
  readonly messageIds: number;
  /** Statements run (each its own short transaction). */
  readonly batches: number;
}
