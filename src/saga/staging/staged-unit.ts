import type { StagedDelivery } from '../../contracts.js';
import { SagaValidationError } from '../../errors.js';
import { copyMessage } from '../copy-message.js';
import { correlateMessage } from '../correlate-message.js';
import { checkMessageId } from '../handled-messages.js';
import type { RegisteredSaga } from '../registered-saga.js';
import type { SagaMessage } from '../saga-message.js';
import { labelOf } from '../stored-text.js';
import type { HandleTarget } from '../unit-of-work/handle-target.js';
import type { RuntimeMessage } from '../unit-of-work/runtime-message.js';

/**
 * The unit of work a claimed staged delivery runs: its message (checked and correlated as `handle()` does) and its
 * target, which stamps the row in the saga's transaction while the claim's token holds.
 * @throws SagaValidationError `MESSAGE_TYPE_UNKNOWN` when the row's payload carries another type than its column
 *   says; the correlation errors of `handle()`.
 */
export function stagedUnit(saga: RegisteredSaga, delivery: StagedDelivery): { message: RuntimeMessage; target: HandleTarget } {
  const details = { sagaType: delivery.sagaType };
  const original = delivery.payload as SagaMessage;
  const copy = copyMessage(original, `Staged delivery ${delivery.id} of saga ${delivery.sagaType}`, details);
  const { type, value, first } = correlateMessage(saga, { original, copy });
  if (type !== delivery.messageType) {
    throw new SagaValidationError(
      'MESSAGE_TYPE_UNKNOWN',
      `Staged delivery ${delivery.id} of saga ${delivery.sagaType} says '${labelOf(delivery.messageType)}' but carries another message type: repair or delete the row.`,
      { ...details, messageType: labelOf(delivery.messageType) },
    );
  }
  const messageId = delivery.messageId === null ? undefined : checkMessageId(delivery.messageId, delivery.sagaType, type);
  const target: HandleTarget = { kind: 'correlation', value, messageId, staged: { id: delivery.id, token: delivery.token } };
  return { message: { original, copy, first }, target };
}
