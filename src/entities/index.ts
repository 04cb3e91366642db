import { DispatchRecord } from './dispatch-record.js';
import { SagaHandledMessage } from './saga-handled-message.js';
import { SagaOutbox } from './saga-outbox.js';
import { SagaState } from './saga-state.js';
import { SagaTimer } from './saga-timer.js';

export { DispatchRecord } from './dispatch-record.js';
export type { OutboxOutcome, TimerOutcome } from './dispatch-states.js';
export { COLUMN_LIMITS, OUTBOX_OUTCOMES, TIMER_OUTCOMES } from './dispatch-states.js';
export { SagaHandledMessage } from './saga-handled-message.js';
export { SagaOutbox } from './saga-outbox.js';
export { SagaState } from './saga-state.js';
export { SagaTimer } from './saga-timer.js';

/** The library's entities: add them to your MikroORM `entities` next to your saga state entities. */
export const SAGA_ENTITIES = [SagaState, DispatchRecord, SagaTimer, SagaOutbox, SagaHandledMessage] as const;
