import { copyMessage } from '../copy-message.js';
import type { RegisteredSaga } from '../registered-saga.js';
import type { SagaMessage } from '../saga-message.js';

/** A message as the runtime holds it while it handles it. */
export interface RuntimeMessage {
  /** The caller's object (a timer's payload): handed back to the caller's own hook (`onHandled`), never to a step. */
  readonly original: SagaMessage;
  /** The runtime's copy: its type is read and recorded from it; no saga code gets it. */
  readonly copy: SagaMessage;
  /** The copy the correlation function read: the step's first run gets it, later runs a new copy each. */
  readonly first?: SagaMessage | undefined;
}

/** A copy of the message for one run of the saga's own code (its correlation function or a step). */
export function stepCopy(saga: RegisteredSaga, message: RuntimeMessage): SagaMessage {
  return copyMessage(message.copy, `A message for saga ${saga.definition.name}`, { sagaType: saga.definition.name });
}
