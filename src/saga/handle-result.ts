/** What handling one message did to one saga instance. */
export const HANDLE_OUTCOMES = {
  /** The message created the instance. */
  STARTED: 'started',
  /** The message ran its step on an existing instance (which may have changed nothing). */
  HANDLED: 'handled',
  /** The message was not handled; `reason` says why. Nothing was written, except that a timer delivering it is stamped `discarded`. */
  IGNORED: 'ignored',
  /** A timer firing lost its claim (cancelled, replaced or already fired); nothing was written. */
  STALE: 'stale',
  /**
   * The message id was handled before by this instance (`HandleOptions.messageId`): nothing was written, and
   * `version` is the version that earlier unit of work produced.
   */
  DUPLICATE: 'duplicate',
} as const;
/** What handling one message did to one saga instance. */
export type HandleOutcome = (typeof HANDLE_OUTCOMES)[keyof typeof HANDLE_OUTCOMES];

/** Why a message was ignored. */
export const IGNORE_REASONS = {
  /** No instance has the message's correlation value and the message does not start the saga. */
  NO_INSTANCE: 'no-instance',
  /** The instance is completed and the definition does not handle this message type after completion. */
  COMPLETED: 'completed',
} as const;
/** Why a message was ignored. */
export type IgnoreReason = (typeof IGNORE_REASONS)[keyof typeof IGNORE_REASONS];

/** The result of `SagaRuntime.handle`. */
export interface HandleResult {
  readonly outcome: HandleOutcome;
  /** Set when `outcome` is `ignored`. */
  readonly reason?: IgnoreReason;
  readonly sagaType: string;
  readonly messageType: string;
  /** The instance's id; null when no instance was found or created. */
  readonly sagaId: string | null;
  /** The instance's version after the unit of work; null when there is no instance. */
  readonly version: number | null;
  /** The value of the definition's `stepProperty` afterwards, if it has one. */
  readonly step: string | null;
  /** Whether the state row changed (and so its version was bumped). */
  readonly changed: boolean;
  /** Whether the saga is completed afterwards. */
  readonly completed: boolean;
  /** Units of work run: 1 plus one per concurrency conflict retried. */
  readonly attempts: number;
  /** Concurrency conflicts met and retried on fresh state. */
  readonly conflicts: number;
  /** Timers written (new or replaced). */
  readonly timersScheduled: number;
  /** Pending timers deleted (cancelled, step change, completion). */
  readonly timersCancelled: number;
  /** Outbox rows written. */
  readonly messagesSent: number;
}
