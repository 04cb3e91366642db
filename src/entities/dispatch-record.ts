import { DateTimeType, EntitySchema } from '@mikro-orm/core';
import { COLUMN_LIMITS } from './dispatch-states.js';

/**
 * The columns `saga_timer` and `saga_outbox` share: what is delivered, for which saga, and the dispatch
 * state the dispatcher claims and stamps. A row is pending while `dispatched_at` is null.
 * Mapped by one of {@link SAGA_ENTITIES}.
 */
export abstract class DispatchRecord<TOutcome extends string = string> {
  /** A UUIDv7: rows of one process sort in creation order. */
  id!: string;
  sagaType!: string;
  sagaId!: string;
  messageType!: string;
  /** The message, JSON round-tripped. */
  payload!: Record<string, unknown>;
  correlationId: string | null = null;
  /**
   * The W3C trace context current when the row was written (the `saga.step` span of the unit of work that wrote it),
   * as JSON `{"traceparent": ..., "tracestate"?: ...}`; null when no trace was recorded. The delivery's span continues
   * that trace (docs/observability.md). Read leniently: a value that is not a valid trace context is ignored.
   */
  traceContext: string | null = null;
  /** When the row may next be claimed: when it is due, later pushed by retry backoff. */
  availableAt!: Date;
  /** Concurrency token: a new value at every claim (and, for timers, every reschedule). */
  token!: string;
  /** End of the lease of the dispatcher that claimed the row. */
  lockedUntil: Date | null = null;
  /**
   * When the delivery under the current claim started (written in its own statement before the step or
   * publisher runs). A lease that runs out on a started delivery is charged as a failed attempt; one that
   * runs out before its delivery started is not.
   */
  deliveryStartedAt: Date | null = null;
  /** Failed deliveries so far. */
  attempts: number = 0;
  lastError: string | null = null;
  /** Set when the row leaves the pending set, whichever way; `outcome` says which. */
  dispatchedAt: Date | null = null;
  outcome: TOutcome | null = null;
  deadLetteredAt: Date | null = null;
  /** Why the row was retired. May quote the payload: treat it as sensitive as the payload. */
  deadLetterReason: string | null = null;
  createdAt!: Date;
}

/**
 * DispatchRecord's mapping (abstract: no table of its own). An EntitySchema from `@mikro-orm/core` rather than
 * decorators, so the same definition works on MikroORM 6 and 7 and under every metadata provider.
 */
export const DispatchRecordSchema = new EntitySchema<DispatchRecord>({
  class: DispatchRecord as never,
  abstract: true,
  properties: {
    id: { type: 'uuid', fieldName: 'id', primary: true },
    sagaType: { type: 'string', length: COLUMN_LIMITS.sagaType, fieldName: 'saga_type' },
    sagaId: { type: 'uuid', fieldName: 'saga_id' },
    messageType: { type: 'string', length: COLUMN_LIMITS.messageType, fieldName: 'message_type' },
    payload: { type: 'json', fieldName: 'payload' },
    correlationId: { type: 'string', length: COLUMN_LIMITS.correlationId, fieldName: 'correlation_id', nullable: true },
    traceContext: { type: 'text', fieldName: 'trace_context', nullable: true },
    availableAt: { type: DateTimeType, fieldName: 'available_at' },
    token: { type: 'uuid', fieldName: 'token' },
    lockedUntil: { type: DateTimeType, fieldName: 'locked_until', nullable: true },
    deliveryStartedAt: { type: DateTimeType, fieldName: 'delivery_started_at', nullable: true },
    attempts: { type: 'integer', fieldName: 'attempts' },
    lastError: { type: 'text', fieldName: 'last_error', nullable: true },
    dispatchedAt: { type: DateTimeType, fieldName: 'dispatched_at', nullable: true },
    outcome: { type: 'string', length: 20, fieldName: 'outcome', nullable: true },
    deadLetteredAt: { type: DateTimeType, fieldName: 'dead_lettered_at', nullable: true },
    deadLetterReason: { type: 'text', fieldName: 'dead_letter_reason', nullable: true },
    createdAt: { type: DateTimeType, fieldName: 'created_at' },
  },
});
