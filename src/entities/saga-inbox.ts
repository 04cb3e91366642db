import { DateTimeType, EntitySchema } from '@mikro-orm/core';
import { runBeforeInsert } from './before-insert.js';
import { COLUMN_LIMITS, type InboxOutcome } from './dispatch-states.js';
import { OrderKeyType } from './order-key-type.js';

/**
 * A message staged for a saga from the application's own transaction (table `saga_inbox`): written through the
 * application's EntityManager by `SagaRuntime.stageDelivery()`, so it commits or rolls back with the application's
 * writes, then delivered by the dispatcher through an ordinary unit of work, which stamps the row in the transaction
 * of the saga's change. The rows of one saga (type and correlation value) are delivered in `orderKey` order, which is
 * the order their transactions committed. Mapped by one of {@link SAGA_ENTITIES}.
 */
export class SagaInbox {
  /**
   * Assigned by the database on insert: a sequence on PostgreSQL (the stager holds the saga key's advisory lock until
   * COMMIT, so it grows in commit order per saga), SQLite's autoincrement (one writer at a time).
   */
  orderKey?: string | number | bigint;
  /** A UUIDv7: the row's id in the operator API, the dispatcher's claims and its events. */
  id!: string;
  sagaType!: string;
  /** The correlation value as text (a uuid in lower case, a number as JavaScript prints it): the saga's ordering key. */
  sagaKey!: string;
  messageType!: string;
  /** The message, JSON round-tripped. */
  payload!: Record<string, unknown>;
  /** The caller's message id, recorded with the unit of work that delivers the row (`handle(..., { messageId })`). */
  messageId: string | null = null;
  correlationId: string | null = null;
  /** When the row may next be claimed: when it is due, later pushed by retry backoff. */
  availableAt!: Date;
  /** Concurrency token: a new value at every claim. */
  token!: string;
  /** End of the lease of the dispatcher that claimed the row. */
  lockedUntil: Date | null = null;
  /** When the delivery under the current claim started (see `DispatchRecord.deliveryStartedAt`). */
  deliveryStartedAt: Date | null = null;
  /** Failed deliveries so far. */
  attempts: number = 0;
  lastError: string | null = null;
  /** Set when the row leaves the pending set, whichever way; `outcome` says which. */
  dispatchedAt: Date | null = null;
  outcome: InboxOutcome | null = null;
  deadLetteredAt: Date | null = null;
  /** Why the row was retired. May quote the payload: treat it as sensitive as the payload. */
  deadLetterReason: string | null = null;
  createdAt!: Date;
  /** The W3C trace context current at the staging call (JSON), continued by the delivery's `saga.deliver` span. */
  traceContext: string | null = null;
}

/** SagaInbox's mapping (table `saga_inbox`), registered through `SAGA_ENTITIES`. */
export const SagaInboxSchema = new EntitySchema<SagaInbox>({
  class: SagaInbox,
  tableName: 'saga_inbox',
  properties: {
    orderKey: { type: OrderKeyType, fieldName: 'order_key', primary: true, autoincrement: true },
    id: { type: 'uuid', fieldName: 'id' },
    sagaType: { type: 'string', length: COLUMN_LIMITS.sagaType, fieldName: 'saga_type' },
    sagaKey: { type: 'text', fieldName: 'saga_key' },
    messageType: { type: 'string', length: COLUMN_LIMITS.messageType, fieldName: 'message_type' },
    payload: { type: 'json', fieldName: 'payload' },
    messageId: { type: 'string', length: COLUMN_LIMITS.messageId, fieldName: 'message_id', nullable: true },
    correlationId: { type: 'string', length: COLUMN_LIMITS.correlationId, fieldName: 'correlation_id', nullable: true },
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
    traceContext: { type: 'text', fieldName: 'trace_context', nullable: true },
  },
  indexes: [
    // The dispatcher finds rows by id; the order key is the primary key (SQLite auto-assigns only an integer primary key).
    { name: 'saga_inbox_id_uniq', expression: 'create unique index "saga_inbox_id_uniq" on "saga_inbox" ("id")' },
    {
      // The claim's order (`order by available_at, id limit n`), as for saga_timer and saga_outbox.
      name: 'saga_inbox_claim_idx',
      expression: 'create index "saga_inbox_claim_idx" on "saga_inbox" ("available_at", "id") where "dispatched_at" is null',
    },
    {
      // The first pending row of a saga: a row is claimed only when it is that row. Over `outcome is null` (set and
      // cleared with `dispatched_at`): a claim's lookup of it then cannot be served by the claim index, which PostgreSQL
      // chose, reading every pending row per candidate, when statistics said few rows were pending.
      name: 'saga_inbox_saga_key_idx',
      expression: 'create index "saga_inbox_saga_key_idx" on "saga_inbox" ("saga_type", "saga_key", "order_key") where "outcome" is null',
    },
    { name: 'saga_inbox_dispatched_at_idx', properties: ['dispatchedAt'] },
  ],
  hooks: { beforeCreate: [runBeforeInsert] },
});
