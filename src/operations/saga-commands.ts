import { randomUUID } from 'node:crypto';
import type { EntityManager } from '@mikro-orm/core';
import type { DialectAdapter } from '../dialect/dialect-adapter.js';
import { SagaConcurrencyError, SagaValidationError } from '../errors.js';
import { uuidV7 } from '../ids/uuid-v7.js';
import { inFreshTransaction } from '../orm/index.js';
import { fieldOf, SAGA_COLUMN_FIXES, storedDateProblem, storedValueInvalid, storedVersionProblem } from '../saga/stored-values.js';
import { insertOutboxMessages } from '../sql/outbox-statements.js';
import { queryRows, runStatement } from '../sql/sql-executor.js';
import { deleteAllPendingTimers } from '../sql/timer-statements.js';
import { activeTraceContext } from '../telemetry/trace-context.js';
import { checkedInput, checkReason, checkUuid, invalidInput } from './operation-input.js';
import { OPERATOR_MESSAGE_TYPES, type SagaChange, type SagaChangeRequest } from './operation-types.js';
import type { OperationsContext } from './operations-context.js';
import { sagaTableOf } from './saga-queries.js';
import type { SagaTable } from './saga-table.js';

type ChangeKind = 'forceComplete' | 'reopen';

function checkRequest(ops: OperationsContext, request: SagaChangeRequest) {
  if (typeof request !== 'object' || request === null) throw invalidInput('A saga change needs { sagaType, sagaId, reason }.');
  const saga = sagaTableOf(ops, request.sagaType);
  const sagaId = checkUuid(request.sagaId, 'sagaId');
  const reason = checkReason(request.reason);
  const { expectedVersion: expected } = request;
  if (expected !== undefined && (!Number.isSafeInteger(expected) || expected < 0)) {
    throw invalidInput('expectedVersion must be an integer >= 0 (the version shown by listSagas or getSaga).', { sagaType: saga.sagaType });
  }
  return { saga, sagaId, reason, expected };
}

/**
 * Force-completes an active saga, or reopens a completed one, in ONE transaction guarded by its version:
 * the state row (`completed_at`, `updated_at`, `version + 1`), its pending timers (deleted on completion)
 * and an audit message in the outbox commit together or not at all.
 * @throws SagaValidationError `SAGA_NOT_FOUND`, `SAGA_STATE_CONFLICT` (already completed / still active).
 * @throws SagaConcurrencyError `VERSION_CONFLICT` when the saga's version is not `expectedVersion`, or changed meanwhile.
 */
export async function changeSaga(ops: OperationsContext, kind: ChangeKind, request: SagaChangeRequest): Promise<SagaChange> {
  const { saga, sagaId, reason, expected } = checkedInput(kind, () => checkRequest(ops, request));
  const completing = kind === 'forceComplete';
  return inFreshTransaction(ops.db.em, async (em) => {
    const now = ops.clock.now();
    const version = await readVersion(em, ops.db.dialect, saga, sagaId, completing, expected);
    const c = saga.column;
    const updated = await runStatement(em, {
      sql: `update ${saga.table} set ${c.completedAt} = ?, ${c.updatedAt} = ?, ${c.version} = ${c.version} + 1 where ${c.id} = ? and ${c.version} = ?`,
      params: [completing ? now : null, now, sagaId, version],
    });
    if (updated !== 1) throw versionConflict(saga, sagaId);
    const timersCancelled = completing ? await runStatement(em, deleteAllPendingTimers(ops.db, saga.sagaType, sagaId)) : 0;
    const type = completing ? OPERATOR_MESSAGE_TYPES.FORCE_COMPLETED : OPERATOR_MESSAGE_TYPES.REOPENED;
    const payload = { type, sagaType: saga.sagaType, sagaId, reason, version: version + 1, ...(completing ? { timersCancelled } : {}) };
    const auditMessageId = uuidV7();
    await runStatement(
      em,
      insertOutboxMessages(ops.db, [
        {
          id: auditMessageId,
          sagaType: saga.sagaType,
          sagaId,
          messageType: type,
          payloadJson: JSON.stringify(payload),
          headersJson: JSON.stringify({ 'saga-type': saga.sagaType, 'saga-id': sagaId, 'operator-action': kind }),
          correlationId: null,
          // The operator's own trace, when the call runs in one (the CLI, an admin endpoint).
          traceContext: activeTraceContext(),
          token: randomUUID(),
          createdAt: now,
        },
      ]),
    );
    return { sagaType: saga.sagaType, sagaId, version: version + 1, timersCancelled, auditMessageId };
  });
}

async function readVersion(
  em: EntityManager,
  dialect: DialectAdapter,
  saga: SagaTable,
  sagaId: string,
  completing: boolean,
  expected: number | undefined,
): Promise<number> {
  const c = saga.column;
  const rows = await queryRows<{ version: number | string; completedAt: unknown }>(em, {
    sql: `select ${c.version} as "version", ${c.completedAt} as "completedAt" from ${saga.table} where ${c.id} = ?`,
    params: [sagaId],
  });
  const row = rows[0];
  const details = { sagaType: saga.sagaType, sagaId };
  if (!row) {
    throw new SagaValidationError(
      'SAGA_NOT_FOUND',
      `Saga ${saga.sagaType}/${sagaId} does not exist: check the id with listSagas.`,
      details,
    );
  }
  const version = readStoredVersion(saga, sagaId, row.version);
  if (row.completedAt != null) readStoredCompletedAt(saga, sagaId, dialect, row.completedAt);
  if (expected !== undefined && expected !== version) throw versionConflict(saga, sagaId);
  if ((row.completedAt != null) === completing) {
    throw new SagaValidationError(
      'SAGA_STATE_CONFLICT',
      completing
        ? `Saga ${saga.sagaType}/${sagaId} is already completed; nothing was written. Reopen it first if it must run again.`
        : `Saga ${saga.sagaType}/${sagaId} is active, so there is nothing to reopen; nothing was written.`,
      details,
    );
  }
  return version;
}

/** The row's version, checked as the runtime checks it: a version it cannot bump exactly is `STORED_VALUE_INVALID`. */
function readStoredVersion(saga: SagaTable, sagaId: string, value: unknown): number {
  const version = value == null || value === '' ? Number.NaN : Number(value);
  const problem = storedVersionProblem(version);
  if (problem)
    throw storedValueInvalid(
      { table: saga.meta.tableName, sagaType: saga.sagaType, sagaId },
      fieldOf(saga.meta, 'version'),
      problem,
      SAGA_COLUMN_FIXES.version,
    );
  return version;
}

/** A completion stamp the runtime would refuse is refused here too, rather than taken for "completed". */
function readStoredCompletedAt(saga: SagaTable, sagaId: string, dialect: DialectAdapter, value: unknown): void {
  const problem = storedDateProblem(dialect.readDate(value));
  if (problem)
    throw storedValueInvalid(
      { table: saga.meta.tableName, sagaType: saga.sagaType, sagaId },
      fieldOf(saga.meta, 'completedAt'),
      problem,
      SAGA_COLUMN_FIXES.completedAt,
    );
}

function versionConflict(saga: SagaTable, sagaId: string): SagaConcurrencyError {
  return new SagaConcurrencyError(
    'VERSION_CONFLICT',
    `Saga ${saga.sagaType}/${sagaId} changed since its version was read (a message was handled meanwhile); nothing was written. Read it again and decide on its current state.`,
    { sagaType: saga.sagaType, sagaId },
  );
}
