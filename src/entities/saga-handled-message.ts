import { DateTimeType, Entity, Index, PrimaryKey, Property, Unique } from '@mikro-orm/core';
import { COLUMN_LIMITS } from './dispatch-states.js';

/**
 * A message id one saga instance has handled (table `saga_handled_message`), written in the same transaction as the
 * unit of work it identifies. A message delivered again with the same id finds its row and writes nothing
 * (outcome `duplicate`). Rows older than the runtime's `messageIds.retentionMs` are purged in batches.
 */
@Entity({ tableName: 'saga_handled_message' })
@Unique({ name: 'saga_handled_message_uniq', properties: ['sagaType', 'sagaId', 'messageId'] })
@Index({ name: 'saga_handled_message_processed_at_idx', properties: ['processedAt'] })
export class SagaHandledMessage {
  /** A UUIDv7. */
  @PrimaryKey({ type: 'uuid', fieldName: 'id' })
  id!: string;

  @Property({ type: 'string', length: COLUMN_LIMITS.sagaType, fieldName: 'saga_type' })
  sagaType!: string;

  @Property({ type: 'uuid', fieldName: 'saga_id' })
  sagaId!: string;

  /** The id the caller gave the message (`handle(..., { messageId })`). */
  @Property({ type: 'string', length: COLUMN_LIMITS.messageId, fieldName: 'message_id' })
  messageId!: string;

  /** The saga's version after the unit of work that handled the message. */
  @Property({ type: 'integer', fieldName: 'version' })
  version!: number;

  @Property({ type: DateTimeType, fieldName: 'processed_at' })
  processedAt!: Date;
}
