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

/** Column lengths shared by the entities, the validation and the migrations. */
export const COLUMN_LIMITS = {
  sagaType: 100,
  timerName: 200,
  step: 100,
  messageType: 200,
  calendarKey: 100,
  correlationId: 200,
  messageId: 200,
} as const;
