import { DispatchRecordSchema } from './dispatch-record.js';
import { SagaHandledMessageSchema } from './saga-handled-message.js';
import { SagaInboxSchema } from './saga-inbox.js';
import { SagaOutboxSchema } from './saga-outbox.js';
import { SagaStateSchema } from './saga-state.js';
import { SagaTimerSchema } from './saga-timer.js';

export { DispatchRecord, DispatchRecordSchema } from './dispatch-record.js';
export type { InboxOutcome, OutboxOutcome, TimerOutcome } from './dispatch-states.js';
export { COLUMN_LIMITS, INBOX_OUTCOMES, OUTBOX_OUTCOMES, TIMER_OUTCOMES } from './dispatch-states.js';
export { SagaHandledMessage, SagaHandledMessageSchema } from './saga-handled-message.js';
export { SagaInbox, SagaInboxSchema } from './saga-inbox.js';
export { SagaOutbox, SagaOutboxSchema } from './saga-outbox.js';
export { SagaState, SagaStateSchema } from './saga-state.js';
export { SagaTimer, SagaTimerSchema } from './saga-timer.js';

/**
 * The library's entities, as `EntitySchema`s from `@mikro-orm/core` (they work on MikroORM 6 and 7 and under
 * every metadata provider): add them to your MikroORM `entities` next to your saga state entities.
 */
export const SAGA_ENTITIES = [
  SagaStateSchema,
  DispatchRecordSchema,
  SagaTimerSchema,
  SagaOutboxSchema,
  SagaHandledMessageSchema,
  SagaInboxSchema,
] as const;
