import { COLUMN_LIMITS } from '../entities/dispatch-states.js';
import { type SagaErrorDetails, SagaValidationError } from '../errors.js';
import { nameProblem } from './stored-text.js';

/**
 * The `type` of a message: a non-empty string that `saga_timer.message_type` / `saga_outbox.message_type`
 * store as given (at most 200 code points, no U+0000, no lone surrogate). The error never quotes the value.
 * @param what names the message in the error, e.g. "A message for saga order" or "Timer 'x' of saga order/1".
 * @throws SagaValidationError `MESSAGE_TYPE_MISSING` otherwise.
 */
export function messageTypeOf(message: unknown, what: string, details: SagaErrorDetails): string {
  const type = (message as { type?: unknown } | null | undefined)?.type;
  const problem = nameProblem(type, { maxLength: COLUMN_LIMITS.messageType });
  if (problem) {
    throw new SagaValidationError(
      'MESSAGE_TYPE_MISSING',
      `${what} has no usable message type (its 'type' ${problem}): every message is an object with a 'type' string of 1 to ${COLUMN_LIMITS.messageType} characters, without U+0000 or lone surrogates.`,
      details,
    );
  }
  return type as string;
}
