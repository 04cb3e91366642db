import { Entity, Index, Property } from '@mikro-orm/core';
import { DispatchRecord } from './dispatch-record.js';
import type { OutboxOutcome } from './dispatch-states.js';

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
export class SagaOutbox extends DispatchRecord<OutboxOutcome> {
  /** Headers for the publisher: correlation id, saga type and id, plus any the step added. */
  @Property({ type: 'json', fieldName: 'headers' })
  headers!: Record<string, string>;
}
