import { COLUMN_LIMITS } from '../entities/dispatch-states.js';
import { type SagaErrorDetails, SagaValidationError } from '../errors.js';

/**
 * The `type` of a message: a non-empty string that fits `saga_timer.message_type` / `saga_outbox.message_type`.
 * @param what names the message in the error, e.g. "A message for saga order" or "Timer 'x' of saga order/1".
 * @throws SagaValidationError `MESSAGE_TYPE_MISSING` otherwise.
 */
export function messageTypeOf(message: unknown, what: string, details: SagaErrorDetails): string {
  const type = (message as { type?: unknown } | null | undefined)?.type;
  if (typeof type !== 'string' || type === '' || type.length > COLUMN_LIMITS.messageType) {
    throw new SagaValidationError(
      'MESSAGE_TYPE_MISSING',
      `${what} has no message type: every message is an object with a 'type' string of 1 to ${COLUMN_LIMITS.messageType} characters.`,
      details,
    );
  }
  return type;
}
