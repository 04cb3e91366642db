import { randomUUID } from 'node:crypto';
import type { EntityManager } from '@mikro-orm/core';
import { getCorrelationId } from '../../correlation/correlation-context.js';
import { COLUMN_LIMITS } from '../../entities/dispatch-states.js';
import { SagaInbox } from '../../entities/saga-inbox.js';
import { uuidV7 } from '../../ids/uuid-v7.js';
import { stagingStatement } from '../../sql/inbox-statements.js';
import { dispatcherChannel } from '../../sql/notification-statements.js';
import { activeTraceContext } from '../../telemetry/trace-context.js';
import { truncate } from '../../text/truncate.js';
import { callOptions } from '../call-options.js';
import { copyMessage } from '../copy-message.js';
import { correlateMessage, sagaKeyOf } from '../correlate-message.js';
import { checkCorrelationId } from '../correlation-value.js';
import { checkMessageId } from '../handled-messages.js';
import { toJsonPayload } from '../json-payload.js';
import type { RegisteredSaga } from '../registered-saga.js';
import type { SagaMessage } from '../saga-message.js';
import { availableAtOf } from './available-at.js';
import type { StageDeliveryOptions, StagedRow } from './staging-options.js';
import { persistStaged, type StagingRuntime } from './staging-target.js';

/**
 * Checks `message` for `saga` as `handle()` does (its type, its correlation value, the correlation id and message
 * id), and that it round-trips through JSON within `maxPayloadBytes` and its delivery time, then persists a
 * `saga_inbox` row into `em`: the application's flush inserts it, in its transaction. On PostgreSQL that flush first
 * takes the saga key's advisory lock (held until COMMIT; see `stagingStatement`) and, for a row due at once, NOTIFYs
 * the dispatchers (delivered at COMMIT). Nothing is sent to the database here.
 * @throws SagaValidationError / SagaCorrelationError as `handle()` does, and `PAYLOAD_NOT_SERIALIZABLE`,
 *   `PAYLOAD_TOO_LARGE`, `TIMER_DELAY_INVALID`, `TIMER_DUE_INVALID`, `OPTION_INVALID`; nothing is persisted.
 */
export function stageDelivery(
  runtime: StagingRuntime,
  em: EntityManager,
  saga: RegisteredSaga,
  message: unknown,
  options: StageDeliveryOptions | undefined,
): StagedRow {
  const { name } = saga.definition;
  const details = { sagaType: name };
  const checked = callOptions(options, 'The options of stageDelivery()', details);
  const copy = copyMessage(message as SagaMessage, `A message staged for saga ${name}`, details);
  const { type, value } = correlateMessage(saga, { original: message as SagaMessage, copy });
  const given = checked.correlationId === undefined ? (getCorrelationId() ?? randomUUID()) : checked.correlationId;
  const correlationId = checkCorrelationId(given, name);
  const messageId = checked.messageId === undefined ? null : checkMessageId(checked.messageId, name, type);
  const what = `the '${type}' message staged for saga ${name}`;
  const payloadJson = toJsonPayload(copy, what, runtime.options.maxPayloadBytes, { ...details, messageType: type });
  const now = runtime.options.clock.now();
  const availableAt = availableAtOf(now, checked, what, { ...details, messageType: type });

  const row = new SagaInbox();
  row.id = uuidV7();
  row.sagaType = name;
  row.sagaKey = sagaKeyOf(value);
  row.messageType = type;
  // What is stored is the text that was checked, parsed back (a getter read twice cannot change it).
  row.payload = JSON.parse(payloadJson) as Record<string, unknown>;
  row.messageId = messageId;
  row.correlationId = truncate(correlationId, COLUMN_LIMITS.correlationId);
  row.availableAt = availableAt;
  row.token = randomUUID();
  row.createdAt = now;
  // The staging request's trace: the delivery's `saga.deliver` span continues it (docs/observability.md).
  row.traceContext = activeTraceContext();
  const { db } = runtime;
  const notify = runtime.options.notifyDispatchers && availableAt.getTime() <= now.getTime() ? dispatcherChannel(db) : undefined;
  const statement = stagingStatement(db, { saga: { sagaType: name, sagaKey: row.sagaKey }, notify });
  persistStaged(em, row, statement, db.dialect.locksSagaKeys);
  runtime.metrics.add('deliveriesStaged', name);
  return { id: row.id, availableAt };
}
