// The shapes that pass between the runtime (src/saga), the dispatcher (src/dispatcher) and the helpers built on them
// (src/testing, the errors). They live here, below both, so neither imports the other for a type.

/** A claimed timer handed to the runtime for delivery (by the dispatcher, or a test). */
export interface TimerDelivery {
  readonly id: string;
  readonly token: string;
  readonly sagaType: string;
  readonly sagaId: string;
  readonly name: string;
  readonly messageType: string;
  readonly payload: unknown;
  readonly dueAt: Date;
  readonly attempts: number;
  readonly correlationId: string | null;
  /** The last failure recorded on the timer, if any. */
  readonly lastError?: string | null;
}

/**
 * A claimed staged delivery (a `saga_inbox` row) handed to the runtime for delivery (by the dispatcher, or a test):
 * the message an application staged for a saga with `SagaRuntime.stageDelivery()`.
 */
export interface StagedDelivery {
  readonly id: string;
  readonly token: string;
  readonly sagaType: string;
  /** The correlation value as the row stores it (text): the saga's ordering key. */
  readonly sagaKey: string;
  readonly messageType: string;
  readonly payload: unknown;
  /** The message id given when it was staged, recorded with the unit of work that delivers it; null for none. */
  readonly messageId: string | null;
  readonly correlationId: string | null;
  /** Failed deliveries before this one. */
  readonly attempts: number;
  /** The last failure recorded on the row, if any. */
  readonly lastError?: string | null;
}

/** What happened to the rows one pass claimed, per table. */
export interface DeliveryCounts {
  /** Due rows this pass claimed. */
  readonly claimed: number;
  /** Failed deliveries (the step or publisher threw, timed out or died with its process); the row backs off. */
  readonly failed: number;
  /** Failed for the last allowed time, or could not be decoded, and retired. */
  readonly deadLettered: number;
  /** Claimed but given back unattempted because the dispatcher was stopping. */
  readonly released: number;
  /** The database failed under the delivery (connection lost, file locked): not charged, given back. */
  readonly interrupted: number;
  /** Taken over by another dispatcher before the delivery started (the lease ran out): not delivered here. */
  readonly lost: number;
}

/** What one dispatcher pass did. */
export interface DispatchPassResult {
  readonly timers: DeliveryCounts & {
    /** Delivered; the state change and the `fired` stamp committed together. */
    readonly fired: number;
    /** Dropped: cancelled, replaced or already fired meanwhile, or their saga is gone or completed. */
    readonly stale: number;
    /** Discarded by the catch-up policy, stamped `missed`. */
    readonly missed: number;
    /**
     * Given back uncharged, backed off: the delivery's unit of work met concurrency conflicts on its saga past the
     * runtime's `concurrency.maxAttempts` (a busy saga, not a failed delivery).
     */
    readonly contended: number;
  };
  readonly outbox: DeliveryCounts & {
    /** Handed to the publisher, which resolved. */
    readonly published: number;
  };
  /** Deliveries the application staged in its own transactions (`SagaRuntime.stageDelivery`). */
  readonly inbox: DeliveryCounts & {
    /** Delivered through a unit of work; the saga's change and the row's stamp committed together. */
    readonly delivered: number;
    /** Their message id was already handled by the saga: stamped `duplicate`, no step ran. */
    readonly duplicates: number;
    /** No step ran (no instance and not a start message, or a completed saga): stamped `ignored`. */
    readonly ignored: number;
    /** Taken over by another dispatcher while delivering (the lease ran out): nothing was written here. */
    readonly stale: number;
    /** Given back uncharged, backed off: the unit of work met concurrency conflicts past the runtime's retries. */
    readonly contended: number;
  };
}
