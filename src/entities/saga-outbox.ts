import { DateTimeType, Entity, Index, PrimaryKey, Property } from '@mikro-orm/core';
import { COLUMN_LIMITS, type OutboxOutcome } from './dispatch-states.js';

/**
 * A message a saga step sent (table `saga_outbox`), written in the same transaction as the state change
 * that caused it and relayed to the application's publisher by the dispatcher, at least once.
 * The row id is the message id consumers deduplicate on.
 */
@Entity({ tableName: 'saga_outbox' })
@Index({
  name: 'saga_outbox_due_idx',
  expression: 'create index "saga_outbox_due_idx" on "saga_outbox" ("available_at") where "dispatched_at" is null',
})
@Index({ name: 'saga_outbox_dispatched_at_idx', properties: ['dispatchedAt'] })
export class SagaOutbox {
  @PrimaryKey({ type: 'uuid', fieldName: 'id' })
  id!: string;

  @Property({ type: 'string', length: COLUMN_LIMITS.sagaType, fieldName: 'saga_type' })
  sagaType!: string;

  @Property({ type: 'uuid', fieldName: 'saga_id' })
  sagaId!: string;

  @Property({ type: 'string', length: COLUMN_LIMITS.messageType, fieldName: 'message_type' })
  messageType!: string;

  @Property({ type: 'json', fieldName: 'payload' })
  payload!: Record<string, unknown>;

  /** Headers for the publisher: correlation id, saga type and id, plus any the step added. */
  @Property({ type: 'json', fieldName: 'headers' })
  headers!: Record<string, string>;

  @Property({ type: 'string', length: COLUMN_LIMITS.correlationId, fieldName: 'correlation_id', nullable: true })
  correlationId: string | null = null;

  /** When the row may next be claimed: its creation, later pushed by retry backoff. */
  @Property({ type: DateTimeType, fieldName: 'available_at' })
  availableAt!: Date;

  /** Concurrency token: a new value at every claim. */
  @Property({ type: 'uuid', fieldName: 'token' })
  token!: string;

  @Property({ type: DateTimeType, fieldName: 'locked_until', nullable: true })
  lockedUntil: Date | null = null;

  @Property({ type: 'integer', fieldName: 'attempts' })
  attempts: number = 0;

  @Property({ type: 'text', fieldName: 'last_error', nullable: true })
  lastError: string | null = null;

  /** Set when the row leaves the pending set: published or dead-lettered. */
  @Property({ type: DateTimeType, fieldName: 'dispatched_at', nullable: true })
  dispatchedAt: Date | null = null;

  @Property({ type: 'string', length: 20, fieldName: 'outcome', nullable: true })
  outcome: OutboxOutcome | null = null;

  @Property({ type: DateTimeType, fieldName: 'dead_lettered_at', nullable: true })
  deadLetteredAt: Date | null = null;

  /** Why the row was retired. May quote the payload: treat it as sensitive as the payload. */
  @Property({ type: 'text', fieldName: 'dead_letter_reason', nullable: true })
  deadLetterReason: string | null = null;

  @Property({ type: DateTimeType, fieldName: 'created_at' })
  createdAt!: Date;
}
