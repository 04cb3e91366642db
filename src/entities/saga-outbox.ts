import { EntitySchema } from '@mikro-orm/core';
import { runBeforeInsert } from './before-insert.js';
import { DispatchRecord, DispatchRecordSchema } from './dispatch-record.js';
import type { OutboxOutcome } from './dispatch-states.js';

/**
 * A message a saga step sent (table `saga_outbox`), written in the same transaction as the state change
 * that caused it and relayed to the application's publisher by the dispatcher, at least once.
 * The row id is the message id consumers deduplicate on. Mapped by one of {@link SAGA_ENTITIES}.
 */
export class SagaOutbox extends DispatchRecord<OutboxOutcome> {
  /** Headers for the publisher: correlation id, saga type and id, plus any the step added. */
  headers!: Record<string, string>;
}

/** SagaOutbox's mapping (table `saga_outbox`), registered through `SAGA_ENTITIES`. */
export const SagaOutboxSchema = new EntitySchema<SagaOutbox, DispatchRecord>({
  class: SagaOutbox,
  extends: DispatchRecordSchema,
  tableName: 'saga_outbox',
  properties: {
    headers: { type: 'json', fieldName: 'headers' },
  },
  indexes: [
    {
      // The claim's order (`order by available_at, id limit n`): read in index order, the claim stops after n
      // rows instead of sorting every due row (Migration20261201011500 / ...011501 replaced the due_idx on (available_at)).
      name: 'saga_outbox_claim_idx',
      expression: 'create index "saga_outbox_claim_idx" on "saga_outbox" ("available_at", "id") where "dispatched_at" is null',
    },
    { name: 'saga_outbox_dispatched_at_idx', properties: ['dispatchedAt'] },
  ],
  // A message the application stages itself (`SagaRuntime.stageMessage`) is inserted by the application's flush.
  hooks: { beforeCreate: [runBeforeInsert] },
});
