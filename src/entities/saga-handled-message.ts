import { DateTimeType, EntitySchema } from '@mikro-orm/core';
import { COLUMN_LIMITS } from './dispatch-states.js';

/**
 * A message id one saga instance has handled (table `saga_handled_message`), written in the same transaction as the
 * unit of work it identifies. A message delivered again with the same id finds its row and writes nothing
 * (outcome `duplicate`). Rows older than the runtime's `messageIds.retentionMs` are purged in batches.
 * Mapped by one of {@link SAGA_ENTITIES}.
 */
export class SagaHandledMessage {
  /** A UUIDv7. */
  id!: string;
  sagaType!: string;
  sagaId!: string;
  /** The id the caller gave the message (`handle(..., { messageId })`). */
  messageId!: string;
  /** The saga's version after the unit of work that handled the message. */
  version!: number;
  processedAt!: Date;
}

/** SagaHandledMessage's mapping (table `saga_handled_message`), registered through `SAGA_ENTITIES`. */
export const SagaHandledMessageSchema = new EntitySchema<SagaHandledMessage>({
  class: SagaHandledMessage,
  tableName: 'saga_handled_message',
  properties: {
    id: { type: 'uuid', fieldName: 'id', primary: true },
    sagaType: { type: 'string', length: COLUMN_LIMITS.sagaType, fieldName: 'saga_type' },
    sagaId: { type: 'uuid', fieldName: 'saga_id' },
    messageId: { type: 'string', length: COLUMN_LIMITS.messageId, fieldName: 'message_id' },
    version: { type: 'integer', fieldName: 'version' },
    processedAt: { type: DateTimeType, fieldName: 'processed_at' },
  },
  uniques: [{ name: 'saga_handled_message_uniq', properties: ['sagaType', 'sagaId', 'messageId'] }],
  indexes: [{ name: 'saga_handled_message_processed_at_idx', properties: ['processedAt'] }],
});
