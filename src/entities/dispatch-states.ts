/** How a timer left the pending set. */
export const TIMER_OUTCOMES = {
  /** Delivered to its saga; the saga's state change committed with this stamp. */
  FIRED: 'fired',
  /** Discarded by the catch-up policy after it came due while no dispatcher ran. */
  MISSED: 'missed',
  /** Retired after `maxAttempts` failed deliveries; kept for an operator to look at. */
  DEAD_LETTERED: 'dead_lettered',
  /**
   * Delivered to a saga that no longer exists, or is completed and does not handle the timer's message after
   * completion: taken out of the pending set without running a step (counted as `saga.timeout.discarded`).
   */
  DISCARDED: 'discarded',
} as const;
/** How a timer left the pending set. */
export type TimerOutcome = (typeof TIMER_OUTCOMES)[keyof typeof TIMER_OUTCOMES];

/** How an outbox row left the pending set. */
export const OUTBOX_OUTCOMES = {
  /** Handed to the application's publisher, which resolved. */
  PUBLISHED: 'published',
  /** Retired after `maxAttempts` failed publishes. */
  DEAD_LETTERED: 'dead_lettered',
} as const;
/** How an outbox row left the pending set. */
export type OutboxOutcome = (typeof OUTBOX_OUTCOMES)[keyof typeof OUTBOX_OUTCOMES];

/** How a staged delivery (a `saga_inbox` row) left the pending set. */
export const INBOX_OUTCOMES = {
  /** Delivered to its saga through a unit of work; the saga's change committed with this stamp. */
  DELIVERED: 'delivered',
  /** Its message id was already handled by the saga instance: no step ran. */
  DUPLICATE: 'duplicate',
  /**
   * No step ran: no instance exists and the message does not start the saga, or the instance is completed and does
   * not handle the message after completion.
   */
  IGNORED: 'ignored',
  /** Retired after `maxAttempts` failed deliveries, or because it cannot be decoded; kept for an operator. */
  DEAD_LETTERED: 'dead_lettered',
} as const;
/** How a staged delivery left the pending set. */
export type InboxOutcome = (typeof INBOX_OUTCOMES)[keyof typeof INBOX_OUTCOMES];

/** Column lengths shared by the entities, the validation and the migrations. */
export const COLUMN_LIMITS = {
  sagaType: 100,
  timerName: 200,
  step: 100,
  messageType: 200,
  calendarKey: 100,
  correlationId: 200,
  messageId: 200,
  orderingKey: 200,
} as const;
