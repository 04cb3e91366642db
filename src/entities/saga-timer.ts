import { DateTimeType, Entity, Index, PrimaryKey, Property } from '@mikro-orm/core';
import { COLUMN_LIMITS, type TimerOutcome } from './dispatch-states.js';

/**
 * A durable, named timeout of one saga instance (table `saga_timer`).
 *
 * A timer is pending while `dispatched_at` is null. Its name is unique among the pending timers of its
 * instance (a filtered unique index), so scheduling a pending name replaces it. It leaves the pending set
 * by being fired, missed (catch-up policy) or dead-lettered, and is then stamped, never deleted; only a
 * cancellation deletes a timer.
 */
@Entity({ tableName: 'saga_timer' })
@Index({
  name: 'saga_timer_pending_name_uniq',
  // One raw expression with double-quoted identifiers is valid on PostgreSQL and SQLite alike.
  expression:
    'create unique index "saga_timer_pending_name_uniq" on "saga_timer" ("saga_type", "saga_id", "name") where "dispatched_at" is null',
})
@Index({
  name: 'saga_timer_due_idx',
  expression: 'create index "saga_timer_due_idx" on "saga_timer" ("available_at") where "dispatched_at" is null',
})
@Index({ name: 'saga_timer_dispatched_at_idx', properties: ['dispatchedAt'] })
export class SagaTimer {
  @PrimaryKey({ type: 'uuid', fieldName: 'id' })
  id!: string;

  @Property({ type: 'string', length: COLUMN_LIMITS.sagaType, fieldName: 'saga_type' })
  sagaType!: string;

  @Property({ type: 'uuid', fieldName: 'saga_id' })
  sagaId!: string;

  @Property({ type: 'string', length: COLUMN_LIMITS.timerName, fieldName: 'name' })
  name!: string;

  /** The saga step the timer belongs to (step-scoped timers), or null for a saga-scoped timer. */
  @Property({ type: 'string', length: COLUMN_LIMITS.step, fieldName: 'step', nullable: true })
  step: string | null = null;

  /** Absolute due time, computed when the timer was scheduled (calendar applied). */
  @Property({ type: DateTimeType, fieldName: 'due_at' })
  dueAt!: Date;

  /** When the timer may next be claimed: `due_at`, later pushed by retry backoff. */
  @Property({ type: DateTimeType, fieldName: 'available_at' })
  availableAt!: Date;

  @Property({ type: 'string', length: COLUMN_LIMITS.messageType, fieldName: 'message_type' })
  messageType!: string;

  @Property({ type: 'json', fieldName: 'payload' })
  payload!: Record<string, unknown>;

  @Property({ type: 'string', length: COLUMN_LIMITS.calendarKey, fieldName: 'calendar_key', nullable: true })
  calendarKey: string | null = null;

  @Property({ type: 'string', length: COLUMN_LIMITS.correlationId, fieldName: 'correlation_id', nullable: true })
  correlationId: string | null = null;

  /** Concurrency token: a new value at every claim and every reschedule. */
  @Property({ type: 'uuid', fieldName: 'token' })
  token!: string;

  /** End of the lease of the dispatcher that claimed the timer. */
  @Property({ type: DateTimeType, fieldName: 'locked_until', nullable: true })
  lockedUntil: Date | null = null;

  @Property({ type: 'integer', fieldName: 'attempts' })
  attempts: number = 0;

  @Property({ type: 'text', fieldName: 'last_error', nullable: true })
  lastError: string | null = null;

  /** Set when the timer leaves the pending set in any way: fired, missed or dead-lettered. */
  @Property({ type: DateTimeType, fieldName: 'dispatched_at', nullable: true })
  dispatchedAt: Date | null = null;

  @Property({ type: 'string', length: 20, fieldName: 'outcome', nullable: true })
  outcome: TimerOutcome | null = null;

  @Property({ type: DateTimeType, fieldName: 'dead_lettered_at', nullable: true })
  deadLetteredAt: Date | null = null;

  /** Why the timer was retired. May quote the payload: treat it as sensitive as the payload. */
  @Property({ type: 'text', fieldName: 'dead_letter_reason', nullable: true })
  deadLetterReason: string | null = null;

  @Property({ type: DateTimeType, fieldName: 'created_at' })
  createdAt!: Date;
}
