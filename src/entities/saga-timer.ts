import { DateTimeType, EntitySchema } from '@mikro-orm/core';
import { DispatchRecord, DispatchRecordSchema } from './dispatch-record.js';
import { COLUMN_LIMITS, type TimerOutcome } from './dispatch-states.js';

/**
 * A durable, named timeout of one saga instance (table `saga_timer`). Mapped by one of {@link SAGA_ENTITIES}.
 *
 * A timer is pending while `dispatched_at` is null. Its name is unique among the pending timers of its
 * instance (a filtered unique index), so scheduling a pending name replaces it. It leaves the pending set
 * by being fired, missed (catch-up policy) or dead-lettered, and is then stamped, never deleted; only a
 * cancellation deletes a timer.
 */
export class SagaTimer extends DispatchRecord<TimerOutcome> {
  name!: string;
  /** The saga step the timer belongs to (step-scoped timers), or null for a saga-scoped timer. */
  step: string | null = null;
  /** Absolute due time, computed when the timer was scheduled (calendar applied). */
  dueAt!: Date;
  calendarKey: string | null = null;
}

/** SagaTimer's mapping (table `saga_timer`), registered through `SAGA_ENTITIES`. */
export const SagaTimerSchema = new EntitySchema<SagaTimer, DispatchRecord>({
  class: SagaTimer,
  extends: DispatchRecordSchema,
  tableName: 'saga_timer',
  properties: {
    name: { type: 'string', length: COLUMN_LIMITS.timerName, fieldName: 'name' },
    step: { type: 'string', length: COLUMN_LIMITS.step, fieldName: 'step', nullable: true },
    dueAt: { type: DateTimeType, fieldName: 'due_at' },
    calendarKey: { type: 'string', length: COLUMN_LIMITS.calendarKey, fieldName: 'calendar_key', nullable: true },
  },
  indexes: [
    {
      name: 'saga_timer_pending_name_uniq',
      // One raw expression with double-quoted identifiers is valid on PostgreSQL and SQLite alike.
      expression:
        'create unique index "saga_timer_pending_name_uniq" on "saga_timer" ("saga_type", "saga_id", "name") where "dispatched_at" is null',
    },
    {
      // The claim's order (`order by available_at, id limit n`): read in index order, the claim stops after n
      // rows instead of sorting every due row (Migration20261201011500 / ...011501 replaced the due_idx on (available_at)).
      name: 'saga_timer_claim_idx',
      expression: 'create index "saga_timer_claim_idx" on "saga_timer" ("available_at", "id") where "dispatched_at" is null',
    },
    { name: 'saga_timer_dispatched_at_idx', properties: ['dispatchedAt'] },
  ],
});
