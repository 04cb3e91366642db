import { DateTimeType, Entity, PrimaryKey, Property } from '@mikro-orm/core';
import { COLUMN_LIMITS } from './dispatch-states.js';

/**
 * The columns `saga_timer` and `saga_outbox` share: what is delivered, for which saga, and the dispatch
 * state the dispatcher claims and stamps. A row is pending while `dispatched_at` is null.
 */
@Entity({ abstract: true })
export abstract class DispatchRecord<TOutcome extends string = string> {
  /** A UUIDv7: rows of one process sort in creation order. */
  @PrimaryKey({ type: 'uuid', fieldName: 'id' })
  id!: string;

  @Property({ type: 'string', length: COLUMN_LIMITS.sagaType, fieldName: 'saga_type' })
  sagaType!: string;

  @Property({ type: 'uuid', fieldName: 'saga_id' })
  sagaId!: string;

  @Property({ type: 'string', length: COLUMN_LIMITS.messageType, fieldName: 'message_type' })
  messageType!: string;

  /** The message, JSON round-tripped. */
  @Property({ type: 'json', fieldName: 'payload' })
  payload!: Record<string, unknown>;

  @Property({ type: 'string', length: COLUMN_LIMITS.correlationId, fieldName: 'correlation_id', nullable: true })
  correlationId: string | null = null;

  /** When the row may next be claimed: when it is due, later pushed by retry backoff. */
  @Property({ type: DateTimeType, fieldName: 'available_at' })
  availableAt!: Date;

  /** Concurrency token: a new value at every claim (and, for timers, every reschedule). */
  @Property({ type: 'uuid', fieldName: 'token' })
  token!: string;

  /** End of the lease of the dispatcher that claimed the row. */
  @Property({ type: DateTimeType, fieldName: 'locked_until', nullable: true })
  lockedUntil: Date | null = null;

  /**
   * When the delivery under the current claim started (written in its own statement before the step or
   * publisher runs). A lease that runs out on a started delivery is charged as a failed attempt; one that
   * runs out before its delivery started is not.
   */
  @Property({ type: DateTimeType, fieldName: 'delivery_started_at', nullable: true })
  deliveryStartedAt: Date | null = null;

  /** Failed deliveries so far. */
  @Property({ type: 'integer', fieldName: 'attempts' })
  attempts: number = 0;

  @Property({ type: 'text', fieldName: 'last_error', nullable: true })
  lastError: string | null = null;

  /** Set when the row leaves the pending set, whichever way; `outcome` says which. */
  @Property({ type: DateTimeType, fieldName: 'dispatched_at', nullable: true })
  dispatchedAt: Date | null = null;

  @Property({ type: 'string', length: 20, fieldName: 'outcome', nullable: true })
  outcome: TOutcome | null = null;

  @Property({ type: DateTimeType, fieldName: 'dead_lettered_at', nullable: true })
  deadLetteredAt: Date | null = null;

  /** Why the row was retired. May quote the payload: treat it as sensitive as the payload. */
  @Property({ type: 'text', fieldName: 'dead_letter_reason', nullable: true })
  deadLetterReason: string | null = null;

  @Property({ type: DateTimeType, fieldName: 'created_at' })
  createdAt!: Date;
}
