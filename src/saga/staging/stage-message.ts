import { randomUUID } from 'node:crypto';
import type { EntityManager } from '@mikro-orm/core';
import { getCorrelationId } from '../../correlation/correlation-context.js';
import { COLUMN_LIMITS } from '../../entities/dispatch-states.js';
import { SagaOutbox } from '../../entities/saga-outbox.js';
import { SagaValidationError } from '../../errors.js';
import { nameUuid } from '../../ids/name-uuid.js';
import { uuidV7 } from '../../ids/uuid-v7.js';
import { stagingStatement } from '../../sql/inbox-statements.js';
import { dispatcherChannel } from '../../sql/notification-statements.js';
import { activeTraceContext } from '../../telemetry/trace-context.js';
import { truncate } from '../../text/truncate.js';
import { callOptions, headerRecord } from '../call-options.js';
import { checkCorrelationId } from '../correlation-value.js';
import { checkMessageWithHeaders, toJsonPayload } from '../json-payload.js';
import { messageTypeOf } from '../message-type-of.js';
import { nameProblem } from '../stored-text.js';
import { availableAtOf } from './available-at.js';
import type { StagedRow, StageMessageOptions } from './staging-options.js';
import { persistStaged, type StagingRuntime } from './staging-target.js';

/**
 * The `saga_outbox.saga_type` of a message the application staged itself (`SagaRuntime.stageMessage`): the empty
 * string, which no saga's name can be. Such a message's `sagaId` is its ordering lane: the name-based uuid of its
 * ordering key, or its own id when it has none.
 */
export const APP_MESSAGE_SAGA_TYPE = '';

/**
 * Checks an outgoing message of the application as `ctx.send()` checks a step's (its type, JSON round trip, headers,
 * size) and its options, then persists a `saga_outbox` row into `em`: the application's flush inserts it, in its
 * transaction, and the dispatcher relays it as it relays a saga's messages. On PostgreSQL, a row due at once NOTIFYs
 * the dispatchers in that transaction (delivered at COMMIT). Nothing is sent to the database here.
 * @throws SagaValidationError `MESSAGE_TYPE_MISSING`, `PAYLOAD_NOT_SERIALIZABLE`, `PAYLOAD_TOO_LARGE`,
 *   `TIMER_DELAY_INVALID`, `TIMER_DUE_INVALID`, `OPTION_INVALID`; nothing is persisted.
 */
export function stageMessage(
  runtime: StagingRuntime,
  em: EntityManager,
  message: unknown,
  options: StageMessageOptions | undefined,
): StagedRow {
  const checked = callOptions(options, 'The options of stageMessage()', {});
  const type = messageTypeOf(message, 'A message staged by the application', {});
  const details = { messageType: type };
  const what = `the '${type}' message staged by the application`;
  const { maxPayloadBytes, clock } = runtime.options;
  const payloadJson = toJsonPayload(message, what, maxPayloadBytes, details);
  const extra = headerRecord(checked.headers, what, details);
  const given = checked.correlationId === undefined ? (getCorrelationId() ?? randomUUID()) : checked.correlationId;
  const correlationId = checkCorrelationId(given, 'the application');
  // The message and its headers are checked as ctx.send() checks a step's, then the ordering key its header adds.
  const sent = { ...extra, 'correlation-id': correlationId };
  checkMessageWithHeaders(
    payloadJson,
    toJsonPayload(sent, `the headers of ${what}`, maxPayloadBytes, details),
    what,
    maxPayloadBytes,
    details,
  );
  const orderingKey = checked.orderingKey;
  const keyProblem = orderingKey === undefined ? undefined : nameProblem(orderingKey, { maxLength: COLUMN_LIMITS.orderingKey });
  if (keyProblem) {
    throw new SagaValidationError(
      'OPTION_INVALID',
      `The orderingKey of ${what} ${keyProblem}: pass a string of 1 to ${COLUMN_LIMITS.orderingKey} characters without U+0000 or lone surrogates, or none.`,
      details,
    );
  }
  const headers = orderingKey === undefined ? sent : { ...sent, 'ordering-key': orderingKey };
  const headersJson = toJsonPayload(headers, `the headers of ${what}`, maxPayloadBytes, details);
  checkMessageWithHeaders(payloadJson, headersJson, what, maxPayloadBytes, details);
  const now = clock.now();
  const availableAt = availableAtOf(now, checked, what, details);

  const row = new SagaOutbox();
  row.id = uuidV7();
  row.sagaType = APP_MESSAGE_SAGA_TYPE;
  row.sagaId = orderingKey === undefined ? row.id : nameUuid(orderingKey);
  row.messageType = type;
  row.payload = JSON.parse(payloadJson) as Record<string, unknown>;
  row.headers = JSON.parse(headersJson) as Record<string, string>;
  row.correlationId = truncate(correlationId, COLUMN_LIMITS.correlationId);
  row.availableAt = availableAt;
  row.token = randomUUID();
  row.createdAt = now;
  // The staging request's trace: the publish's `saga.publish` span continues it (docs/observability.md).
  row.traceContext = activeTraceContext();
  const { db } = runtime;
  const notify = runtime.options.notifyDispatchers && availableAt.getTime() <= now.getTime() ? dispatcherChannel(db) : undefined;
  persistStaged(em, row, stagingStatement(db, { notify }), false);
  runtime.metrics.add('messagesStaged', APP_MESSAGE_SAGA_TYPE);
  return { id: row.id, availableAt };
}
