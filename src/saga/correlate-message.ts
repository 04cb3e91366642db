import { SagaCorrelationError, SagaValidationError } from '../errors.js';
import { messageTypeOf } from './message-type-of.js';
import type { RegisteredSaga } from './registered-saga.js';
import type { SagaMessage } from './saga-message.js';
import { labelOf } from './stored-text.js';
import { type RuntimeMessage, stepCopy } from './unit-of-work/runtime-message.js';

/** A message's type and correlation value for one saga, checked. */
export interface CorrelatedMessage {
  readonly type: string;
  /** The correlation value to look the instance up by (a uuid in lower case, anything else as given). */
  readonly value: unknown;
  /** The copy the correlation function read: the step's first run gets it. */
  readonly first: SagaMessage;
}

/**
 * Checks that `saga` has a step for the message's type and finds the message's correlation value, as `handle()` and
 * `stageDelivery()` do before anything is read or written. The correlation function is the saga's own code: it
 * reads a copy of its own.
 * @throws SagaValidationError `MESSAGE_TYPE_MISSING`, `MESSAGE_TYPE_UNKNOWN`.
 * @throws SagaCorrelationError `CORRELATION_UNDEFINED`, `CORRELATION_MISSING`, `CORRELATION_INVALID`.
 */
export function correlateMessage(saga: RegisteredSaga, message: RuntimeMessage): CorrelatedMessage {
  const { name } = saga.definition;
  const type = messageTypeOf(message.copy, `A message for saga ${name}`, { sagaType: name });
  if (!saga.definition.steps.has(type)) {
    throw new SagaValidationError(
      'MESSAGE_TYPE_UNKNOWN',
      `Saga ${name} has no step for message type ${labelOf(type)}: add a step for it, or do not send it this message.`,
      { sagaType: name, messageType: labelOf(type) },
    );
  }
  const first = stepCopy(saga, message);
  const correlation = saga.definition.correlate(first);
  if (!correlation.defined) {
    throw new SagaCorrelationError(
      'CORRELATION_UNDEFINED',
      `Saga ${name} does not say how '${type}' finds its instance: add correlation.from.${type}.`,
      { sagaType: name, messageType: type },
    );
  }
  if (correlation.value === undefined || correlation.value === null || correlation.value === '') {
    throw new SagaCorrelationError(
      'CORRELATION_MISSING',
      `Message '${type}' carries no value for ${name}.${saga.definition.correlationProperty}: set the correlation field on the message before handling it.`,
      { sagaType: name, messageType: type },
    );
  }
  return { type, value: saga.checkCorrelation(correlation.value, type), first };
}

/**
 * A checked correlation value as text, as `saga_inbox.saga_key` stores it: a string (a uuid already in lower case) as
 * it is, a number or BigInt as JavaScript prints it. Values the property's column takes as one (`-0` and `0`) print
 * alike, so one saga has one key.
 */
export function sagaKeyOf(value: unknown): string {
  return typeof value === 'string' ? value : String(value);
}
